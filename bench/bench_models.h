// Random-weight LLaMA GGUFs of the shapes llama.cpp was measured on
// (../shared/reference/perf) and of a LLaMA-2 7B: llama_bench, serve_bench and
// gpu_bench write them.
#pragma once
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/gguf/ggml_type.h"

namespace herd::bench {

struct Shape {
  std::string name;
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab;
  bool tied;
};

/// llama-110m, tinyllama-1.1b and 7b (LLaMA-2 7B: 4096 dim, 32 layers, 32 heads, 32 KV
/// heads, FFN 11008, vocabulary 32000, untied output).
const Shape* FindShape(const std::string& name);
/// "llama-110m, tinyllama-1.1b, 7b" (for messages).
std::string ShapeNames();

/// How WriteModel writes.
struct WriteOptions {
  /// A GGUF (such as ../shared/models/vocab/ggml-vocab-llama-spm.gguf) whose tokenizer.*
  /// metadata is copied in, so that the model can serve text; its token count must equal
  /// the shape's n_vocab (INVALID_ARGUMENT otherwise).
  std::string vocab_path;
  /// When not empty, stored as one more string key (a cache stamp).
  std::string extra_key, extra_value;
  /// 0: one generator (normal, sigma 0.02) draws every weight in file order: the bytes
  /// WriteModel has always written (about a minute per 10^9 weights). N > 0: weights
  /// drawn on N threads, each row from its own generator seeded by (tensor, row)
  /// (uniform, sigma 0.02): other bytes, the same for every N, fast enough for 7b.
  int threads = 0;
};

/// Writes a random-weight llama GGUF (fixed seed: the same bytes every time) with 2-D
/// weights in `wtype` (norms F32); like llama-quantize, a quantized model other than
/// Q8_0 keeps its output tensor (token_embd when tied) in Q6_K. Streams: holds one
/// tensor at a time, never the whole model.
absl::Status WriteModel(const Shape& s, GgmlType wtype, const std::string& path, const WriteOptions& opts);
/// The same with a vocabulary and an extra key (serial generator).
absl::Status WriteModel(const Shape& s, GgmlType wtype, const std::string& path, const std::string& vocab_path = "",
                        const std::string& extra_key = "", const std::string& extra_value = "");

/// Bytes of tensor data WriteModel writes for (s, wtype), alignment padding included
/// (the file adds its header: metadata, tensor table, and the vocabulary if copied).
uint64_t ModelDataBytes(const Shape& s, GgmlType wtype);

/// The first of $XDG_CACHE_HOME/herd-bench, ~/.cache/herd-bench, /tmp/herd-bench.
std::string DefaultCacheDir();
/// CACHE_DIR/models/<shape>-<type>.gguf (type in lower case, e.g. llama-110m-q4_0.gguf)
/// with `vocab_path`'s tokenizer (so llama.cpp loads it too), written unless a file with
/// the same recipe stamp (the herd.bench.recipe key: recipe version, shape, type, vocab
/// name and size) is there already; *reused says which. Creates the directories.
/// Errors: NOT_FOUND for a missing vocab; WriteModel's.
absl::StatusOr<std::string> CachedModel(const Shape& s, GgmlType wtype, const std::string& cache_dir,
                                        const std::string& vocab_path, bool* reused);

}  // namespace herd::bench
