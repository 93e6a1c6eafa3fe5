#include "libs/base/log.h"

#include <sys/time.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace herd {
namespace {
std::atomic<int> g_level{[] {
  const char* e = std::getenv("HERD_LOG_LEVEL");
  if (e == nullptr) return 1;
  if (std::strcmp(e, "debug") == 0) return 0;
  if (std::strcmp(e, "warning") == 0) return 2;
  if (std::strcmp(e, "error") == 0) return 3;
  return 1;
}()};
}  // namespace

LogLevel MinLogLevel() { return static_cast<LogLevel>(g_level.load()); }
void SetMinLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

LogMessage::LogMessage(LogLevel level, const char* file, int line) : level_(level) {
  static const char kTag[] = {'D', 'I', 'W', 'E'};
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  const char* base = std::strrchr(file, '/');
  char head[64];
  std::snprintf(head, sizeof(head), "%c%02d%02d %02d:%02d:%02d.%03d ", kTag[static_cast<int>(level)], tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(tv.tv_usec / 1000));
  ss_ << head << (base ? base + 1 : file) << ":" << line << "] ";
}

LogMessage::~LogMessage() {
  ss_ << '\n';
  const std::string s = ss_.str();
  std::fwrite(s.data(), 1, s.size(), stderr);
  (void)level_;
}

}  // namespace herd
