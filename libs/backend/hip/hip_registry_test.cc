// The registry in a binary that links //libs/backend/hip:register (as worker_hip does):
// the "hip" kind follows the built-in ones; without an AMD GPU DescribeDevices says why
// and CreateBackend("hip") is NOT_FOUND naming the kind, never a crash.
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/hip/hip_backend.h"
#include "libs/backend/registry.h"

namespace herd {
namespace {

TEST(HipRegistryTest, TheHipKindIsRegisteredAfterTheBuiltInOnes) {
  std::vector<std::string> names;
  for (const BackendKind& k : BackendKinds()) names.push_back(k.name);
  ASSERT_EQ(names, (std::vector<std::string>{"cpu", "vulkan", "cuda", "hip"}));
  EXPECT_NE(DescribeDevices().find("; hip: "), std::string::npos) << DescribeDevices();
}

TEST(HipRegistryTest, LateOrDuplicateRegistrationsAreRefused) {
  (void)BackendKinds();  // frozen from here on
  BackendKind k{
      "late", [] { return std::vector<DeviceInfo>{}; },
      [](const BackendOptions&) -> absl::StatusOr<std::unique_ptr<Backend>> { return absl::InternalError("never"); },
      nullptr};
  EXPECT_FALSE(RegisterBackendKind(k));
  k.name = "cuda";
  EXPECT_FALSE(RegisterBackendKind(k));
  EXPECT_EQ(BackendKinds().size(), 4u);
}

TEST(HipRegistryTest, CreateBackendWithoutADeviceIsNotFound) {
  const std::vector<DeviceInfo> devs = HipDevices();
  BackendOptions o;
  o.n_threads = 1;
  o.device = static_cast<int>(devs.size());
  auto b = CreateBackend("hip", o);
  ASSERT_EQ(b.status().code(), absl::StatusCode::kNotFound) << b.status();
  EXPECT_NE(b.status().message().find("backend hip has no device"), std::string::npos) << b.status();
  if (devs.empty()) {
    const std::string reason = HipUnavailableReason();
    EXPECT_FALSE(reason.empty());
    EXPECT_NE(b.status().message().find("hip: no device found (" + reason + ")"), std::string::npos) << b.status();
    std::printf("no HIP device here; CreateBackend(\"hip\"): %s\n", std::string(b.status().message()).c_str());
  } else {
    o.device = 0;
    auto ok = CreateBackend("hip", o);
    ASSERT_TRUE(ok.ok()) << ok.status();
    EXPECT_EQ((*ok)->device().backend, "hip");
  }
}

}  // namespace
}  // namespace herd
