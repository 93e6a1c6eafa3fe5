#include "libs/backend/vulkan/vulkan_backend.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"

#include "libs/backend/op_support.h"
#include "libs/backend/vulkan/vk_api.h"
#include "libs/base/log.h"
#include "libs/tensor/graph_alloc.h"
#include "libs/tensor/op_params.h"

namespace herd {
namespace {

// SPIR-V of every shader variant (BUILD: glsl_shader targets).
const uint32_t kSpvGetRowsF32[] =
#include "libs/backend/vulkan/get_rows_f32.spv.inc"
    ;
const uint32_t kSpvGetRowsF16[] =
#include "libs/backend/vulkan/get_rows_f16.spv.inc"
    ;
const uint32_t kSpvGetRowsQ4_0[] =
#include "libs/backend/vulkan/get_rows_q4_0.spv.inc"
    ;
const uint32_t kSpvGetRowsQ8_0[] =
#include "libs/backend/vulkan/get_rows_q8_0.spv.inc"
    ;
const uint32_t kSpvGetRowsQ4_K[] =
#include "libs/backend/vulkan/get_rows_q4_k.spv.inc"
    ;
const uint32_t kSpvGetRowsQ6_K[] =
#include "libs/backend/vulkan/get_rows_q6_k.spv.inc"
    ;
const uint32_t kSpvMatVecF32[] =
#include "libs/backend/vulkan/mul_mat_vec_f32.spv.inc"
    ;
const uint32_t kSpvMatVecF16[] =
#include "libs/backend/vulkan/mul_mat_vec_f16.spv.inc"
    ;
const uint32_t kSpvMatVecQ4_0[] =
#include "libs/backend/vulkan/mul_mat_vec_q4_0.spv.inc"
    ;
const uint32_t kSpvMatVecQ8_0[] =
#include "libs/backend/vulkan/mul_mat_vec_q8_0.spv.inc"
    ;
const uint32_t kSpvMatVecQ4_K[] =
#include "libs/backend/vulkan/mul_mat_vec_q4_k.spv.inc"
    ;
const uint32_t kSpvMatVecQ6_K[] =
#include "libs/backend/vulkan/mul_mat_vec_q6_k.spv.inc"
    ;
const uint32_t kSpvMatMulF32[] =
#include "libs/backend/vulkan/mul_mat_f32.spv.inc"
    ;
const uint32_t kSpvMatMulF16[] =
#include "libs/backend/vulkan/mul_mat_f16.spv.inc"
    ;
const uint32_t kSpvMatMulQ4_0[] =
#include "libs/backend/vulkan/mul_mat_q4_0.spv.inc"
    ;
const uint32_t kSpvMatMulQ8_0[] =
#include "libs/backend/vulkan/mul_mat_q8_0.spv.inc"
    ;
const uint32_t kSpvMatMulQ4_K[] =
#include "libs/backend/vulkan/mul_mat_q4_k.spv.inc"
    ;
const uint32_t kSpvMatMulQ6_K[] =
#include "libs/backend/vulkan/mul_mat_q6_k.spv.inc"
    ;
const uint32_t kSpvUnary[] =
#include "libs/backend/vulkan/unary.spv.inc"
    ;
const uint32_t kSpvBinary[] =
#include "libs/backend/vulkan/binary.spv.inc"
    ;
const uint32_t kSpvNorm[] =
#include "libs/backend/vulkan/norm.spv.inc"
    ;
const uint32_t kSpvSoftMax[] =
#include "libs/backend/vulkan/soft_max.spv.inc"
    ;
const uint32_t kSpvRope[] =
#include "libs/backend/vulkan/rope.spv.inc"
    ;
const uint32_t kSpvSetRowsF32[] =
#include "libs/backend/vulkan/set_rows_f32.spv.inc"
    ;
const uint32_t kSpvSetRowsF16[] =
#include "libs/backend/vulkan/set_rows_f16.spv.inc"
    ;
const uint32_t kSpvFlashAttnF16[] =
#include "libs/backend/vulkan/flash_attn_f16.spv.inc"
    ;
const uint32_t kSpvFlashAttnF32[] =
#include "libs/backend/vulkan/flash_attn_f32.spv.inc"
    ;

// Opaque base address of every device buffer (never dereferenced; ggml-vulkan's trick).
void* const kFakeBase = reinterpret_cast<void*>(uintptr_t{0x1000});
// Largest staging buffer: bigger transfers go in chunks.
constexpr VkDeviceSize kStagingChunk = VkDeviceSize{64} << 20;
// Buffer sizes are rounded up to this (a multiple of 4 for vkCmdFillBuffer).
constexpr VkDeviceSize kSizeGranule = 256;
// Descriptor bindings of the one set layout: 0..4 tensors, 5 the error flags.
constexpr uint32_t kTensorBindings = 5;
constexpr uint32_t kBindings = 6;
constexpr uint32_t kPushBytes = 128;  // the minimum maxPushConstantsSize every device has
// Error flag bits (shaders/common.glsl).
constexpr uint32_t kErrGetRowsIndex = 1;
constexpr uint32_t kErrSetRowsIndex = 2;

VkDeviceSize RoundUp(VkDeviceSize x, VkDeviceSize m) { return (x + m - 1) / m * m; }

// Index of a weight / source type among the shader variants (-1: none).
int TypeVariant(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
      return 0;
    case GgmlType::F16:
      return 1;
    case GgmlType::Q4_0:
      return 2;
    case GgmlType::Q8_0:
      return 3;
    case GgmlType::Q4_K:
      return 4;
    case GgmlType::Q6_K:
      return 5;
    default:
      return -1;
  }
}

// Pipelines: one per shader variant and specialization.
enum Pipe : int {
  kPipeGetRows = 0,  // + TypeVariant
  kPipeMatVec = 6,   // + TypeVariant
  kPipeMatMul = 12,  // + TypeVariant
  kPipeUnary = 18,   // + UnaryOp
  kPipeBinary = 24,  // + BinaryOp
  kPipeNorm = 27,    // + 0 rms_norm, 1 norm
  kPipeSoftMax = 29,
  kPipeRope = 30,
  kPipeSetRowsF32 = 31,
  kPipeSetRowsF16 = 32,
  kPipeFlashAttnF16 = 33,
  kPipeFlashAttnF32 = 34,
  kPipeCount = 35,
};
enum UnaryOp : uint32_t { kUScale = 0, kUSilu, kUGelu, kUGeluErf, kUClamp, kUCopy };
enum BinaryOp : uint32_t { kBAdd = 0, kBMul, kBSwiglu };

struct PipeSpec {
  const uint32_t* spv;
  size_t bytes;
  int spec;  // specialization constant 0, or -1
};

template <size_t N>
PipeSpec Spec(const uint32_t (&spv)[N], int spec = -1) {
  return PipeSpec{spv, N * sizeof(uint32_t), spec};
}

std::array<PipeSpec, kPipeCount> PipeSpecs() {
  std::array<PipeSpec, kPipeCount> s{};
  const PipeSpec get_rows[6] = {Spec(kSpvGetRowsF32),  Spec(kSpvGetRowsF16),  Spec(kSpvGetRowsQ4_0),
                                Spec(kSpvGetRowsQ8_0), Spec(kSpvGetRowsQ4_K), Spec(kSpvGetRowsQ6_K)};
  const PipeSpec mat_vec[6] = {Spec(kSpvMatVecF32),  Spec(kSpvMatVecF16),  Spec(kSpvMatVecQ4_0),
                               Spec(kSpvMatVecQ8_0), Spec(kSpvMatVecQ4_K), Spec(kSpvMatVecQ6_K)};
  const PipeSpec mat_mul[6] = {Spec(kSpvMatMulF32),  Spec(kSpvMatMulF16),  Spec(kSpvMatMulQ4_0),
                               Spec(kSpvMatMulQ8_0), Spec(kSpvMatMulQ4_K), Spec(kSpvMatMulQ6_K)};
  for (int i = 0; i < 6; ++i) {
    s[kPipeGetRows + i] = get_rows[i];
    s[kPipeMatVec + i] = mat_vec[i];
    s[kPipeMatMul + i] = mat_mul[i];
    s[kPipeUnary + i] = Spec(kSpvUnary, i);
  }
  for (int i = 0; i < 3; ++i) s[kPipeBinary + i] = Spec(kSpvBinary, i);
  s[kPipeNorm + 0] = Spec(kSpvNorm, 0);
  s[kPipeNorm + 1] = Spec(kSpvNorm, 1);
  s[kPipeSoftMax] = Spec(kSpvSoftMax);
  s[kPipeRope] = Spec(kSpvRope);
  s[kPipeSetRowsF32] = Spec(kSpvSetRowsF32);
  s[kPipeSetRowsF16] = Spec(kSpvSetRowsF16);
  s[kPipeFlashAttnF16] = Spec(kSpvFlashAttnF16);
  s[kPipeFlashAttnF32] = Spec(kSpvFlashAttnF32);
  return s;
}

// ---------------------------------------------------------------------------
// Instance and devices.

// A VkInstance with its entry points.
struct Instance {
  vk::Api api;
  VkInstance instance = VK_NULL_HANDLE;
  ~Instance() {
    if (instance != VK_NULL_HANDLE) api.vkDestroyInstance(instance, nullptr);
  }
};

absl::StatusOr<std::unique_ptr<Instance>> CreateInstance() {
  auto inst = std::make_unique<Instance>();
  absl::Status s = inst->api.LoadGlobal();
  if (!s.ok()) return s;
  VkApplicationInfo app{};
  app.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO;
  app.pApplicationName = "herd";
  app.pEngineName = "herd";
  app.apiVersion = VK_API_VERSION_1_1;
  VkInstanceCreateInfo ici{};
  ici.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO;
  ici.pApplicationInfo = &app;
  HERD_VK_RETURN_IF_ERROR("vkCreateInstance", inst->api.vkCreateInstance(&ici, nullptr, &inst->instance));
  s = inst->api.LoadInstance(inst->instance);
  if (!s.ok()) return s;
  return inst;
}

// A device the backend can use: Vulkan >= 1.1 with a compute queue family.
struct PhysicalDevice {
  VkPhysicalDevice handle = VK_NULL_HANDLE;
  uint32_t queue_family = 0;
  VkPhysicalDeviceProperties props{};
};

absl::StatusOr<std::vector<PhysicalDevice>> UsableDevices(const Instance& inst) {
  const vk::Api& api = inst.api;
  uint32_t n = 0;
  HERD_VK_RETURN_IF_ERROR("vkEnumeratePhysicalDevices", api.vkEnumeratePhysicalDevices(inst.instance, &n, nullptr));
  std::vector<VkPhysicalDevice> all(n);
  if (n > 0) {
    VkResult r = api.vkEnumeratePhysicalDevices(inst.instance, &n, all.data());
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) return vk::CallError("vkEnumeratePhysicalDevices", r);
    all.resize(n);
  }
  std::vector<PhysicalDevice> out;
  for (VkPhysicalDevice pd : all) {
    PhysicalDevice d;
    d.handle = pd;
    api.vkGetPhysicalDeviceProperties(pd, &d.props);
    if (d.props.apiVersion < VK_API_VERSION_1_1) continue;
    uint32_t nq = 0;
    api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    api.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, qf.data());
    // Prefer a compute family without graphics (a dedicated compute queue).
    int best = -1;
    for (uint32_t i = 0; i < nq; ++i) {
      if ((qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT) == 0 || qf[i].queueCount == 0) continue;
      if (best < 0 || ((qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT) == 0 &&
                       (qf[static_cast<size_t>(best)].queueFlags & VK_QUEUE_GRAPHICS_BIT) != 0)) {
        best = static_cast<int>(i);
      }
    }
    if (best < 0) continue;
    d.queue_family = static_cast<uint32_t>(best);
    out.push_back(d);
  }
  return out;
}

