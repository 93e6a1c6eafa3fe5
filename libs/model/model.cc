#include "libs/model/model.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace herd::model {
namespace {

std::string ShapeString(const int64_t* ne, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) absl::StrAppend(&s, i ? ", " : "", ne[i]);
  return s + "]";
}

}  // namespace

std::vector<std::string> Model::SupportedArchitectures() { return {"llama"}; }

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& path) {
  auto file = gguf::GgufFile::Open(path);
  if (!file.ok()) return file.status();
  return FromGguf(*std::move(file));
}

absl::StatusOr<std::unique_ptr<Model>> Model::FromGguf(std::unique_ptr<gguf::GgufFile> file) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = std::move(file);
  auto arch = m->file_->GetString("general.architecture");
  if (!arch.ok()) return arch.status();
  m->hp_.arch = *arch;
  if (*arch == "llama") {
    absl::Status s = m->LoadLlama();
    if (!s.ok()) return s;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(m->file_->path(), ": unsupported architecture '", *arch,
                                                   "' (supported: ",
                                                   absl::StrJoin(SupportedArchitectures(), ", "), ")"));
  }
  return m;
}

absl::StatusOr<Tensor*> Model::Weight(const std::string& name, std::vector<int64_t> ne, bool required) {
  const gguf::TensorInfo* ti = file_->FindTensor(name);
  if (ti == nullptr) {
    if (!required) return nullptr;
    return absl::NotFoundError(absl::StrCat(file_->path(), ": missing tensor '", name, "'"));
  }
  bool ok = true;
  for (size_t i = 0; i < 4; ++i) {
    const int64_t want = i < ne.size() ? ne[i] : 1;
    if (ti->ne[i] != want) ok = false;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(file_->path(), ": tensor '", name, "' has shape ",
                                                   ShapeString(ti->ne, static_cast<int>(ti->n_dims)),
                                                   ", expected ",
                                                   ShapeString(ne.data(), static_cast<int>(ne.size()))));
  }
  Tensor* t = weights_.NewTensor(ti->type, ne, name);
  t->data = const_cast<uint8_t*>(ti->data);
  weight_bytes_ += ti->nbytes;
  return t;
}

