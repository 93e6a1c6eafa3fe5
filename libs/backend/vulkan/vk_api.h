// The Vulkan entry points herd uses, loaded at run time from the system's loader
// (libvulkan.so.1) instead of linked: binaries start, and VulkanDevices() reports no
// device, on machines without Vulkan.
#pragma once
#define VK_NO_PROTOTYPES
#include <vulkan/vulkan.h>

#include <string>

#include "absl/status/status.h"

namespace herd::vk {

// Loaded with vkGetInstanceProcAddr(nullptr, ...).
#define HERD_VK_GLOBAL_FNS(X) X(vkCreateInstance)

// Loaded with vkGetInstanceProcAddr(instance, ...).
#define HERD_VK_INSTANCE_FNS(X)               \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkCreateDevice)                           \
  X(vkGetDeviceProcAddr)

// Loaded with vkGetDeviceProcAddr(device, ...).
#define HERD_VK_DEVICE_FNS(X)      \
  X(vkDestroyDevice)               \
  X(vkGetDeviceQueue)              \
  X(vkDeviceWaitIdle)              \
  X(vkCreateBuffer)                \
  X(vkDestroyBuffer)               \
  X(vkGetBufferMemoryRequirements) \
  X(vkAllocateMemory)              \
  X(vkFreeMemory)                  \
  X(vkBindBufferMemory)            \
  X(vkMapMemory)                   \
  X(vkUnmapMemory)                 \
  X(vkCreateCommandPool)           \
  X(vkDestroyCommandPool)          \
  X(vkAllocateCommandBuffers)      \
  X(vkResetCommandBuffer)          \
  X(vkBeginCommandBuffer)          \
  X(vkEndCommandBuffer)            \
  X(vkCmdCopyBuffer)               \
  X(vkCmdFillBuffer)               \
  X(vkCmdPipelineBarrier)          \
  X(vkCmdBindPipeline)             \
  X(vkCmdBindDescriptorSets)       \
  X(vkCmdPushConstants)            \
  X(vkCmdDispatch)                 \
  X(vkQueueSubmit)                 \
  X(vkCreateFence)                 \
  X(vkDestroyFence)                \
  X(vkWaitForFences)               \
  X(vkResetFences)                 \
  X(vkCreateShaderModule)          \
  X(vkDestroyShaderModule)         \
  X(vkCreateDescriptorSetLayout)   \
  X(vkDestroyDescriptorSetLayout)  \
  X(vkCreatePipelineLayout)        \
  X(vkDestroyPipelineLayout)       \
  X(vkCreateComputePipelines)      \
  X(vkDestroyPipeline)             \
  X(vkCreateDescriptorPool)        \
  X(vkDestroyDescriptorPool)       \
  X(vkResetDescriptorPool)         \
  X(vkAllocateDescriptorSets)      \
  X(vkUpdateDescriptorSets)

/// Function pointers of one instance and (after LoadDevice) one device.
struct Api {
#define HERD_VK_DECLARE(fn) PFN_##fn fn = nullptr;
  HERD_VK_DECLARE(vkGetInstanceProcAddr)
  HERD_VK_GLOBAL_FNS(HERD_VK_DECLARE)
  HERD_VK_INSTANCE_FNS(HERD_VK_DECLARE)
  HERD_VK_DEVICE_FNS(HERD_VK_DECLARE)
#undef HERD_VK_DECLARE

  /// Opens the Vulkan loader (once per process) and the global entry points.
  /// UNAVAILABLE when there is no loader.
  absl::Status LoadGlobal();
  /// The instance-level entry points. UNAVAILABLE naming a missing one.
  absl::Status LoadInstance(VkInstance instance);
  /// The device-level entry points. UNAVAILABLE naming a missing one.
  absl::Status LoadDevice(VkDevice device);
};

/// "VK_ERROR_DEVICE_LOST" etc. (the number for codes this build does not name).
std::string ResultName(VkResult r);

/// The status of a failed call: RESOURCE_EXHAUSTED for out-of-memory results,
/// UNAVAILABLE otherwise; the message names the call and the result.
absl::Status CallError(const char* call, VkResult r);

}  // namespace herd::vk

/// Returns CallError(#call) from the enclosing function when `expr` is not VK_SUCCESS.
#define HERD_VK_RETURN_IF_ERROR(call, expr)           \
  do {                                                \
    const VkResult herd_vk_r_ = (expr);               \
    if (herd_vk_r_ != VK_SUCCESS) {                   \
      return ::herd::vk::CallError(call, herd_vk_r_); \
    }                                                 \
  } while (0)
