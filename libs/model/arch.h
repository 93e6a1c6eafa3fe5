// Internal to libs/model: the architecture registry, the GGUF loader helpers every
// architecture's loader uses, and the per-architecture entry points (one
// arch_<family>.cc file each).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

#include "libs/base/status_macros.h"
#include "libs/model/builder.h"
#include "libs/model/model.h"

namespace herd::model {

/// Reads one model's hyper-parameters and weights into a Model (llama.cpp
/// llama_model::load_hparams / load_tensors). Every error names the file and the key or
/// tensor at fault.
class Loader {
 public:
  explicit Loader(Model* m) : m_(m) {}

  const gguf::GgufFile& file() const { return *m_->file_; }
  Hparams& hp() { return m_->hp_; }
  Weights& w() { return m_->w_; }
  /// "<arch>.<suffix>".
  std::string Key(absl::string_view suffix) const;

  // Metadata keys, given as the suffix after "<arch>.". Required keys that are absent are
  // NOT_FOUND "<file>: missing required key '<arch>.<suffix>'"; present keys of the wrong
  // type or out of range are INVALID_ARGUMENT naming the key. Optional keys leave *out
  // unchanged when absent.
  absl::Status ReqInt(absl::string_view suffix, int64_t* out);  // integer >= 1
  absl::Status OptInt(absl::string_view suffix, int64_t* out);  // integer >= 1
  absl::Status ReqFloat(absl::string_view suffix, float* out);
  absl::Status OptFloat(absl::string_view suffix, float* out);
  absl::Status ReqBool(absl::string_view suffix, bool* out);

  /// The keys llama.cpp reads for every architecture: context_length, embedding_length,
  /// block_count, feed_forward_length, attention.head_count (required); head_count_kv,
  /// key_length, value_length, rope.dimension_count, rope.freq_base, rope.scaling.type /
  /// .factor (optional). Set hp().rope_type first: n_rot is validated only for RoPE models.
  /// Also reads token_embd.weight's shape into n_vocab.
  absl::Status CommonHparams();
  /// The start every architecture's loader shares: hp().rope_type = `rope_type`,
  /// CommonHparams(), then the norm epsilon (required): attention.layer_norm_rms_epsilon
  /// when `rms_norm`, else attention.layer_norm_epsilon.
  absl::Status CommonHparams(int rope_type, bool rms_norm);

  /// kSkip: not looked up at all (*out = nullptr), for tensors an architecture ignores.
  enum Need { kRequired, kOptional, kSkip };
  /// Tensor `name` with exactly the shape `ne` (ggml order); *out = nullptr when optional
  /// and absent. Errors: NOT_FOUND "missing tensor 'name'", INVALID_ARGUMENT naming the
  /// tensor, its shape and the expected one.
  absl::Status Get(const std::string& name, std::vector<int64_t> ne, Need need, Tensor** out);
  /// Layer tensor "blk.<il>.<name>".
  absl::Status GetL(int64_t il, const std::string& name, std::vector<int64_t> ne, Need need, Tensor** out);

  /// Every layer of the GPT-2 / GPT-NeoX block (all required, each with its bias):
  /// attn_norm, attn_qkv [n_embd, n_q + 2 * n_embd_k_gqa] (fused Q, K, V), attn_output
  /// [n_q, n_embd], ffn_norm, ffn_up [n_embd, n_ff], ffn_down [n_ff, n_embd], where
  /// n_q = n_embd_head_k * n_head (llama.cpp LLM_ARCH_GPT2 / LLM_ARCH_GPTNEOX tensors).
  /// Errors as GetL.
  absl::Status BiasedFusedQkvLayers();

  // Pieces of one layer's tensor set (llama.cpp's names and shapes), errors as GetL.
  /// attn_norm.weight [n_embd] (required) and attn_norm.bias [n_embd] per `bias`.
  absl::Status AttnNorm(int64_t il, Layer& L, Need bias);
  /// attn_q / attn_k / attn_v .weight [n_embd, n_embd_head_k * n_head | n_embd_k_gqa |
  /// n_embd_v_gqa] (required).
  absl::Status SeparateQkv(int64_t il, Layer& L);
  /// attn_q / attn_k / attn_v .bias [n_embd_head_k * n_head | n_embd_k_gqa | n_embd_v_gqa].
  absl::Status QkvBiases(int64_t il, Layer& L, Need need);
  /// attn_output.weight [n_embd_head_v * n_head, n_embd] (required).
  absl::Status AttnOutput(int64_t il, Layer& L);
  /// ffn_gate.weight, ffn_up.weight [n_embd, n_ff] and ffn_down.weight [n_ff, n_embd]
  /// (all required): the gated FFN of the llama-like decoders.
  absl::Status GatedFfn(int64_t il, Layer& L);

