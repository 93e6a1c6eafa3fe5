// Memory planning for one compute graph (the role of ggml-alloc's gallocr):
// every compute node that owns memory gets an offset in a single arena, and a
// node's memory is reused as soon as every node reading it has run.
#pragma once
#include <cstddef>
#include <vector>

#include "libs/tensor/tensor.h"

namespace herd {

struct GraphPlan {
  size_t arena_size = 0;         // bytes needed
  std::vector<Tensor*> tensors;  // nodes that own memory
  std::vector<size_t> offsets;   // their offsets in the arena (same order)
};

/// Plans the arena for `ctx`'s nodes. Leaves (weights, inputs, caches) and views are not
/// placed. Outputs (is_output) are never reused. `alignment` is a power of two.
GraphPlan PlanGraph(const Graph& ctx, size_t alignment);

/// Sets data pointers: planned nodes get base + offset, views get their root's data + offset.
/// Leaves must already have data.
void ApplyPlan(const GraphPlan& plan, const Graph& ctx, void* base);

}  // namespace herd
