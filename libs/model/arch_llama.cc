// LLaMA and the RMSNorm + SwiGLU decoders built like it:
// llama, baichuan, refact (llama.cpp llm_build_llama / llm_build_baichuan / llm_build_refact).
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"
#include "libs/model/builder.h"

namespace herd::model {

absl::Status LoadLlamaLayers(Loader& ld, Loader::Need qkv_bias, Loader::Need out_bias, Loader::Need qk_norm) {
  const Hparams& hp = ld.hp();
  const int64_t n_embd = hp.n_embd, hd = hp.n_embd_head_k;
  ld.w().layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = ld.w().layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(ld.AttnNorm(il, L, Loader::kSkip));
    HERD_RETURN_IF_ERROR(ld.SeparateQkv(il, L));
    HERD_RETURN_IF_ERROR(ld.AttnOutput(il, L));
    HERD_RETURN_IF_ERROR(ld.QkvBiases(il, L, qkv_bias));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.bias", {n_embd}, out_bias, &L.bo));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q_norm.weight", {hd}, qk_norm, &L.attn_q_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k_norm.weight", {hd}, qk_norm, &L.attn_k_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.weight", {n_embd}, Loader::kRequired, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(ld.GatedFfn(il, L));
  }
  return absl::OkStatus();
}

Tensor* BuildLlamaFamily(const Model& m, Graph& g, const ForwardInputs& in, const LlamaBlock& o) {
  GraphBuilder b(m, g, in);
  Tensor* inp = b.InpEmbd();
  if (o.scale_embd) inp = g.Scale(inp, std::sqrt(static_cast<float>(b.hp.n_embd)));
  for (int64_t il = 0; il < b.hp.n_layer; ++il) {
    const Layer& L = b.layer(il);
    Tensor* cur = b.Norm(inp, L.attn_norm, nullptr, NormType::kRms);
    Qkv qkv = b.Project(L, cur);
    if (L.attn_q_norm != nullptr) {  // per-head RMS norm before RoPE (qwen3)
      qkv.q = b.Norm(qkv.q, L.attn_q_norm, nullptr, NormType::kRms);
      qkv.k = b.Norm(qkv.k, L.attn_k_norm, nullptr, NormType::kRms);
    }
    if (o.rope) b.RopeQk(qkv, b.w.rope_freqs);
    if (o.scale_q) qkv.q = g.Scale(qkv.q, b.KqScale());  // as llama.cpp (precision)
    cur = b.Attention(il, L.wo, o.use_bo ? L.bo : nullptr, qkv, o.scale_q ? 1.0f : b.KqScale());
    b.LastLayerOutputs(il, {&cur, &inp});
    inp = b.FfnResidual(cur, inp, L, NormType::kRms, o.act, o.gate);
  }
  return b.Logits(inp, NormType::kRms);
}

// llama: llama.cpp LLM_ARCH_LLAMA. RMS eps required; output tied when absent; optional
// rope_freqs (Llama 3.1 frequency factors); NORM RoPE over all n_rot = head dims.
absl::Status LoadLlama(Loader& ld) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNorm, /*rms_norm=*/true));
  HERD_RETURN_IF_ERROR(ld.RopeCoversHead());
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kOptional));
  HERD_RETURN_IF_ERROR(ld.Get("rope_freqs.weight", {hp.n_rot / 2}, Loader::kOptional, &ld.w().rope_freqs));
  return LoadLlamaLayers(ld, Loader::kOptional, Loader::kOptional, Loader::kSkip);
}

Tensor* BuildLlama(const Model& m, Graph& g, const ForwardInputs& in) {
  LlamaBlock o;
  o.use_bo = true;
  return BuildLlamaFamily(m, g, in, o);
}

// baichuan: llama.cpp LLM_ARCH_BAICHUAN. RMS eps required. RoPE (NORM) only for the 7B
// (32 layers) and ALiBi (max bias 8) only for the 13B (40 layers); any other depth gets
// neither, exactly as llama.cpp (model type UNKNOWN). Separate output matrix.
absl::Status LoadBaichuan(Loader& ld) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNorm, /*rms_norm=*/true));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  HERD_RETURN_IF_ERROR(ld.RopeCoversHead());         // llama.cpp asserts it even when it does not rope
  if (hp.n_layer == 40) hp.f_max_alibi_bias = 8.0f;  // TODO in llama.cpp: become a GGUF key
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kRequired));
  return LoadLlamaLayers(ld, Loader::kSkip, Loader::kSkip, Loader::kSkip);
}

Tensor* BuildBaichuan(const Model& m, Graph& g, const ForwardInputs& in) {
  LlamaBlock o;
  o.rope = m.hparams().n_layer == 32;
  return BuildLlamaFamily(m, g, in, o);
}

// refact: llama.cpp LLM_ARCH_REFACT. RMS eps required; no RoPE; ALiBi with max bias 8
// (hard-coded, no GGUF key); output tied when absent.
absl::Status LoadRefact(Loader& ld) {
  Hparams& hp = ld.hp();
  HERD_RETURN_IF_ERROR(ld.CommonHparams(kRopeNone, /*rms_norm=*/true));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  hp.f_max_alibi_bias = 8.0f;
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kSkip, Loader::kOptional));
  return LoadLlamaLayers(ld, Loader::kOptional, Loader::kOptional, Loader::kSkip);
}

Tensor* BuildRefact(const Model& m, Graph& g, const ForwardInputs& in) {
  LlamaBlock o;
  o.rope = false;
  return BuildLlamaFamily(m, g, in, o);
}

}  // namespace herd::model
