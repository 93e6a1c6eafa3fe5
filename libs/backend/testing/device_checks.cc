#include "libs/backend/testing/device_checks.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/testing/op_graph.h"

namespace herd::testing {

void ExpectDevice0(const DeviceInfo& d, const std::string& kind, const std::string& name, Backend* device,
                   Backend* host) {
  EXPECT_EQ(d.backend, kind);
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d.name, name);
  EXPECT_FALSE(d.description.empty());
  EXPECT_GT(d.memory_total, 0u);
  EXPECT_FALSE(d.host_visible);
  EXPECT_EQ(device->name(), name);
  EXPECT_EQ(device->device().description, d.description);
  EXPECT_FALSE(device->default_buffer_type()->is_host());
  EXPECT_TRUE(device->CanUseBufferType(device->default_buffer_type()));
  EXPECT_FALSE(device->CanUseBufferType(host->default_buffer_type()));
}

void ExpectTransfersRoundTrip(Backend* device, Backend* host) {
  Graph g;
  Tensor* a = g.NewTensor(GgmlType::F32, {1000, 3});
  Tensor* b = g.NewTensor(GgmlType::F32, {1000, 3});
  absl::StatusOr<std::unique_ptr<Buffer>> buf = device->default_buffer_type()->Allocate(a->nbytes() * 2 + 4096);
  ASSERT_TRUE(buf.ok()) << buf.status();
  EXPECT_NE((*buf)->base(), nullptr);
  ASSERT_TRUE(PlaceTensor(a, buf->get(), 0).ok());
  ASSERT_TRUE(PlaceTensor(b, buf->get(), 12288).ok());
  const std::vector<float> v = OpGraph::Floats(3000, 7);
  ASSERT_TRUE(device->SetTensor(a, v.data(), 0, v.size() * 4).ok());
  ASSERT_TRUE(device->CopyTensor(a, b).ok());
  std::vector<float> back(3000);
  ASSERT_TRUE(device->GetTensor(b, back.data(), 0, back.size() * 4).ok());
  EXPECT_EQ(back, v);
  // Partial reads and writes at byte offsets.
  const float x = 42.5f;
  ASSERT_TRUE(device->SetTensor(b, &x, 4 * 1001, 4).ok());
  float y = 0;
  ASSERT_TRUE(device->GetTensor(b, &y, 4 * 1001, 4).ok());
  EXPECT_EQ(y, x);
  EXPECT_EQ(device->SetTensor(b, v.data(), 4, b->nbytes()).code(), absl::StatusCode::kOutOfRange);
  (*buf)->Clear(0);
  ASSERT_TRUE(device->GetTensor(b, &y, 0, 4).ok());
  EXPECT_EQ(y, 0.0f);
  // A tensor in host memory is not this backend's.
  absl::StatusOr<std::unique_ptr<Buffer>> host_buf = host->default_buffer_type()->Allocate(a->nbytes());
  ASSERT_TRUE(host_buf.ok()) << host_buf.status();
  Tensor* c = g.NewTensor(GgmlType::F32, {1000, 3});
  ASSERT_TRUE(PlaceTensor(c, host_buf->get(), 0).ok());
  EXPECT_EQ(device->SetTensor(c, v.data(), 0, 4).code(), absl::StatusCode::kInvalidArgument);
}

void ExpectBadIndexIsAnError(Backend* device, Backend* reference) {
  const BuildFn bad_get = [](OpGraph& b) { return b.g().GetRows(b.F32({8, 4}, 1), b.I32({1, 4})); };
  absl::StatusOr<std::vector<float>> r = RunOn(device, bad_get);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  const BuildFn bad_set = [](OpGraph& b) { return b.g().SetRows(b.F32({8, 4}, 1), b.F32({8, 1}, 2), b.I32({-1})); };
  r = RunOn(device, bad_set);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  // The backend stays usable.
  const BuildFn good = [](OpGraph& b) { return b.g().GetRows(b.F32({8, 4}, 1), b.I32({3, 0})); };
  absl::StatusOr<std::vector<float>> want = RunOn(reference, good);
  ASSERT_TRUE(want.ok()) << want.status();
  r = RunOn(device, good);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, *want);
}

void ExpectUnsupportedOpsAreRefused(Backend* device) {
  OpGraph b;
  Tensor* w = b.Typed(GgmlType::Q5_K, {256, 4}, 1);
  Tensor* mm = b.g().MulMat(w, b.F32({256, 1}, 2));
  EXPECT_FALSE(device->SupportsOp(*mm));
  Tensor* cache = b.Typed(GgmlType::Q8_0, {64, 4}, 3);
  Tensor* sr = b.g().SetRows(cache, b.F32({64, 1}, 4), b.I32({0}));
  EXPECT_FALSE(device->SupportsOp(*sr));
  absl::Status s = device->GraphCompute(b.g());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

}  // namespace herd::testing