absl::Status Model::LoadLlama() {
  const gguf::GgufFile& f = *file_;
  const std::string a = hp_.arch;
  auto req_int = [&](const std::string& key, int64_t* out) -> absl::Status {
    auto v = f.GetInt(a + "." + key);
    if (!v.ok()) return v.status();
    if (*v <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", a, ".", key, " = ", *v, " must be positive"));
    }
    *out = *v;
    return absl::OkStatus();
  };
  auto opt_int = [&](const std::string& key, int64_t* out) -> absl::Status {
    if (f.Find(a + "." + key) == nullptr) return absl::OkStatus();
    return req_int(key, out);
  };
  auto opt_float = [&](const std::string& key, float* out) -> absl::Status {
    if (f.Find(a + "." + key) == nullptr) return absl::OkStatus();
    auto v = f.GetFloat(a + "." + key);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
#define HERD_RETURN_IF_ERROR(expr)      \
  do {                                  \
    absl::Status _s = (expr);           \
    if (!_s.ok()) return _s;            \
  } while (0)
  HERD_RETURN_IF_ERROR(req_int("context_length", &hp_.n_ctx_train));
  HERD_RETURN_IF_ERROR(req_int("embedding_length", &hp_.n_embd));
  HERD_RETURN_IF_ERROR(req_int("block_count", &hp_.n_layer));
  HERD_RETURN_IF_ERROR(req_int("feed_forward_length", &hp_.n_ff));
  HERD_RETURN_IF_ERROR(req_int("attention.head_count", &hp_.n_head));
  hp_.n_head_kv = hp_.n_head;
  HERD_RETURN_IF_ERROR(opt_int("attention.head_count_kv", &hp_.n_head_kv));
  if (hp_.n_embd % hp_.n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": embedding_length ", hp_.n_embd,
                                                   " is not a multiple of head_count ", hp_.n_head));
  }
  if (hp_.n_head % hp_.n_head_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": head_count ", hp_.n_head,
                                                   " is not a multiple of head_count_kv ", hp_.n_head_kv));
  }
  hp_.n_embd_head_k = hp_.n_embd / hp_.n_head;
  hp_.n_embd_head_v = hp_.n_embd_head_k;
  HERD_RETURN_IF_ERROR(opt_int("attention.key_length", &hp_.n_embd_head_k));
  HERD_RETURN_IF_ERROR(opt_int("attention.value_length", &hp_.n_embd_head_v));
  hp_.n_rot = hp_.n_embd_head_k;
  HERD_RETURN_IF_ERROR(opt_int("rope.dimension_count", &hp_.n_rot));
  if (hp_.n_rot > hp_.n_embd_head_k || hp_.n_rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(f.path(), ": rope.dimension_count ", hp_.n_rot,
                                                   " must be even and at most the head size ",
                                                   hp_.n_embd_head_k));
  }
  HERD_RETURN_IF_ERROR(opt_float("attention.layer_norm_rms_epsilon", &hp_.f_norm_rms_eps));
  HERD_RETURN_IF_ERROR(opt_float("rope.freq_base", &hp_.rope_freq_base));
  float scaling = 0.0f;
  HERD_RETURN_IF_ERROR(opt_float("rope.scaling.factor", &scaling));
  if (f.Find(a + ".rope.scaling.type") != nullptr) {
    auto type = f.GetString(a + ".rope.scaling.type");
    if (type.ok() && *type != "linear" && *type != "none") {
      return absl::InvalidArgumentError(absl::StrCat(f.path(), ": rope.scaling.type '", *type,
                                                     "' is not supported (linear, none)"));
    }
    if (type.ok() && *type == "none") scaling = 0.0f;
  }
  if (scaling > 0.0f) hp_.rope_freq_scale = 1.0f / scaling;
  hp_.rope_type = 0;  // LLAMA_ROPE_TYPE_NORM

  const gguf::TensorInfo* emb = f.FindTensor("token_embd.weight");
  if (emb == nullptr) return absl::NotFoundError(absl::StrCat(f.path(), ": missing tensor 'token_embd.weight'"));
  hp_.n_vocab = emb->ne[1];

  const int64_t n_embd = hp_.n_embd, n_ff = hp_.n_ff;
  const int64_t n_q = hp_.n_embd_head_k * hp_.n_head;
  const int64_t n_k = hp_.n_embd_k_gqa(), n_v = hp_.n_embd_v_gqa();
  auto w = [&](const std::string& name, std::vector<int64_t> ne, bool required, Tensor** out) -> absl::Status {
    auto t = Weight(name, std::move(ne), required);
    if (!t.ok()) return t.status();
    *out = *t;
    return absl::OkStatus();
  };
  HERD_RETURN_IF_ERROR(w("token_embd.weight", {n_embd, hp_.n_vocab}, true, &tok_embd_));
  HERD_RETURN_IF_ERROR(w("output_norm.weight", {n_embd}, true, &output_norm_));
  HERD_RETURN_IF_ERROR(w("output.weight", {n_embd, hp_.n_vocab}, false, &output_));
  if (output_ == nullptr) output_ = tok_embd_;  // tied embeddings
  HERD_RETURN_IF_ERROR(w("rope_freqs.weight", {hp_.n_rot / 2}, false, &rope_freqs_));
  layers_.resize(static_cast<size_t>(hp_.n_layer));
  for (int64_t il = 0; il < hp_.n_layer; ++il) {
    Layer& L = layers_[static_cast<size_t>(il)];
    const std::string p = absl::StrCat("blk.", il, ".");
    HERD_RETURN_IF_ERROR(w(p + "attn_norm.weight", {n_embd}, true, &L.attn_norm));
    HERD_RETURN_IF_ERROR(w(p + "attn_q.weight", {n_embd, n_q}, true, &L.wq));
    HERD_RETURN_IF_ERROR(w(p + "attn_k.weight", {n_embd, n_k}, true, &L.wk));
    HERD_RETURN_IF_ERROR(w(p + "attn_v.weight", {n_embd, n_v}, true, &L.wv));
    HERD_RETURN_IF_ERROR(w(p + "attn_output.weight", {n_q, n_embd}, true, &L.wo));
    HERD_RETURN_IF_ERROR(w(p + "attn_q.bias", {n_q}, false, &L.bq));
    HERD_RETURN_IF_ERROR(w(p + "attn_k.bias", {n_k}, false, &L.bk));
    HERD_RETURN_IF_ERROR(w(p + "attn_v.bias", {n_v}, false, &L.bv));
    HERD_RETURN_IF_ERROR(w(p + "attn_output.bias", {n_embd}, false, &L.bo));
    HERD_RETURN_IF_ERROR(w(p + "ffn_norm.weight", {n_embd}, true, &L.ffn_norm));
    HERD_RETURN_IF_ERROR(w(p + "ffn_gate.weight", {n_embd, n_ff}, true, &L.ffn_gate));
    HERD_RETURN_IF_ERROR(w(p + "ffn_up.weight", {n_embd, n_ff}, true, &L.ffn_up));
    HERD_RETURN_IF_ERROR(w(p + "ffn_down.weight", {n_ff, n_embd}, true, &L.ffn_down));
  }
