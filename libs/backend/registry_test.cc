#include "libs/backend/registry.h"

#include <set>

#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/sched.h"
#include "libs/backend/testing/fake_device.h"

namespace herd {
namespace {

TEST(RegistryTest, TheCpuIsAlwaysThere) {
  ASSERT_FALSE(BackendKinds().empty());
  EXPECT_EQ(BackendKinds()[0].name, "cpu");
  const std::vector<DeviceInfo> devs = ListDevices();
  ASSERT_FALSE(devs.empty());
  EXPECT_EQ(devs[0].backend, "cpu");
  EXPECT_TRUE(devs[0].host_visible);
  EXPECT_GT(devs[0].memory_total, 0u);
  BackendOptions o;
  o.n_threads = 2;
  auto b = CreateBackend("cpu", o);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->device().backend, "cpu");
  EXPECT_TRUE((*b)->default_buffer_type()->is_host());
}

TEST(RegistryTest, WrongNamesAndIndicesListWhatThereIs) {
  auto b = CreateBackend("tpu", BackendOptions());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(b.status().message().find("unknown backend 'tpu'"), std::string::npos) << b.status();
  EXPECT_NE(b.status().message().find("cpu: 0 CPU"), std::string::npos) << b.status();
  BackendOptions o;
  o.device = 3;
  b = CreateBackend("cpu", o);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(b.status().message().find("no device 3"), std::string::npos) << b.status();
  o.device = 0;
  o.n_threads = 0;
  EXPECT_EQ(CreateBackend("cpu", o).status().code(), absl::StatusCode::kInvalidArgument);
}

// --backend lists: remote entries through the caller's connector, layers in list order,
// clear errors for malformed lists.
TEST(RegistryTest, SplitBackendsFromAList) {
  EXPECT_TRUE(IsSplitSpec("cpu,remote://h:1"));
  EXPECT_TRUE(IsSplitSpec("remote://h:1"));
  EXPECT_FALSE(IsSplitSpec("cpu"));
  BackendOptions o;
  SplitOptions so;
  so.n_layer = 4;
  std::string asked;
  so.connect_remote = [&](const std::string& address) -> absl::StatusOr<std::unique_ptr<Backend>> {
    asked = address;
    std::set<Op> all;
    for (int k = 0; k < static_cast<int>(Op::kCount); ++k) all.insert(static_cast<Op>(k));
    return std::unique_ptr<Backend>(new testing::FakeDevice(all));
  };
  auto b = CreateSplitBackend("cpu, remote://10.0.0.7:50061", o, so);  // spaces are trimmed
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(asked, "10.0.0.7:50061");
  auto* sched = dynamic_cast<Scheduler*>(b->get());
  ASSERT_NE(sched, nullptr);
  // [remote, cpu] in priority order; input + layers 0-1 on the CPU, layers 2-3 + output remote.
  EXPECT_EQ(sched->layer_placement(), (std::vector<size_t>{1, 1, 1, 0, 0, 0}));
  EXPECT_TRUE(sched->default_buffer_type()->is_host());  // inputs stay local

  for (const char* bad : {"cpu,remote://10.0.0.7", "cpu,remote://", "cpu,remote://h:0", "cpu,remote://h:x",
                          "cpu,,remote://h:1", "cpu,cpu"}) {
    auto r = CreateSplitBackend(bad, o, so);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad << ": " << r.status();
  }
  so.tensor_split = {1, 1, 1};
  auto r = CreateSplitBackend("cpu,remote://h:1", o, so);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("3 proportions for 2 backends"), std::string::npos) << r.status();
  so.tensor_split = {};
  so.connect_remote = nullptr;
  EXPECT_EQ(CreateSplitBackend("cpu,remote://h:1", o, so).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace herd
