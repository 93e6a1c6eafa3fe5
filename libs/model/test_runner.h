// Test helper (testonly): drives Model::BuildForward for one sequence with a private KV
// cache, independent of libs/engine. Cell i holds the token at position i; the mask is
// filled the way llama.cpp's llama_kv_cache::set_input_kq_mask does (0 or, for ALiBi
// models, -|pos_q - pos_k| where visible; -inf for future cells).
#pragma once
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/model/model.h"

namespace herd::model {

class SequenceRunner {
 public:
  /// KV cache of n_ctx cells of `kv_type` (F32 or F16). `m` and `backend` must outlive it.
  SequenceRunner(const Model& m, Backend* backend, int64_t n_ctx, GgmlType kv_type = GgmlType::F32);

  /// Evaluates `tokens` at positions p0, p0+1, ... (cells [0, p0) must already hold the
  /// earlier tokens of the sequence); returns n_vocab logits for every token, or only for
  /// the last one when !all_logits (then ForwardInputs::out_ids selects that row).
  /// With `embeddings`, n_embd output-normed hidden states instead of logits
  /// (ForwardInputs::embeddings). Errors: OUT_OF_RANGE past n_ctx; the backend's.
  absl::StatusOr<std::vector<std::vector<float>>> Eval(const std::vector<int32_t>& tokens, int32_t p0,
                                                       bool all_logits = true, bool embeddings = false);

  /// Greedy generation (argmax, lowest id on ties): evaluates `prompt` from position 0
  /// (logits of its last token only), then each chosen token; returns n_predict ids (the
  /// last one is never evaluated).
  absl::StatusOr<std::vector<int32_t>> Greedy(const std::vector<int32_t>& prompt, int n_predict);

 private:
  const Model& m_;
  Backend* backend_;
  int64_t n_ctx_;
  Graph cache_;
  std::vector<std::vector<uint8_t>> data_;
  std::vector<Tensor*> k_, v_;
};

}  // namespace herd::model
