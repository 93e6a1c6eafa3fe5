// Command-line handling shared by the service binaries (gateway, loader, worker, draft).
#pragma once
#include <string>

namespace herd::serving {

/// Parses a service's Abseil flags, answering first what every herd binary answers:
/// -h / --help / --helpfull / --helpshort: `usage` and the flags defined in source files
/// whose path contains `flags_path` (e.g. "services/gateway/") on stdout, exit 0;
/// --version: VersionLine(program), exit 0. Everything else goes to
/// absl::ParseCommandLine (an unknown flag or a bad value exits 1 naming it).
void ParseServiceFlags(int argc, char** argv, const std::string& program, const std::string& usage,
                       const std::string& flags_path);

}  // namespace herd::serving
