// The client-facing side of a generation on one worker attempt: turns the worker's
// StepResults into GenerateResponse messages (streaming detokenization, stop strings,
// the n_predict budget, logprob texts) and decides the finish reason.
#pragma once
#include <cstdint>

#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/gateway.pb.h"
#include "proto/herd/v1/worker.pb.h"
#include "services/gateway/generation.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway {

/// Finish/stop/usage tracking of one attempt. Updates the Generation's completion
/// count, timings and finish reason as results arrive. Not thread-safe.
class CompletionTracker {
 public:
  /// `budget` >= 1: the most tokens this attempt may produce (n_predict, or the room
  /// left in the worker's context when n_predict is -1).
  CompletionTracker(Generation& g, int64_t budget);

  /// The message for one StepResult: its tokens (cut at the budget), their text (held
  /// back while a stop string may be forming; flushed at the end), logprobs with token
  /// texts, and, on the last message, finish_reason and usage (add the speculative
  /// statistics yourself). The finish reason is STOP (a stop string matched; the text
  /// ends before it), EOS (unless ignore_eos), LENGTH (budget or context full).
  /// `*run_ended`: the worker ended its run of steps at an end-of-generation token that
  /// ignore_eos skips (ask for the rest with another Step; worker.proto).
  v1::GenerateResponse Consume(const v1::StepResult& sr, bool* run_ended);

  bool finished() const { return g_.finish != v1::FINISH_REASON_UNSPECIFIED; }
  int64_t budget() const { return budget_; }
  /// Tokens left before the budget.
  int64_t remaining() const { return budget_ - g_.completion; }

 private:
  Generation& g_;
  int64_t budget_;
  tokenizer::StreamingDetokenizer detok_;
  StopStringMatcher stops_;
};

}  // namespace herd::gateway
