// Gemma (llama.cpp llm_build_gemma): embeddings scaled by sqrt(n_embd), RMSNorm (weights
// used as stored), NeoX RoPE, head size from attention.key_length, GeGLU, always tied.
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"
#include "libs/model/builder.h"

namespace herd::model {

// gemma.attention.layer_norm_rms_epsilon required; output is always token_embd.
absl::Status LoadGemma(Loader& ld) {
  Hparams& hp = ld.hp();
  hp.rope_type = kRopeNeox;
  HERD_RETURN_IF_ERROR(ld.CommonHparams());
  HERD_RETURN_IF_ERROR(ld.ReqFloat("attention.layer_norm_rms_epsilon", &hp.f_norm_rms_eps));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  Weights& w = ld.w();
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  const int64_t n_q = hp.n_embd_head_k * hp.n_head, n_kv = hp.n_embd_k_gqa();
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kSkip));  // tied
  const Loader::Need req = Loader::kRequired;
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = w.layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_norm.weight", {n_embd}, req, &L.attn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q.weight", {n_embd, n_q}, req, &L.wq));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k.weight", {n_embd, n_kv}, req, &L.wk));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_v.weight", {n_embd, n_kv}, req, &L.wv));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.weight", {n_q, n_embd}, req, &L.wo));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.weight", {n_embd}, req, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_gate.weight", {n_embd, n_ff}, req, &L.ffn_gate));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.weight", {n_embd, n_ff}, req, &L.ffn_up));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.weight", {n_ff, n_embd}, req, &L.ffn_down));
  }
  return absl::OkStatus();
}

Tensor* BuildGemma(const Model& m, Graph& g, const ForwardInputs& in) {
  GraphBuilder b(m, g, in);
  const Hparams& hp = b.hp;
  Tensor* inp = g.Scale(b.InpEmbd(), std::sqrt(static_cast<float>(hp.n_embd)));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& L = b.w.layers[static_cast<size_t>(il)];
    Tensor* cur = b.Norm(inp, L.attn_norm, nullptr, NormType::kRms);
    Qkv qkv = b.Project(L, cur);
    qkv.q = b.Rope(qkv.q);
    qkv.k = b.Rope(qkv.k);
    qkv.q = g.Scale(qkv.q, 1.0f / std::sqrt(static_cast<float>(hp.n_embd_head_k)));
    cur = b.Attention(il, L.wo, nullptr, qkv, 1.0f);
    if (il == hp.n_layer - 1) {
      cur = b.Outputs(cur);
      inp = b.Outputs(inp);
    }
    Tensor* sa_out = g.Add(cur, inp);
    cur = b.Norm(sa_out, L.ffn_norm, nullptr, NormType::kRms);
    cur = b.Ffn(cur, L, FfnAct::kGelu, FfnGate::kPar);
    inp = g.Add(cur, sa_out);
  }
  return b.Logits(inp, NormType::kRms);
}

}  // namespace herd::model
