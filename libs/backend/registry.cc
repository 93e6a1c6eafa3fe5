#include "libs/backend/registry.h"

#include <cstdio>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/cuda/cuda_backend.h"
#include "libs/backend/sched.h"
#include "libs/backend/vulkan/vulkan_backend.h"

namespace herd {
namespace {

// Kinds added by RegisterBackendKind, and whether BackendKinds() has been built.
struct Registered {
  std::mutex mu;
  std::vector<BackendKind> kinds;
  bool frozen = false;
};
Registered& Registrations() {
  static Registered* r = new Registered();
  return *r;
}

std::vector<BackendKind> MakeKinds() {
  std::vector<BackendKind> kinds;
  kinds.push_back(BackendKind{
      "cpu", [] { return std::vector<DeviceInfo>{CpuBackend::HostDevice()}; },
      [](const BackendOptions& o) -> absl::StatusOr<std::unique_ptr<Backend>> {
        if (o.n_threads < 1) return absl::InvalidArgumentError(absl::StrCat("threads ", o.n_threads, " must be >= 1"));
        auto cpu = std::make_unique<CpuBackend>(o.n_threads, BestIsa(), o.repack, o.pin_threads, o.ggml_order);
        cpu->set_shared_prefix_attention(o.shared_prefix_attention && !o.ggml_order);
        return std::unique_ptr<Backend>(std::move(cpu));
      },
      nullptr});
  kinds.push_back(BackendKind{
      "vulkan", [] { return VulkanDevices(); },
      [](const BackendOptions& o) -> absl::StatusOr<std::unique_ptr<Backend>> { return CreateVulkanBackend(o.device); },
      nullptr});
  kinds.push_back(BackendKind{
      "cuda", [] { return CudaDevices(); },
      [](const BackendOptions& o) -> absl::StatusOr<std::unique_ptr<Backend>> { return CreateCudaBackend(o.device); },
      [] { return CudaUnavailableReason(); }});
  Registered& r = Registrations();
  std::lock_guard<std::mutex> lock(r.mu);
  for (BackendKind& k : r.kinds) kinds.push_back(std::move(k));
  r.kinds.clear();
  r.frozen = true;
  return kinds;
}

std::string DescribeDevice(const DeviceInfo& d) {
  std::string s = absl::StrCat(d.index, " ", d.name, " (", d.description);
  if (d.memory_total > 0) absl::StrAppend(&s, absl::StrFormat(", %.1f GiB", d.memory_total / 1073741824.0));
  return s + ")";
}

}  // namespace

const std::vector<BackendKind>& BackendKinds() {
  static const std::vector<BackendKind>* kinds = new std::vector<BackendKind>(MakeKinds());
  return *kinds;
}

bool RegisterBackendKind(BackendKind kind) {
  Registered& r = Registrations();
  std::lock_guard<std::mutex> lock(r.mu);
  const char* why = nullptr;
  if (r.frozen) why = "registered after BackendKinds() was first used";
  for (const char* builtin : {"cpu", "vulkan", "cuda"}) {
    if (kind.name == builtin) why = "a built-in kind has this name";
  }
  for (const BackendKind& k : r.kinds) {
    if (k.name == kind.name) why = "registered twice";
  }
  if (why != nullptr) {
    // stderr directly: this runs in static initializers, before logging is set up.
    std::fprintf(stderr, "herd: backend kind '%s' not registered: %s\n", kind.name.c_str(), why);
    return false;
  }
  r.kinds.push_back(std::move(kind));
  return true;
}

std::vector<DeviceInfo> ListDevices() {
  std::vector<DeviceInfo> out;
  for (const BackendKind& k : BackendKinds()) {
    for (DeviceInfo& d : k.devices()) out.push_back(std::move(d));
  }
  return out;
}

std::string DescribeDevices() {
  std::vector<std::string> parts;
  for (const BackendKind& k : BackendKinds()) {
    std::vector<DeviceInfo> devs = k.devices();
    std::vector<std::string> ds;
    for (const DeviceInfo& d : devs) ds.push_back(DescribeDevice(d));
    std::string none = "no device found";
    if (ds.empty() && k.why_none) {
      const std::string why = k.why_none();
      if (!why.empty()) absl::StrAppend(&none, " (", why, ")");
    }
    parts.push_back(absl::StrCat(k.name, ": ", ds.empty() ? none : absl::StrJoin(ds, ", ")));
  }
  return absl::StrJoin(parts, "; ");
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& name, const BackendOptions& opts) {
  for (const BackendKind& k : BackendKinds()) {
    if (k.name != name) continue;
    const std::vector<DeviceInfo> devs = k.devices();
    if (opts.device < 0 || opts.device >= static_cast<int>(devs.size())) {
      return absl::NotFoundError(absl::StrCat("backend ", name, " has no device ", opts.device,
                                              " on this machine (this build and machine have: ", DescribeDevices(),
                                              ")"));
    }
    absl::StatusOr<std::unique_ptr<Backend>> b = k.create(opts);
    if (!b.ok() || name == "cpu") return b;
    std::vector<std::unique_ptr<Backend>> chain;
    chain.push_back(*std::move(b));
    auto cpu = std::make_unique<CpuBackend>(std::max(1, opts.n_threads), BestIsa(), opts.repack, opts.pin_threads,
                                            opts.ggml_order);
    cpu->set_shared_prefix_attention(opts.shared_prefix_attention && !opts.ggml_order);
    chain.push_back(std::move(cpu));
    absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(std::move(chain));
    if (!s.ok()) return s.status();
    return std::unique_ptr<Backend>(*std::move(s));
  }
  std::vector<std::string> names;
  for (const BackendKind& k : BackendKinds()) names.push_back(k.name);
  return absl::NotFoundError(absl::StrCat("unknown backend '", name, "': this build has ", absl::StrJoin(names, ", "),
                                          " (devices: ", DescribeDevices(), ")"));
}

}  // namespace herd
