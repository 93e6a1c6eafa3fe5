// Random-weight LLaMA GGUFs of the shapes llama.cpp was measured on
// (../shared/reference/perf): llama_bench and serve_bench write them.
#pragma once
#include <cstdint>
#include <string>

#include "absl/status/status.h"

#include "libs/gguf/ggml_type.h"

namespace herd::bench {

struct Shape {
  std::string name;
  int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab;
  bool tied;
};

/// llama-110m and tinyllama-1.1b.
const Shape* FindShape(const std::string& name);
/// "llama-110m, tinyllama-1.1b" (for messages).
std::string ShapeNames();

/// Writes a random-weight llama GGUF (fixed seed: the same bytes every time) with 2-D
/// weights in `wtype` (norms F32); like llama-quantize, a quantized model other than
/// Q8_0 keeps its output tensor (token_embd when tied) in Q6_K. With `vocab_path` (a
/// GGUF such as ../shared/models/vocab/ggml-vocab-llama-spm.gguf), its tokenizer.*
/// metadata is copied in, so that the model can serve text; its token count must equal
/// the shape's n_vocab (INVALID_ARGUMENT otherwise). `extra_key`/`extra_value`, when
/// not empty, are stored as one more string key (serve_bench's cache stamp).
absl::Status WriteModel(const Shape& s, GgmlType wtype, const std::string& path, const std::string& vocab_path = "",
                        const std::string& extra_key = "", const std::string& extra_value = "");

}  // namespace herd::bench
