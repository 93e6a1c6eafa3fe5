// Logit comparisons shared by the conformance tests against llama.cpp's references.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "libs/engine/engine.h"

namespace herd::conformance {

/// The logits (n_vocab floats each) at the sequence positions `positions` of S = prompt
/// followed by output, computed the way the references were: the prompt in one batch
/// (logits for every position), then output[0], output[1], ... one token per pass
/// (teacher forcing: the reference ids, whatever we would have sampled). Clears the
/// engine's KV cache first. Errors: INVALID_ARGUMENT when a position is negative or past
/// S; the engine's error from Decode.
absl::StatusOr<std::vector<std::vector<float>>> TeacherForcedLogits(engine::Engine& eng,
                                                                    const std::vector<int32_t>& prompt,
                                                                    const std::vector<int32_t>& output,
                                                                    const std::vector<int>& positions);

/// TeacherForcedLogits for a test: on an error, a gtest failure naming it and an empty
/// result (MaxAbsDiff of which against a reference is +infinity).
std::vector<std::vector<float>> TeacherForcedLogitsOrFail(engine::Engine& eng, const std::vector<int32_t>& prompt,
                                                          const std::vector<int32_t>& output,
                                                          const std::vector<int>& positions);

/// The largest |ours[k][i] - ref_values[k][i]| over all rows k and columns i, with
/// `ref_values` a JSON array of rows of numbers (reference/*.json "logits"."values").
/// +infinity when the row counts or a row's length differ.
double MaxAbsDiff(const std::vector<std::vector<float>>& ours, const nlohmann::json& ref_values);

/// The DIR/NAME.json files whose NAME starts with one of `prefixes`, sorted (a reference
/// directory's cases); none when DIR cannot be read.
std::vector<std::string> ReferenceCases(const std::string& dir, const std::vector<std::string>& prefixes);

/// Whether architecture `arch`'s MLP uses GELU (llama.cpp's F16-table GELU): those
/// families get a 1e-3 logit tolerance instead of 1e-4.
bool UsesGelu(const std::string& arch);

/// Index of the first output whose greedy margin (`block`'s "greedy_margins") is below
/// 2 x `logit_err` (ids from there on may part legitimately): the number of ids to compare.
size_t Comparable(const nlohmann::json& block, double logit_err);

}  // namespace herd::conformance
