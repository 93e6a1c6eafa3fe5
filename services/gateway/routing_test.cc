#include "services/gateway/routing.h"

#include "gtest/gtest.h"

namespace herd::gateway {
namespace {

RouteCandidate C(const char* a, int64_t load, int64_t kv, int64_t prefix) { return {a, load, kv, prefix}; }

TEST(Routing, ParsePolicy) {
  EXPECT_EQ(*ParseRoutePolicy("prefix"), RoutePolicy::kPrefix);
  EXPECT_EQ(*ParseRoutePolicy("least_loaded"), RoutePolicy::kLeastLoaded);
  absl::StatusOr<RoutePolicy> bad = ParseRoutePolicy("random");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--route_policy 'random'"), std::string::npos);
}

TEST(Routing, LeastLoadedIgnoresPrefixes) {
  const std::vector<RouteCandidate> c = {C("a", 3, 0, 512), C("b", 1, 50, 0), C("c", 1, 10, 0)};
  const RouteDecision d = ChooseWorker(RoutePolicy::kLeastLoaded, c, 4);
  EXPECT_EQ(d.index, 2u);  // load 1, fewer KV cells than b
  EXPECT_EQ(d.reason, RouteReason::kLeastLoaded);
}

TEST(Routing, PrefixWinsWithinTheSlack) {
  const std::vector<RouteCandidate> c = {C("a", 2, 0, 0), C("b", 4, 0, 256), C("c", 3, 0, 128)};
  const RouteDecision d = ChooseWorker(RoutePolicy::kPrefix, c, 2);
  EXPECT_EQ(d.index, 1u);
  EXPECT_EQ(d.reason, RouteReason::kPrefix);
}

TEST(Routing, HotPrefixOnABusyWorkerIsBalanced) {
  // b holds the whole prefix but is 5 sequences busier than a: the slack is 2, so the
  // best prefix within it (c) wins and the decision says a longer one was passed over.
  const std::vector<RouteCandidate> c = {C("a", 1, 0, 0), C("b", 6, 0, 512), C("c", 3, 0, 128)};
  const RouteDecision d = ChooseWorker(RoutePolicy::kPrefix, c, 2);
  EXPECT_EQ(d.index, 2u);
  EXPECT_EQ(d.reason, RouteReason::kPrefixOverloaded);
  // Nothing within the slack holds a prefix: the least loaded.
  const std::vector<RouteCandidate> c2 = {C("a", 1, 0, 0), C("b", 6, 0, 512)};
  const RouteDecision d2 = ChooseWorker(RoutePolicy::kPrefix, c2, 2);
  EXPECT_EQ(d2.index, 0u);
  EXPECT_EQ(d2.reason, RouteReason::kPrefixOverloaded);
}

TEST(Routing, DefaultSlackKeepsAPrefixOnAWorkerEightBusier) {
  // --route_max_extra_load's default: b is 8 sequences busier than a and still wins by
  // its prefix; 9 busier, it does not.
  const std::vector<RouteCandidate> c = {C("a", 0, 0, 0), C("b", 8, 0, 512)};
  EXPECT_EQ(ChooseWorker(RoutePolicy::kPrefix, c, 8).index, 1u);
  const std::vector<RouteCandidate> c2 = {C("a", 0, 0, 0), C("b", 9, 0, 512)};
  const RouteDecision d2 = ChooseWorker(RoutePolicy::kPrefix, c2, 8);
  EXPECT_EQ(d2.index, 0u);
  EXPECT_EQ(d2.reason, RouteReason::kPrefixOverloaded);
}

TEST(Routing, NoPrefixAnywhereIsLeastLoaded) {
  const std::vector<RouteCandidate> c = {C("b", 2, 0, 0), C("a", 2, 0, 0), C("c", 5, 0, 0)};
  const RouteDecision d = ChooseWorker(RoutePolicy::kPrefix, c, 8);
  EXPECT_EQ(d.index, 1u);  // tie on load and KV: address order
  EXPECT_EQ(d.reason, RouteReason::kLeastLoaded);
}

TEST(Routing, EqualPrefixesGoToTheLessLoaded) {
  const std::vector<RouteCandidate> c = {C("a", 4, 0, 256), C("b", 2, 0, 256), C("c", 0, 0, 0)};
  const RouteDecision d = ChooseWorker(RoutePolicy::kPrefix, c, 4);
  EXPECT_EQ(d.index, 1u);
  EXPECT_EQ(d.reason, RouteReason::kPrefix);
}

TEST(Routing, AShortPrefixIsNotWorthMoreLoad) {
  // Every prompt opens with the same 16 tokens, cached on a and b but not on c, a worker
  // that just restarted: one cached block is worth less than 3 more sequences.
  const std::vector<RouteCandidate> c = {C("a", 3, 0, 16), C("b", 3, 0, 16), C("c", 0, 0, 0)};
  const RouteDecision d = ChooseWorker(RoutePolicy::kPrefix, c, 8);
  EXPECT_EQ(d.index, 2u);
  EXPECT_EQ(d.reason, RouteReason::kPrefixOverloaded);
  // 50 tokens per sequence: 64 tokens outweigh one more sequence, not two.
  const std::vector<RouteCandidate> c2 = {C("a", 1, 0, 64), C("b", 0, 0, 0)};
  EXPECT_EQ(ChooseWorker(RoutePolicy::kPrefix, c2, 8).index, 0u);
  const std::vector<RouteCandidate> c3 = {C("a", 2, 0, 64), C("b", 0, 0, 0)};
  EXPECT_EQ(ChooseWorker(RoutePolicy::kPrefix, c3, 8).index, 1u);
  // A longer prefix on a busier worker against a shorter one on a lighter worker.
  const std::vector<RouteCandidate> c4 = {C("a", 4, 0, 400), C("b", 1, 0, 300)};
  EXPECT_EQ(ChooseWorker(RoutePolicy::kPrefix, c4, 8).index, 1u);  // 400 - 150 < 300
  // 0 tokens per sequence: the longest prefix within the slack, whatever the load.
  EXPECT_EQ(ChooseWorker(RoutePolicy::kPrefix, c, 8, 0).index, 0u);
}

}  // namespace
}  // namespace herd::gateway
