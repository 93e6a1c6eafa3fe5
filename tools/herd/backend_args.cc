#include "tools/herd/backend_args.h"

#include "absl/strings/str_cat.h"

#include "libs/backend/registry.h"
#include "libs/base/status_macros.h"

namespace herd::cli {

std::vector<FlagSpec> BackendFlagSpecs() {
  return {
      {{"--backend"},
       true,
       "compute backend: cpu, vulkan, ... (a wrong name lists what this build and machine have)",
       "cpu"},
      {{"--device"}, true, "device index within --backend", "0"},
      {{"--ggml-order"},
       false,
       "CPU: llama.cpp's x86 results bit for bit (Q8_0/Q5_0 weights unpacked, in ggml's summation order; their "
       "prompt processing 4-5x slower)",
       ""},
  };
}

std::vector<FlagSpec> WithBackendFlags(std::vector<FlagSpec> specs) {
  auto at = specs.end();
  for (auto it = specs.begin(); it != specs.end(); ++it) {
    if (!it->names.empty() && it->names[0] == "-h") at = it;
  }
  const std::vector<FlagSpec> extra = BackendFlagSpecs();
  specs.insert(at, extra.begin(), extra.end());
  return specs;
}

absl::StatusOr<std::unique_ptr<Backend>> BackendFromArgs(const Args& args, int threads, model::Model* model) {
  HERD_ASSIGN_OR_RETURN(int64_t device, args.GetInt("--device"));
  return OpenBackend(args.Get("--backend"), static_cast<int>(device), threads, model, args.Has("--ggml-order"));
}

absl::StatusOr<std::unique_ptr<Backend>> OpenBackend(const std::string& name, int device, int threads,
                                                     model::Model* model, bool ggml_order) {
  BackendOptions o;
  o.ggml_order = ggml_order;
  o.n_threads = threads;
  o.device = device;
  absl::StatusOr<std::unique_ptr<Backend>> b = CreateBackend(name, o);
  if (!b.ok()) return absl::Status(b.status().code(), absl::StrCat("--backend ", name, ": ", b.status().message()));
  HERD_RETURN_IF_ERROR(model->PlaceWeights(b->get()));
  return b;
}

std::string DescribeBackend(const std::string& name, const Backend& backend) {
  const DeviceInfo d = backend.device();
  return absl::StrCat(name, " on ", d.name, " (", d.description, ")");
}

}  // namespace herd::cli
