// One generation request as the gateway runs it: validated and tokenized by
// Gateway::Prepare, then run by Gateway::Run over one or more worker attempts.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

#include "libs/engine/spec/spec_config.h"
#include "libs/tokenizer/tokenizer.h"
#include "libs/toolcall/tool_calls.h"
#include "proto/herd/v1/common.pb.h"

namespace herd::gateway {

/// A validated, tokenized request bound to a model (made by Gateway::Prepare, consumed
/// by Gateway::Run), with its run state.
class Generation {
 public:
  std::string id;
  std::string method;
  std::string model;
  absl::Time start;
  absl::Time deadline;         // the earlier of the client's and the request timeout
  absl::Time client_deadline;  // the client's (InfiniteFuture when none)
  std::shared_ptr<const tokenizer::Vocab> vocab;
  std::vector<int32_t> prompt;
  int32_t n_predict = -1;  // -1: until EOS or the context is full
  std::vector<std::string> stops;
  int32_t logprobs = 0;
  bool ignore_eos = false;
  v1::SamplingParams sampling;
  /// The speculative configuration: the gateway's defaults with the request's fields
  /// laid over them (validated).
  engine::spec::SpecConfig spec;
  /// How the output is parsed into reasoning, content and tool calls (chat prompts:
  /// the template family's syntax when tools are offered; <think> splitting per the
  /// reasoning format). Format kNone and no reasoning: the text as it is.
  toolcall::ParserConfig parse;
  /// tool_choice "required" / a named function: the grammar that forces the call.
  std::string forced_grammar;
  /// Control tokens detokenized with their text: the markers of `parse`
  /// (toolcall::MarkerTexts) that are single tokens of the vocabulary.
  std::vector<int32_t> preserved_tokens;

  // Run state.
  int completion = 0;
  bool any_message = false;  // a message went to the client
  absl::Time first_token_time = absl::InfinitePast();
  double queue_ms = 0, prompt_ms = 0, generation_ms = 0;
  int32_t cached_tokens = 0;  // SessionStarted.n_cached of the attempt that ran
  std::string worker;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  bool speculative = false;         // a drafter ran (spec_stats is meaningful)
  v1::SpeculativeStats spec_stats;  // of the last attempt
  bool worker_speculation = false;  // the worker drafted (its StepResults carried spec_stats)
};

/// The usage block of a last message: prompt and completion tokens and the timings so
/// far (total_ms measured now).
void FillUsage(const Generation& g, v1::Usage* usage);

}  // namespace herd::gateway
