#include "libs/tensor/graph_alloc.h"

#include <vector>

#include "gtest/gtest.h"

namespace herd {
namespace {

bool Overlap(const Tensor* a, size_t oa, const Tensor* b, size_t ob) {
  return oa < ob + b->nbytes() && ob < oa + a->nbytes();
}

TEST(GraphAlloc, ReusesDeadNodesAndNeverOverlapsLiveOnes) {
  Graph g;
  Tensor* x = g.NewTensor(GgmlType::F32, {1024, 4}, "x");
  Tensor* a = g.Scale(x, 2.0f);  // dies after b
  Tensor* b = g.Silu(a);         // dies after c
  Tensor* c = g.Add(b, x);       // dies after d
  Tensor* d = g.Scale(c, 0.5f);
  g.SetOutput(d);
  GraphPlan plan = PlanGraph(g, 64);
  ASSERT_EQ(plan.tensors.size(), 4u);
  // Live at once: at most two 16 KiB tensors, so the arena must be 2 * 16 KiB.
  EXPECT_EQ(plan.arena_size, 2u * 1024 * 4 * 4);
  // a and b are live together, b and c, c and d.
  for (size_t i = 0; i + 1 < plan.tensors.size(); ++i) {
    EXPECT_FALSE(Overlap(plan.tensors[i], plan.offsets[i], plan.tensors[i + 1], plan.offsets[i + 1])) << i;
  }
}

TEST(GraphAlloc, ViewsKeepTheirRootAlive) {
  Graph g;
  Tensor* x = g.NewTensor(GgmlType::F32, {256, 2}, "x");
  Tensor* a = g.Scale(x, 2.0f);
  Tensor* av = g.Reshape(a, {512});
  Tensor* b = g.Scale(x, 3.0f);  // must not take a's memory: av is read below
  Tensor* c = g.Add(g.Reshape(b, {512}), av);
  g.SetOutput(c);
  GraphPlan plan = PlanGraph(g, 64);
  size_t oa = 0, ob = 0;
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    if (plan.tensors[i] == a) oa = plan.offsets[i];
    if (plan.tensors[i] == b) ob = plan.offsets[i];
  }
  EXPECT_FALSE(Overlap(a, oa, b, ob));
  std::vector<float> arena(plan.arena_size / 4);
  x->data = arena.data();  // leaves need data before ApplyPlan resolves views
  ApplyPlan(plan, g, arena.data());
  EXPECT_EQ(av->data, a->data);
}

}  // namespace
}  // namespace herd
