#include "libs/model/builder.h"

#include <cmath>

namespace herd::model {

GraphBuilder::GraphBuilder(const Model& m, Graph& graph, const ForwardInputs& inputs)
    : hp(m.hparams()), w(m.weights()), g(graph), in(inputs), n_tokens(inputs.tokens->ne[0]) {}

float GraphBuilder::KqScale() const { return 1.0f / std::sqrt(static_cast<float>(hp.n_embd_head_k)); }

Tensor* GraphBuilder::InpEmbd() { return g.GetRows(w.tok_embd, in.tokens); }

Tensor* GraphBuilder::Norm(Tensor* x, Tensor* weight, Tensor* bias, NormType type) {
  Tensor* cur = type == NormType::kRms ? g.RmsNorm(x, hp.f_norm_rms_eps) : g.Norm(x, hp.f_norm_eps);
  if (weight != nullptr) cur = g.Mul(cur, weight);
  if (bias != nullptr) cur = g.Add(cur, bias);
  return cur;
}

Qkv GraphBuilder::Project(const Layer& L, Tensor* cur) {
  const int64_t hd_k = hp.n_embd_head_k, hd_v = hp.n_embd_head_v;
  const int64_t n_q = hd_k * hp.n_head, n_k = hp.n_embd_k_gqa();
  const int64_t nt = cur->ne[1];
  const float c = hp.f_clamp_kqv;
  Qkv r;
  if (L.wqkv != nullptr) {
    Tensor* qkv = g.MulMat(L.wqkv, cur);
    if (L.bqkv != nullptr) qkv = g.Add(qkv, L.bqkv);
    if (c > 0.0f) qkv = g.Clamp(qkv, -c, c);
    const size_t f = sizeof(float);
    r.q = g.View(qkv, {hd_k, hp.n_head, nt}, {f * static_cast<size_t>(hd_k), qkv->nb[1]}, 0);
    r.k = g.View(qkv, {hd_k, hp.n_head_kv, nt}, {f * static_cast<size_t>(hd_k), qkv->nb[1]},
                 f * static_cast<size_t>(n_q));
    r.v = g.View(qkv, {hd_v, hp.n_head_kv, nt}, {f * static_cast<size_t>(hd_v), qkv->nb[1]},
                 f * static_cast<size_t>(n_q + n_k));
    return r;
  }
  auto proj = [&](Tensor* wt, Tensor* b) {
    Tensor* t = g.MulMat(wt, cur);
    if (b != nullptr) t = g.Add(t, b);
    if (c > 0.0f) t = g.Clamp(t, -c, c);
    return t;
  };
  r.q = g.Reshape(proj(L.wq, L.bq), {hd_k, hp.n_head, nt});
  r.k = g.Reshape(proj(L.wk, L.bk), {hd_k, hp.n_head_kv, nt});
  r.v = g.Reshape(proj(L.wv, L.bv), {hd_v, hp.n_head_kv, nt});
  return r;
}

Tensor* GraphBuilder::Rope(Tensor* x, Tensor* freq_factors) {
  if (hp.rope_type == kRopeNone) return x;
  // ggml_rope_ext with llama.cpp's defaults for non-YaRN models: ext_factor 0,
  // attn_factor 1, beta_fast 32, beta_slow 1, n_ctx_orig = n_ctx_train.
  return g.Rope(x, in.pos, freq_factors, static_cast<int>(hp.n_rot), hp.rope_type, static_cast<int>(hp.n_ctx_train),
                hp.rope_freq_base, hp.rope_freq_scale, 0.0f, 1.0f, 32.0f, 1.0f);
}

void GraphBuilder::RopeQk(Qkv& qkv, Tensor* freq_factors) {
  qkv.q = Rope(qkv.q, freq_factors);
  qkv.k = Rope(qkv.k, freq_factors);
}

Tensor* GraphBuilder::Rows(Tensor* x) {
  const std::vector<int64_t> ne2 = {x->ne[0] * x->ne[1], x->ne[2]};
  if (x->is_contiguous()) return g.Reshape(x, ne2);
  if (x->nb[1] == x->nb[0] * static_cast<size_t>(x->ne[0])) return g.View(x, ne2, {x->nb[2]}, 0);
  return g.Reshape(g.Cont(x), ne2);
}

Tensor* GraphBuilder::Attention(int64_t il, Tensor* wo, Tensor* bo, const Qkv& qkv, float kq_scale) {
  const int64_t hd_k = hp.n_embd_head_k, hd_v = hp.n_embd_head_v;
  Tensor* kc = in.k_cache[static_cast<size_t>(il)];
  Tensor* vc = in.v_cache[static_cast<size_t>(il)];
  Tensor* kw = g.SetRows(kc, Rows(qkv.k), in.kv_idx);
  Tensor* vw = g.SetRows(vc, Rows(qkv.v), in.kv_idx);
  const size_t kel = GetGgmlTypeTraits(kc->type)->type_size;
  const size_t vel = GetGgmlTypeTraits(vc->type)->type_size;
  Tensor* kview = g.View(kw, {hd_k, hp.n_head_kv, in.n_kv}, {kel * static_cast<size_t>(hd_k), kc->nb[1]}, 0);
  Tensor* vview = g.View(vw, {hd_v, hp.n_head_kv, in.n_kv}, {vel * static_cast<size_t>(hd_v), vc->nb[1]}, 0);
  Tensor* attn = g.FlashAttnExt(qkv.q, kview, vview, in.mask, kq_scale, hp.f_max_alibi_bias);
  Tensor* cur = g.MulMat(wo, g.Reshape(attn, {hd_v * hp.n_head, qkv.q->ne[2]}));
  if (bo != nullptr) cur = g.Add(cur, bo);
  return cur;
}

Tensor* GraphBuilder::Ffn(Tensor* cur, const Layer& L, FfnAct act, FfnGate gate) {
  auto activate = [&](Tensor* x) {
    switch (act) {
      case FfnAct::kGelu:
        return g.Gelu(x);
      case FfnAct::kGeluErf:
        return g.GeluErf(x);
      case FfnAct::kSilu:
        return g.Silu(x);
    }
    return x;
  };
  // gate_x * up_x with the activation on the gate (ggml swiglu / geglu, split form).
  auto glu = [&](Tensor* gate_x, Tensor* up_x) {
    if (act == FfnAct::kSilu) return g.Swiglu(gate_x, up_x);
    return g.Mul(activate(gate_x), up_x);
  };
  Tensor* up = g.MulMat(L.ffn_up, cur);
  if (L.ffn_up_b != nullptr) up = g.Add(up, L.ffn_up_b);
  Tensor* x = nullptr;
  switch (gate) {
    case FfnGate::kNone:
      x = activate(up);
      break;
    case FfnGate::kPar: {
      Tensor* gt = g.MulMat(L.ffn_gate, cur);
      if (L.ffn_gate_b != nullptr) gt = g.Add(gt, L.ffn_gate_b);
      x = glu(gt, up);
      break;
    }
    case FfnGate::kFusedUp: {
      const int64_t n_ff = up->ne[0] / 2;
      const size_t half = sizeof(float) * static_cast<size_t>(n_ff);
      Tensor* gt = g.View(up, {n_ff, up->ne[1]}, {up->nb[1]}, 0);
      Tensor* u = g.View(up, {n_ff, up->ne[1]}, {up->nb[1]}, half);
      x = glu(gt, u);
      break;
    }
  }
  Tensor* down = g.MulMat(L.ffn_down, x);
  if (L.ffn_down_b != nullptr) down = g.Add(down, L.ffn_down_b);
  return down;
}

bool GraphBuilder::SelectsOutputs() const { return in.out_ids != nullptr && in.out_ids->ne[0] != n_tokens; }

Tensor* GraphBuilder::Outputs(Tensor* x) { return SelectsOutputs() ? g.GetRows(x, in.out_ids) : x; }

void GraphBuilder::LastLayerOutputs(int64_t il, std::initializer_list<Tensor**> xs) {
  if (il != hp.n_layer - 1) return;
  for (Tensor** x : xs) *x = Outputs(*x);
}

Tensor* GraphBuilder::FfnResidual(Tensor* attn_out, Tensor* inp, const Layer& L, NormType norm, FfnAct act,
                                  FfnGate gate) {
  Tensor* ffn_inp = g.Add(attn_out, inp);
  Tensor* cur = Norm(ffn_inp, L.ffn_norm, L.ffn_norm_b, norm);
  cur = Ffn(cur, L, act, gate);
  return g.Add(cur, ffn_inp);
}

Tensor* GraphBuilder::Logits(Tensor* x, NormType type) {
  Tensor* cur = Norm(x, w.output_norm, w.output_norm_b, type);
  if (in.embeddings) {
    cur->name = "result_embd";
    g.SetOutput(cur);
    return cur;
  }
  Tensor* logits = g.MulMat(w.output, cur);
  if (w.output_b != nullptr) logits = g.Add(logits, w.output_b);
  logits->name = "result_output";
  g.SetOutput(logits);
  return logits;
}

}  // namespace herd::model
