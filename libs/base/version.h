// The version every herd binary reports (`--version`).
#pragma once
#include <string>

namespace herd {

/// herd's release version (semantic versioning).
inline constexpr char kHerdVersion[] = "0.5.0";

/// "PROGRAM herd 0.5.0 (optimized build)" — "unoptimized build" when NDEBUG is not defined.
inline std::string VersionLine(const std::string& program) {
#ifdef NDEBUG
  const char* build = "optimized build";
#else
  const char* build = "unoptimized build";
#endif
  return program + " (herd " + kHerdVersion + ", " + build + ")";
}

}  // namespace herd
