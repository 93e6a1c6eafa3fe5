#include "libs/engine/spec/spec_loop.h"

#include <limits>

#include "gtest/gtest.h"

namespace herd::engine::spec {
namespace {

// Drafts the next `n_max` tokens of a fixed script after its history; records calls.
class ScriptSource : public DraftSource {
 public:
  explicit ScriptSource(std::vector<int32_t> script) : script_(std::move(script)) {}
  void Append(const std::vector<int32_t>& t) override { history.insert(history.end(), t.begin(), t.end()); }
  absl::StatusOr<DraftResult> Propose(int32_t n_max) override {
    caps.push_back(n_max);
    if (fail_next) {
      fail_next = false;
      return absl::UnavailableError("draft worker down");
    }
    DraftResult d;
    for (size_t i = history.size(); i < script_.size() && d.tokens.size() < static_cast<size_t>(n_max); ++i) {
      d.tokens.push_back(script_[i]);
    }
    return d;
  }
  void Accept(int32_t n) override { accepted.push_back(n); }
  SpecStats Stats() const override { return {}; }

  std::vector<int32_t> history, accepted, caps;
  bool fail_next = false;

 private:
  std::vector<int32_t> script_;
};

TEST(SpecLoopTest, DraftsVerifiesAcceptsAndAppendsUntilTheEnd) {
  // The target produces 10, 11, ..., 19; the script agrees up to 14 then diverges.
  const std::vector<int32_t> target = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  ScriptSource src({10, 11, 12, 13, 14, 99, 99, 99, 99, 99});
  SpecLoopLimits lim;
  lim.draft_max = 3;
  lim.n_vocab = 100;
  size_t produced = 0;
  int passes = 0;
  SpecLoopHooks hooks;
  hooks.room = [&] { return static_cast<int64_t>(target.size() - produced) - 1; };
  hooks.verify = [&](const DraftResult& d) -> absl::StatusOr<SpecPass> {
    ++passes;
    SpecPass p;
    for (size_t i = 0; i <= d.tokens.size() && produced < target.size(); ++i) {
      const int32_t t = target[produced++];
      p.tokens.push_back(t);
      if (i < d.tokens.size() && d.tokens[i] == t) {
        ++p.n_accepted;
      } else {
        break;
      }
    }
    p.end = produced == target.size();
    return p;
  };
  ASSERT_TRUE(RunSpecLoop(src, lim, hooks).ok());
  EXPECT_EQ(src.history, target);
  // Pass 1: draft 10 11 12 accepted + 13; pass 2: 14 99 99 -> 14 accepted + 15; then
  // drafts of 99s are rejected at once until the room runs out.
  ASSERT_GE(src.accepted.size(), 2u);
  EXPECT_EQ(src.accepted[0], 3);
  EXPECT_EQ(src.accepted[1], 1);
  for (int32_t c : src.caps) EXPECT_LE(c, 3);
  EXPECT_LT(passes, static_cast<int>(target.size()));
}

TEST(SpecLoopTest, ProposeErrorsAreEmptyDraftsAndVerifyErrorsEndTheLoop) {
  ScriptSource src({1, 2, 3, 4});
  src.fail_next = true;
  int errors = 0, passes = 0;
  SpecLoopHooks hooks;
  hooks.room = [] { return int64_t{8}; };
  hooks.on_draft_error = [&](const absl::Status& s) {
    ++errors;
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  };
  hooks.verify = [&](const DraftResult& d) -> absl::StatusOr<SpecPass> {
    if (++passes == 1) {
      EXPECT_TRUE(d.tokens.empty());  // the failed Propose
      SpecPass p;
      p.tokens = {1};
      return p;
    }
    return absl::InternalError("worker gone");
  };
  absl::Status s = RunSpecLoop(src, SpecLoopLimits(), hooks);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(passes, 2);
  EXPECT_TRUE(src.accepted.empty());  // no draft was verified successfully
}

TEST(SpecLoopTest, NoProposeBelowDraftMinOrTheTargetCap) {
  ScriptSource src({1, 2, 3, 4, 5, 6, 7, 8});
  SpecLoopLimits lim;
  lim.draft_min = 3;
  lim.draft_max = 16;
  lim.target_max_draft = 2;  // below draft_min: never asked
  SpecLoopHooks hooks;
  hooks.room = [] { return int64_t{10}; };
  hooks.verify = [&](const DraftResult&) -> absl::StatusOr<SpecPass> {
    SpecPass p;
    p.tokens = {0};
    p.end = true;
    return p;
  };
  ASSERT_TRUE(RunSpecLoop(src, lim, hooks).ok());
  EXPECT_TRUE(src.caps.empty());
}

TEST(SanitizeDraftTest, CutsAtBadIdsAndDropsInvalidDistributions) {
  DraftResult d;
  d.tokens = {1, 2, 500, 3};
  d.probs = {{{1, 0.5f}, {2, 0.5f}}, {{2, 1.0f}}, {}, {}};
  SanitizeDraft(&d, 100, 8);
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(d.probs.size(), 2u);

  DraftResult bad;
  bad.tokens = {1, 2};
  bad.probs = {{{1, std::numeric_limits<float>::quiet_NaN()}}, {{2, 1.0f}}};
  SanitizeDraft(&bad, 100, 8);
  EXPECT_EQ(bad.tokens.size(), 2u);
  EXPECT_TRUE(bad.probs.empty());

  DraftResult zero_q;  // the token has no mass in its own distribution
  zero_q.tokens = {1};
  zero_q.probs = {{{2, 1.0f}}};
  SanitizeDraft(&zero_q, 100, 8);
  EXPECT_TRUE(zero_q.probs.empty());

  DraftResult longer;
  longer.tokens = {1, 2, 3, 4};
  SanitizeDraft(&longer, 0, 2);
  EXPECT_EQ(longer.tokens.size(), 2u);
}

}  // namespace
}  // namespace herd::engine::spec
