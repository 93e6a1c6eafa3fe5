#include "services/gateway/request_validation.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

#include "libs/engine/sampling.h"
#include "libs/engine/spec/spec_proto.h"
#include "libs/grammar/gbnf.h"
#include "services/gateway/chat_prompt.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway {
namespace {

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

std::string FloatStr(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%g", v);
}

}  // namespace

absl::Status ValidateSampling(const v1::SamplingParams& s) {
  if (s.has_temperature() && (!std::isfinite(s.temperature()) || s.temperature() < 0)) {
    return Invalid(
        absl::StrCat("sampling.temperature: must be a finite number >= 0 (got ", FloatStr(s.temperature()), ")"));
  }
  if (s.has_top_p() && !(s.top_p() >= 0 && s.top_p() <= 1)) {
    return Invalid(absl::StrCat("sampling.top_p: must be in [0, 1] (got ", FloatStr(s.top_p()), ")"));
  }
  if (s.has_min_p() && !(s.min_p() >= 0 && s.min_p() <= 1)) {
    return Invalid(absl::StrCat("sampling.min_p: must be in [0, 1] (got ", FloatStr(s.min_p()), ")"));
  }
  if (s.has_repeat_penalty() && (!std::isfinite(s.repeat_penalty()) || s.repeat_penalty() <= 0)) {
    return Invalid(
        absl::StrCat("sampling.repeat_penalty: must be a finite number > 0 (got ", FloatStr(s.repeat_penalty()), ")"));
  }
  if (s.has_repeat_last_n() && s.repeat_last_n() < -1) {
    return Invalid(absl::StrCat("sampling.repeat_last_n: must be >= -1 (got ", s.repeat_last_n(), ")"));
  }
  if (s.has_presence_penalty() && !std::isfinite(s.presence_penalty())) {
    return Invalid(
        absl::StrCat("sampling.presence_penalty: must be finite (got ", FloatStr(s.presence_penalty()), ")"));
  }
  if (s.has_frequency_penalty() && !std::isfinite(s.frequency_penalty())) {
    return Invalid(
        absl::StrCat("sampling.frequency_penalty: must be finite (got ", FloatStr(s.frequency_penalty()), ")"));
  }
  // The engine's own checks, as a backstop (same ranges).
  engine::SamplingParams p;
  if (s.has_temperature()) p.temp = s.temperature();
  if (s.has_top_k()) p.top_k = std::max(0, s.top_k());  // <= 0 = disabled (llama.cpp)
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_repeat_penalty()) p.repeat_penalty = s.repeat_penalty();
  if (s.has_repeat_last_n()) p.penalty_last_n = s.repeat_last_n();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  absl::Status st = engine::ValidateSamplingParams(p);
  if (!st.ok()) return Invalid(absl::StrCat("sampling: ", st.message()));
  for (int i = 0; i < s.logit_bias_size(); ++i) {
    const float b = s.logit_bias(i).bias();
    if (std::isnan(b) || b == std::numeric_limits<float>::infinity()) {
      return Invalid(
          absl::StrCat("sampling.logit_bias[", i, "].bias: must be a finite number or -inf (got ", FloatStr(b), ")"));
    }
  }
  if (!s.grammar().empty()) {
    auto g = grammar::Grammar::Parse(s.grammar());
    if (!g.ok())
      return Invalid(absl::StrCat("sampling.grammar: ", absl::StripPrefix(g.status().message(), "grammar: ")));
  }
  return absl::OkStatus();
}

absl::Status ValidateLogitBiasIds(const v1::SamplingParams& s, int32_t n_vocab) {
  for (int i = 0; i < s.logit_bias_size(); ++i) {
    const int32_t id = s.logit_bias(i).token_id();
    if (id < 0 || id >= n_vocab) {
      return Invalid(
          absl::StrCat("sampling.logit_bias[", i, "].token_id: ", id, " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<engine::spec::SpecConfig> ValidateGenerateRequest(const v1::GenerateRequest& req,
                                                                 int64_t max_prompt_bytes,
                                                                 const engine::spec::SpecConfig& spec_defaults) {
  if (req.model().empty()) return Invalid("model: required (a name from ListModels)");
  switch (req.prompt_case()) {
    case v1::GenerateRequest::kText: {
      // llama.cpp's server generates from BOS alone; herd asks for a prompt (protocol.md).
      if (req.text().empty()) return Invalid("prompt.text: empty (a prompt is required)");
      if (static_cast<int64_t>(req.text().size()) > max_prompt_bytes) {
        return Invalid(absl::StrCat("prompt.text: ", req.text().size(), " bytes exceeds the limit of ",
                                    max_prompt_bytes, " bytes"));
      }
      size_t bad = 0;
      if (!IsValidUtf8(req.text(), &bad)) return Invalid(absl::StrCat("prompt.text: invalid UTF-8 at byte ", bad));
      break;
    }
    case v1::GenerateRequest::kTokens: {
      if (req.tokens().ids().empty()) return Invalid("prompt.tokens: no token ids");
      for (int i = 0; i < req.tokens().ids_size(); ++i) {
        if (req.tokens().ids(i) < 0) {
          return Invalid(absl::StrCat("prompt.tokens.ids[", i, "]: ", req.tokens().ids(i), " is not a token id"));
        }
      }
      break;
    }
    case v1::GenerateRequest::kChat: {
      absl::Status cs = ValidateChatPrompt(req.chat(), max_prompt_bytes);
      if (!cs.ok()) return cs;
      break;
    }
    default:
      return Invalid("prompt: required (text, tokens or chat)");
  }
  absl::Status s = ValidateSampling(req.sampling());
  if (!s.ok()) return s;
  if (req.has_n_predict() && (req.n_predict() < -1 || req.n_predict() == 0)) {
    return Invalid(absl::StrCat("n_predict: must be -1 or 1..n_ctx (got ", req.n_predict(), ")"));
  }
  if (req.stop_size() > kMaxStops) {
    return Invalid(absl::StrCat("stop: at most ", kMaxStops, " strings (got ", req.stop_size(), ")"));
  }
  for (int i = 0; i < req.stop_size(); ++i) {
    const std::string& stop = req.stop(i);
    if (stop.empty() || stop.size() > kMaxStopBytes) {
      return Invalid(absl::StrCat("stop[", i, "]: must be 1..", kMaxStopBytes, " bytes (got ", stop.size(), ")"));
    }
    if (!IsValidUtf8(stop)) return Invalid(absl::StrCat("stop[", i, "]: invalid UTF-8"));
  }
  if (req.has_logprobs() && (req.logprobs() < 0 || req.logprobs() > kMaxLogprobs)) {
    return Invalid(absl::StrCat("logprobs: must be in 0..", kMaxLogprobs, " (got ", req.logprobs(), ")"));
  }
  return engine::spec::SpecConfigFromProto(req.speculative(), spec_defaults, "speculative.");
}

}  // namespace herd::gateway
