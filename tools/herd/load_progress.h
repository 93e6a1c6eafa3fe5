// Reading a model's weights into memory up front, with a progress bar on a terminal
// (llama.cpp prints its loading progress the same way), so that a large model's first
// token is not delayed by page faults on the file mapping.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "libs/gguf/gguf.h"

namespace herd::cli {

/// Touches every page of every tensor of `f` (reads one byte per 4 KiB), calling
/// `progress(done_bytes, total_bytes)` after each chunk of at most 64 MiB and at the end.
/// Returns the total bytes touched.
uint64_t PageInTensors(const gguf::GgufFile& f, const std::function<void(uint64_t, uint64_t)>& progress);

/// When stderr is a terminal and the weights are at least `min_bytes`, pages them in with
/// a "loading LABEL [#####     ]  45%  1.2/2.6 GiB" bar; otherwise does nothing (the
/// pages then come in on first use, as before).
void PageInWithProgressBar(const gguf::GgufFile& f, const std::string& label, uint64_t min_bytes = 64ull << 20);

}  // namespace herd::cli
