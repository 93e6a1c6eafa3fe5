// GPT-2 and StarCoder (GPTBigCode): learned position embeddings, LayerNorm with bias,
// fused QKV with bias, GELU MLP with biases, no RoPE (llama.cpp llm_build_gpt2 /
// llm_build_starcoder; StarCoder is the same graph with multi-query attention).
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/model/arch.h"
#include "libs/model/builder.h"

namespace herd::model {

// Shared by gpt2 / starcoder / bloom: LN eps required, every bias required, output tied
// when absent. Bloom has token_embd_norm instead of position_embd.
absl::Status LoadGpt2Family(Loader& ld, bool pos_embd, bool tok_norm, float max_alibi_bias) {
  Hparams& hp = ld.hp();
  hp.rope_type = kRopeNone;
  HERD_RETURN_IF_ERROR(ld.CommonHparams());
  HERD_RETURN_IF_ERROR(ld.ReqFloat("attention.layer_norm_epsilon", &hp.f_norm_eps));
  HERD_RETURN_IF_ERROR(ld.SameHeadSizes());
  hp.f_max_alibi_bias = max_alibi_bias;
  Weights& w = ld.w();
  const int64_t n_embd = hp.n_embd;
  HERD_RETURN_IF_ERROR(ld.TokEmbd());
  if (pos_embd) {
    HERD_RETURN_IF_ERROR(ld.Get("position_embd.weight", {n_embd, hp.n_ctx_train}, Loader::kRequired, &w.pos_embd));
  }
  if (tok_norm) {
    HERD_RETURN_IF_ERROR(ld.Get("token_embd_norm.weight", {n_embd}, Loader::kRequired, &w.tok_norm));
    HERD_RETURN_IF_ERROR(ld.Get("token_embd_norm.bias", {n_embd}, Loader::kRequired, &w.tok_norm_b));
  }
  HERD_RETURN_IF_ERROR(ld.Output(Loader::kRequired, Loader::kOptional));
  HERD_RETURN_IF_ERROR(ld.BiasedFusedQkvLayers());
  return absl::OkStatus();
}

// The GPT-2 block: x += attn(LN1(x)); x += mlp(LN2(x)), GELU MLP, final LN, logits. The
// input is the embedding plus, when the model has them, learned position embeddings
// (gpt2, starcoder, mpt with position_embd), or the LayerNorm'd embedding (bloom).
Tensor* BuildGpt2Family(const Model& m, Graph& g, const ForwardInputs& in) {
  GraphBuilder b(m, g, in);
  const Hparams& hp = b.hp;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hp.n_embd_head_k));
  Tensor* inp = b.InpEmbd();
  if (b.w.pos_embd != nullptr) inp = g.Add(inp, g.GetRows(b.w.pos_embd, in.pos));
  if (b.w.tok_norm != nullptr) inp = b.Norm(inp, b.w.tok_norm, b.w.tok_norm_b, NormType::kLayer);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& L = b.w.layers[static_cast<size_t>(il)];
    Tensor* cur = b.Norm(inp, L.attn_norm, L.attn_norm_b, NormType::kLayer);
    Qkv qkv = b.Project(L, cur);     // clamped when f_clamp_kqv > 0 (mpt)
    if (L.attn_q_norm != nullptr) {  // MPT's optional Q/K LayerNorm over whole rows
      const std::vector<int64_t> q3 = {qkv.q->ne[0], qkv.q->ne[1], qkv.q->ne[2]};
      const std::vector<int64_t> k3 = {qkv.k->ne[0], qkv.k->ne[1], qkv.k->ne[2]};
      Tensor* q = g.Reshape(g.Cont(qkv.q), {q3[0] * q3[1], q3[2]});
      Tensor* k = g.Reshape(g.Cont(qkv.k), {k3[0] * k3[1], k3[2]});
      qkv.q = g.Reshape(b.Norm(q, L.attn_q_norm, L.attn_q_norm_b, NormType::kLayer), q3);
      qkv.k = g.Reshape(b.Norm(k, L.attn_k_norm, L.attn_k_norm_b, NormType::kLayer), k3);
    }
    cur = b.Attention(il, L.wo, L.bo, qkv, kq_scale);
    if (il == hp.n_layer - 1) {
      cur = b.Outputs(cur);
      inp = b.Outputs(inp);
    }
    Tensor* ffn_inp = g.Add(cur, inp);
    cur = b.Norm(ffn_inp, L.ffn_norm, L.ffn_norm_b, NormType::kLayer);
    cur = b.Ffn(cur, L, FfnAct::kGelu, FfnGate::kNone);
    inp = g.Add(cur, ffn_inp);
  }
  return b.Logits(inp, NormType::kLayer);
}

// gpt2: gpt2.attention.layer_norm_epsilon required; position_embd [n_embd, context_length].
absl::Status LoadGpt2(Loader& ld) { return LoadGpt2Family(ld, /*pos_embd=*/true, /*tok_norm=*/false, 0.0f); }
Tensor* BuildGpt2(const Model& m, Graph& g, const ForwardInputs& in) { return BuildGpt2Family(m, g, in); }

// starcoder: as gpt2 (usually MQA: head_count_kv 1).
absl::Status LoadStarcoder(Loader& ld) { return LoadGpt2Family(ld, true, false, 0.0f); }
Tensor* BuildStarcoder(const Model& m, Graph& g, const ForwardInputs& in) { return BuildGpt2Family(m, g, in); }

// bloom: token_embd_norm (w + b) on the embeddings, no position embeddings, ALiBi with
// max bias 8 (hard-coded in llama.cpp, no GGUF key).
absl::Status LoadBloom(Loader& ld) { return LoadGpt2Family(ld, false, /*tok_norm=*/true, 8.0f); }
Tensor* BuildBloom(const Model& m, Graph& g, const ForwardInputs& in) { return BuildGpt2Family(m, g, in); }

}  // namespace herd::model
