// The --backend/--device flags of `herd run`, `herd perplexity` and `herd embed`
// (llama.cpp's --device; backends by name through libs/backend/registry.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/backend/backend.h"
#include "libs/model/model.h"
#include "tools/herd/args.h"

namespace herd::cli {

/// The flag specs: --backend NAME (default cpu), --device N (default 0), --ggml-order
/// (BackendOptions::ggml_order).
std::vector<FlagSpec> BackendFlagSpecs();
/// `specs` with BackendFlagSpecs() inserted before its -h entry (or at the end).
std::vector<FlagSpec> WithBackendFlags(std::vector<FlagSpec> specs);

/// Creates the backend the flags name (a device backend with `threads` CPU threads for
/// the ops it lacks) and places `model`'s weights in its memory. Errors: a usage-style
/// INVALID_ARGUMENT for a --device that is not a number; NOT_FOUND listing what this
/// build and machine have; the device's and the placement's errors.
absl::StatusOr<std::unique_ptr<Backend>> BackendFromArgs(const Args& args, int threads, model::Model* model);

/// The same from a name, an index and --ggml-order.
absl::StatusOr<std::unique_ptr<Backend>> OpenBackend(const std::string& name, int device, int threads,
                                                     model::Model* model, bool ggml_order = false);

/// "cpu on CPU (AMD EPYC 7B13 (avx2))" for the setup lines on stderr.
std::string DescribeBackend(const std::string& name, const Backend& backend);

}  // namespace herd::cli
