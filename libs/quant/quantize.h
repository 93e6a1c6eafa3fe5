// Whole-model quantization of a GGUF file, as llama.cpp's llama-quantize does it
// (src/llama-quant.cpp, no importance matrix): the same per-tensor types for every
// mixture (type_rules.h) and byte-identical tensor data (libs/tensor/quants.h).
// Used by `herd quantize` and the loader service's Quantize RPC.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace herd::quant {

struct QuantizeOptions {
  /// llama-quantize file type: "Q4_K_M", "q8_0", ... (case-insensitive; see
  /// SupportedFileTypes(); the numeric llama_ftype, e.g. "15", is accepted too).
  std::string type;
  /// --pure: every quantizable 2-D weight (output and token_embd included) gets the
  /// file type's default tensor type; no mixture rules, --tensor-type ignored.
  bool pure = false;
  /// --output-tensor-type: ggml type name ("q8_0", "f16", ...) for output.weight; "" = rules.
  std::string output_tensor_type;
  /// --token-embedding-type: ggml type name for token_embd.weight; "" = rules.
  std::string token_embedding_type;
  /// --tensor-type PATTERN=TYPE, in order: the first whose (lowercased) regex is found
  /// in a tensor's name sets its type (the row-length fallback still applies).
  std::vector<std::string> tensor_type_overrides;
  /// Threads quantizing rows in parallel (>= 1). The output does not depend on it.
  int n_threads = 1;
};

struct QuantizeProgress {
  int tensors_done, tensors_total;
  /// Bytes of source tensor data processed / in total.
  uint64_t bytes_done, bytes_total;
  /// Seconds since the start; estimated seconds left (< 0: not known yet).
  double elapsed_s, eta_s;
  /// The tensor being processed ("" once everything is written).
  std::string current_tensor;
};

/// Quantizes the GGUF model at `src_path` into `dst_path`.
///
/// Output (llama-quantize's layout): the source metadata in order, plus
/// general.quantization_version = 2 and general.file_type = the llama_ftype (both u32;
/// split.* keys removed); tensors ordered by layer then name, each either copied (type
/// unchanged: 1-D tensors, norms, or already the target type) or converted: F16/BF16
/// sources are widened to F32 first; quantized sources are refused (llama-quantize's
/// default, no --allow-requantize).
///
/// Writes atomically: tensor data is first produced in an unnamed scratch file in
/// dst's directory (disk space: up to the output size again), then the file is written
/// to a unique temp file there, fsync'ed and renamed over dst_path. On any error or
/// cancel, dst_path is untouched and no temp or scratch file remains.
///
/// `progress` (may be empty) is called on the calling thread after each tensor (and
/// within large tensors), last with tensors_done == tensors_total. `cancel` (may be
/// null) is polled between row chunks.
///
/// Errors: INVALID_ARGUMENT naming the field for bad options ("type: ...",
/// "output_tensor_type: ...", "tensor_type_overrides[1]: ...", "n_threads: ...",
/// "dst_path: ..."); the GGUF reader's errors for a missing (NOT_FOUND), corrupt or
/// truncated (INVALID_ARGUMENT) source; INVALID_ARGUMENT for a source that is not a
/// model (no general.architecture / block_count), NaN/Inf in source data, a row length
/// the requested type cannot hold (with no fallback), or quantized data out of F16
/// range; FAILED_PRECONDITION for requantizing a quantized tensor; CANCELLED; I/O
/// errors (NOT_FOUND / PERMISSION_DENIED / INTERNAL) naming the path.
absl::Status QuantizeModel(const std::string& src_path, const std::string& dst_path, const QuantizeOptions& options,
                           const std::function<void(const QuantizeProgress&)>& progress,
                           const std::atomic<bool>* cancel);

/// File type names QuantizeOptions::type accepts: Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S
/// Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS F16 BF16 F32, then the
/// aliases Q3_K Q4_K Q5_K.
std::vector<std::string> SupportedFileTypes();

}  // namespace herd::quant
