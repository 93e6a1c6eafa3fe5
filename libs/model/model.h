// A loaded model: hyper-parameters from GGUF metadata, weight tensors, and the
// forward graph of its architecture (llama.cpp's llm_build_* equivalents).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "libs/gguf/gguf.h"
#include "libs/tensor/tensor.h"

namespace herd::model {

/// Hyper-parameters (llama.cpp llama_hparams), read from "<arch>.*" GGUF keys.
struct Hparams {
  std::string arch;          // general.architecture
  int64_t n_vocab = 0;       // rows of token_embd
  int64_t n_ctx_train = 0;   // <arch>.context_length
  int64_t n_embd = 0;        // <arch>.embedding_length
  int64_t n_layer = 0;       // <arch>.block_count
  int64_t n_head = 0;        // <arch>.attention.head_count
  int64_t n_head_kv = 0;     // <arch>.attention.head_count_kv (default n_head)
  int64_t n_ff = 0;          // <arch>.feed_forward_length
  int64_t n_embd_head_k = 0; // <arch>.attention.key_length (default n_embd / n_head)
  int64_t n_embd_head_v = 0; // <arch>.attention.value_length (default n_embd / n_head)
  int64_t n_rot = 0;         // <arch>.rope.dimension_count (default n_embd_head_k)
  float f_norm_rms_eps = 1e-5f;  // <arch>.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  // <arch>.rope.freq_base
  float rope_freq_scale = 1.0f;     // 1 / <arch>.rope.scaling.factor (linear scaling)
  int rope_type = 0;         // 0 normal (adjacent pairs), 2 NeoX (halves)

  int64_t n_embd_k_gqa() const { return n_embd_head_k * n_head_kv; }
  int64_t n_embd_v_gqa() const { return n_embd_head_v * n_head_kv; }
};

/// Tensors of one transformer block (nullptr when absent and optional).
struct Layer {
  Tensor* attn_norm = nullptr;
  Tensor* wq = nullptr;
  Tensor* wk = nullptr;
  Tensor* wv = nullptr;
  Tensor* wo = nullptr;
  Tensor* bq = nullptr;
  Tensor* bk = nullptr;
  Tensor* bv = nullptr;
  Tensor* bo = nullptr;
  Tensor* ffn_norm = nullptr;
  Tensor* ffn_gate = nullptr;
  Tensor* ffn_up = nullptr;
  Tensor* ffn_down = nullptr;
};

/// Inputs of one forward pass over n_tokens tokens, all leaves of the graph being built.
struct ForwardInputs {
  Tensor* tokens = nullptr;   // I32 [n_tokens]
  Tensor* pos = nullptr;      // I32 [n_tokens]
  Tensor* kv_idx = nullptr;   // I32 [n_tokens]: KV cache row each token's K/V is written to
  Tensor* mask = nullptr;     // F32 [n_kv, n_tokens]: 0 = attend, -inf = masked
  Tensor* out_ids = nullptr;  // I32 [n_outputs]: tokens whose logits are wanted
  std::vector<Tensor*> k_cache;  // per layer: [n_embd_k_gqa, n_cells] (F16 or F32)
  std::vector<Tensor*> v_cache;  // per layer: [n_embd_v_gqa, n_cells]
  int64_t n_kv = 0;           // cells [0, n_kv) take part in attention
};

/// A model loaded from a GGUF file; weights stay in the file mapping (zero copy).
class Model {
 public:
  /// Opens and validates `path`. Errors: the GGUF reader's, INVALID_ARGUMENT for an
  /// unsupported architecture (listing the supported ones), NOT_FOUND naming a missing
  /// required key or tensor, INVALID_ARGUMENT naming a tensor with a wrong shape.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);
  /// Same over an already-open file (takes ownership).
  static absl::StatusOr<std::unique_ptr<Model>> FromGguf(std::unique_ptr<gguf::GgufFile> file);

  const Hparams& hparams() const { return hp_; }
  const gguf::GgufFile& file() const { return *file_; }
  /// Architectures this build can run.
  static std::vector<std::string> SupportedArchitectures();

  /// Appends the forward pass to `g`; returns the logits, F32 [n_vocab, n_outputs].
  Tensor* BuildForward(Graph& g, const ForwardInputs& in) const;

  /// Total bytes of weight data.
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  Model() = default;
  absl::Status LoadLlama();
  absl::StatusOr<Tensor*> Weight(const std::string& name, std::vector<int64_t> ne, bool required);

  std::unique_ptr<gguf::GgufFile> file_;
  Hparams hp_;
  Graph weights_;  // leaves only; data points into the file mapping
  Tensor* tok_embd_ = nullptr;
  Tensor* output_norm_ = nullptr;
  Tensor* output_ = nullptr;
  Tensor* rope_freqs_ = nullptr;
  std::vector<Layer> layers_;
  size_t weight_bytes_ = 0;
};

}  // namespace herd::model
