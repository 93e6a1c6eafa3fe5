// The herd CLI's flags for reaching a secured service (herd generate, herd health,
// herd up's readiness probe): TLS files and the key, turned into a
// serving::ClientSecurity for serving::MakeChannel.
#pragma once
#include <initializer_list>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/serving/security.h"
#include "tools/herd/args.h"

namespace herd::cli {

/// --tls-ca-file, --tls-cert-file, --tls-key-file, --tls-server-name, --api-key-file
/// (underscore spellings accepted too).
const std::vector<FlagSpec>& ClientSecurityFlags();

/// `specs` followed by ClientSecurityFlags().
std::vector<FlagSpec> WithClientSecurityFlags(std::vector<FlagSpec> specs);

/// The security those flags describe. The key: --api-key-file when given, else the first
/// key of the first set variable among `key_envs` (e.g. HERD_API_KEY), else none.
/// Errors: INVALID_ARGUMENT / NOT_FOUND from ValidateClientSecurity and LoadClientKey.
absl::StatusOr<serving::ClientSecurity> ClientSecurityFromArgs(const Args& args,
                                                               std::initializer_list<const char*> key_envs);

}  // namespace herd::cli