// The largest device-local heap (the largest heap when none is device-local).
uint64_t DeviceMemoryBytes(const vk::Api& api, VkPhysicalDevice pd) {
  VkPhysicalDeviceMemoryProperties mp;
  api.vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  uint64_t local = 0, any = 0;
  for (uint32_t i = 0; i < mp.memoryHeapCount; ++i) {
    any = std::max<uint64_t>(any, mp.memoryHeaps[i].size);
    if (mp.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) {
      local = std::max<uint64_t>(local, mp.memoryHeaps[i].size);
    }
  }
  return local > 0 ? local : any;
}

DeviceInfo MakeDeviceInfo(const vk::Api& api, const PhysicalDevice& d, int index) {
  DeviceInfo info;
  info.backend = "vulkan";
  info.index = index;
  info.name = absl::StrCat("Vulkan", index);
  info.description = d.props.deviceName;
  info.memory_total = DeviceMemoryBytes(api, d.handle);
  info.memory_free = 0;
  info.host_visible = false;
  return info;
}

// ---------------------------------------------------------------------------
// The device: queue, memory, transfers.

struct DeviceBuffer {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  VkDeviceSize size = 0;   // allocated bytes (a multiple of kSizeGranule)
  void* mapped = nullptr;  // host-visible buffers only
};

class VulkanContext {
 public:
  static absl::StatusOr<std::shared_ptr<VulkanContext>> Create(int index);
  ~VulkanContext();
  VulkanContext(const VulkanContext&) = delete;
  VulkanContext& operator=(const VulkanContext&) = delete;

  const vk::Api& api() const { return inst_->api; }
  VkDevice device() const { return device_; }
  const DeviceInfo& info() const { return info_; }
  const VkPhysicalDeviceLimits& limits() const { return limits_; }
  VkDeviceSize max_allocation() const { return max_allocation_; }
  /// Serialises everything that records into or submits to the queue.
  std::mutex& mu() { return mu_; }

  /// A storage buffer of at least `size` bytes: device-local (or any memory when the
  /// device has none) or, with host_visible, host-visible coherent and mapped.
  absl::StatusOr<DeviceBuffer> CreateBuffer(VkDeviceSize size, bool host_visible);
  void DestroyBuffer(DeviceBuffer* b);

  // Transfers; each waits for completion. The caller must not hold mu().
  absl::Status Upload(const DeviceBuffer& dst, VkDeviceSize off, const void* src, size_t n);
  absl::Status Download(const DeviceBuffer& src, VkDeviceSize off, void* dst, size_t n);
  absl::Status Copy(const DeviceBuffer& src, VkDeviceSize src_off, const DeviceBuffer& dst, VkDeviceSize dst_off,
                    size_t n);
  absl::Status Fill(const DeviceBuffer& dst, uint32_t word);

  /// Submits `cmd` and waits on `fence` (then resets it). The caller holds mu().
  absl::Status SubmitAndWait(VkCommandBuffer cmd, VkFence fence);
  /// A primary command buffer from this context's pool and a fence for it.
  absl::Status NewCommandBuffer(VkCommandBuffer* cmd, VkFence* fence);

 private:
  VulkanContext() = default;
  int FindMemoryType(uint32_t type_bits, VkMemoryPropertyFlags want) const;
  absl::Status EnsureStaging(VkDeviceSize size);
  // Records `fn(cmd)` into the transfer command buffer, submits and waits. Holds mu().
  template <typename Fn>
  absl::Status RunTransfer(const Fn& fn);

  std::unique_ptr<Instance> inst_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  DeviceInfo info_;
  VkPhysicalDeviceLimits limits_{};
  VkDeviceSize max_allocation_ = 0;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  std::mutex mu_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  std::vector<VkFence> fences_;
  VkCommandBuffer xfer_cmd_ = VK_NULL_HANDLE;
  VkFence xfer_fence_ = VK_NULL_HANDLE;
  DeviceBuffer staging_;
};

