#include "libs/engine/engine.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace herd::engine {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const model::Model& model, const EngineParams& params,
                                                       Backend* backend) {
  EngineParams p = params;
  if (p.n_ctx < 0) return absl::InvalidArgumentError(absl::StrCat("n_ctx ", p.n_ctx, " must be >= 0"));
  if (p.n_batch < 1) return absl::InvalidArgumentError(absl::StrCat("n_batch ", p.n_batch, " must be >= 1"));
  if (p.n_ctx == 0) p.n_ctx = std::min<int64_t>(model.hparams().n_ctx_train, 4096);
  const std::vector<const BufferType*> weights = model.weights_buffer_types();
  if (weights.empty() && !backend->default_buffer_type()->is_host()) {
    return absl::FailedPreconditionError(absl::StrCat("the model's weights are in the file mapping, which backend ",
                                                      backend->name(),
                                                      " cannot use: place them first (Model::PlaceWeights)"));
  }
  for (const BufferType* w : weights) {  // a layer split has several
    if (!backend->CanUseBufferType(w)) {
      return absl::FailedPreconditionError(absl::StrCat("the model's weights are in ", w->name(), ", which backend ",
                                                        backend->name(),
                                                        " cannot use: place them first (Model::PlaceWeights)"));
    }
  }
  std::unique_ptr<Engine> e(new Engine(model, p, backend));
  // Each layer's K/V in its layer's memory (one memory unless the backend splits layers).
  const int64_t n_layer = model.hparams().n_layer;
  auto kv = KvCache::Create(model.hparams(), p.n_ctx, p.kv_type,
                            [backend, n_layer](int64_t il) { return backend->layer_buffer_type(il, n_layer); });
  if (!kv.ok()) return kv.status();
  e->kv_ = *std::move(kv);
  return e;
}

const float* Engine::Logits(int64_t j) const {
  if (j < 0 || j >= n_outputs_) return nullptr;
  return logits_.data() + static_cast<size_t>(j) * static_cast<size_t>(n_vocab());
}

const float* Engine::Embedding(int64_t j) const {
  if (j < 0 || j >= n_embd_outputs_) return nullptr;
  return embd_.data() + static_cast<size_t>(j) * static_cast<size_t>(n_embd());
}

absl::Status Engine::Decode(const Batch& batch) { return DecodeImpl(batch, /*embd=*/false); }

absl::Status Engine::DecodeEmbeddings(const Batch& batch) { return DecodeImpl(batch, /*embd=*/true); }

absl::Status Engine::DecodeImpl(const Batch& batch, bool embd) {
  const size_t n = batch.tokens.size();
  if (batch.pos.size() != n || batch.seq.size() != n || batch.logits.size() != n) {
    return absl::InvalidArgumentError("batch: tokens, pos, seq and logits must have the same length");
  }
  for (size_t i = 0; i < n; ++i) {
    if (batch.tokens[i] < 0 || batch.tokens[i] >= n_vocab()) {
      return absl::InvalidArgumentError(absl::StrCat("batch: token ", batch.tokens[i], " at index ", i,
                                                     " is outside the vocabulary [0, ", n_vocab(), ")"));
    }
    if (batch.pos[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch: position ", batch.pos[i], " at index ", i, " is negative"));
    }
    if (batch.seq[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch: sequence ", batch.seq[i], " at index ", i, " is negative"));
    }
  }
  if (static_cast<int64_t>(n) > kv_->n_cells() - kv_->used()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: batch of ", n, " tokens, ",
                                                     kv_->n_cells() - kv_->used(), " of ", kv_->n_cells(),
                                                     " cells free"));
  }
  int64_t n_out = 0;
  for (size_t i = 0; i < n; ++i) n_out += batch.logits[i] ? 1 : 0;
  std::vector<float>& out = embd ? embd_ : logits_;
  int64_t& n_outputs = embd ? n_embd_outputs_ : n_outputs_;
  out.assign(static_cast<size_t>(n_out) * static_cast<size_t>(embd ? n_embd() : n_vocab()), 0.0f);
  n_outputs = 0;
  std::vector<int32_t> cells;
  for (size_t b = 0; b < n; b += static_cast<size_t>(params_.n_batch)) {
    const size_t e = std::min(n, b + static_cast<size_t>(params_.n_batch));
    absl::Status s = DecodeChunk(batch, b, e, embd, &cells);
    if (!s.ok()) {
      kv_->FreeCells(cells);
      n_outputs = 0;
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> Engine::Embed(const std::vector<int32_t>& tokens, Pooling pooling, int32_t seq) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return absl::InvalidArgumentError("input: no tokens");
  if (n > n_ctx()) {
    return absl::InvalidArgumentError(absl::StrCat("input: ", n, " tokens exceed the context of ", n_ctx()));
  }
  if (seq < 0) return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, " is negative"));
  if (kv_->SeqPosMax(seq) >= 0) {
    return absl::FailedPreconditionError(absl::StrCat("sequence ", seq, " already holds KV cells"));
  }
  Batch b;
  for (int64_t i = 0; i < n; ++i) {
    const bool want =
        pooling == Pooling::kMean || (pooling == Pooling::kCls && i == 0) || (pooling == Pooling::kLast && i == n - 1);
    b.Add(tokens[static_cast<size_t>(i)], static_cast<int32_t>(i), seq, want);
  }
  absl::Status s = DecodeEmbeddings(b);
  kv_->SeqRemove(seq, 0, -1);  // a failed Decode has freed its cells already
  if (!s.ok()) return s;
  auto pooled = PoolHiddenStates(embd_.data(), n_embd(), n_embd_outputs_, pooling);
  embd_.clear();
  n_embd_outputs_ = 0;
  return pooled;
}

