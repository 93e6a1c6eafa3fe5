// A loaded model: hyper-parameters from GGUF metadata, weight tensors, and the
// forward graph of its architecture (llama.cpp's llm_build_* equivalents).
//
// Every architecture is one entry of a registry (libs/model/arch.h): a loader that
// reads its "<arch>.*" keys and tensors (llama.cpp llama_model::load_hparams /
// load_tensors) and a graph builder (llm_build_<arch>). SupportedArchitectures()
// lists them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/gguf/gguf.h"
#include "libs/tensor/tensor.h"

namespace herd::model {

/// RoPE variants (llama.cpp llama_rope_type; the values are ggml's rope modes).
inline constexpr int kRopeNone = -1;  // no rotary embedding (gpt2, mpt, bloom, refact, ...)
inline constexpr int kRopeNorm = 0;   // pairs (2i, 2i+1): llama, baichuan, ...
inline constexpr int kRopeNeox = 2;   // pairs (i, i + n_rot/2): gptneox, falcon, phi, qwen, gemma, stablelm

/// Hyper-parameters (llama.cpp llama_hparams), read from "<arch>.*" GGUF keys.
struct Hparams {
  std::string arch;                 // general.architecture
  int64_t n_vocab = 0;              // rows of token_embd
  int64_t n_ctx_train = 0;          // <arch>.context_length
  int64_t n_embd = 0;               // <arch>.embedding_length
  int64_t n_layer = 0;              // <arch>.block_count
  int64_t n_head = 0;               // <arch>.attention.head_count
  int64_t n_head_kv = 0;            // <arch>.attention.head_count_kv (default n_head)
  int64_t n_ff = 0;                 // <arch>.feed_forward_length
  int64_t n_embd_head_k = 0;        // <arch>.attention.key_length (default n_embd / n_head)
  int64_t n_embd_head_v = 0;        // <arch>.attention.value_length (default n_embd / n_head)
  int64_t n_rot = 0;                // <arch>.rope.dimension_count (default n_embd_head_k); dims rotated per head
  float f_norm_eps = 1e-5f;         // LayerNorm epsilon: <arch>.attention.layer_norm_epsilon
  float f_norm_rms_eps = 1e-5f;     // RMSNorm epsilon: <arch>.attention.layer_norm_rms_epsilon
  float rope_freq_base = 10000.0f;  // <arch>.rope.freq_base
  float rope_freq_scale = 1.0f;     // 1 / <arch>.rope.scaling.factor (linear scaling)
  int rope_type = kRopeNorm;        // kRopeNone / kRopeNorm / kRopeNeox, fixed per architecture
  /// > 0: the Q/K/V projections (the whole fused QKV output, bias included) are clamped
  /// to [-f_clamp_kqv, f_clamp_kqv] (<arch>.attention.clamp_kqv, optional; 0 = no clamp).
  float f_clamp_kqv = 0.0f;
  /// > 0: ALiBi with this maximum bias (mpt.attention.max_alibi_bias; llama.cpp hard-codes
  /// 8 for bloom, refact and 40-layer baichuan). 0 = no ALiBi.
  float f_max_alibi_bias = 0.0f;
  /// GPT-NeoX parallel residual, x + attn(ln1(x)) + ffn(ln2(x)) (gptneox.use_parallel_residual).
  bool use_par_res = false;

