#include "libs/model/test_runner.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace herd::model {

SequenceRunner::SequenceRunner(const Model& m, Backend* backend, int64_t n_ctx, GgmlType kv_type)
    : m_(m), backend_(backend), n_ctx_(n_ctx) {
  const Hparams& hp = m.hparams();
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Tensor* k = cache_.NewTensor(kv_type, {hp.n_embd_k_gqa(), n_ctx}, absl::StrCat("cache_k_l", il));
    Tensor* v = cache_.NewTensor(kv_type, {hp.n_embd_v_gqa(), n_ctx}, absl::StrCat("cache_v_l", il));
    for (Tensor* t : {k, v}) {
      data_.emplace_back(t->nbytes(), 0);
      t->data = data_.back().data();
    }
    k_.push_back(k);
    v_.push_back(v);
  }
}

absl::StatusOr<std::vector<std::vector<float>>> SequenceRunner::Eval(const std::vector<int32_t>& tokens, int32_t p0,
                                                                     bool all_logits, bool embeddings) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t n_kv = p0 + n;
  if (n == 0 || p0 < 0 || n_kv > n_ctx_) {
    return absl::OutOfRangeError(absl::StrCat("positions [", p0, ", ", n_kv, ") outside the ", n_ctx_, "-cell cache"));
  }
  const bool alibi = m_.hparams().use_alibi();
  std::vector<int32_t> toks = tokens, pos(static_cast<size_t>(n)), ids;
  std::vector<float> mask(static_cast<size_t>(n_kv * n));
  for (int64_t t = 0; t < n; ++t) {
    pos[t] = p0 + static_cast<int32_t>(t);
    if (all_logits || t == n - 1) ids.push_back(static_cast<int32_t>(t));
    for (int64_t c = 0; c < n_kv; ++c) {
      mask[static_cast<size_t>(t * n_kv + c)] = c > pos[t] ? -std::numeric_limits<float>::infinity()
                                                : alibi    ? -std::fabs(static_cast<float>(pos[t] - c))
                                                           : 0.0f;
    }
  }
  Graph g;
  ForwardInputs in;
  in.tokens = g.NewTensor(GgmlType::I32, {n}, "inp_tokens");
  in.tokens->data = toks.data();
  in.pos = g.NewTensor(GgmlType::I32, {n}, "inp_pos");
  in.pos->data = pos.data();
  in.kv_idx = g.NewTensor(GgmlType::I32, {n}, "inp_kv_idx");
  in.kv_idx->data = pos.data();
  in.mask = g.NewTensor(GgmlType::F32, {n_kv, n}, "inp_mask");
  in.mask->data = mask.data();
  in.out_ids = g.NewTensor(GgmlType::I32, {static_cast<int64_t>(ids.size())}, "inp_out_ids");
  in.out_ids->data = ids.data();
  in.k_cache = k_;
  in.v_cache = v_;
  in.n_kv = n_kv;
  in.embeddings = embeddings;
  for (Tensor* t : g.leaves()) t->is_input = true;
  Tensor* logits = m_.BuildForward(g, in);
  absl::Status s = backend_->GraphCompute(g);
  if (!s.ok()) return s;
  const int64_t nv = logits->ne[0];
  std::vector<float> all(static_cast<size_t>(nv * logits->ne[1]));
  s = backend_->GetTensor(logits, all.data(), 0, all.size() * sizeof(float));
  if (!s.ok()) return s;
  std::vector<std::vector<float>> out;
  for (int64_t t = 0; t < logits->ne[1]; ++t) out.emplace_back(all.begin() + t * nv, all.begin() + (t + 1) * nv);
  return out;
}

absl::StatusOr<std::vector<int32_t>> SequenceRunner::Greedy(const std::vector<int32_t>& prompt, int n_predict) {
  auto argmax = [](const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
  };
  std::vector<int32_t> out;
  auto l = Eval(prompt, 0, /*all_logits=*/false);
  if (!l.ok()) return l.status();
  int32_t next = argmax(l->back());
  for (int i = 0; i < n_predict; ++i) {
    out.push_back(next);
    if (i + 1 == n_predict) break;
    l = Eval({next}, static_cast<int32_t>(prompt.size() + out.size() - 1));
    if (!l.ok()) return l.status();
    next = argmax((*l)[0]);
  }
  return out;
}

}  // namespace herd::model
