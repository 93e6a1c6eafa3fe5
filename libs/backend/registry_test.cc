#include "libs/backend/registry.h"

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace herd
