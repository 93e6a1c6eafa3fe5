// LLaMA and the RMSNorm + SwiGLU decoders built like it:
// llama, baichuan, refact (llama.cpp llm_build_llama / llm_build_baichuan / llm_build_refact).
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"
#include "libs/model/builder.h"

namespace herd::model {
namespace {

// Separate Q/K/V (+ optional biases), attn_output (+ optional bias), ffn_norm and a gated
// FFN: the tensor set llama.cpp loads for LLM_ARCH_LLAMA / REFACT / BAICHUAN.
absl::Status LoadLlamaLayers(Loader& ld, bool with_biases) {
  const Hparams& hp = ld.hp();
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  const int64_t n_q = hp.n_embd_head_k * hp.n_head, n_k = hp.n_embd_k_gqa(), n_v = hp.n_embd_v_gqa();
  const int64_t n_o = hp.n_embd_head_v * hp.n_head;
  const Loader::Need opt = with_biases ? Loader::kOptional : Loader::kRequired;
  ld.w().layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = ld.w().layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_norm.weight", {n_embd}, Loader::kRequired, &L.attn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q.weight", {n_embd, n_q}, Loader::kRequired, &L.wq));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k.weight", {n_embd, n_k}, Loader::kRequired, &L.wk));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_v.weight", {n_embd, n_v}, Loader::kRequired, &L.wv));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.weight", {n_o, n_embd}, Loader::kRequired, &L.wo));
    if (with_biases) {
      HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q.bias", {n_q}, opt, &L.bq));
      HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k.bias", {n_k}, opt, &L.bk));
      HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_v.bias", {n_v}, opt, &L.bv));
      HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.bias", {n_embd}, opt, &L.bo));
    }
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.weight", {n_embd}, Loader::kRequired, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_gate.weight", {n_embd, n_ff}, Loader::kRequired, &L.ffn_gate));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.weight", {n_embd, n_ff}, Loader::kRequired, &L.ffn_up));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.weight", {n_ff, n_embd}, Loader::kRequired, &L.ffn_down));
  }
  return absl::OkStatus();
}

// The pre-norm RMS block shared by llama / baichuan / refact: attention with optional RoPE,
// then SwiGLU. `rope` false skips RoPE; `bo` false ignores attn_output.bias.
Tensor* BuildRmsSwiglu(const Model& m, Graph& g, const ForwardInputs& in, bool rope, bool use_bo) {
  GraphBuilder b(m, g, in);
  const Hparams& hp = b.hp;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd_head_k));
  Tensor* inp = b.InpEmbd();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& L = b.w.layers[static_cast<size_t>(il)];
    Tensor* cur = b.Norm(inp, L.attn_norm, nullptr, NormType::kRms);
    Qkv qkv = b.Project(L, cur);
    if (rope) {
      qkv.q = b.Rope(qkv.q, b.w.rope_freqs);
      qkv.k = b.Rope(qkv.k, b.w.rope_freqs);
    }
    cur = b.Attention(il, L.wo, use_bo ? L.bo : nullptr, qkv, kq_scale);
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

// llama: llama.cpp LLM_ARCH_LLAMA. RMS eps required; output tied when absent; optional
// rope_freqs (Llama 3.1 frequency factors); NORM RoPE over all n_rot = head dims.
absl::Status LoadLlama(Loader& ld) {
  Hparams& hp = ld.hp();
  hp.rope_type = kRopeNorm;
  HERD_RETURN_IF_ERROR(ld.CommonHparams());
  HERD_RETURN_IF_ERROR(ld.ReqFloat("attention.layer_norm_rms_epsilon", &hp.f_norm_rms_eps));
  HERD_RETURN_IF_ERROR(ld.RopeCoversHead());
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kOptional));
  HERD_RETURN_IF_ERROR(ld.Get("rope_freqs.weight", {hp.n_rot / 2}, Loader::kOptional, &ld.w().rope_freqs));
  return LoadLlamaLayers(ld, /*with_biases=*/true);
}

Tensor* BuildLlama(const Model& m, Graph& g, const ForwardInputs& in) {
  return BuildRmsSwiglu(m, g, in, /*rope=*/true, /*use_bo=*/true);
}

// baichuan: llama.cpp LLM_ARCH_BAICHUAN. RMS eps required. RoPE (NORM) only for the 7B
// (32 layers) and ALiBi (max bias 8) only for the 13B (40 layers); any other depth gets
// neither, exactly as llama.cpp (model type UNKNOWN). Separate output matrix.
absl::Status LoadBaichuan(Loader& ld) {
  Hparams& hp = ld.hp();
  hp.rope_type = kRopeNorm;
  HERD_RETURN_IF_ERROR(ld.CommonHparams());
  HERD_RETURN_IF_ERROR(ld.ReqFloat("attention.layer_norm_rms_epsilon", &hp.f_norm_rms_eps));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  HERD_RETURN_IF_ERROR(ld.RopeCoversHead());         // llama.cpp asserts it even when it does not rope
  if (hp.n_layer == 40) hp.f_max_alibi_bias = 8.0f;  // TODO in llama.cpp: become a GGUF key
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kRequired));
  return LoadLlamaLayers(ld, /*with_biases=*/false);
}

Tensor* BuildBaichuan(const Model& m, Graph& g, const ForwardInputs& in) {
  return BuildRmsSwiglu(m, g, in, /*rope=*/m.hparams().n_layer == 32, /*use_bo=*/false);
}

// refact: llama.cpp LLM_ARCH_REFACT. RMS eps required; no RoPE; ALiBi with max bias 8
// (hard-coded, no GGUF key); output tied when absent.
absl::Status LoadRefact(Loader& ld) {
  Hparams& hp = ld.hp();
  hp.rope_type = kRopeNone;
  HERD_RETURN_IF_ERROR(ld.CommonHparams());
  HERD_RETURN_IF_ERROR(ld.ReqFloat("attention.layer_norm_rms_epsilon", &hp.f_norm_rms_eps));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  hp.f_max_alibi_bias = 8.0f;
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kOptional));
  return LoadLlamaLayers(ld, /*with_biases=*/true);
}

Tensor* BuildRefact(const Model& m, Graph& g, const ForwardInputs& in) {
  return BuildRmsSwiglu(m, g, in, /*rope=*/false, /*use_bo=*/false);
}

}  // namespace herd::model
