// One-sequence text generation: tokenize, process the prompt, then sample and
// decode token by token until end-of-generation or n_predict (llama.cpp's
// llama-simple / llama-cli loop). Used by `herd run` and the conformance tests.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/engine/engine.h"
#include "libs/engine/sampling.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd::engine {

struct GenerateParams {
  std::string prompt;
  /// Prompt token ids; when non-empty they are used instead of tokenizing `prompt`.
  std::vector<int32_t> prompt_ids;
  int32_t n_predict = 128;  // -1 = until EOG or the context is full
  bool add_special = true;  // add BOS/EOS per the vocabulary
  bool parse_special = true;
  bool all_prompt_logits = false;  // keep logits of every prompt position
  bool ignore_eos = false;
  SamplingParams sampling;
};

enum class StopReason { kEog, kLength, kContextFull };
const char* StopReasonName(StopReason r);

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::string text;  // generated text only (pieces with special = false)
  StopReason stop = StopReason::kLength;
  /// Logits per evaluated position: every prompt position when all_prompt_logits
  /// (else only the last), then one per generated token that was evaluated.
  std::vector<std::vector<float>> logits;
  double pp_ms = 0, tg_ms = 0;  // prompt processing / token generation wall time
  int64_t pp_tokens = 0, tg_tokens = 0;
};

/// Runs generation on sequence 0 of `engine` (its KV cache is cleared first).
/// `on_text` (optional) receives text as it completes, never half a UTF-8 character.
/// Errors: INVALID_ARGUMENT for bad sampling params or an empty prompt with no BOS,
/// or a prompt longer than n_ctx; errors of Engine::Decode.
absl::StatusOr<GenerateResult> Generate(Engine& engine, const tokenizer::Vocab& vocab, const GenerateParams& params,
                                        const std::function<void(const std::string&)>& on_text = nullptr);

}  // namespace herd::engine
