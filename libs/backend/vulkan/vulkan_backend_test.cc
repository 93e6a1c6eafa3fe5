// What is specific to the Vulkan backend: its device, buffers and transfers, errors for
// bad indices and refusal of the ops it lacks. Op results against the CPU are
// tests/backend_ops's (every op x type x shape on every backend present). Runs on lavapipe
// (BUILD pins VK_ICD_FILENAMES); skips when there is no Vulkan device.
#include "libs/backend/vulkan/vulkan_backend.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/testing/device_checks.h"

namespace herd {
namespace {

class VulkanBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    devices_ = VulkanDevices();
    if (devices_.empty()) {
      GTEST_SKIP() << "no Vulkan device (no loader, no driver, or no device): the Vulkan backend is not tested";
    }
    absl::StatusOr<std::unique_ptr<Backend>> be = CreateVulkanBackend(0);
    ASSERT_TRUE(be.ok()) << be.status();
    vk_ = *std::move(be);
  }

  std::vector<DeviceInfo> devices_;
  std::unique_ptr<Backend> vk_;
  CpuBackend cpu_{2};
};

TEST_F(VulkanBackendTest, DeviceInfo) { testing::ExpectDevice0(devices_[0], "vulkan", "Vulkan0", vk_.get(), &cpu_); }

TEST_F(VulkanBackendTest, MissingDeviceIsNotFound) {
  absl::StatusOr<std::unique_ptr<Backend>> be = CreateVulkanBackend(static_cast<int>(devices_.size()) + 5);
  EXPECT_EQ(be.status().code(), absl::StatusCode::kNotFound) << be.status();
}

TEST_F(VulkanBackendTest, TransfersRoundTrip) { testing::ExpectTransfersRoundTrip(vk_.get(), &cpu_); }

TEST_F(VulkanBackendTest, BadIndexIsAnError) { testing::ExpectBadIndexIsAnError(vk_.get(), &cpu_); }

TEST_F(VulkanBackendTest, UnsupportedOpsAreRefused) { testing::ExpectUnsupportedOpsAreRefused(vk_.get()); }

}  // namespace
}  // namespace herd