absl::StatusOr<std::shared_ptr<VulkanContext>> VulkanContext::Create(int index) {
  absl::StatusOr<std::unique_ptr<Instance>> inst = CreateInstance();
  if (!inst.ok()) return inst.status();
  absl::StatusOr<std::vector<PhysicalDevice>> devs = UsableDevices(**inst);
  if (!devs.ok()) return devs.status();
  if (index < 0 || static_cast<size_t>(index) >= devs->size()) {
    return absl::NotFoundError(absl::StrCat("no Vulkan device ", index, " (", devs->size(), " found)"));
  }
  const PhysicalDevice& pd = (*devs)[static_cast<size_t>(index)];
  std::shared_ptr<VulkanContext> ctx(new VulkanContext());
  ctx->inst_ = std::move(*inst);
  const vk::Api& api = ctx->inst_->api;
  ctx->physical_ = pd.handle;
  ctx->info_ = MakeDeviceInfo(api, pd, index);
  ctx->limits_ = pd.props.limits;
  api.vkGetPhysicalDeviceMemoryProperties(pd.handle, &ctx->mem_props_);
  VkPhysicalDeviceMaintenance3Properties m3{};
  m3.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES;
  VkPhysicalDeviceProperties2 p2{};
  p2.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2;
  p2.pNext = &m3;
  api.vkGetPhysicalDeviceProperties2(pd.handle, &p2);
  ctx->max_allocation_ = m3.maxMemoryAllocationSize;

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{};
  qci.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO;
  qci.queueFamilyIndex = pd.queue_family;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  VkDeviceCreateInfo dci{};
  dci.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  HERD_VK_RETURN_IF_ERROR("vkCreateDevice", api.vkCreateDevice(pd.handle, &dci, nullptr, &ctx->device_));
  absl::Status s = ctx->inst_->api.LoadDevice(ctx->device_);
  if (!s.ok()) return s;
  api.vkGetDeviceQueue(ctx->device_, pd.queue_family, 0, &ctx->queue_);

  VkCommandPoolCreateInfo cpi{};
  cpi.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO;
  cpi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  cpi.queueFamilyIndex = pd.queue_family;
  HERD_VK_RETURN_IF_ERROR("vkCreateCommandPool", api.vkCreateCommandPool(ctx->device_, &cpi, nullptr, &ctx->pool_));
  s = ctx->NewCommandBuffer(&ctx->xfer_cmd_, &ctx->xfer_fence_);
  if (!s.ok()) return s;
  return ctx;
}

VulkanContext::~VulkanContext() {
  if (device_ != VK_NULL_HANDLE) {
    const vk::Api& a = api();
    a.vkDeviceWaitIdle(device_);
    DestroyBuffer(&staging_);
    for (VkFence f : fences_) a.vkDestroyFence(device_, f, nullptr);
    if (pool_ != VK_NULL_HANDLE) a.vkDestroyCommandPool(device_, pool_, nullptr);
    a.vkDestroyDevice(device_, nullptr);
  }
}

absl::Status VulkanContext::NewCommandBuffer(VkCommandBuffer* cmd, VkFence* fence) {
  const vk::Api& a = api();
  VkCommandBufferAllocateInfo cai{};
  cai.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO;
  cai.commandPool = pool_;
  cai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  cai.commandBufferCount = 1;
  HERD_VK_RETURN_IF_ERROR("vkAllocateCommandBuffers", a.vkAllocateCommandBuffers(device_, &cai, cmd));
  VkFenceCreateInfo fci{};
  fci.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO;
  HERD_VK_RETURN_IF_ERROR("vkCreateFence", a.vkCreateFence(device_, &fci, nullptr, fence));
  fences_.push_back(*fence);
  return absl::OkStatus();
}

int VulkanContext::FindMemoryType(uint32_t type_bits, VkMemoryPropertyFlags want) const {
  for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
    if ((type_bits & (1u << i)) && (mem_props_.memoryTypes[i].propertyFlags & want) == want) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

absl::StatusOr<DeviceBuffer> VulkanContext::CreateBuffer(VkDeviceSize size, bool host_visible) {
  const vk::Api& a = api();
  DeviceBuffer b;
  b.size = std::max(RoundUp(size, kSizeGranule), kSizeGranule);
  if (max_allocation_ != 0 && b.size > max_allocation_) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size, " bytes on ", info_.name,
                                                     ": maxMemoryAllocationSize is ", max_allocation_));
  }
  VkBufferCreateInfo bci{};
  bci.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
  bci.size = b.size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  HERD_VK_RETURN_IF_ERROR("vkCreateBuffer", a.vkCreateBuffer(device_, &bci, nullptr, &b.buffer));
  VkMemoryRequirements req;
  a.vkGetBufferMemoryRequirements(device_, b.buffer, &req);
  int type = -1;
  if (host_visible) {
    type =
        FindMemoryType(req.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT |
                                               VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    if (type < 0) {
      type = FindMemoryType(req.memoryTypeBits,
                            VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
    }
  } else {
    type = FindMemoryType(req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
    if (type < 0) type = FindMemoryType(req.memoryTypeBits, 0);
  }
  if (type < 0) {
    a.vkDestroyBuffer(device_, b.buffer, nullptr);
    return absl::UnavailableError(absl::StrCat(
        info_.name, " has no ", host_visible ? "host-visible coherent" : "usable", " memory type for storage buffers"));
  }
  VkMemoryAllocateInfo mai{};
  mai.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO;
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = static_cast<uint32_t>(type);
  VkResult r = a.vkAllocateMemory(device_, &mai, nullptr, &b.memory);
  if (r != VK_SUCCESS) {
    a.vkDestroyBuffer(device_, b.buffer, nullptr);
    if (r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY) {
      return absl::ResourceExhaustedError(
          absl::StrCat("vkAllocateMemory failed: ", vk::ResultName(r), " (", size, " bytes on ", info_.name, ")"));
    }
    return vk::CallError("vkAllocateMemory", r);
  }
  const char* call = "vkBindBufferMemory";
  r = a.vkBindBufferMemory(device_, b.buffer, b.memory, 0);
  if (r == VK_SUCCESS && host_visible) {
    call = "vkMapMemory";
    r = a.vkMapMemory(device_, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped);
  }
  if (r != VK_SUCCESS) {
    a.vkDestroyBuffer(device_, b.buffer, nullptr);
    a.vkFreeMemory(device_, b.memory, nullptr);
    return vk::CallError(call, r);
  }
  return b;
}

void VulkanContext::DestroyBuffer(DeviceBuffer* b) {
  const vk::Api& a = api();
  if (b->mapped != nullptr) a.vkUnmapMemory(device_, b->memory);
  if (b->buffer != VK_NULL_HANDLE) a.vkDestroyBuffer(device_, b->buffer, nullptr);
  if (b->memory != VK_NULL_HANDLE) a.vkFreeMemory(device_, b->memory, nullptr);
  *b = DeviceBuffer{};
}

absl::Status VulkanContext::EnsureStaging(VkDeviceSize size) {
  if (staging_.buffer != VK_NULL_HANDLE && staging_.size >= size) return absl::OkStatus();
  DestroyBuffer(&staging_);
  absl::StatusOr<DeviceBuffer> b = CreateBuffer(size, /*host_visible=*/true);
  if (!b.ok()) return b.status();
  staging_ = *b;
  return absl::OkStatus();
}

absl::Status VulkanContext::SubmitAndWait(VkCommandBuffer cmd, VkFence fence) {
  const vk::Api& a = api();
  VkSubmitInfo si{};
  si.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO;
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  HERD_VK_RETURN_IF_ERROR("vkQueueSubmit", a.vkQueueSubmit(queue_, 1, &si, fence));
  HERD_VK_RETURN_IF_ERROR("vkWaitForFences",
                          a.vkWaitForFences(device_, 1, &fence, VK_TRUE, std::numeric_limits<uint64_t>::max()));
  HERD_VK_RETURN_IF_ERROR("vkResetFences", a.vkResetFences(device_, 1, &fence));
  return absl::OkStatus();
}

// A global barrier from everything earlier on the queue (transfers, dispatches, host
// writes) to what follows.
void FullBarrier(const vk::Api& a, VkCommandBuffer cmd) {
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_MEMORY_READ_BIT | VK_ACCESS_MEMORY_WRITE_BIT;
  a.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, 0, 1, &mb, 0,
                         nullptr, 0, nullptr);
}

// Device writes made visible to host reads after the fence.
void HostReadBarrier(const vk::Api& a, VkCommandBuffer cmd) {
  VkMemoryBarrier mb{};
  mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
  mb.srcAccessMask = VK_ACCESS_MEMORY_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  a.vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0,
                         nullptr);
}

