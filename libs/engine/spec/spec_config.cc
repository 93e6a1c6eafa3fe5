#include "libs/engine/spec/spec_config.h"

#include <cmath>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"

namespace herd::engine::spec {

const char* SpecTypeName(SpecType t) {
  switch (t) {
    case SpecType::kNone:
      return "none";
    case SpecType::kNgramSimple:
      return "ngram-simple";
    case SpecType::kNgramMapK:
      return "ngram-map-k";
    case SpecType::kNgramMapK4v:
      return "ngram-map-k4v";
    case SpecType::kNgramCache:
      return "ngram-cache";
    case SpecType::kDraftModel:
      return "draft-model";
  }
  return "unknown";
}

absl::StatusOr<SpecType> ParseSpecType(absl::string_view name, absl::string_view field) {
  std::string n = absl::AsciiStrToLower(absl::StrReplaceAll(name, {{"_", "-"}}));
  if (n.empty() || n == "none") return SpecType::kNone;
  if (n == "draft") return SpecType::kDraftModel;
  for (SpecType t : {SpecType::kNgramSimple, SpecType::kNgramMapK, SpecType::kNgramMapK4v, SpecType::kNgramCache,
                     SpecType::kDraftModel}) {
    if (n == SpecTypeName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": unknown speculative type \"", name,
                   "\" (valid: none, ngram-simple, ngram-map-k, ngram-map-k4v, ngram-cache, draft-model)"));
}

bool SpecConfig::operator==(const SpecConfig& o) const {
  return type == o.type && draft_max == o.draft_max && draft_min == o.draft_min && draft_p_min == o.draft_p_min &&
         ngram_size_n == o.ngram_size_n && ngram_size_m == o.ngram_size_m && ngram_check_rate == o.ngram_check_rate &&
         ngram_min_hits == o.ngram_min_hits;
}

namespace {
absl::Status Range(const char* field, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) return absl::InvalidArgumentError(absl::StrCat(field, ": ", v, " is outside ", lo, "..", hi));
  return absl::OkStatus();
}
absl::Status AtLeast(const char* field, int64_t v, int64_t lo) {
  if (v < lo) return absl::InvalidArgumentError(absl::StrCat(field, ": ", v, " must be at least ", lo));
  return absl::OkStatus();
}
}  // namespace

absl::Status ValidateSpecConfig(const SpecConfig& c) {
  if (absl::Status s = Range("draft_max", c.draft_max, 0, kSpecMaxSize); !s.ok()) return s;
  if (c.draft_min < 0 || c.draft_min > c.draft_max) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft_min: ", c.draft_min, " is outside 0..draft_max (", c.draft_max, ")"));
  }
  if (!(c.draft_p_min >= 0.0f && c.draft_p_min <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("draft_p_min: ", c.draft_p_min, " is outside [0, 1]"));
  }
  if (absl::Status s = Range("ngram_size_n", c.ngram_size_n, 1, kSpecMaxSize); !s.ok()) return s;
  if (absl::Status s = Range("ngram_size_m", c.ngram_size_m, 1, kSpecMaxSize); !s.ok()) return s;
  if (absl::Status s = AtLeast("ngram_check_rate", c.ngram_check_rate, 1); !s.ok()) return s;
  if (absl::Status s = AtLeast("ngram_min_hits", c.ngram_min_hits, 1); !s.ok()) return s;
  return absl::OkStatus();
}

double SpecStats::acceptance_rate() const {
  return gen_tokens > 0 ? static_cast<double>(acc_tokens) / static_cast<double>(gen_tokens) : 0.0;
}

void SpecStats::Add(const SpecStats& o) {
  calls += o.calls;
  gen_drafts += o.gen_drafts;
  acc_drafts += o.acc_drafts;
  gen_tokens += o.gen_tokens;
  acc_tokens += o.acc_tokens;
}

std::string SpecStats::ToString() const {
  return absl::StrFormat(
      "statistics %s: #calls = %d, #gen drafts = %d, #acc drafts = %d, #gen tokens = %d, #acc tokens = %d, "
      "acceptance rate = %.3f",
      SpecTypeName(type), calls, gen_drafts, acc_drafts, gen_tokens, acc_tokens, acceptance_rate());
}

std::string SpecConfigMessageForFlags(const std::string& msg) {
  static const std::pair<const char*, const char*> kMap[] = {{"ngram_size_n:", "--spec_ngram_size_n:"},
                                                             {"ngram_size_m:", "--spec_ngram_size_m:"},
                                                             {"ngram_check_rate:", "--spec_ngram_check_rate:"},
                                                             {"ngram_min_hits:", "--spec_ngram_min_hits:"},
                                                             {"draft_max:", "--draft_max:"},
                                                             {"draft_min:", "--draft_min:"},
                                                             {"draft_p_min:", "--draft_p_min:"},
                                                             {"type:", "--spec_type:"}};
  for (const auto& [from, to] : kMap) {
    if (msg.rfind(from, 0) == 0) return std::string(to) + msg.substr(std::string(from).size());
  }
  return msg;
}

}  // namespace herd::engine::spec
