// The inference engine over one model: a KV cache shared by sequences, batched
// forward passes (prompt processing in chunks of n_batch), and logits out.
// Semantics follow llama.cpp's llama_decode with a llama_batch.
#pragma once
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

#include "libs/backend/backend.h"
#include "libs/engine/embedding.h"
#include "libs/engine/kv_cache.h"
#include "libs/model/model.h"

namespace herd::engine {

/// Tokens to evaluate: token i of sequence seq[i] at position pos[i]; logits[i] asks
/// for its output distribution.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;
  std::vector<int32_t> seq;
  std::vector<bool> logits;

  void Add(int32_t token, int32_t p, int32_t s, bool want_logits) {
    tokens.push_back(token);
    pos.push_back(p);
    seq.push_back(s);
    logits.push_back(want_logits);
  }
  size_t size() const { return tokens.size(); }
  void Clear() {
    tokens.clear();
    pos.clear();
    seq.clear();
    logits.clear();
  }
};

struct EngineParams {
  int64_t n_ctx = 0;                 // KV cells; 0 = the model's context length capped at 4096
  int64_t n_batch = 512;             // tokens per forward pass (prompt processing chunk)
  GgmlType kv_type = GgmlType::F16;  // F16 (default) or F32
};

class Engine {
 public:
  /// The model and backend must outlive the engine; the model's weights must be where
  /// the backend can use them (Model::PlaceWeights; a host backend also reads them from
  /// the file mapping). Errors: INVALID_ARGUMENT for bad params (named),
  /// FAILED_PRECONDITION for weights the backend cannot use, RESOURCE_EXHAUSTED when the
  /// KV cache cannot be allocated.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const model::Model& model, const EngineParams& params,
                                                        Backend* backend);

  /// Evaluates `batch` (any size: split into forward passes of n_batch tokens).
  /// Errors, with nothing changed in the KV cache: INVALID_ARGUMENT for a token id outside
  /// [0, n_vocab), a negative position or sequence, or mismatched vector sizes naming the
  /// index; RESOURCE_EXHAUSTED when the KV cache has no room. After success, Logits(j) is
  /// the distribution of the j-th token (in batch order) that asked for logits.
  absl::Status Decode(const Batch& batch);

  /// n_vocab logits of output j of the last Decode (nullptr if j is out of range).
  const float* Logits(int64_t j) const;
  int64_t n_outputs() const { return n_outputs_; }

  /// Decode() that outputs final hidden states instead of logits (llama.cpp's
  /// llama_decode with cparams.embeddings: res->t_embd, after the output norm, before the
  /// LM head). Same errors and KV cache effects as Decode(); Logits() are left as they
  /// were. After success, Embedding(j) is the hidden state of the j-th token that asked
  /// for output (batch.logits[i]).
  absl::Status DecodeEmbeddings(const Batch& batch);
  /// n_embd floats of output j of the last DecodeEmbeddings (nullptr if out of range).
  const float* Embedding(int64_t j) const;
  int64_t n_embd_outputs() const { return n_embd_outputs_; }

  /// The pooled (not normalized) embedding of `tokens`, one sequence from position 0,
  /// evaluated as the temporary sequence `seq` in chunks of n_batch tokens; the cells it
  /// took are freed before returning, whatever happens, so the KV cache is left as it
  /// was. Only the rows the pooling needs are computed (all for kMean). Result: n_embd
  /// floats. Errors: INVALID_ARGUMENT for empty `tokens`, more tokens than n_ctx cells
  /// ("input: N tokens exceed the context of M"), or a token outside the vocabulary;
  /// FAILED_PRECONDITION when `seq` already holds cells; RESOURCE_EXHAUSTED when the KV
  /// cache (or seq's range) has fewer free cells than tokens. Source: llama.cpp
  /// examples/embedding batch_decode + the pooling of llama_context::decode.
  absl::StatusOr<std::vector<float>> Embed(const std::vector<int32_t>& tokens, Pooling pooling, int32_t seq);

  int64_t n_vocab() const { return model_.hparams().n_vocab; }
  int64_t n_embd() const { return model_.hparams().n_embd; }
  int64_t n_ctx() const { return kv_->n_cells(); }
  int64_t n_batch() const { return params_.n_batch; }

  KvCache& kv() { return *kv_; }
  const model::Model& model() const { return model_; }

 private:
  Engine(const model::Model& m, const EngineParams& p, Backend* b) : model_(m), params_(p), backend_(b) {}
  absl::Status DecodeImpl(const Batch& batch, bool embd);
  absl::Status DecodeChunk(const Batch& batch, size_t begin, size_t end, bool embd, std::vector<int32_t>* cells);
  /// Places the graph inputs (tensor, host bytes) in inputs_ (grown as needed) and
  /// queues their upload. The host bytes must stay valid until the graph is computed.
  absl::Status PlaceInputs(absl::Span<const std::pair<Tensor*, const void*>> inputs);

  const model::Model& model_;
  EngineParams params_;
  Backend* backend_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<Buffer> inputs_;  // the graph inputs, in the backend's memory
  std::vector<float> logits_;
  int64_t n_outputs_ = 0;
  std::vector<float> embd_;  // [n_embd, n_embd_outputs_]
  int64_t n_embd_outputs_ = 0;
};

}  // namespace herd::engine
