#include "libs/engine/spec/spec_loop.h"

#include <algorithm>
#include <cmath>

namespace herd::engine::spec {
namespace {

bool ValidDist(const SparseDist& q, int32_t token, int64_t n_vocab) {
  if (q.empty()) return true;  // a deterministic token
  double sum = 0, q_x = 0;
  for (const TokenProb& e : q) {
    if (e.id < 0 || (n_vocab > 0 && e.id >= n_vocab) || !std::isfinite(e.p) || e.p < 0) return false;
    sum += e.p;
    if (e.id == token) q_x += e.p;
  }
  return sum > 0 && q_x > 0;
}

}  // namespace

void SanitizeDraft(DraftResult* d, int64_t n_vocab, int64_t n_max) {
  size_t n = std::min<size_t>(d->tokens.size(), static_cast<size_t>(std::max<int64_t>(0, n_max)));
  for (size_t i = 0; i < n; ++i) {
    if (d->tokens[i] < 0 || (n_vocab > 0 && d->tokens[i] >= n_vocab)) {
      n = i;
      break;
    }
  }
  d->tokens.resize(n);
  if (d->probs.empty()) return;
  bool ok = d->probs.size() >= n;
  for (size_t i = 0; ok && i < n; ++i) ok = ValidDist(d->probs[i], d->tokens[i], n_vocab);
  if (ok) {
    d->probs.resize(n);
  } else {
    d->probs.clear();
  }
}

absl::Status RunSpecLoop(DraftSource& source, const SpecLoopLimits& limits, const SpecLoopHooks& hooks) {
  for (;;) {
    DraftResult draft;
    int64_t cap = std::min<int64_t>(hooks.room(), limits.draft_max);
    if (limits.target_max_draft > 0) cap = std::min(cap, limits.target_max_draft);
    if (cap >= std::max<int64_t>(1, limits.draft_min)) {
      absl::StatusOr<DraftResult> r = source.Propose(static_cast<int32_t>(cap));
      if (r.ok()) {
        draft = *std::move(r);
        SanitizeDraft(&draft, limits.n_vocab, cap);
      } else if (hooks.on_draft_error) {
        hooks.on_draft_error(r.status());
      }
    }
    absl::StatusOr<SpecPass> pass = hooks.verify(draft);
    if (!pass.ok()) return pass.status();
    if (!draft.tokens.empty()) source.Accept(pass->n_accepted);
    source.Append(pass->tokens);
    if (hooks.deliver) {
      if (absl::Status s = hooks.deliver(*pass); !s.ok()) return s;
    }
    if (pass->end) return absl::OkStatus();
  }
}

}  // namespace herd::engine::spec
