// MPT (llama.cpp LLM_ARCH_MPT, llm_build_mpt): the GPT-2 block with ALiBi instead of
// position embeddings, an optional clamp of the fused QKV projection, usually no biases,
// and the output tied to the token embedding.
#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"

namespace herd::model {

// Keys: mpt.attention.layer_norm_epsilon and mpt.attention.max_alibi_bias required;
// mpt.attention.clamp_kqv optional (absent = no clamp). Tensors: token_embd, output_norm
// and every layer's attn_norm / attn_qkv / attn_output / ffn_norm / ffn_up / ffn_down
// weights required; position_embd, output.weight (else tied), all biases and the Q/K
// LayerNorm (attn_q_norm / attn_k_norm) optional.
absl::Status LoadMpt(Loader& ld) {
  Hparams& hp = ld.hp();
  hp.rope_type = kRopeNone;
  HERD_RETURN_IF_ERROR(ld.CommonHparams());
  HERD_RETURN_IF_ERROR(ld.ReqFloat("attention.layer_norm_epsilon", &hp.f_norm_eps));
  HERD_RETURN_IF_ERROR(ld.OptFloat("attention.clamp_kqv", &hp.f_clamp_kqv));
  HERD_RETURN_IF_ERROR(ld.ReqFloat("attention.max_alibi_bias", &hp.f_max_alibi_bias));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  Weights& w = ld.w();
  const int64_t n_embd = hp.n_embd, n_ff = hp.n_ff;
  const int64_t n_q = hp.n_embd_head_k * hp.n_head, n_kv = hp.n_embd_k_gqa(), n_qkv = n_q + 2 * n_kv;
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  HERD_RETURN_IF_ERROR(ld.Get("position_embd.weight", {n_embd, hp.n_ctx_train}, Loader::kOptional, &w.pos_embd));
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kOptional, Loader::kOptional));
  const Loader::Need req = Loader::kRequired, opt = Loader::kOptional;
  w.layers.resize(static_cast<size_t>(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Layer& L = w.layers[static_cast<size_t>(il)];
    HERD_RETURN_IF_ERROR(ld.AttnNorm(il, L, opt));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_qkv.weight", {n_embd, n_qkv}, req, &L.wqkv));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_qkv.bias", {n_qkv}, opt, &L.bqkv));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.weight", {n_q, n_embd}, req, &L.wo));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_output.bias", {n_embd}, opt, &L.bo));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.weight", {n_embd}, req, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_norm.bias", {n_embd}, opt, &L.ffn_norm_b));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.weight", {n_embd, n_ff}, req, &L.ffn_up));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_up.bias", {n_ff}, opt, &L.ffn_up_b));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.weight", {n_ff, n_embd}, req, &L.ffn_down));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "ffn_down.bias", {n_embd}, opt, &L.ffn_down_b));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q_norm.weight", {n_q}, opt, &L.attn_q_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_q_norm.bias", {n_q}, opt, &L.attn_q_norm_b));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k_norm.weight", {n_kv}, opt, &L.attn_k_norm));
    HERD_RETURN_IF_ERROR(ld.GetL(il, "attn_k_norm.bias", {n_kv}, opt, &L.attn_k_norm_b));
    if ((L.attn_q_norm == nullptr) != (L.attn_k_norm == nullptr)) {
      return ld.Invalid(absl::StrCat("layer ", il, ": attn_q_norm and attn_k_norm must both be present or absent"));
    }
    const std::string act = absl::StrCat("blk.", il, ".ffn_act.scales");
    if (ld.file().FindTensor(act) != nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(ld.file().path(), ": tensor '", act, "' (AWQ activation scales) is not supported"));
    }
  }
  return absl::OkStatus();
}

Tensor* BuildMpt(const Model& m, Graph& g, const ForwardInputs& in) { return BuildGpt2Family(m, g, in); }

}  // namespace herd::model