#undef HERD_RETURN_IF_ERROR
  return absl::OkStatus();
}

Tensor* Model::BuildForward(Graph& g, const ForwardInputs& in) const {
  const Hparams& hp = hp_;
  const int64_t n_tokens = in.tokens->ne[0];
  const int64_t hd_k = hp.n_embd_head_k, hd_v = hp.n_embd_head_v;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(hd_k));
  // llm_build_llama (llama.cpp): pre-norm blocks, RoPE on Q/K, SwiGLU FFN.
  Tensor* inp = g.GetRows(tok_embd_, in.tokens);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const Layer& L = layers_[static_cast<size_t>(il)];
    Tensor* cur = g.Mul(g.RmsNorm(inp, hp.f_norm_rms_eps), L.attn_norm);
    Tensor* q = g.MulMat(L.wq, cur);
    if (L.bq) q = g.Add(q, L.bq);
    Tensor* k = g.MulMat(L.wk, cur);
    if (L.bk) k = g.Add(k, L.bk);
    Tensor* v = g.MulMat(L.wv, cur);
    if (L.bv) v = g.Add(v, L.bv);
    q = g.Reshape(q, {hd_k, hp.n_head, n_tokens});
    k = g.Reshape(k, {hd_k, hp.n_head_kv, n_tokens});
    q = g.Rope(q, in.pos, rope_freqs_, static_cast<int>(hp.n_rot), hp.rope_type,
               static_cast<int>(hp.n_ctx_train), hp.rope_freq_base, hp.rope_freq_scale, 0.0f, 1.0f,
               32.0f, 1.0f);
    k = g.Rope(k, in.pos, rope_freqs_, static_cast<int>(hp.n_rot), hp.rope_type,
               static_cast<int>(hp.n_ctx_train), hp.rope_freq_base, hp.rope_freq_scale, 0.0f, 1.0f,
               32.0f, 1.0f);
    Tensor* kc = in.k_cache[static_cast<size_t>(il)];
    Tensor* vc = in.v_cache[static_cast<size_t>(il)];
    Tensor* kw = g.SetRows(kc, g.Reshape(k, {hp.n_embd_k_gqa(), n_tokens}), in.kv_idx);
    Tensor* vw = g.SetRows(vc, g.Reshape(v, {hp.n_embd_v_gqa(), n_tokens}), in.kv_idx);
    const size_t kel = GetGgmlTypeTraits(kc->type)->type_size;
    const size_t vel = GetGgmlTypeTraits(vc->type)->type_size;
    Tensor* kview = g.View(kw, {hd_k, hp.n_head_kv, in.n_kv}, {kel * hd_k, kc->nb[1]}, 0);
    Tensor* vview = g.View(vw, {hd_v, hp.n_head_kv, in.n_kv}, {vel * hd_v, vc->nb[1]}, 0);
    Tensor* attn = g.FlashAttnExt(q, kview, vview, in.mask, kq_scale, 0.0f);
    cur = g.MulMat(L.wo, g.Reshape(attn, {hd_v * hp.n_head, n_tokens}));
    if (L.bo) cur = g.Add(cur, L.bo);
    Tensor* ffn_inp = g.Add(cur, inp);
    cur = g.Mul(g.RmsNorm(ffn_inp, hp.f_norm_rms_eps), L.ffn_norm);
    Tensor* gate = g.MulMat(L.ffn_gate, cur);
    Tensor* up = g.MulMat(L.ffn_up, cur);
    cur = g.MulMat(L.ffn_down, g.Swiglu(gate, up));
    inp = g.Add(cur, ffn_inp);
  }
  if (in.out_ids != nullptr && in.out_ids->ne[0] != n_tokens) inp = g.GetRows(inp, in.out_ids);
  Tensor* cur = g.Mul(g.RmsNorm(inp, hp.f_norm_rms_eps), output_norm_);
  Tensor* logits = g.MulMat(output_, cur);
  logits->name = "result_output";
  g.SetOutput(logits);
  return logits;
}

}  // namespace herd::model
