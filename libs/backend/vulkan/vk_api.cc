#include "libs/backend/vulkan/vk_api.h"

#include <dlfcn.h>

#include "absl/strings/str_cat.h"

namespace herd::vk {
namespace {

// The loader's vkGetInstanceProcAddr, or null when no loader can be opened.
PFN_vkGetInstanceProcAddr OpenLoader() {
  static PFN_vkGetInstanceProcAddr gipa = []() -> PFN_vkGetInstanceProcAddr {
    for (const char* name : {"libvulkan.so.1", "libvulkan.so"}) {
      // Never closed: function pointers from it live as long as the process.
      void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib == nullptr) continue;
      void* sym = dlsym(lib, "vkGetInstanceProcAddr");
      if (sym != nullptr) return reinterpret_cast<PFN_vkGetInstanceProcAddr>(sym);
      dlclose(lib);
    }
    return nullptr;
  }();
  return gipa;
}

}  // namespace

absl::Status Api::LoadGlobal() {
  vkGetInstanceProcAddr = OpenLoader();
  if (vkGetInstanceProcAddr == nullptr) return absl::UnavailableError("no Vulkan loader (libvulkan.so.1)");
#define HERD_VK_LOAD(fn)                                                       \
  fn = reinterpret_cast<PFN_##fn>(vkGetInstanceProcAddr(VK_NULL_HANDLE, #fn)); \
  if (fn == nullptr) return absl::UnavailableError("the Vulkan loader has no " #fn);
  HERD_VK_GLOBAL_FNS(HERD_VK_LOAD)
#undef HERD_VK_LOAD
  return absl::OkStatus();
}

absl::Status Api::LoadInstance(VkInstance instance) {
#define HERD_VK_LOAD(fn)                                                 \
  fn = reinterpret_cast<PFN_##fn>(vkGetInstanceProcAddr(instance, #fn)); \
  if (fn == nullptr) return absl::UnavailableError("vkGetInstanceProcAddr found no " #fn);
  HERD_VK_INSTANCE_FNS(HERD_VK_LOAD)
#undef HERD_VK_LOAD
  return absl::OkStatus();
}

absl::Status Api::LoadDevice(VkDevice device) {
#define HERD_VK_LOAD(fn)                                             \
  fn = reinterpret_cast<PFN_##fn>(vkGetDeviceProcAddr(device, #fn)); \
  if (fn == nullptr) return absl::UnavailableError("vkGetDeviceProcAddr found no " #fn);
  HERD_VK_DEVICE_FNS(HERD_VK_LOAD)
#undef HERD_VK_LOAD
  return absl::OkStatus();
}

std::string ResultName(VkResult r) {
  switch (r) {
#define HERD_VK_NAME(c) \
  case c:               \
    return #c;
    HERD_VK_NAME(VK_SUCCESS)
    HERD_VK_NAME(VK_NOT_READY)
    HERD_VK_NAME(VK_TIMEOUT)
    HERD_VK_NAME(VK_INCOMPLETE)
    HERD_VK_NAME(VK_ERROR_OUT_OF_HOST_MEMORY)
    HERD_VK_NAME(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    HERD_VK_NAME(VK_ERROR_INITIALIZATION_FAILED)
    HERD_VK_NAME(VK_ERROR_DEVICE_LOST)
    HERD_VK_NAME(VK_ERROR_MEMORY_MAP_FAILED)
    HERD_VK_NAME(VK_ERROR_LAYER_NOT_PRESENT)
    HERD_VK_NAME(VK_ERROR_EXTENSION_NOT_PRESENT)
    HERD_VK_NAME(VK_ERROR_FEATURE_NOT_PRESENT)
    HERD_VK_NAME(VK_ERROR_INCOMPATIBLE_DRIVER)
    HERD_VK_NAME(VK_ERROR_TOO_MANY_OBJECTS)
    HERD_VK_NAME(VK_ERROR_FORMAT_NOT_SUPPORTED)
    HERD_VK_NAME(VK_ERROR_FRAGMENTED_POOL)
    HERD_VK_NAME(VK_ERROR_UNKNOWN)
    HERD_VK_NAME(VK_ERROR_OUT_OF_POOL_MEMORY)
    HERD_VK_NAME(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    HERD_VK_NAME(VK_ERROR_FRAGMENTATION)
#undef HERD_VK_NAME
    default:
      return absl::StrCat("VkResult(", static_cast<int>(r), ")");
  }
}

absl::Status CallError(const char* call, VkResult r) {
  const std::string msg = absl::StrCat(call, " failed: ", ResultName(r));
  if (r == VK_ERROR_OUT_OF_HOST_MEMORY || r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_POOL_MEMORY ||
      r == VK_ERROR_FRAGMENTED_POOL || r == VK_ERROR_FRAGMENTATION || r == VK_ERROR_TOO_MANY_OBJECTS) {
    return absl::ResourceExhaustedError(msg);
  }
  return absl::UnavailableError(msg);
}

}  // namespace herd::vk
