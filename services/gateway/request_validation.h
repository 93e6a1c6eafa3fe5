// Field-by-field validation of the public GenerateRequest (gateway.proto), before the
// model is resolved: every error is INVALID_ARGUMENT naming the field, as the gateway
// returns it.
#pragma once
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/engine/spec/spec_config.h"
#include "proto/herd/v1/gateway.pb.h"

namespace herd::gateway {

/// Most stop strings per request, and bytes per stop string.
inline constexpr int kMaxStops = 16;
inline constexpr size_t kMaxStopBytes = 256;
/// Largest GenerateRequest.logprobs.
inline constexpr int kMaxLogprobs = 20;

/// Sampling values in range (temperature, top_p, min_p, penalties, logit_bias values,
/// the grammar's syntax). INVALID_ARGUMENT naming the field ("sampling.top_p: ...").
absl::Status ValidateSampling(const v1::SamplingParams& s);

/// logit_bias token ids within [0, n_vocab). INVALID_ARGUMENT naming the entry.
absl::Status ValidateLogitBiasIds(const v1::SamplingParams& s, int32_t n_vocab);

/// Every field of `req` that can be checked without the model, in declaration order:
/// model, prompt (text size <= `max_prompt_bytes` and UTF-8, token ids >= 0, chat
/// messages), sampling, n_predict (-1 or >= 1), stop strings, logprobs, speculative.
/// Returns the speculative configuration: `spec_defaults` with the request's fields laid
/// over it. Errors: INVALID_ARGUMENT naming the first bad field.
absl::StatusOr<engine::spec::SpecConfig> ValidateGenerateRequest(const v1::GenerateRequest& req,
                                                                 int64_t max_prompt_bytes,
                                                                 const engine::spec::SpecConfig& spec_defaults);

}  // namespace herd::gateway
