// Phi-2 (llm_build_phi2): one LayerNorm feeding attention and a GELU MLP in parallel,
// partial NeoX RoPE, output bias. Phi-3 (llm_build_phi3): RMSNorm, fused QKV, NeoX RoPE,
// fused gate+up SwiGLU.
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"
#include "libs/model/builder.h"

namespace herd::model {
namespace {

// attn_qkv (+bias) when present, else attn_q/k/v (biases per `bias`).
absl::Status LoadQkv(Loader& ld, int64_t il, Layer& L, Loader::Need qkv_bias, Loader::Need bias) {
  const Hparams& hp = ld.hp();
  const int64_t n_embd = hp.n_embd, n_q = hp.n_embd_head_k * hp.n_head, n_kv = hp.n_embd_k_gqa();
  HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_qkv.weight", {n_embd, n_q + 2 * n_kv}, Loader::kOptional, &L.wqkv));
  if (L.wqkv != nullptr) return ld.GetL(il, "attn_qkv.bias", {n_q + 2 * n_kv}, qkv_bias, &L.bqkv);
  HERD_RETURN_IF_ERROR(ld.SeparateQkv(il, L));
  return ld.QkvBiases(il, L, bias);
}

}  // namespace

// phi2: phi2.attention.layer_norm_epsilon required; every bias and output.weight/.bias
// required; attn_qkv or separate attn_q/k/v.
absl::Status LoadPhi2(Loader& ld) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNeox, /*rms_norm=*/false));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  Weights& w = ld.w();
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kRequired, Loader::kRequired));
  HERD_RETURN_IF_ERROR(ld.Get("output.bias", {hp.n_vocab}, Loader::kRequired, &w.output_b));
  const Loader::Need req = Loader::kRequired;
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = w.layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(ld.AttnNorm(il, L, req));
    HERD_RETURN_IF_ERROR(LoadQkv(ld, il, L, Loader::kOptional, req));
    HERD_RETURN_IF_ERROR(ld.AttnOutput(il, L));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.bias", {n_embd}, req, &L.bo));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.weight", {n_embd, n_ff}, req, &L.ffn_up));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.bias", {n_ff}, req, &L.ffn_up_b));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.weight", {n_ff, n_embd}, req, &L.ffn_down));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.bias", {n_embd}, req, &L.ffn_down_b));
  }
  return absl::OkStatus();
}

Tensor* BuildPhi2(const Model& m, Graph& g, const ForwardInputs& in) {
  GraphBuilder b(m, g, in);
  Tensor* inp = b.InpEmbd();
  for (int64_t il = 0; il < b.hp.n_layer; ++il) {
    const Layer& L = b.layer(il);
    Tensor* attn_norm = b.Norm(inp, L.attn_norm, L.attn_norm_b, NormType::kLayer);
    Qkv qkv = b.Project(L, attn_norm);
    b.RopeQk(qkv);
    // As llama.cpp: Q is scaled before the product (precision), attention scale 1.
    qkv.q = g.Scale(qkv.q, b.KqScale());
    Tensor* cur = b.Attention(il, L.wo, L.bo, qkv, 1.0f);
    b.LastLayerOutputs(il, {&cur, &inp, &attn_norm});
    Tensor* ffn_out = b.Ffn(attn_norm, L, FfnAct::kGelu, FfnGate::kNone);
    cur = g.Add(cur, ffn_out);
    inp = g.Add(cur, inp);
  }
  return b.Logits(inp, NormType::kLayer);
}

// phi3: phi3.attention.layer_norm_rms_epsilon required; attn_qkv (or attn_q/k/v) without
// biases; ffn_up holds gate and up ([n_embd, 2*n_ff], gate first); output tied when absent.
// LongRoPE (rope_factors_long/short) is not supported; phi3.attention.sliding_window is
// ignored, as llama.cpp does (Phi SWA disabled).
absl::Status LoadPhi3(Loader& ld) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNeox, /*rms_norm=*/true));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  Weights& w = ld.w();
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kOptional));
  HERD_RETURN_IF_ERROR(ld.Get("output.bias", {hp.n_vocab}, Loader::kOptional, &w.output_b));
  const Loader::Need req = Loader::kRequired;
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = w.layers[static_cast<size_t>(il)];
    for (const char* f : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
      if (ld.file().FindTensor(f) != nullptr || ld.file().FindTensor(absl::StrCat("blk.", il, ".", f)) != nullptr) {
        return absl::UnimplementedError(absl::StrCat(ld.file().path(), ": phi3 LongRoPE ('", f, "') is not supported"));
      }
    }
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_norm.weight", {n_embd}, req, &L.attn_norm));
    HERD_RETURN_IF_ERROR(LoadQkv(ld, il, L, Loader::kSkip, Loader::kSkip));
    HERD_RETURN_IF_ERROR(ld.AttnOutput(il, L));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.weight", {n_embd}, req, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.weight", {n_embd, 2 * n_ff}, req, &L.ffn_up));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.weight", {n_ff, n_embd}, req, &L.ffn_down));
  }
  return absl::OkStatus();
}

Tensor* BuildPhi3(const Model& m, Graph& g, const ForwardInputs& in) {
  LlamaBlock o;
  o.scale_q = true;
  o.gate = FfnGate::kFusedUp;
  return BuildLlamaFamily(m, g, in, o);
}

}  // namespace herd::model
