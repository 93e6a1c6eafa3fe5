#include "libs/serving/testing/test_certs.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace herd::serving::testing {
namespace {

absl::Status Run(const std::string& cmd) {
  const int rc = std::system((cmd + " >/dev/null 2>&1").c_str());
  if (rc != 0) return absl::InternalError(absl::StrCat("`", cmd, "` failed with status ", rc));
  return absl::OkStatus();
}

absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Run(absl::StrCat(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 -subj /CN=herd-test-", name,
      " -keyout ", dir, "/", name, ".key -out ", dir, "/", name, ".pem"));
}

// A leaf signed by `ca`; servers and clients share one profile (both EKUs) as herd
// services use one certificate for both roles.
absl::Status MakeLeaf(const std::string& dir, const std::string& ca, const std::string& name) {
  const std::string ext = absl::StrCat(dir, "/", name, ".ext");
  {
    std::ofstream f(ext);
    f << "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
         "extendedKeyUsage=serverAuth,clientAuth\n"
         "basicConstraints=CA:FALSE\n";
  }
  absl::Status s =
      Run(absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=", name,
                       " -keyout ", dir, "/", name, ".key -out ", dir, "/", name, ".csr"));
  if (!s.ok()) return s;
  return Run(absl::StrCat("openssl x509 -req -in ", dir, "/", name, ".csr -CA ", dir, "/", ca, ".pem -CAkey ", dir, "/",
                          ca, ".key -CAcreateserial -days 2 -extfile ", ext, " -out ", dir, "/", name, ".pem"));
}

}  // namespace

absl::StatusOr<TestCerts> MakeTestCerts(const std::string& dir) {
  ::mkdir(dir.c_str(), 0700);
  for (const char* ca : {"ca", "ca2"}) {
    if (absl::Status s = MakeCa(dir, ca); !s.ok()) return s;
  }
  const std::pair<const char*, const char*> leaves[] = {
      {"ca", "server"}, {"ca", "client"}, {"ca2", "server2"}, {"ca2", "client2"}};
  for (const auto& [ca, name] : leaves) {
    if (absl::Status s = MakeLeaf(dir, ca, name); !s.ok()) return s;
  }
  TestCerts c;
  c.dir = dir;
  c.ca = dir + "/ca.pem";
  c.server_cert = dir + "/server.pem";
  c.server_key = dir + "/server.key";
  c.client_cert = dir + "/client.pem";
  c.client_key = dir + "/client.key";
  c.ca2 = dir + "/ca2.pem";
  c.server2_cert = dir + "/server2.pem";
  c.server2_key = dir + "/server2.key";
  c.client2_cert = dir + "/client2.pem";
  c.client2_key = dir + "/client2.key";
  return c;
}

absl::Status ReplaceFile(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) return absl::InternalError("cannot read " + from);
  const std::string tmp = to + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << in.rdbuf();
    if (!out) return absl::InternalError("cannot write " + tmp);
  }
  if (std::rename(tmp.c_str(), to.c_str()) != 0) return absl::InternalError("cannot rename onto " + to);
  return absl::OkStatus();
}

}  // namespace herd::serving::testing
