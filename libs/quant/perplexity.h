// Perplexity of a model over a text, with llama-perplexity's semantics (llama.cpp
// tools/perplexity, perplexity()): the standard quality check of a quantization.
//
// The text is tokenized with the vocabulary's BOS; the tokens are cut into chunks of
// n_ctx; n_seq = max(1, n_batch / n_ctx) chunks are evaluated together as separate
// sequences (one KV cache of n_seq * n_ctx cells); the first token of each chunk is
// replaced by BOS (when the vocabulary adds one); only the second half of each chunk
// is scored: logits at positions n_ctx/2 .. n_ctx-2 predict tokens n_ctx/2+1 .. n_ctx-1.
// nll = -log softmax(target) with the max taken in float and the sum of expf in double.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/gguf/ggml_type.h"
#include "libs/model/model.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd::quant {

struct PerplexityOptions {
  int64_t n_ctx = 512;               // tokens per chunk (llama-perplexity -c)
  int64_t n_batch = 2048;            // tokens per llama_decode call (-b): n_batch / n_ctx chunks run together
  int64_t n_chunks = -1;             // chunks to evaluate (-1: all that fit)
  GgmlType kv_type = GgmlType::F16;  // KV cache type (llama.cpp's default F16)
  int64_t n_ubatch = 512;            // tokens per forward pass (llama.cpp's default n_ubatch)
};

struct PerplexityResult {
  int64_t n_tokens = 0;  // tokens of the whole text (BOS included)
  int64_t n_ctx = 0, n_batch = 0, n_seq = 0, n_chunks = 0;
  int64_t count = 0;                // scored tokens
  double ppl = 0;                   // exp(mean nll)
  double ppl_err = 0;               // llama-perplexity's "+/-": ppl * sqrt(var(nll) / (count - 1))
  std::vector<double> running_ppl;  // after each chunk (llama-perplexity's [i]ppl list)
};

/// Evaluates `text` with `model` on `backend`. `on_chunk(chunk_index, running_ppl)`
/// (optional) is called after each chunk. Errors: INVALID_ARGUMENT naming the option
/// for n_ctx < 2 (or odd tiny values), n_batch not a multiple of n_ctx when >= n_ctx,
/// or a text with fewer than 2 * n_ctx tokens ("need at least N tokens"); errors of
/// Engine::Create / Decode.
absl::StatusOr<PerplexityResult> Perplexity(const model::Model& model, const tokenizer::Vocab& vocab, Backend* backend,
                                            const std::string& text, const PerplexityOptions& options,
                                            const std::function<void(int64_t, double)>& on_chunk = nullptr);

}  // namespace herd::quant