template <typename Fn>
absl::Status VulkanContext::RunTransfer(const Fn& fn) {
  const vk::Api& a = api();
  HERD_VK_RETURN_IF_ERROR("vkResetCommandBuffer", a.vkResetCommandBuffer(xfer_cmd_, 0));
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  HERD_VK_RETURN_IF_ERROR("vkBeginCommandBuffer", a.vkBeginCommandBuffer(xfer_cmd_, &bi));
  FullBarrier(a, xfer_cmd_);
  fn(xfer_cmd_);
  HostReadBarrier(a, xfer_cmd_);
  HERD_VK_RETURN_IF_ERROR("vkEndCommandBuffer", a.vkEndCommandBuffer(xfer_cmd_));
  return SubmitAndWait(xfer_cmd_, xfer_fence_);
}

absl::Status VulkanContext::Upload(const DeviceBuffer& dst, VkDeviceSize off, const void* src, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint8_t* p = static_cast<const uint8_t*>(src);
  while (n > 0) {
    const VkDeviceSize chunk = std::min<VkDeviceSize>(n, kStagingChunk);
    absl::Status s = EnsureStaging(chunk);
    if (!s.ok()) return s;
    std::memcpy(staging_.mapped, p, chunk);
    s = RunTransfer([&](VkCommandBuffer cmd) {
      VkBufferCopy region{0, off, chunk};
      api().vkCmdCopyBuffer(cmd, staging_.buffer, dst.buffer, 1, &region);
    });
    if (!s.ok()) return s;
    p += chunk;
    off += chunk;
    n -= chunk;
  }
  return absl::OkStatus();
}

absl::Status VulkanContext::Download(const DeviceBuffer& src, VkDeviceSize off, void* dst, size_t n) {
  std::lock_guard<std::mutex> lock(mu_);
  uint8_t* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const VkDeviceSize chunk = std::min<VkDeviceSize>(n, kStagingChunk);
    absl::Status s = EnsureStaging(chunk);
    if (!s.ok()) return s;
    s = RunTransfer([&](VkCommandBuffer cmd) {
      VkBufferCopy region{off, 0, chunk};
      api().vkCmdCopyBuffer(cmd, src.buffer, staging_.buffer, 1, &region);
    });
    if (!s.ok()) return s;
    std::memcpy(p, staging_.mapped, chunk);
    p += chunk;
    off += chunk;
    n -= chunk;
  }
  return absl::OkStatus();
}

absl::Status VulkanContext::Copy(const DeviceBuffer& src, VkDeviceSize src_off, const DeviceBuffer& dst,
                                 VkDeviceSize dst_off, size_t n) {
  if (n == 0) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(mu_);
  return RunTransfer([&](VkCommandBuffer cmd) {
    VkBufferCopy region{src_off, dst_off, n};
    api().vkCmdCopyBuffer(cmd, src.buffer, dst.buffer, 1, &region);
  });
}

absl::Status VulkanContext::Fill(const DeviceBuffer& dst, uint32_t word) {
  std::lock_guard<std::mutex> lock(mu_);
  return RunTransfer([&](VkCommandBuffer cmd) { api().vkCmdFillBuffer(cmd, dst.buffer, 0, VK_WHOLE_SIZE, word); });
}

// ---------------------------------------------------------------------------
// Buffers.

class VulkanBufferType : public BufferType, public std::enable_shared_from_this<VulkanBufferType> {
 public:
  explicit VulkanBufferType(std::shared_ptr<VulkanContext> ctx)
      : ctx_(std::move(ctx)),
        alignment_(std::max<size_t>(64, static_cast<size_t>(ctx_->limits().minStorageBufferOffsetAlignment))) {}
  std::string name() const override { return ctx_->info().name; }
  size_t alignment() const override { return alignment_; }
  bool is_host() const override { return false; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override;
  VulkanContext* ctx() const { return ctx_.get(); }

 private:
  std::shared_ptr<VulkanContext> ctx_;
  size_t alignment_;
};

/// A device buffer; keeps its buffer type (and so the device) alive.
class VulkanBuffer : public Buffer {
 public:
  VulkanBuffer(std::shared_ptr<VulkanBufferType> type, DeviceBuffer dev, size_t size)
      : type_(std::move(type)), dev_(dev), size_(size) {}
  ~VulkanBuffer() override { type_->ctx()->DestroyBuffer(&dev_); }
  BufferType* type() const override { return type_.get(); }
  void* base() const override { return kFakeBase; }
  size_t size() const override { return size_; }
  void Clear(uint8_t value) override {
    const uint32_t word = uint32_t{value} * 0x01010101u;
    absl::Status s = type_->ctx()->Fill(dev_, word);
    if (!s.ok()) {
      HERD_LOG(Error) << "Vulkan buffer clear: " << s;
    }
  }
  const DeviceBuffer& dev() const { return dev_; }

 private:
  std::shared_ptr<VulkanBufferType> type_;
  DeviceBuffer dev_;
  size_t size_;
};

absl::StatusOr<std::unique_ptr<Buffer>> VulkanBufferType::Allocate(size_t size) {
  absl::StatusOr<DeviceBuffer> b = ctx_->CreateBuffer(size, /*host_visible=*/false);
  if (!b.ok()) return b.status();
  return std::unique_ptr<Buffer>(new VulkanBuffer(shared_from_this(), *b, size));
}

// ---------------------------------------------------------------------------
// The backend.

// One tensor bound to a dispatch: the buffer range bound and where the tensor starts
// inside it.
struct Arg {
  const DeviceBuffer* buf = nullptr;
  VkDeviceSize bind_off = 0;    // descriptor offset (a multiple of minStorageBufferOffsetAlignment)
  VkDeviceSize range = 0;       // descriptor range
  uint32_t resid = 0;           // bytes from bind_off to the tensor's first byte
  VkDeviceSize lo = 0, hi = 0;  // the tensor's bytes in the buffer (hazard tracking)
};

struct Dispatch {
  int pipe = 0;
  std::array<Arg, kTensorBindings> args{};
  uint32_t nargs = 0;
  int write = -1;  // index of the argument the dispatch writes
  std::array<uint32_t, kPushBytes / 4> push{};
  uint32_t npush = 0;
  uint64_t groups = 0;  // logical workgroups
};

// Push constants in declaration order (at most kPushBytes; the largest block, flash
// attention's, is 100 bytes).
class Push {
 public:
  explicit Push(Dispatch* d) : d_(d) {}
  Push& U(uint64_t v) {
    if (d_->npush < d_->push.size()) d_->push[d_->npush++] = static_cast<uint32_t>(v);
    return *this;
  }
  Push& F(float v) {
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return U(u);
  }

 private:
  Dispatch* d_;
};

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

class VulkanBackend : public Backend {
 public:
  VulkanBackend(std::shared_ptr<VulkanContext> ctx, std::shared_ptr<VulkanBufferType> buft)
      : ctx_(std::move(ctx)),
        buft_(std::move(buft)),
        limits_(GpuOpLimits([](GgmlType t) { return TypeVariant(t) >= 0; },
                            [this](const Tensor& t) { return Fits(&t); })) {}
  ~VulkanBackend() override;
  absl::Status Init();

  std::string name() const override { return ctx_->info().name; }
  DeviceInfo device() const override { return ctx_->info(); }
  BufferType* default_buffer_type() override { return buft_.get(); }
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status CopyTensor(const Tensor* src, Tensor* dst) override;
  bool SupportsOp(const Tensor& node) const override;
  absl::Status GraphCompute(Graph& ctx) override;

