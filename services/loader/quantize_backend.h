// The loader's seam to whole-model quantization (libs/quant). Two implementations:
// quantize_backend_quant.cc (libs/quant) and quantize_backend_none.cc (UNIMPLEMENTED),
// chosen in BUILD, so the service builds before and after libs/quant exists.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace herd::loader {

/// One quantization job (herd.v1.QuantizeRequest with resolved paths).
struct QuantizeJob {
  std::string src_path;
  std::string dst_path;  // written atomically; must not exist
  std::string type;      // "Q4_K_M", "Q8_0", ...
  bool pure = false;
  std::string output_tensor_type;
  std::string token_embedding_type;
  std::vector<std::string> tensor_type_overrides;  // "PATTERN=TYPE"
  int n_threads = 0;
};

/// Progress of a job, as libs/quant reports it.
struct QuantizeReport {
  int tensors_done = 0, tensors_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;
  double elapsed_s = 0, eta_s = 0;
  std::string current_tensor;
};

/// True when this build links a quantizer (libs/quant).
bool QuantizeAvailable();

/// Runs `job`; calls `progress` from the job's thread(s) (serialized by the caller's
/// callback if needed); stops with CANCELLED soon after *cancel becomes true. Errors:
/// the quantizer's (INVALID_ARGUMENT for a bad type or source file, ...);
/// UNIMPLEMENTED when built without a quantizer.
absl::Status RunQuantizeJob(const QuantizeJob& job, const std::function<void(const QuantizeReport&)>& progress,
                            const std::atomic<bool>* cancel);

}  // namespace herd::loader
