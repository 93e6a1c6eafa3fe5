#include "libs/serving/flags.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"

#include "libs/base/version.h"

namespace herd::serving {

void ParseServiceFlags(int argc, char** argv, const std::string& program, const std::string& usage,
                       const std::string& flags_path) {
  absl::FlagsUsageConfig config;
  config.contains_help_flags = [flags_path](absl::string_view file) {
    return absl::StrContains(file, flags_path) || absl::StrContains(file, "libs/serving/service_flags") ||
           absl::StrContains(file, "libs/serving/security_flags");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [program] { return VersionLine(program) + "\n"; };
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--") == 0) break;
    if (std::strcmp(a, "-h") == 0 || std::strcmp(a, "--help") == 0 || std::strcmp(a, "-help") == 0 ||
        std::strcmp(a, "--helpfull") == 0 || std::strcmp(a, "--helpshort") == 0) {
      absl::flags_internal::FlagsHelp(std::cout, flags_path, absl::flags_internal::HelpFormat::kHumanReadable, usage);
      // The flags every service shares (libs/serving/service_flags.cc), when linked in.
      if (absl::FindCommandLineFlag("grace_ms") != nullptr) {
        absl::flags_internal::FlagsHelp(std::cout, "libs/serving/service_flags",
                                        absl::flags_internal::HelpFormat::kHumanReadable,
                                        "flags every herd service shares:");
      }
      // The shared security flags (libs/serving/security_flags.cc), when linked in.
      if (absl::FindCommandLineFlag("tls_cert_file") != nullptr) {
        absl::flags_internal::FlagsHelp(std::cout, "libs/serving/security_flags",
                                        absl::flags_internal::HelpFormat::kHumanReadable,
                                        "security flags (TLS, mTLS, cluster key):");
      }
      std::cout.flush();
      std::exit(0);
    }
    if (std::strcmp(a, "--version") == 0 || std::strcmp(a, "-version") == 0) {
      std::printf("%s\n", VersionLine(program).c_str());
      std::exit(0);
    }
  }
  absl::ParseCommandLine(argc, argv);
}

}  // namespace herd::serving