absl::Status Engine::DecodeChunk(const Batch& batch, size_t begin, size_t end, bool embd, std::vector<int32_t>* cells) {
  const int64_t n_tokens = static_cast<int64_t>(end - begin);
  std::vector<int32_t> seq(batch.seq.begin() + static_cast<long>(begin), batch.seq.begin() + static_cast<long>(end));
  std::vector<int32_t> pos(batch.pos.begin() + static_cast<long>(begin), batch.pos.begin() + static_cast<long>(end));
  auto idx = kv_->Allocate(seq, pos);
  if (!idx.ok()) return idx.status();
  cells->insert(cells->end(), idx->begin(), idx->end());
  const int64_t n_kv = kv_->n_kv();

  std::vector<int32_t> out_ids;
  for (size_t i = begin; i < end; ++i) {
    if (batch.logits[i]) out_ids.push_back(static_cast<int32_t>(i - begin));
  }
  std::vector<float> mask(static_cast<size_t>(n_kv * n_tokens));
  kv_->FillMask(seq, pos, n_kv, mask.data(), model_.hparams().use_alibi());

  Graph g;
  model::ForwardInputs in;
  in.tokens = g.NewTensor(GgmlType::I32, {n_tokens}, "inp_tokens");
  in.pos = g.NewTensor(GgmlType::I32, {n_tokens}, "inp_pos");
  in.kv_idx = g.NewTensor(GgmlType::I32, {n_tokens}, "inp_kv_idx");
  in.mask = g.NewTensor(GgmlType::F32, {n_kv, n_tokens}, "inp_mask");
  in.k_cache = kv_->k_layers();
  in.v_cache = kv_->v_layers();
  in.n_kv = n_kv;
  in.embeddings = embd;
  if (out_ids.empty()) {
    // Still run the pass (it fills the KV cache); ask for the last row to keep shapes valid.
    out_ids.push_back(static_cast<int32_t>(n_tokens - 1));
  }
  in.out_ids = g.NewTensor(GgmlType::I32, {static_cast<int64_t>(out_ids.size())}, "inp_out_ids");
  // The inputs go into the backend's memory like any tensor (ggml_backend_tensor_set).
  const std::pair<Tensor*, const void*> inputs[] = {{in.tokens, batch.tokens.data() + begin},
                                                    {in.pos, pos.data()},
                                                    {in.kv_idx, idx->data()},
                                                    {in.mask, mask.data()},
                                                    {in.out_ids, out_ids.data()}};
  absl::Status s = PlaceInputs(inputs);
  if (!s.ok()) return s;
  Tensor* result = model_.BuildForward(g, in);  // logits, or hidden states with embd
  s = backend_->GraphCompute(g);
  if (!s.ok()) return s;
  bool any = false;
  for (size_t i = begin; i < end; ++i) any |= batch.logits[i];
  if (any) {
    std::vector<float>& out = embd ? embd_ : logits_;
    int64_t& n_outputs = embd ? n_embd_outputs_ : n_outputs_;
    const size_t row = static_cast<size_t>(result->ne[0]);
    const size_t bytes = static_cast<size_t>(result->ne[1]) * row * sizeof(float);
    s = backend_->GetTensorAsync(result, out.data() + static_cast<size_t>(n_outputs) * row, 0, bytes);
    if (s.ok()) s = backend_->Synchronize();
    if (!s.ok()) return s;
    n_outputs += result->ne[1];
    return absl::OkStatus();
  }
  return backend_->Synchronize();  // the inputs' host memory and buffer are reused next
}

absl::Status Engine::PlaceInputs(absl::Span<const std::pair<Tensor*, const void*>> inputs) {
  BufferType* buft = backend_->default_buffer_type();
  const size_t align = buft->alignment();
  size_t total = 0;
  for (const auto& [t, host] : inputs) total += (t->nbytes() + align - 1) / align * align;
  if (inputs_ == nullptr || inputs_->size() < total) {
    inputs_.reset();
    absl::StatusOr<std::unique_ptr<Buffer>> b = buft->Allocate(total + total / 4);  // room to grow
    if (!b.ok()) return b.status();
    inputs_ = *std::move(b);
  }
  size_t offset = 0;
  for (const auto& [t, host] : inputs) {
    t->is_input = true;
    if (absl::Status s = PlaceTensor(t, inputs_.get(), offset); !s.ok()) return s;
    if (absl::Status s = backend_->SetTensorAsync(t, host, 0, t->nbytes()); !s.ok()) return s;
    offset += (t->nbytes() + align - 1) / align * align;
  }
  return absl::OkStatus();
}

}  // namespace herd::engine
