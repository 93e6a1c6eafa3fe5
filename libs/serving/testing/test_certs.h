// Test certificates made with the `openssl` CLI at test time (nothing checked in):
// two CAs, for each a server certificate (SAN IP:127.0.0.1, DNS:localhost) and a client
// certificate. Tests only.
#pragma once
#include <string>

#include "absl/status/statusor.h"

namespace herd::serving::testing {

struct TestCerts {
  std::string dir;
  std::string ca;                         // CA 1 certificate
  std::string server_cert, server_key;    // signed by CA 1
  std::string client_cert, client_key;    // signed by CA 1
  std::string ca2;                        // CA 2 certificate
  std::string server2_cert, server2_key;  // signed by CA 2 (for rotation tests)
  std::string client2_cert, client2_key;  // signed by CA 2 (a client the CA 1 server refuses)
};

/// Generates the set under `dir` (created). Errors: INTERNAL with openssl's exit
/// status when a command fails (e.g. no openssl on PATH).
absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir);

/// Copies file `from` over `to` (via a temp file and rename, atomically).
/// Errors: INTERNAL.
absl::Status ReplaceFile(const std::string& from, const std::string& to);

}  // namespace herd::serving::testing
