#include "libs/engine/sampling_proto.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

#include "libs/grammar/gbnf.h"
#include "libs/grammar/matcher.h"

namespace herd::engine {
namespace {

std::string FloatStr(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%g", v);
}

absl::Status Invalid(const std::string& prefix, const char* field, const std::string& msg) {
  return absl::InvalidArgumentError(absl::StrCat(prefix, field, ": ", msg));
}

// The range checks of the scalar fields (proto names); the values are not yet copied.
absl::Status CheckScalars(const herd::v1::SamplingParams& s, const std::string& pre) {
  if (s.has_temperature() && (!std::isfinite(s.temperature()) || s.temperature() < 0)) {
    return Invalid(pre, "temperature",
                   absl::StrCat("must be a finite number >= 0 (got ", FloatStr(s.temperature()), ")"));
  }
  if (s.has_top_p() && !(s.top_p() >= 0 && s.top_p() <= 1)) {
    return Invalid(pre, "top_p", absl::StrCat("must be in [0, 1] (got ", FloatStr(s.top_p()), ")"));
  }
  if (s.has_min_p() && !(s.min_p() >= 0 && s.min_p() <= 1)) {
    return Invalid(pre, "min_p", absl::StrCat("must be in [0, 1] (got ", FloatStr(s.min_p()), ")"));
  }
  if (s.has_repeat_penalty() && (!std::isfinite(s.repeat_penalty()) || s.repeat_penalty() <= 0)) {
    return Invalid(pre, "repeat_penalty",
                   absl::StrCat("must be a finite number > 0 (got ", FloatStr(s.repeat_penalty()), ")"));
  }
  if (s.has_repeat_last_n() && s.repeat_last_n() < -1) {
    return Invalid(pre, "repeat_last_n", absl::StrCat("must be >= -1 (got ", s.repeat_last_n(), ")"));
  }
  if (s.has_presence_penalty() && !std::isfinite(s.presence_penalty())) {
    return Invalid(pre, "presence_penalty", absl::StrCat("must be finite (got ", FloatStr(s.presence_penalty()), ")"));
  }
  if (s.has_frequency_penalty() && !std::isfinite(s.frequency_penalty())) {
    return Invalid(pre, "frequency_penalty",
                   absl::StrCat("must be finite (got ", FloatStr(s.frequency_penalty()), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SamplingParams> SamplingParamsFromProto(const herd::v1::SamplingParams& s,
                                                       const std::string& field_prefix) {
  if (absl::Status st = CheckScalars(s, field_prefix); !st.ok()) return st;
  SamplingParams p;
  if (s.has_temperature()) p.temp = s.temperature();
  if (s.has_top_k()) p.top_k = s.top_k();  // <= 0 = disabled (llama.cpp)
  if (s.has_top_p()) p.top_p = s.top_p();
  if (s.has_min_p()) p.min_p = s.min_p();
  if (s.has_repeat_penalty()) p.repeat_penalty = s.repeat_penalty();
  if (s.has_repeat_last_n()) p.penalty_last_n = s.repeat_last_n();
  if (s.has_presence_penalty()) p.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) p.seed = s.seed();
  p.logit_bias.reserve(static_cast<size_t>(s.logit_bias_size()));
  for (int i = 0; i < s.logit_bias_size(); ++i) {
    const herd::v1::LogitBias& b = s.logit_bias(i);
    const std::string field = absl::StrCat(field_prefix, "logit_bias[", i, "]");
    if (b.token_id() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".token_id: ", b.token_id(), " is negative (token ids are in [0, n_vocab))"));
    }
    if (std::isnan(b.bias()) || b.bias() == std::numeric_limits<float>::infinity()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".bias: must be a finite number or -inf (got ", FloatStr(b.bias()), ")"));
    }
    p.logit_bias.emplace_back(b.token_id(), b.bias());
  }
  if (!s.grammar().empty()) {
    auto g = grammar::Grammar::Parse(s.grammar());
    if (!g.ok()) {
      return Invalid(field_prefix, "grammar", std::string(absl::StripPrefix(g.status().message(), "grammar: ")));
    }
    // Matching cost bounded before any worker runs it (grammar::CheckMatchCost).
    if (absl::Status cost = grammar::CheckMatchCost(*g); !cost.ok()) {
      return Invalid(field_prefix, "grammar", std::string(absl::StripPrefix(cost.message(), "grammar: ")));
    }
    p.grammar = s.grammar();
  }
  // The engine's own ranges, as a backstop (the same checks; the grammar is parsed above).
  SamplingParams ranges = p;
  ranges.grammar.clear();
  if (absl::Status st = ValidateSamplingParams(ranges); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(absl::StripSuffix(field_prefix, "."), ": ", st.message()));
  }
  return p;
}

absl::Status CheckLogitBiasIds(const herd::v1::SamplingParams& s, int64_t n_vocab, const std::string& field_prefix) {
  for (int i = 0; i < s.logit_bias_size(); ++i) {
    const int32_t id = s.logit_bias(i).token_id();
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(absl::StrCat(field_prefix, "logit_bias[", i, "].token_id: ", id,
                                                     " is outside the vocabulary [0, ", n_vocab, ")"));
    }
  }
  return absl::OkStatus();
}

void SamplingParamsToProto(const SamplingParams& p, herd::v1::SamplingParams* proto) {
  proto->Clear();
  proto->set_temperature(p.temp);
  proto->set_top_k(p.top_k);
  proto->set_top_p(p.top_p);
  proto->set_min_p(p.min_p);
  proto->set_repeat_penalty(p.repeat_penalty);
  proto->set_repeat_last_n(p.penalty_last_n);
  proto->set_presence_penalty(p.presence_penalty);
  proto->set_frequency_penalty(p.frequency_penalty);
  if (p.seed != kRandomSeed) proto->set_seed(p.seed);
  if (!p.grammar.empty()) proto->set_grammar(p.grammar);
  for (const auto& [id, bias] : p.logit_bias) {
    herd::v1::LogitBias* b = proto->add_logit_bias();
    b->set_token_id(id);
    b->set_bias(bias);
  }
}

}  // namespace herd::engine
