// Qwen2 and Qwen3 (llama.cpp llm_build_qwen2 / llm_build_qwen3): RMSNorm, separate
// Q/K/V (Qwen2 with biases, Qwen3 with a per-head RMS qk-norm), NeoX RoPE, SwiGLU.
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"
#include "libs/model/builder.h"

namespace herd::model {
namespace {

absl::Status LoadQwen(Loader& ld, bool qk_norm) {
  Hparams& hp = ld.hp();
  hp.rope_type = kRopeNeox;
  HERD_RETURN_IF_ERROR(ld.CommonHparams());
  HERD_RETURN_IF_ERROR(ld.ReqFloat("attention.layer_norm_rms_epsilon", &hp.f_norm_rms_eps));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  if (!qk_norm) HERD_RETURN_IF_ERROR(ld.RopeCoversHead());  // qwen2 asserts n_rot == head size
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kOptional));
  HERD_RETURN_IF_ERROR(
      ld.Get("output.bias", {hp.n_vocab}, qk_norm ? Loader::kSkip : Loader::kOptional, &ld.w().output_b));
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff, hd = hp.n_embd_head_k;
  const int64_t n_q = hd * hp.n_head, n_kv = hp.n_embd_k_gqa();
  const Loader::Need bias = qk_norm ? Loader::kSkip : Loader::kOptional;
  const Loader::Need norm = qk_norm ? Loader::kRequired : Loader::kSkip;
  ld.w().layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = ld.w().layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_norm.weight", {n_embd}, Loader::kRequired, &L.attn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q.weight", {n_embd, n_q}, Loader::kRequired, &L.wq));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k.weight", {n_embd, n_kv}, Loader::kRequired, &L.wk));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_v.weight", {n_embd, n_kv}, Loader::kRequired, &L.wv));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.weight", {n_q, n_embd}, Loader::kRequired, &L.wo));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q.bias", {n_q}, bias, &L.bq));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k.bias", {n_kv}, bias, &L.bk));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_v.bias", {n_kv}, bias, &L.bv));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q_norm.weight", {hd}, norm, &L.attn_q_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k_norm.weight", {hd}, norm, &L.attn_k_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.weight", {n_embd}, Loader::kRequired, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_gate.weight", {n_embd, n_ff}, Loader::kRequired, &L.ffn_gate));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.weight", {n_embd, n_ff}, Loader::kRequired, &L.ffn_up));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.weight", {n_ff, n_embd}, Loader::kRequired, &L.ffn_down));
  }
  return absl::OkStatus();
}

Tensor* BuildQwen(const Model& m, Graph& g, const ForwardInputs& in, bool qk_norm) {
  GraphBuilder b(m, g, in);
  const Hparams& hp = b.hp;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd_head_k));
  Tensor* inp = b.InpEmbd();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& L = b.w.layers[static_cast<size_t>(il)];
    Tensor* cur = b.Norm(inp, L.attn_norm, nullptr, NormType::kRms);
    Qkv qkv = b.Project(L, cur);
    if (qk_norm) {  // per-head RMS norm before RoPE (Qwen3)
      qkv.q = b.Norm(qkv.q, L.attn_q_norm, nullptr, NormType::kRms);
      qkv.k = b.Norm(qkv.k, L.attn_k_norm, nullptr, NormType::kRms);
    }
    qkv.q = b.Rope(qkv.q);
    qkv.k = b.Rope(qkv.k);
    cur = b.Attention(il, L.wo, qk_norm ? nullptr : L.bo, qkv, kq_scale);
    if (il == hp.n_layer - 1) {
      cur = b.Outputs(cur);
      inp = b.Outputs(inp);
    }
    Tensor* ffn_inp = g.Add(cur, inp);
    cur = b.Norm(ffn_inp, L.ffn_norm, nullptr, NormType::kRms);
    cur = b.Ffn(cur, L, FfnAct::kSilu, FfnGate::kPar);
    inp = g.Add(cur, ffn_inp);
  }
  return b.Logits(inp, NormType::kRms);
}

}  // namespace

// qwen2: RMS eps required; optional Q/K/V biases; output tied when absent, optional output.bias.
absl::Status LoadQwen2(Loader& ld) { return LoadQwen(ld, /*qk_norm=*/false); }
Tensor* BuildQwen2(const Model& m, Graph& g, const ForwardInputs& in) { return BuildQwen(m, g, in, false); }

// qwen3: RMS eps required; attn_q_norm / attn_k_norm [head_dim] required; no biases.
absl::Status LoadQwen3(Loader& ld) { return LoadQwen(ld, /*qk_norm=*/true); }
Tensor* BuildQwen3(const Model& m, Graph& g, const ForwardInputs& in) { return BuildQwen(m, g, in, true); }

}  // namespace herd::model