 private:
  // The Vulkan buffer holding t and t's byte offset in it.
  absl::Status Locate(const Tensor* t, const VulkanBuffer** buf, size_t* offset) const;
  // t as a dispatch argument; its first byte must be a multiple of elem_align.
  absl::StatusOr<Arg> MakeArg(const Tensor* t, uint32_t elem_align) const;
  // A tensor's byte span, strides and element count fit the shaders' 32-bit indexing
  // and one descriptor range; F32/I32 strides are whole elements, F16 even.
  bool Fits(const Tensor* t) const;
  absl::Status Encode(Tensor* n, std::vector<Dispatch>* out) const;
  absl::Status Run(std::vector<Dispatch>* ds);
  absl::Status EnsureDescriptorPool(uint32_t sets);
  absl::Status EnsureScratch(size_t bytes);

  std::shared_ptr<VulkanContext> ctx_;
  std::shared_ptr<VulkanBufferType> buft_;
  OpLimits limits_;  // what SupportsOp accepts beyond the op's shape rules (Fits: this backend's)
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipe_layout_ = VK_NULL_HANDLE;
  std::array<VkPipeline, kPipeCount> pipes_{};
  VkDescriptorPool desc_pool_ = VK_NULL_HANDLE;
  uint32_t desc_pool_sets_ = 0;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  DeviceBuffer flags_;  // host-visible error flags (binding 5)
  DeviceBuffer dummy_;  // bound to unused tensor bindings
  std::unique_ptr<Buffer> scratch_;
};

absl::Status VulkanBackend::Init() {
  VulkanContext& c = *ctx_;
  const vk::Api& a = c.api();
  VkDevice dev = c.device();
  std::array<VkDescriptorSetLayoutBinding, kBindings> bindings{};
  for (uint32_t i = 0; i < kBindings; ++i) {
    bindings[i].binding = i;
    bindings[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    bindings[i].descriptorCount = 1;
    bindings[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo dli{};
  dli.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO;
  dli.bindingCount = kBindings;
  dli.pBindings = bindings.data();
  HERD_VK_RETURN_IF_ERROR("vkCreateDescriptorSetLayout",
                          a.vkCreateDescriptorSetLayout(dev, &dli, nullptr, &set_layout_));
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo pli{};
  pli.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO;
  pli.setLayoutCount = 1;
  pli.pSetLayouts = &set_layout_;
  pli.pushConstantRangeCount = 1;
  pli.pPushConstantRanges = &pcr;
  HERD_VK_RETURN_IF_ERROR("vkCreatePipelineLayout", a.vkCreatePipelineLayout(dev, &pli, nullptr, &pipe_layout_));

  const std::array<PipeSpec, kPipeCount> specs = PipeSpecs();
  for (int i = 0; i < kPipeCount; ++i) {
    VkShaderModuleCreateInfo smi{};
    smi.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO;
    smi.codeSize = specs[i].bytes;
    smi.pCode = specs[i].spv;
    VkShaderModule module = VK_NULL_HANDLE;
    HERD_VK_RETURN_IF_ERROR("vkCreateShaderModule", a.vkCreateShaderModule(dev, &smi, nullptr, &module));
    const uint32_t spec_value = static_cast<uint32_t>(std::max(specs[i].spec, 0));
    VkSpecializationMapEntry entry{0, 0, sizeof(uint32_t)};
    VkSpecializationInfo si{1, &entry, sizeof(uint32_t), &spec_value};
    VkComputePipelineCreateInfo cpi{};
    cpi.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO;
    cpi.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpi.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpi.stage.module = module;
    cpi.stage.pName = "main";
    cpi.stage.pSpecializationInfo = specs[i].spec >= 0 ? &si : nullptr;
    cpi.layout = pipe_layout_;
    const VkResult r =
        a.vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpi, nullptr, &pipes_[static_cast<size_t>(i)]);
    a.vkDestroyShaderModule(dev, module, nullptr);
    if (r != VK_SUCCESS) return vk::CallError("vkCreateComputePipelines", r);
  }
  absl::Status s = c.NewCommandBuffer(&cmd_, &fence_);
  if (!s.ok()) return s;
  absl::StatusOr<DeviceBuffer> b = c.CreateBuffer(kSizeGranule, /*host_visible=*/true);
  if (!b.ok()) return b.status();
  flags_ = *b;
  b = c.CreateBuffer(kSizeGranule, /*host_visible=*/false);
  if (!b.ok()) return b.status();
  dummy_ = *b;
  return absl::OkStatus();
}

VulkanBackend::~VulkanBackend() {
  VulkanContext& c = *ctx_;
  const vk::Api& a = c.api();
  VkDevice dev = c.device();
  std::lock_guard<std::mutex> lock(c.mu());
  scratch_.reset();
  c.DestroyBuffer(&flags_);
  c.DestroyBuffer(&dummy_);
  if (desc_pool_ != VK_NULL_HANDLE) a.vkDestroyDescriptorPool(dev, desc_pool_, nullptr);
  for (VkPipeline p : pipes_) {
    if (p != VK_NULL_HANDLE) a.vkDestroyPipeline(dev, p, nullptr);
  }
  if (pipe_layout_ != VK_NULL_HANDLE) a.vkDestroyPipelineLayout(dev, pipe_layout_, nullptr);
  if (set_layout_ != VK_NULL_HANDLE) a.vkDestroyDescriptorSetLayout(dev, set_layout_, nullptr);
}

absl::Status VulkanBackend::Locate(const Tensor* t, const VulkanBuffer** buf, size_t* offset) const {
  const Buffer* b = nullptr;
  if (absl::Status s = LocateTensor(t, buft_.get(), name(), &b, offset); !s.ok()) return s;
  *buf = static_cast<const VulkanBuffer*>(b);
  return absl::OkStatus();
}

absl::StatusOr<Arg> VulkanBackend::MakeArg(const Tensor* t, uint32_t elem_align) const {
  const VulkanBuffer* vb = nullptr;
  size_t off = 0;
  absl::Status s = Locate(t, &vb, &off);
  if (!s.ok()) return s;
  if (off % elem_align != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t->name, "' starts at byte ", off, ", not a multiple of ", elem_align));
  }
  const VkDeviceSize align = std::max<VkDeviceSize>(1, ctx_->limits().minStorageBufferOffsetAlignment);
  Arg a;
  a.buf = &vb->dev();
  a.bind_off = off / align * align;
  a.resid = static_cast<uint32_t>(off - a.bind_off);
  a.range = std::min<VkDeviceSize>(RoundUp(a.resid + t->nbytes(), 4), vb->dev().size - a.bind_off);
  if (a.range > ctx_->limits().maxStorageBufferRange) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t->name, "' spans ", t->nbytes(),
                                                   " bytes, more than maxStorageBufferRange (",
                                                   ctx_->limits().maxStorageBufferRange, ") of ", name()));
  }
  a.lo = off;
  a.hi = off + t->nbytes();
  return a;
}

bool VulkanBackend::Fits(const Tensor* t) const {
  if (t == nullptr) return false;
  constexpr int64_t kMaxIndex = int64_t{1} << 31;
  if (t->nelements() <= 0 || t->nelements() >= kMaxIndex) return false;
  for (int i = 0; i < 4; ++i) {
    if (t->ne[i] <= 0 || t->ne[i] >= kMaxIndex || t->nb[i] >= static_cast<size_t>(kMaxIndex) * 2) return false;
  }
  const uint64_t max_range = ctx_->limits().maxStorageBufferRange;
  if (static_cast<uint64_t>(t->nbytes()) + ctx_->limits().minStorageBufferOffsetAlignment + 4 > max_range) return false;
  size_t unit = 1;
  if (t->type == GgmlType::F32 || t->type == GgmlType::I32) unit = 4;
  if (t->type == GgmlType::F16) unit = 2;
  for (int i = 1; i < 4; ++i) {
    if (t->nb[i] % unit != 0) return false;
  }
  if (t->view_src != nullptr && t->view_offs % unit != 0) return false;
  return true;
}

bool VulkanBackend::SupportsOp(const Tensor& n) const { return OpSupported(n, limits_); }

