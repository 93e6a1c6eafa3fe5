// Qwen2 and Qwen3 (llama.cpp llm_build_qwen2 / llm_build_qwen3): RMSNorm, separate
// Q/K/V (Qwen2 with biases, Qwen3 with a per-head RMS qk-norm), NeoX RoPE, SwiGLU.
#include "libs/model/arch.h"

namespace herd::model {
namespace {

absl::Status LoadQwen(Loader& ld, bool qk_norm) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNeox, /*rms_norm=*/true));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  if (!qk_norm) HERD_RETURN_IF_ERROR(ld.RopeCoversHead());  // qwen2 asserts n_rot == head size
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kOptional));
  HERD_RETURN_IF_ERROR(
      ld.Get("output.bias", {hp.n_vocab}, qk_norm ? Loader::kSkip : Loader::kOptional, &ld.w().output_b));
  const Loader::Need bias = qk_norm ? Loader::kSkip : Loader::kOptional;
  const Loader::Need norm = qk_norm ? Loader::kRequired : Loader::kSkip;
  return LoadLlamaLayers(ld, bias, Loader::kSkip, norm);
}

}  // namespace

// qwen2: RMS eps required; optional Q/K/V biases; output tied when absent, optional output.bias.
absl::Status LoadQwen2(Loader& ld) { return LoadQwen(ld, /*qk_norm=*/false); }
Tensor* BuildQwen2(const Model& m, Graph& g, const ForwardInputs& in) {
  return BuildLlamaFamily(m, g, in, LlamaBlock());
}

// qwen3: RMS eps required; attn_q_norm / attn_k_norm [head_dim] required; no biases.
absl::Status LoadQwen3(Loader& ld) { return LoadQwen(ld, /*qk_norm=*/true); }
Tensor* BuildQwen3(const Model& m, Graph& g, const ForwardInputs& in) {
  return BuildLlamaFamily(m, g, in, LlamaBlock());
}

}  // namespace herd::model
