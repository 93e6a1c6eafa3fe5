// Minimal structured logging to stderr: "I1130 02:30:00.123 file.cc:42] message".
#pragma once
#include <sstream>

namespace herd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

/// Messages below this level are dropped (default kInfo; env HERD_LOG_LEVEL=debug|info|warning|error).
LogLevel MinLogLevel();
void SetMinLogLevel(LogLevel level);

/// Streams one line to stderr on destruction.
class LogMessage {
 public:
  LogMessage(LogLevel level, const char* file, int line);
  ~LogMessage();
  std::ostream& stream() { return ss_; }

 private:
  LogLevel level_;
  std::ostringstream ss_;
};

}  // namespace herd

#define HERD_LOG(level)                                     \
  if (::herd::LogLevel::k##level < ::herd::MinLogLevel()) { \
  } else                                                    \
    ::herd::LogMessage(::herd::LogLevel::k##level, __FILE__, __LINE__).stream()