// Binds a dispatch's tensors in order (Encode's helper). The first failure is kept
// (status()); later tensors are still tried, as each op binds all of its own first.
class ArgBinder {
 public:
  using MakeArgFn = absl::FunctionRef<absl::StatusOr<Arg>(const Tensor*, uint32_t)>;
  ArgBinder(MakeArgFn make_arg, const DeviceBuffer* dummy, Dispatch* d) : make_arg_(make_arg), dummy_(dummy), d_(d) {}
  /// Binds t (its first byte a multiple of elem_align); returns its offset inside the
  /// binding in bytes (0 when it fails).
  uint32_t Add(const Tensor* t, uint32_t elem_align) {
    absl::StatusOr<Arg> a = make_arg_(t, elem_align);
    if (!a.ok()) {
      if (status_.ok()) status_ = a.status();
      return 0;
    }
    d_->args[d_->nargs] = *a;
    return d_->args[d_->nargs++].resid;
  }
  /// Add(t), or for a null t (an unused optional tensor) the dummy buffer, offset 0.
  uint32_t AddOptional(const Tensor* t, uint32_t elem_align) {
    if (t != nullptr) return Add(t, elem_align);
    d_->args[d_->nargs++] = Arg{dummy_, 0, kSizeGranule, 0, 0, 0};
    return 0;
  }
  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }

 private:
  MakeArgFn make_arg_;
  const DeviceBuffer* dummy_;
  Dispatch* d_;
  absl::Status status_;
};

uint64_t Floats(size_t bytes) { return static_cast<uint64_t>(bytes / 4); }

// The element alignment of a weight's bytes: F32 4, F16 2, block types 1.
uint32_t WeightAlign(GgmlType t) { return t == GgmlType::F32 ? 4 : t == GgmlType::F16 ? 2 : 1; }

// The per-op encoders below fill d (pipeline, arguments, push constants in the shader's
// order, workgroups); they return early, leaving d incomplete, when args fails.
void EncodeGetRows(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  Push p(&d);
  d.pipe = kPipeGetRows + TypeVariant(a->type);
  const uint32_t r0 = args.Add(a, WeightAlign(a->type));
  const uint32_t r1 = args.Add(b, 4);
  const uint32_t r2 = args.Add(n, 4);
  if (!args.ok()) return;
  d.write = 2;
  p.U(r0).U(a->nb[1]).U(a->ne[1]).U(a->ne[0]).U(b->ne[0]).U(r1 / 4).U(r2 / 4).U(Floats(n->nb[1]));
  d.groups = static_cast<uint64_t>(b->ne[0]) * CeilDiv(a->ne[0], 256);
}

void EncodeMulMat(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  Push p(&d);
  const int64_t ncols = b->ne[1] * b->ne[2] * b->ne[3];
  const bool vec = ncols <= kVulkanMatVecMaxCols;
  d.pipe = (vec ? kPipeMatVec : kPipeMatMul) + TypeVariant(a->type);
  const uint32_t r0 = args.Add(a, WeightAlign(a->type));
  const uint32_t r1 = args.Add(b, 4);
  const uint32_t r2 = args.Add(n, 4);
  if (!args.ok()) return;
  d.write = 2;
  p.U(r0).U(a->nb[1]).U(a->ne[0]).U(a->ne[1]);
  p.U(r1 / 4).U(Floats(b->nb[1])).U(Floats(b->nb[2])).U(Floats(b->nb[3])).U(b->ne[1]).U(b->ne[2]);
  p.U(r2 / 4).U(Floats(n->nb[1])).U(Floats(n->nb[2])).U(Floats(n->nb[3])).U(ncols);
  d.groups =
      vec ? static_cast<uint64_t>(a->ne[1]) * static_cast<uint64_t>(ncols) : CeilDiv(a->ne[1], 64) * CeilDiv(ncols, 64);
}

// An F32 tensor's offset (in floats) and its strides nb[1..3] in floats.
void PushF32Strides(Push& p, const Tensor* t, uint32_t offset_bytes) {
  p.U(offset_bytes / 4).U(Floats(t->nb[1])).U(Floats(t->nb[2])).U(Floats(t->nb[3]));
}

// add, mul, swiglu.
void EncodeBinary(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  Push p(&d);
  d.pipe = kPipeBinary + (n->op == Op::kAdd ? kBAdd : n->op == Op::kMul ? kBMul : kBSwiglu);
  const uint32_t r0 = args.Add(a, 4);
  const uint32_t r1 = args.Add(b, 4);
  const uint32_t r2 = args.Add(n, 4);
  if (!args.ok()) return;
  d.write = 2;
  p.U(n->ne[0]).U(n->ne[1]).U(n->ne[2]).U(n->ne[3]);
  PushF32Strides(p, a, r0);
  PushF32Strides(p, b, r1);
  p.U(b->ne[1]).U(b->ne[2]).U(b->ne[3]);
  PushF32Strides(p, n, r2);
  d.groups = CeilDiv(static_cast<uint64_t>(n->nelements()), 256);
}

// scale, silu, gelu, gelu_erf, clamp, cont.
void EncodeUnary(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  Push p(&d);
  UnaryOp op = kUCopy;
  if (n->op == Op::kScale) op = kUScale;
  if (n->op == Op::kSilu) op = kUSilu;
  if (n->op == Op::kGelu) op = kUGelu;
  if (n->op == Op::kGeluErf) op = kUGeluErf;
  if (n->op == Op::kClamp) op = kUClamp;
  d.pipe = kPipeUnary + op;
  const uint32_t r0 = args.Add(a, 4);
  const uint32_t r1 = args.Add(n, 4);
  if (!args.ok()) return;
  d.write = 1;
  p.U(n->ne[0]).U(n->ne[1]).U(n->ne[2]).U(n->ne[3]);
  PushF32Strides(p, a, r0);
  PushF32Strides(p, n, r1);
  float fp[2];
  ElementOpFloats(*n, fp);
  p.F(fp[0]).F(fp[1]);
  d.groups = CeilDiv(static_cast<uint64_t>(n->nelements()), 256);
}

// rms_norm, norm.
void EncodeNorm(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  Push p(&d);
  d.pipe = kPipeNorm + (n->op == Op::kRmsNorm ? 0 : 1);
  const uint32_t r0 = args.Add(a, 4);
  const uint32_t r1 = args.Add(n, 4);
  if (!args.ok()) return;
  d.write = 1;
  p.U(n->ne[0]).U(n->ne[1]).U(n->ne[2]).U(n->nrows());
  PushF32Strides(p, a, r0);
  PushF32Strides(p, n, r1);
  p.F(NormParams::Of(*n).eps);
  d.groups = static_cast<uint64_t>(n->nrows());
}

void EncodeSoftMax(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  Push p(&d);
  d.pipe = kPipeSoftMax;
  const uint32_t r0 = args.Add(a, 4);
  const uint32_t r1 = args.AddOptional(b, 4);
  const uint32_t r2 = args.Add(n, 4);
  if (!args.ok()) return;
  d.write = 2;
  const SoftMaxParams sp = SoftMaxParams::Of(*n);
  const AlibiConsts al = AlibiConsts::For(n->ne[2], sp.max_bias);
  p.U(n->ne[0]).U(n->ne[1]).U(n->ne[2]).U(n->nrows());
  PushF32Strides(p, a, r0);
  PushF32Strides(p, n, r2);
  p.U(r1 / 4).U(b ? Floats(b->nb[1]) : 0).U(b ? b->ne[1] : 1).U(b ? 1 : 0);
  p.F(sp.scale).U(al.use).U(al.n_head_log2).F(al.m0).F(al.m1);
  d.groups = static_cast<uint64_t>(n->nrows());
}

void EncodeRope(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const Tensor* ff = n->src[2];
  Push p(&d);
  d.pipe = kPipeRope;
  const uint32_t r0 = args.Add(a, 4);
  const uint32_t r1 = args.Add(b, 4);
  const uint32_t r2 = args.AddOptional(ff, 4);
  const uint32_t r3 = args.Add(n, 4);
  if (!args.ok()) return;
  d.write = 3;
  const RopeParams rp = RopeParams::Of(*n);
  const int n_dims = rp.n_dims;
  float corr[2];
  rp.CorrDims(corr);
  p.U(n->ne[0]).U(n->ne[1]).U(n->ne[2]).U(n->ne[3]);
  PushF32Strides(p, a, r0);
  PushF32Strides(p, n, r3);
  p.U(r1 / 4).U(r2 / 4).U(ff ? 1 : 0).U(static_cast<uint32_t>(n_dims)).U(rp.neox() ? 1 : 0);
  p.F(rp.theta_scale()).F(rp.freq_scale).F(rp.ext_factor).F(rp.mscale()).F(corr[0]).F(corr[1]);
  const uint64_t slots = static_cast<uint64_t>(n_dims / 2 + (n->ne[0] - n_dims));
  d.groups = CeilDiv(slots * static_cast<uint64_t>(n->nrows()), 256);
}

