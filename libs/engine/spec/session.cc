#include "libs/engine/spec/session.h"

#include <algorithm>

namespace herd::engine::spec {

absl::StatusOr<std::unique_ptr<Drafter>> CreateDrafter(const SpecConfig& c, const SpecResources& resources) {
  if (absl::Status s = ValidateSpecConfig(c); !s.ok()) return s;
  switch (c.type) {
    case SpecType::kNone:
      return std::unique_ptr<Drafter>(new NoneDrafter());
    case SpecType::kNgramSimple:
      return std::unique_ptr<Drafter>(new NgramSimpleDrafter(c.ngram_size_n, c.ngram_size_m, c.ngram_check_rate));
    case SpecType::kNgramMapK:
    case SpecType::kNgramMapK4v:
      return std::unique_ptr<Drafter>(new NgramMapDrafter(c.type == SpecType::kNgramMapK4v, c.ngram_size_n,
                                                          c.ngram_size_m, c.ngram_check_rate, c.ngram_min_hits));
    case SpecType::kNgramCache:
      return std::unique_ptr<Drafter>(new NgramCacheDrafter(resources.ngram_cache));
    case SpecType::kDraftModel:
      if (resources.draft_model == nullptr) {
        return absl::FailedPreconditionError(
            "type: draft-model needs a draft model (--model_draft) and none is loaded");
      }
      return resources.draft_model->NewDrafter();
  }
  return absl::InvalidArgumentError("type: unknown speculative type");
}

absl::StatusOr<std::unique_ptr<SpecSession>> SpecSession::Create(const SpecConfig& config,
                                                                 const SpecResources& resources, uint32_t seed) {
  auto d = CreateDrafter(config, resources);
  if (!d.ok()) return d.status();
  std::unique_ptr<SpecSession> s(new SpecSession());
  s->config_ = config;
  s->drafter_ = *std::move(d);
  s->stats_.type = config.type;
  s->seed_ = seed;
  return s;
}

absl::Status SpecSession::Reconfigure(const SpecConfig& config, const SpecResources& resources) {
  auto d = CreateDrafter(config, resources);
  if (!d.ok()) return d.status();
  if (config.type != config_.type) {
    stats_ = SpecStats();
    stats_.type = config.type;
  }
  drafter_.reset();  // a draft-model drafter frees its sequence first
  drafter_ = *std::move(d);
  config_ = config;
  pending_ = 0;
  return absl::OkStatus();
}

void SpecSession::Append(const std::vector<int32_t>& tokens) {
  history_.insert(history_.end(), tokens.begin(), tokens.end());
}

void SpecSession::Accept(int32_t n_accepted) {
  if (pending_ == 0) return;
  const int32_t n = std::clamp(n_accepted, 0, pending_);
  pending_ = 0;
  if (n > 0) ++stats_.acc_drafts;
  stats_.acc_tokens += n;
  drafter_->Accepted(n);
}

DraftResult SpecSession::Draft(int32_t n_max_cap, float temp) {
  DraftParams p;
  if (!BeginDraft(n_max_cap, temp, &p)) return DraftResult();
  return FinishDraft(drafter_->Draft(history_, p), p);
}

bool SpecSession::BeginDraft(int32_t n_max_cap, float temp, DraftParams* params) {
  ++stats_.calls;
  pending_ = 0;
  int32_t n_max = config_.draft_max;
  if (n_max_cap > 0) n_max = std::min(n_max, n_max_cap);
  if (n_max <= 0 || n_max < config_.draft_min || history_.empty()) return false;
  params->n_max = n_max;
  params->p_min = config_.draft_p_min;
  params->temp = temp;
  params->seed = seed_;
  return true;
}

DraftResult SpecSession::FinishDraft(DraftResult r, const DraftParams& params) {
  const int32_t n_max = params.n_max;
  if (static_cast<int32_t>(r.tokens.size()) > n_max) r.tokens.resize(static_cast<size_t>(n_max));
  if (r.probs.size() > r.tokens.size()) r.probs.resize(r.tokens.size());
  if (static_cast<int32_t>(r.tokens.size()) < config_.draft_min) r = DraftResult();  // too small
  if (!r.tokens.empty()) {
    ++stats_.gen_drafts;
    stats_.gen_tokens += static_cast<int64_t>(r.tokens.size());
    pending_ = static_cast<int32_t>(r.tokens.size());
  }
  return r;
}

}  // namespace herd::engine::spec
