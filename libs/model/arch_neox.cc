// GPT-NeoX / Pythia (llm_build_gptneox), Falcon (llm_build_falcon) and StableLM
// (llm_build_stablelm): LayerNorm with bias and NeoX RoPE (partial for gptneox/stablelm).
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"
#include "libs/model/builder.h"

namespace herd::model {

// gptneox: gptneox.attention.layer_norm_epsilon and gptneox.use_parallel_residual
// required; every bias and output.weight required.
absl::Status LoadGptneox(Loader& ld) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNeox, /*rms_norm=*/false));
  HERD_RETURN_IF_ERROR(ld.ReqBool("use_parallel_residual", &hp.use_par_res));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kRequired, Loader::kRequired));
  HERD_RETURN_IF_ERROR(ld.BiasedFusedQkvLayers());
  return absl::OkStatus();
}

Tensor* BuildGptneox(const Model& m, Graph& g, const ForwardInputs& in) {
  GraphBuilder b(m, g, in);
  Tensor* inp = b.InpEmbd();
  for (int64_t il = 0; il < b.hp.n_layer; ++il) {
    const Layer& L = b.layer(il);
    Tensor* cur = b.Norm(inp, L.attn_norm, L.attn_norm_b, NormType::kLayer);
    Qkv qkv = b.Project(L, cur);
    b.RopeQk(qkv);
    cur = b.Attention(il, L.wo, L.bo, qkv, b.KqScale());
    b.LastLayerOutputs(il, {&cur, &inp});
    if (b.hp.use_par_res) {
      // x = x + attn(ln1(x)) + ffn(ln2(x))
      Tensor* attn_out = cur;
      cur = b.Norm(inp, L.ffn_norm, L.ffn_norm_b, NormType::kLayer);
      cur = b.Ffn(cur, L, FfnAct::kGelu, FfnGate::kNone);
      cur = g.Add(cur, inp);
      inp = g.Add(cur, attn_out);
    } else {
      inp = b.FfnResidual(cur, inp, L, NormType::kLayer, FfnAct::kGelu, FfnGate::kNone);
    }
  }
  return b.Logits(inp, NormType::kLayer);
}

// falcon: falcon.attention.layer_norm_epsilon required; RoPE (NeoX) over the whole head;
// fused QKV without bias; attention and a GELU MLP both fed from attn_norm (Falcon-40B
// feeds attention from attn_norm_2 instead); output tied when absent.
absl::Status LoadFalcon(Loader& ld) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNeox, /*rms_norm=*/false));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  HERD_RETURN_IF_ERROR(ld.RopeCoversHead());
  Weights& w = ld.w();
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  const int64_t n_q = hp.n_embd_head_k * hp.n_head, n_qkv = n_q + 2 * hp.n_embd_k_gqa();
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kRequired, Loader::kOptional));
  const Loader::Need req = Loader::kRequired, opt = Loader::kOptional;
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = w.layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(ld.AttnNorm(il, L, req));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_norm_2.weight", {n_embd}, opt, &L.attn_norm_2));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_norm_2.bias", {n_embd}, opt, &L.attn_norm_2_b));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_qkv.weight", {n_embd, n_qkv}, req, &L.wqkv));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.weight", {n_q, n_embd}, req, &L.wo));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.weight", {n_embd, n_ff}, req, &L.ffn_up));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.weight", {n_ff, n_embd}, req, &L.ffn_down));
  }
  return absl::OkStatus();
}

Tensor* BuildFalcon(const Model& m, Graph& g, const ForwardInputs& in) {
  GraphBuilder b(m, g, in);
  Tensor* inp = b.InpEmbd();
  for (int64_t il = 0; il < b.hp.n_layer; ++il) {
    const Layer& L = b.layer(il);
    Tensor* attn_norm = b.Norm(inp, L.attn_norm, L.attn_norm_b, NormType::kLayer);
    Tensor* cur = L.attn_norm_2 != nullptr ? b.Norm(inp, L.attn_norm_2, L.attn_norm_2_b, NormType::kLayer) : attn_norm;
    Qkv qkv = b.Project(L, cur);
    b.RopeQk(qkv);
    cur = b.Attention(il, L.wo, nullptr, qkv, b.KqScale());
    b.LastLayerOutputs(il, {&cur, &inp, &attn_norm});
    Tensor* ffn_inp = cur;
    cur = b.Ffn(attn_norm, L, FfnAct::kGelu, FfnGate::kNone);  // the attn norm, not the result
    cur = g.Add(cur, ffn_inp);
    inp = g.Add(cur, inp);
  }
  return b.Logits(inp, NormType::kLayer);
}

// stablelm: stablelm.attention.layer_norm_epsilon required; NeoX RoPE over n_rot dims;
// optional Q/K/V biases (StableLM 2 1.6B), optional per-head Q/K LayerNorm (StableLM 2 12B,
// which also has no ffn_norm: attention and SwiGLU then run in parallel from attn_norm).
absl::Status LoadStablelm(Loader& ld) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNeox, /*rms_norm=*/false));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  Weights& w = ld.w();
  const int64_t n_embd = hp.n_embd, hd = hp.n_embd_head_k;
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kRequired, Loader::kRequired));
  const Loader::Need req = Loader::kRequired, opt = Loader::kOptional;
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = w.layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(ld.AttnNorm(il, L, req));
    HERD_RETURN_IF_ERROR(ld.SeparateQkv(il, L));
    HERD_RETURN_IF_ERROR(ld.AttnOutput(il, L));
    HERD_RETURN_IF_ERROR(ld.QkvBiases(il, L, opt));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q_norm.weight", {hd, hp.n_head}, opt, &L.attn_q_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k_norm.weight", {hd, hp.n_head_kv}, opt, &L.attn_k_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.weight", {n_embd}, opt, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.bias", {n_embd}, opt, &L.ffn_norm_b));
    HERD_RETURN_IF_ERROR(ld.GatedFfn(il, L));
  }
  return absl::OkStatus();
}

Tensor* BuildStablelm(const Model& m, Graph& g, const ForwardInputs& in) {
  GraphBuilder b(m, g, in);
  Tensor* inp = b.InpEmbd();
  for (int64_t il = 0; il < b.hp.n_layer; ++il) {
    const Layer& L = b.layer(il);
    Tensor* cur = b.Norm(inp, L.attn_norm, L.attn_norm_b, NormType::kLayer);
    Tensor* inp_sa = cur;
    Qkv qkv = b.Project(L, cur);
    if (L.attn_q_norm != nullptr) qkv.q = b.Norm(qkv.q, L.attn_q_norm, nullptr, NormType::kLayer);
    if (L.attn_k_norm != nullptr) qkv.k = b.Norm(qkv.k, L.attn_k_norm, nullptr, NormType::kLayer);
    b.RopeQk(qkv);
    cur = b.Attention(il, L.wo, nullptr, qkv, b.KqScale());
    b.LastLayerOutputs(il, {&cur, &inp, &inp_sa});
    Tensor* ffn_inp = g.Add(cur, inp);  // no FfnResidual: StableLM 2 12B has no ffn_norm
    cur = L.ffn_norm != nullptr ? b.Norm(ffn_inp, L.ffn_norm, L.ffn_norm_b, NormType::kLayer) : inp_sa;
    cur = b.Ffn(cur, L, FfnAct::kSilu, FfnGate::kPar);
    inp = g.Add(cur, ffn_inp);
  }
  return b.Logits(inp, NormType::kLayer);
}

}  // namespace herd::model
