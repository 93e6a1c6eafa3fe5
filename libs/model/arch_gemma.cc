// Gemma (llama.cpp llm_build_gemma): embeddings scaled by sqrt(n_embd), RMSNorm (weights
// used as stored), NeoX RoPE, head size from attention.key_length, GeGLU, always tied.
#include "libs/model/arch.h"

namespace herd::model {

// gemma.attention.layer_norm_rms_epsilon required; output is always token_embd.
absl::Status LoadGemma(Loader& ld) {
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNeox, /*rms_norm=*/true));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kSkip));  // tied
  return LoadLlamaLayers(ld, Loader::kSkip, Loader::kSkip, Loader::kSkip);
}

Tensor* BuildGemma(const Model& m, Graph& g, const ForwardInputs& in) {
  LlamaBlock o;
  o.scale_embd = true;
  o.scale_q = true;
  o.act = FfnAct::kGelu;
  return BuildLlamaFamily(m, g, in, o);
}

}  // namespace herd::model