  int64_t n_embd_k_gqa() const { return n_embd_head_k * n_head_kv; }
  int64_t n_embd_v_gqa() const { return n_embd_head_v * n_head_kv; }
  /// Whether attention adds ALiBi biases. Then ForwardInputs::mask must carry the
  /// relative positions (see ForwardInputs).
  bool use_alibi() const { return f_max_alibi_bias > 0.0f; }
};

/// Tensors of one transformer block (nullptr when absent and optional). Shapes in ggml
/// order ([in, out] for a matrix); names are llama.cpp's (llama-arch.cpp LLM_TENSOR_NAMES).
struct Layer {
  Tensor* attn_norm = nullptr;    // blk.N.attn_norm.weight [n_embd]
  Tensor* attn_norm_b = nullptr;  // blk.N.attn_norm.bias [n_embd]
  Tensor* attn_norm_2 = nullptr;  // blk.N.attn_norm_2.weight [n_embd] (Falcon-40B)
  Tensor* attn_norm_2_b = nullptr;
  Tensor* wqkv = nullptr;  // blk.N.attn_qkv.weight [n_embd, n_q + 2*n_kv]: Q rows, then K, then V
  Tensor* bqkv = nullptr;  // blk.N.attn_qkv.bias
  Tensor* wq = nullptr;    // blk.N.attn_q.weight [n_embd, n_embd_head_k*n_head]
  Tensor* wk = nullptr;    // blk.N.attn_k.weight [n_embd, n_embd_k_gqa]
  Tensor* wv = nullptr;    // blk.N.attn_v.weight [n_embd, n_embd_v_gqa]
  Tensor* wo = nullptr;    // blk.N.attn_output.weight [n_embd_head_v*n_head, n_embd]
  Tensor* bq = nullptr;
  Tensor* bk = nullptr;
  Tensor* bv = nullptr;
  Tensor* bo = nullptr;
  Tensor* attn_q_norm = nullptr;  // blk.N.attn_q_norm.weight (qk-norm; shape per architecture)
  Tensor* attn_q_norm_b = nullptr;
  Tensor* attn_k_norm = nullptr;
  Tensor* attn_k_norm_b = nullptr;
  Tensor* ffn_norm = nullptr;  // blk.N.ffn_norm.weight [n_embd]
  Tensor* ffn_norm_b = nullptr;
  Tensor* ffn_gate = nullptr;  // blk.N.ffn_gate.weight [n_embd, n_ff]
  Tensor* ffn_gate_b = nullptr;
  Tensor* ffn_up = nullptr;  // blk.N.ffn_up.weight [n_embd, n_ff] (phi3: [n_embd, 2*n_ff], gate first)
  Tensor* ffn_up_b = nullptr;
  Tensor* ffn_down = nullptr;  // blk.N.ffn_down.weight [n_ff, n_embd]
  Tensor* ffn_down_b = nullptr;
};

/// All weights of a model (leaves whose data points into the GGUF mapping).
struct Weights {
  Tensor* tok_embd = nullptr;  // token_embd.weight [n_embd, n_vocab]
  Tensor* pos_embd = nullptr;  // position_embd.weight [n_embd, n_ctx_train] (gpt2, starcoder)
  Tensor* tok_norm = nullptr;  // token_embd_norm.weight [n_embd] (bloom)
  Tensor* tok_norm_b = nullptr;
  Tensor* output_norm = nullptr;  // output_norm.weight [n_embd]
  Tensor* output_norm_b = nullptr;
  Tensor* output = nullptr;      // output.weight [n_embd, n_vocab], or tok_embd when tied
  Tensor* output_b = nullptr;    // output.bias [n_vocab] (phi2)
  Tensor* rope_freqs = nullptr;  // rope_freqs.weight [n_rot/2] (llama 3.1 frequency factors)
  std::vector<Layer> layers;
};

/// Inputs of one forward pass over n_tokens tokens, all leaves of the graph being built.
struct ForwardInputs {
  Tensor* tokens = nullptr;  // I32 [n_tokens]
  Tensor* pos = nullptr;     // I32 [n_tokens]
  Tensor* kv_idx = nullptr;  // I32 [n_tokens]: KV cache row each token's K/V is written to
  /// F32 [n_kv, n_tokens]: -inf where token t may not attend cell c. Where it may: 0, or,
  /// for models with hparams().use_alibi(), -|pos[t] - pos of cell c| (llama.cpp
  /// llama_kv_cache::set_input_kq_mask), which attention scales by each head's ALiBi slope.
  Tensor* mask = nullptr;
  Tensor* out_ids = nullptr;     // I32 [n_outputs]: tokens whose logits are wanted
  std::vector<Tensor*> k_cache;  // per layer: [n_embd_k_gqa, n_cells] (F16 or F32)
  std::vector<Tensor*> v_cache;  // per layer: [n_embd_v_gqa, n_cells]
  int64_t n_kv = 0;              // cells [0, n_kv) take part in attention
  /// Output the final hidden states instead of logits: the rows of out_ids after the
  /// output norm (output_norm + output_norm_b), before the output matrix -- llama.cpp's
  /// res->t_embd, what its embeddings pool. F32 [n_embd, n_outputs], named "result_embd".
  bool embeddings = false;
};

/// The layer a weight belongs to, by name (Backend::layer_buffer_type): N for
/// "blk.N.*", -1 (the input layer) for names starting with "tok" or "pos" (token_embd,
/// token_embd_norm, token_types, position_embd), n_layer (the output layer) for every
/// other tensor (output_norm, output, rope_freqs, ...).
int64_t LayerOfTensor(const std::string& name, int64_t n_layer);

/// A model loaded from a GGUF file; weights stay in the file mapping (zero copy).
class Model {
 public:
  ~Model();

