// Addresses of the services a process calls: comma-separated HOST:PORT lists from
// flags, and NAME:PORT targets resolved through DNS to every address behind them (a
// Kubernetes headless Service lists one address per pod). Used by the gateway's worker
// pool (--workers, --workers_dns) and the draft client (--draft_workers,
// --draft_workers_dns).
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::clients {

/// Parses "h1:p1,h2:p2": blanks around items are ignored, empty items skipped and
/// duplicates dropped (the first kept, order preserved). Each item needs a non-empty
/// host and a port in 1..65535 after its last ':'. Errors: INVALID_ARGUMENT
/// "FLAG: 'ITEM' is not HOST:PORT", where FLAG is `flag` (the list's source, e.g.
/// "workers").
absl::StatusOr<std::vector<std::string>> ParseAddressList(const std::string& list, const std::string& flag);

/// Resolves "NAME:PORT" (NAME a host name, an IP, or a bracketed IPv6 literal) with
/// getaddrinfo to "ip:port" / "[ipv6]:port" strings, sorted and deduplicated. Errors:
/// INVALID_ARGUMENT "FLAG: 'TARGET' is not NAME:PORT" (no name, or a port outside
/// 1..65535); UNAVAILABLE "FLAG: cannot resolve 'NAME': REASON" (gai_strerror).
absl::StatusOr<std::vector<std::string>> ResolveAddresses(const std::string& target, const std::string& flag);

}  // namespace herd::clients
