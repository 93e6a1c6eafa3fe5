#include "libs/backend/registry.h"

#include <cstdio>
#include <mutex>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

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

bool IsSplitSpec(const std::string& spec) {
  return spec.find(',') != std::string::npos || absl::StartsWith(spec, "remote://");
}

absl::StatusOr<std::unique_ptr<Backend>> CreateSplitBackend(const std::string& spec, const BackendOptions& opts,
                                                            const SplitOptions& split) {
  std::vector<std::string> parts = absl::StrSplit(spec, ',');
  for (std::string& p : parts) p = std::string(absl::StripAsciiWhitespace(p));
  std::vector<std::unique_ptr<Backend>> listed;
  int cpu_at = -1;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& p = parts[i];
    if (p.empty()) return absl::InvalidArgumentError(absl::StrCat("backend list '", spec, "': empty entry"));
    for (size_t j = 0; j < i; ++j) {
      if (parts[j] == p) return absl::InvalidArgumentError(absl::StrCat("backend list '", spec, "': ", p, " twice"));
    }
    if (absl::StartsWith(p, "remote://")) {
      const std::string address = p.substr(9);
      const size_t colon = address.rfind(':');
      int port = 0;
      if (address.empty() || colon == std::string::npos || colon == 0 ||
          !absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("backend list '", spec, "': '", p, "' is not remote://HOST:PORT (port 1..65535)"));
      }
      if (!split.connect_remote) {
        return absl::FailedPreconditionError(
            absl::StrCat("backend ", p, ": this program cannot reach remote backends"));
      }
      absl::StatusOr<std::unique_ptr<Backend>> b = split.connect_remote(address);
      if (!b.ok()) return b.status();
      listed.push_back(*std::move(b));
      continue;
    }
    if (p == "cpu") {
      auto cpu = std::make_unique<CpuBackend>(std::max(1, opts.n_threads), BestIsa(), opts.repack, opts.pin_threads,
                                              opts.ggml_order);
      cpu->set_shared_prefix_attention(opts.shared_prefix_attention && !opts.ggml_order);
      cpu_at = static_cast<int>(i);
      listed.push_back(std::move(cpu));
      continue;
    }
    const BackendKind* kind = nullptr;
    for (const BackendKind& k : BackendKinds()) {
      if (k.name == p) kind = &k;
    }
    if (kind == nullptr || opts.device < 0 || opts.device >= static_cast<int>(kind->devices().size())) {
      // CreateBackend's NOT_FOUND, naming what this build and machine have.
      absl::StatusOr<std::unique_ptr<Backend>> none = CreateBackend(p, opts);
      if (!none.ok()) return none.status();
    }
    absl::StatusOr<std::unique_ptr<Backend>> b = kind->create(opts);
    if (!b.ok()) return b.status();
    listed.push_back(*std::move(b));
  }
  // Scheduler order: every listed backend but the CPU in list order, the CPU last.
  std::vector<size_t> index(listed.size());
  std::vector<std::unique_ptr<Backend>> chain;
  for (size_t i = 0; i < listed.size(); ++i) {
    if (static_cast<int>(i) == cpu_at) continue;
    index[i] = chain.size();
    chain.push_back(std::move(listed[i]));
  }
  const size_t cpu_index = chain.size();
  if (cpu_at >= 0) {
    index[static_cast<size_t>(cpu_at)] = cpu_index;
    chain.push_back(std::move(listed[static_cast<size_t>(cpu_at)]));
  } else {
    auto cpu = std::make_unique<CpuBackend>(std::max(1, opts.n_threads), BestIsa(), opts.repack, opts.pin_threads,
                                            opts.ggml_order);
    chain.push_back(std::move(cpu));
  }
  if (!split.tensor_split.empty() && split.tensor_split.size() != parts.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor split of ", split.tensor_split.size(), " proportions for ",
                                                   parts.size(), " backends ('", spec, "')"));
  }
  const std::vector<size_t> placement = LayerPlacementFromSplit(split.n_layer, split.tensor_split, index);
  if (placement.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor split ", absl::StrJoin(split.tensor_split, ","),
                                                   ": proportions must be >= 0 and sum > 0"));
  }
  absl::StatusOr<std::unique_ptr<Scheduler>> s = Scheduler::Create(std::move(chain), cpu_index);
  if (!s.ok()) return s.status();
  if (absl::Status st = (*s)->SetLayerPlacement(placement); !st.ok()) return st;
  return std::unique_ptr<Backend>(*std::move(s));
}

}  // namespace herd