  /// Opens and validates `path`. Errors: the GGUF reader's; INVALID_ARGUMENT for an
  /// unsupported architecture (listing the supported ones); NOT_FOUND naming a missing
  /// required key ("<file>: missing required key 'mpt.attention.max_alibi_bias'") or
  /// tensor; INVALID_ARGUMENT naming a key with a bad value or a tensor with a wrong shape.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& path);
  /// Same over an already-open file (takes ownership).
  static absl::StatusOr<std::unique_ptr<Model>> FromGguf(std::unique_ptr<gguf::GgufFile> file);

  const Hparams& hparams() const { return hp_; }
  const gguf::GgufFile& file() const { return *file_; }
  const Weights& weights() const { return w_; }
  /// Architectures this build can run (general.architecture values), sorted.
  static std::vector<std::string> SupportedArchitectures();

  /// Appends the forward pass to `g`; returns the logits, F32 [n_vocab, n_outputs], or
  /// with in.embeddings the output-normed hidden states, F32 [n_embd, n_outputs].
  /// The K/V of every token are written into in.k_cache / in.v_cache rows in.kv_idx.
  Tensor* BuildForward(Graph& g, const ForwardInputs& in) const;

  /// Total bytes of weight data.
  size_t weight_bytes() const { return weight_bytes_; }

  /// Puts the weights in the memory of `backend` (the placement of llama.cpp's
  /// llama_model_loader::load_all_data), each weight in the memory of its layer,
  /// backend->layer_buffer_type(LayerOfTensor(name, n_layer), n_layer) (one memory for
  /// all unless the backend splits the layers, see Scheduler::SetLayerPlacement). Per
  /// memory kind: a host buffer type wraps the span of the file mapping holding its
  /// weights (no copy, weights stay mmap'd); device memory gets one buffer with its
  /// weights uploaded through SetTensor. Call once, before any engine uses the model with
  /// this backend; the weights then live there (calling it again with the same placement
  /// places nothing again). On failure every weight stays in the mapping. Then lets the
  /// backend prepare them (Backend::PrepareWeights: the CPU repacks Q4_0 / Q8_0 matrices
  /// for its batched kernels). Errors: RESOURCE_EXHAUSTED when the device lacks the
  /// memory; FAILED_PRECONDITION when the weights were placed in other memory.
  absl::Status PlaceWeights(Backend* backend);
  /// The buffer type the weights live in (nullptr before PlaceWeights: the file mapping);
  /// when they are split over several, the input layer's (see weights_buffer_types).
  const BufferType* weights_buffer_type() const {
    return weights_buffers_.empty() ? nullptr : weights_buffers_[0]->type();
  }
  /// Every buffer type holding weights, in the order they were placed (the input
  /// layer's first); empty before PlaceWeights.
  std::vector<const BufferType*> weights_buffer_types() const;

 private:
  Model() = default;
  friend class Loader;

  std::unique_ptr<gguf::GgufFile> file_;
  Hparams hp_;
  Graph weights_graph_;  // leaves only; data points into the file mapping
  Weights w_;
  const void* arch_ = nullptr;  // the registry entry (arch.h ArchDef)
  size_t weight_bytes_ = 0;
  std::vector<std::unique_ptr<Buffer>> weights_buffers_;  // after PlaceWeights: one per memory kind
};

}  // namespace herd::model