  /// token_embd.weight [n_embd, n_vocab] (required).
  absl::Status TokEmbd();
  /// output_norm.weight (+ .bias per `norm_bias`), output.weight (per `output`; tied to
  /// token_embd when optional and absent).
  absl::Status Output(Need norm_bias, Need output);

  /// The graph needs n_embd_head_k == n_embd_head_v (llama.cpp GGML_ASSERTs it);
  /// INVALID_ARGUMENT naming both keys otherwise.
  absl::Status SameHeadSizes();
  /// The graph needs n_rot == n_embd_head_k (llama, falcon, qwen2, baichuan);
  /// INVALID_ARGUMENT naming rope.dimension_count otherwise.
  absl::Status RopeCoversHead();

  /// INVALID_ARGUMENT "<file>: <msg>".
  absl::Status Invalid(absl::string_view msg) const;

 private:
  Model* m_;
};

using LoadFn = absl::Status (*)(Loader&);
/// Appends the architecture's forward pass (see Model::BuildForward).
using BuildFn = Tensor* (*)(const Model&, Graph&, const ForwardInputs&);

struct ArchDef {
  const char* name;  // general.architecture
  LoadFn load;
  BuildFn build;
};

/// Every supported architecture, sorted by name.
const std::vector<ArchDef>& Registry();
/// nullptr when unsupported.
const ArchDef* FindArch(absl::string_view name);

// Entry points, one pair per architecture (arch_<family>.cc). Each Load* mirrors the
// architecture's case of llama.cpp's load_hparams + load_tensors; each Build* its
// llm_build_<arch>.
#define HERD_DECLARE_ARCH(Name)        \
  absl::Status Load##Name(Loader& ld); \
  Tensor* Build##Name(const Model& m, Graph& g, const ForwardInputs& in);
HERD_DECLARE_ARCH(Llama)
HERD_DECLARE_ARCH(Baichuan)
HERD_DECLARE_ARCH(Refact)
HERD_DECLARE_ARCH(Gpt2)
HERD_DECLARE_ARCH(Starcoder)
HERD_DECLARE_ARCH(Mpt)
HERD_DECLARE_ARCH(Bloom)
HERD_DECLARE_ARCH(Falcon)
HERD_DECLARE_ARCH(Gptneox)
HERD_DECLARE_ARCH(Stablelm)
HERD_DECLARE_ARCH(Phi2)
HERD_DECLARE_ARCH(Phi3)
HERD_DECLARE_ARCH(Qwen2)
HERD_DECLARE_ARCH(Qwen3)
HERD_DECLARE_ARCH(Gemma)
#undef HERD_DECLARE_ARCH

/// The GPT-2 block graph shared by gpt2, starcoder, bloom and mpt (arch_gpt2.cc):
/// [pos_embd | token_embd_norm] -> per layer x += attn(LN1(x)), x += GELU-MLP(LN2(x)) ->
/// final LN -> logits. Optional pieces follow the weights present (biases, position
/// embeddings, MPT's Q/K LayerNorm) and hparams (clamp_kqv, ALiBi).
Tensor* BuildGpt2Family(const Model& m, Graph& g, const ForwardInputs& in);

/// The tensors of every layer of the llama-like decoders (arch_llama.cc): attn_norm,
/// attn_q / attn_k / attn_v, attn_output, ffn_norm, ffn_gate / ffn_up / ffn_down
/// (required); the Q/K/V biases per `qkv_bias`, attn_output.bias per `out_bias`, the
/// per-head attn_q_norm / attn_k_norm [n_embd_head_k] per `qk_norm`. Errors as GetL.
absl::Status LoadLlamaLayers(Loader& ld, Loader::Need qkv_bias, Loader::Need out_bias, Loader::Need qk_norm);

/// What BuildLlamaFamily's block does differently per architecture.
struct LlamaBlock {
  bool rope = true;            // RoPE on Q and K (with rope_freqs when loaded)
  bool use_bo = false;         // attn_output.bias
  bool scale_q = false;        // Q * 1/sqrt(head size) before the product, attention scale 1
  bool scale_embd = false;     // token embeddings * sqrt(n_embd)
  FfnAct act = FfnAct::kSilu;  // of the gated FFN
  FfnGate gate = FfnGate::kPar;
};

/// The pre-norm RMSNorm block graph of llama, baichuan, refact, qwen2, qwen3, phi3 and
/// gemma (arch_llama.cc): per layer x += attn(RMS(x)), x += GLU-FFN(RMS(x)), varied by `o`;
/// per-head RMS qk-norm before RoPE where the layer has attn_q_norm (qwen3).
Tensor* BuildLlamaFamily(const Model& m, Graph& g, const ForwardInputs& in, const LlamaBlock& o);

}  // namespace herd::model
