// Gemma (llama.cpp llm_build_gemma): embeddings scaled by sqrt(n_embd), RMSNorm (weights
// used as stored), NeoX RoPE, head size from attention.key_length, GeGLU, always tied.
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"
#include "libs/model/builder.h"

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
  GraphBuilder b(m, g, in);
  const Hparams& hp = b.hp;
  Tensor* inp = g.Scale(b.InpEmbd(), std::sqrt(static_cast<float>(hp.n_embd)));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& L = b.layer(il);
    Tensor* cur = b.Norm(inp, L.attn_norm, nullptr, NormType::kRms);
    Qkv qkv = b.Project(L, cur);
    b.RopeQk(qkv);
    qkv.q = g.Scale(qkv.q, b.KqScale());
    cur = b.Attention(il, L.wo, nullptr, qkv, 1.0f);
    b.LastLayerOutputs(il, {&cur, &inp});
    inp = b.FfnResidual(cur, inp, L, NormType::kRms, FfnAct::kGelu, FfnGate::kPar);
  }
  return b.Logits(inp, NormType::kRms);
}

}  // namespace herd::model