void EncodeSetRows(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const Tensor* idx = n->src[2];
  Push p(&d);
  const bool f16 = a->type == GgmlType::F16;
  d.pipe = f16 ? kPipeSetRowsF16 : kPipeSetRowsF32;
  const uint32_t r0 = args.Add(b, 4);
  const uint32_t r1 = args.Add(idx, 4);
  const uint32_t r2 = args.Add(a, f16 ? 2 : 4);
  if (!args.ok()) return;
  d.write = 2;
  p.U(b->ne[0]).U(b->ne[1]).U(r0 / 4).U(Floats(b->nb[1])).U(r1 / 4).U(r2).U(a->nb[1]).U(a->ne[1]);
  d.groups = static_cast<uint64_t>(b->ne[1]) * CeilDiv(b->ne[0], 256);
}

void EncodeFlashAttn(const Tensor* n, ArgBinder& args, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* k = n->src[1];
  const Tensor* v = n->src[2];
  const Tensor* mask = n->src[3];
  Push p(&d);
  const bool f16 = k->type == GgmlType::F16;
  d.pipe = f16 ? kPipeFlashAttnF16 : kPipeFlashAttnF32;
  const uint32_t kv_align = f16 ? 2 : 4;
  const uint32_t r0 = args.Add(a, 4);
  const uint32_t r1 = args.Add(k, kv_align);
  const uint32_t r2 = args.Add(v, kv_align);
  const uint32_t r3 = args.AddOptional(mask, 4);
  const uint32_t r4 = args.Add(n, 4);
  if (!args.ok()) return;
  d.write = 4;
  const FlashAttnParams fp = FlashAttnParams::Of(*n);
  const AlibiConsts al = AlibiConsts::For(a->ne[1], fp.max_bias);
  p.U(r0 / 4).U(Floats(a->nb[1])).U(Floats(a->nb[2]));
  p.U(r1).U(k->nb[1]).U(k->nb[2]);
  p.U(r2).U(v->nb[1]).U(v->nb[2]);
  p.U(r3 / 4).U(mask ? Floats(mask->nb[1]) : 0);
  p.U(r4 / 4).U(Floats(n->nb[1])).U(Floats(n->nb[2]));
  p.U(a->ne[0]).U(a->ne[1]).U(a->ne[2]).U(k->ne[2]).U(a->ne[1] / k->ne[1]).U(mask ? 1 : 0);
  p.F(fp.scale).U(al.use).U(al.n_head_log2).F(al.m0).F(al.m1);
  d.groups = static_cast<uint64_t>(a->ne[1]) * static_cast<uint64_t>(a->ne[2]);
}

absl::Status VulkanBackend::Encode(Tensor* n, std::vector<Dispatch>* out) const {
  Dispatch d;
  const auto make_arg = [this](const Tensor* t, uint32_t elem_align) { return MakeArg(t, elem_align); };
  ArgBinder args(make_arg, &dummy_, &d);  // holds a reference to make_arg
  switch (n->op) {
    case Op::kGetRows:
      EncodeGetRows(n, args, d);
      break;
    case Op::kMulMat:
      EncodeMulMat(n, args, d);
      break;
    case Op::kAdd:
    case Op::kMul:
    case Op::kSwiglu:
      EncodeBinary(n, args, d);
      break;
    case Op::kScale:
    case Op::kSilu:
    case Op::kGelu:
    case Op::kGeluErf:
    case Op::kClamp:
    case Op::kCont:
      EncodeUnary(n, args, d);
      break;
    case Op::kRmsNorm:
    case Op::kNorm:
      EncodeNorm(n, args, d);
      break;
    case Op::kSoftMax:
      EncodeSoftMax(n, args, d);
      break;
    case Op::kRope:
      EncodeRope(n, args, d);
      break;
    case Op::kSetRows:
      EncodeSetRows(n, args, d);
      break;
    case Op::kFlashAttnExt:
      EncodeFlashAttn(n, args, d);
      break;
    default:
      return absl::UnimplementedError(absl::StrCat(name(), " does not support ", OpName(n->op)));
  }
  if (!args.ok()) return args.status();
  if (d.groups == 0) return absl::OkStatus();  // nothing to compute
  out->push_back(d);
  return absl::OkStatus();
}

absl::Status VulkanBackend::EnsureDescriptorPool(uint32_t sets) {
  const vk::Api& a = ctx_->api();
  VkDevice dev = ctx_->device();
  if (desc_pool_ != VK_NULL_HANDLE && desc_pool_sets_ >= sets) {
    HERD_VK_RETURN_IF_ERROR("vkResetDescriptorPool", a.vkResetDescriptorPool(dev, desc_pool_, 0));
    return absl::OkStatus();
  }
  if (desc_pool_ != VK_NULL_HANDLE) {
    a.vkDestroyDescriptorPool(dev, desc_pool_, nullptr);
    desc_pool_ = VK_NULL_HANDLE;
    desc_pool_sets_ = 0;
  }
  const uint32_t cap = std::max<uint32_t>(256, sets + sets / 2);
  VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, cap * kBindings};
  VkDescriptorPoolCreateInfo dpi{};
  dpi.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO;
  dpi.maxSets = cap;
  dpi.poolSizeCount = 1;
  dpi.pPoolSizes = &size;
  HERD_VK_RETURN_IF_ERROR("vkCreateDescriptorPool", a.vkCreateDescriptorPool(dev, &dpi, nullptr, &desc_pool_));
  desc_pool_sets_ = cap;
  return absl::OkStatus();
}

absl::Status VulkanBackend::EnsureScratch(size_t bytes) {
  if (scratch_ != nullptr && scratch_->size() >= bytes) return absl::OkStatus();
  scratch_.reset();  // the queue is idle: every compute waits for its fence
  absl::StatusOr<std::unique_ptr<Buffer>> b = buft_->Allocate(bytes);
  if (!b.ok()) return b.status();
  scratch_ = std::move(*b);
  return absl::OkStatus();
}

namespace {
bool Overlaps(const Arg& x, const Arg& y) { return x.buf->buffer == y.buf->buffer && x.lo < y.hi && y.lo < x.hi; }
}  // namespace

