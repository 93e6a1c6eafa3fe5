#include "tools/herd/load_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace herd::cli {

uint64_t PageInTensors(const gguf::GgufFile& f, const std::function<void(uint64_t, uint64_t)>& progress) {
  constexpr size_t kPage = 4096;
  constexpr size_t kChunk = 64u << 20;
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : f.tensors()) total += t.nbytes;
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (t.data == nullptr) continue;
    for (size_t off = 0; off < t.nbytes; off += kChunk) {
      const size_t end = std::min(t.nbytes, off + kChunk);
      uint8_t acc = 0;
      for (size_t p = off; p < end; p += kPage) acc ^= t.data[p];
      acc ^= t.data[end - 1];
      sink = sink ^ acc;
      done += end - off;
      if (progress) progress(done, total);
    }
  }
  (void)sink;
  if (progress) progress(total, total);
  return total;
}

void PageInWithProgressBar(const gguf::GgufFile& f, const std::string& label, uint64_t min_bytes) {
  if (::isatty(STDERR_FILENO) == 0) return;
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : f.tensors()) total += t.nbytes;
  if (total < min_bytes) return;
  int last_pct = -1;
  PageInTensors(f, [&](uint64_t done, uint64_t all) {
    const int pct = all > 0 ? static_cast<int>(100 * done / all) : 100;
    if (pct == last_pct) return;
    last_pct = pct;
    constexpr int kWidth = 30;
    const int fill = pct * kWidth / 100;
    std::fprintf(stderr, "\rloading %s [%.*s%*s] %3d%%  %.2f/%.2f GiB", label.c_str(), fill,
                 "##############################", kWidth - fill, "", pct, done / 1073741824.0, all / 1073741824.0);
    std::fflush(stderr);
  });
  std::fputs("\n", stderr);
}

}  // namespace herd::cli
