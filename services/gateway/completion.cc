#include "services/gateway/completion.h"

#include <algorithm>
#include <string>

namespace herd::gateway {

void FillUsage(const Generation& g, v1::Usage* u) {
  u->set_prompt_tokens(static_cast<int32_t>(g.prompt.size()));
  u->set_completion_tokens(g.completion);
  u->set_prompt_ms(g.prompt_ms);
  u->set_generation_ms(g.generation_ms);
  u->set_queue_ms(g.queue_ms);
  u->set_cached_tokens(g.cached_tokens);
  u->set_total_ms(absl::ToDoubleMilliseconds(absl::Now() - g.start));
}

CompletionTracker::CompletionTracker(Generation& g, int64_t budget)
    : g_(g), budget_(budget), detok_(*g.vocab, /*special=*/false), stops_(g.stops) {
  detok_.Preserve(g.preserved_tokens);
}

v1::GenerateResponse CompletionTracker::Consume(const v1::StepResult& sr, bool* run_ended) {
  g_.prompt_ms = sr.prompt_ms();
  g_.generation_ms = sr.generation_ms();
  v1::GenerateResponse msg;
  std::string piece;
  const int64_t take = std::min<int64_t>(sr.tokens_size(), budget_ - g_.completion);
  for (int64_t i = 0; i < take; ++i) {
    const int32_t id = sr.tokens(static_cast<int>(i));
    msg.add_token_ids(id);
    ++g_.completion;
    piece += detok_.Push(id);
    if (g_.logprobs > 0 && i < sr.logprobs_size()) {
      v1::TokenLogprobs* lp = msg.add_logprobs();
      *lp = sr.logprobs(static_cast<int>(i));
      for (v1::TokenLogprob& t : *lp->mutable_top()) {
        t.set_text(SanitizeUtf8(g_.vocab->TokenToPiece(t.token_id(), false)));
      }
    }
  }
  std::string text = stops_.Push(piece);
  if (stops_.matched()) {
    g_.finish = v1::FINISH_REASON_STOP;
  } else if (sr.eos() && !g_.ignore_eos) {
    g_.finish = v1::FINISH_REASON_EOS;
  } else if (sr.context_full() || g_.completion >= budget_) {
    g_.finish = v1::FINISH_REASON_LENGTH;
  }
  // An eos result ends the worker's current run of steps even with ignore_eos
  // (worker.proto): the next iteration asks for the rest.
  *run_ended = sr.eos() && !finished();
  if (finished() && g_.finish != v1::FINISH_REASON_STOP) {
    // End of the stream: release what the detokenizer and the stop matcher hold.
    text += stops_.Push(detok_.Flush());
    if (stops_.matched()) {
      g_.finish = v1::FINISH_REASON_STOP;
    } else {
      text += stops_.Flush();
    }
  }
  msg.set_text(std::move(text));
  if (sr.has_spec_stats()) {  // the worker drafts (SessionStart.speculative)
    g_.speculative = true;
    g_.worker_speculation = true;
    g_.spec_stats = sr.spec_stats();
  }
  if (finished()) {
    msg.set_finish_reason(g_.finish);
    FillUsage(g_, msg.mutable_usage());
    if (g_.worker_speculation) *msg.add_speculative() = g_.spec_stats;
  }
  return msg;
}

}  // namespace herd::gateway