absl::Status VulkanBackend::Run(std::vector<Dispatch>* ds) {
  if (ds->empty()) return absl::OkStatus();
  const vk::Api& a = ctx_->api();
  VkDevice dev = ctx_->device();
  const VkPhysicalDeviceLimits& lim = ctx_->limits();
  const uint32_t n = static_cast<uint32_t>(ds->size());
  absl::Status s = EnsureDescriptorPool(n);
  if (!s.ok()) return s;
  std::vector<VkDescriptorSetLayout> layouts(n, set_layout_);
  std::vector<VkDescriptorSet> sets(n);
  VkDescriptorSetAllocateInfo dai{};
  dai.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO;
  dai.descriptorPool = desc_pool_;
  dai.descriptorSetCount = n;
  dai.pSetLayouts = layouts.data();
  HERD_VK_RETURN_IF_ERROR("vkAllocateDescriptorSets", a.vkAllocateDescriptorSets(dev, &dai, sets.data()));
  std::vector<VkDescriptorBufferInfo> infos(static_cast<size_t>(n) * kBindings);
  std::vector<VkWriteDescriptorSet> writes(static_cast<size_t>(n) * kBindings);
  for (uint32_t i = 0; i < n; ++i) {
    const Dispatch& d = (*ds)[i];
    for (uint32_t j = 0; j < kBindings; ++j) {
      VkDescriptorBufferInfo& bi = infos[i * kBindings + j];
      if (j == kTensorBindings) {
        bi = {flags_.buffer, 0, VK_WHOLE_SIZE};
      } else if (j < d.nargs) {
        bi = {d.args[j].buf->buffer, d.args[j].bind_off, d.args[j].range};
      } else {
        bi = {dummy_.buffer, 0, VK_WHOLE_SIZE};
      }
      VkWriteDescriptorSet& w = writes[i * kBindings + j];
      w.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET;
      w.dstSet = sets[i];
      w.dstBinding = j;
      w.descriptorCount = 1;
      w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      w.pBufferInfo = &bi;
    }
  }
  a.vkUpdateDescriptorSets(dev, static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);

  HERD_VK_RETURN_IF_ERROR("vkResetCommandBuffer", a.vkResetCommandBuffer(cmd_, 0));
  VkCommandBufferBeginInfo bi{};
  bi.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO;
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  HERD_VK_RETURN_IF_ERROR("vkBeginCommandBuffer", a.vkBeginCommandBuffer(cmd_, &bi));
  FullBarrier(a, cmd_);
  // Reads and writes since the last barrier: a dispatch that reads or writes bytes an
  // earlier one wrote, or writes bytes an earlier one reads, waits for it.
  std::vector<Arg> pending_reads, pending_writes;
  int bound = -1;
  for (uint32_t i = 0; i < n; ++i) {
    const Dispatch& d = (*ds)[i];
    bool hazard = false;
    for (uint32_t j = 0; j < d.nargs && !hazard; ++j) {
      if (d.args[j].hi == d.args[j].lo) continue;  // the dummy
      for (const Arg& w : pending_writes) hazard = hazard || Overlaps(d.args[j], w);
      if (static_cast<int>(j) == d.write) {
        for (const Arg& r : pending_reads) hazard = hazard || Overlaps(d.args[j], r);
      }
    }
    if (hazard) {
      VkMemoryBarrier mb{};
      mb.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER;
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
      a.vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                             &mb, 0, nullptr, 0, nullptr);
      pending_reads.clear();
      pending_writes.clear();
    }
    for (uint32_t j = 0; j < d.nargs; ++j) {
      if (d.args[j].hi == d.args[j].lo) continue;
      (static_cast<int>(j) == d.write ? pending_writes : pending_reads).push_back(d.args[j]);
    }
    if (d.pipe != bound) {
      a.vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipes_[static_cast<size_t>(d.pipe)]);
      bound = d.pipe;
    }
    a.vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, pipe_layout_, 0, 1, &sets[i], 0, nullptr);
    a.vkCmdPushConstants(cmd_, pipe_layout_, VK_SHADER_STAGE_COMPUTE_BIT, 0, d.npush * 4, d.push.data());
    // Fold the logical workgroups into x (and y): shaders recompute the index.
    const uint64_t gx = std::min<uint64_t>(d.groups, lim.maxComputeWorkGroupCount[0]);
    const uint64_t gy = CeilDiv(d.groups, gx);
    if (gy > lim.maxComputeWorkGroupCount[1]) {
      a.vkEndCommandBuffer(cmd_);
      return absl::InvalidArgumentError(
          absl::StrCat("a dispatch of ", d.groups, " workgroups exceeds the limits of ", name()));
    }
    a.vkCmdDispatch(cmd_, static_cast<uint32_t>(gx), static_cast<uint32_t>(gy), 1);
  }
  HostReadBarrier(a, cmd_);
  HERD_VK_RETURN_IF_ERROR("vkEndCommandBuffer", a.vkEndCommandBuffer(cmd_));
  std::memset(flags_.mapped, 0, sizeof(uint32_t));
  s = ctx_->SubmitAndWait(cmd_, fence_);
  if (!s.ok()) return s;
  uint32_t flags = 0;
  std::memcpy(&flags, flags_.mapped, sizeof flags);
  if (flags & kErrGetRowsIndex) {
    return absl::InvalidArgumentError("get_rows: an id is outside the rows of its source (zeros written)");
  }
  if (flags & kErrSetRowsIndex) {
    return absl::InvalidArgumentError("set_rows: a row index is outside the destination (row skipped)");
  }
  return absl::OkStatus();
}

absl::Status VulkanBackend::GraphCompute(Graph& g) {
  for (Tensor* n : g.nodes()) {
    if (!SupportsOp(*n)) {
      return absl::UnimplementedError(
          absl::StrCat(name(), " does not support ", OpName(n->op), " for node '", n->name, "'"));
    }
  }
  std::lock_guard<std::mutex> lock(ctx_->mu());
  if (absl::Status s = PlaceInScratch(
          g, buft_->alignment(), kFakeBase, [this](size_t bytes) { return EnsureScratch(bytes); }, scratch_);
      !s.ok()) {
    return s;
  }
  std::vector<Dispatch> ds;
  ds.reserve(g.nodes().size());
  for (Tensor* n : g.nodes()) {
    if (n->op == Op::kNone || n->op == Op::kView) continue;
    absl::Status s = Encode(n, &ds);
    if (!s.ok()) return absl::Status(s.code(), absl::StrCat(OpName(n->op), " '", n->name, "': ", s.message()));
  }
  return Run(&ds);
}

absl::Status VulkanBackend::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  const VulkanBuffer* vb = nullptr;
  size_t off = 0;
  absl::Status s = Locate(t, &vb, &off);
  if (!s.ok()) return s;
  if (offset + size > t->nbytes()) {
    return absl::OutOfRangeError(absl::StrCat("write of ", size, " bytes at ", offset, " past tensor '", t->name, "' (",
                                              t->nbytes(), " bytes)"));
  }
  if (size == 0) return absl::OkStatus();
  return ctx_->Upload(vb->dev(), off + offset, data, size);
}

absl::Status VulkanBackend::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  const VulkanBuffer* vb = nullptr;
  size_t off = 0;
  absl::Status s = Locate(t, &vb, &off);
  if (!s.ok()) return s;
  if (offset + size > t->nbytes()) {
    return absl::OutOfRangeError(
        absl::StrCat("read of ", size, " bytes at ", offset, " past tensor '", t->name, "' (", t->nbytes(), " bytes)"));
  }
  if (size == 0) return absl::OkStatus();
  return ctx_->Download(vb->dev(), off + offset, data, size);
}

absl::Status VulkanBackend::CopyTensor(const Tensor* src, Tensor* dst) {
  if (src->nbytes() != dst->nbytes() || src->type != dst->type) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy '", src->name, "' into '", dst->name, "': type or size differ"));
  }
  const VulkanBuffer* sb = nullptr;
  const VulkanBuffer* db = nullptr;
  size_t so = 0, dof = 0;
  absl::Status s = Locate(src, &sb, &so);
  if (!s.ok()) return s;
  s = Locate(dst, &db, &dof);
  if (!s.ok()) return s;
  const size_t n = src->nbytes();
  if (sb == db && so < dof + n && dof < so + n) {
    if (so == dof) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy '", src->name, "' into '", dst->name, "': their bytes overlap"));
  }
  return ctx_->Copy(sb->dev(), so, db->dev(), dof, n);
}

}  // namespace

std::vector<DeviceInfo> VulkanDevices() {
  std::vector<DeviceInfo> out;
  absl::StatusOr<std::unique_ptr<Instance>> inst = CreateInstance();
  if (!inst.ok()) return out;  // no loader or no driver: no devices
  absl::StatusOr<std::vector<PhysicalDevice>> devs = UsableDevices(**inst);
  if (!devs.ok()) return out;
  for (size_t i = 0; i < devs->size(); ++i) {
    out.push_back(MakeDeviceInfo((*inst)->api, (*devs)[i], static_cast<int>(i)));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateVulkanBackend(int device) {
  absl::StatusOr<std::shared_ptr<VulkanContext>> ctx = VulkanContext::Create(device);
  if (!ctx.ok()) return ctx.status();
  auto buft = std::make_shared<VulkanBufferType>(*ctx);
  auto backend = std::make_unique<VulkanBackend>(*ctx, buft);
  absl::Status s = backend->Init();
  if (!s.ok()) return s;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace herd
