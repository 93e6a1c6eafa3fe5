// Random sentences of a grammar, for tests: draw allowed code points until the grammar
// can end; and their validation against a JSON schema. Test-only helper
// (//libs/grammar:random_walk, testonly).
#pragma once
#include <cstddef>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "libs/grammar/matcher.h"

namespace herd::grammar {

/// Walks from `m`'s state: while fewer than `soft_steps` code points were drawn, draws a
/// random allowed code point (mostly printable ASCII when the class allows it) and stops
/// with probability 1/8 whenever the grammar can end; after that, picks the code point
/// that leads closest to completion (smallest stack depth) and stops as soon as it can.
/// Returns the UTF-8 text, or NOT_FOUND when `hard_steps` code points did not complete.
absl::StatusOr<std::string> RandomWalk(Matcher m, std::mt19937& rng, int soft_steps, int hard_steps);

/// Up to `n` RandomWalk texts from the start of `grammar`; gives up after `max_fails`
/// walks that did not complete (*fails counts them, and a matcher that cannot be made).
std::vector<std::string> RandomWalks(const std::shared_ptr<const Grammar>& grammar, std::mt19937& rng, size_t n,
                                     int max_fails, int soft_steps, int hard_steps, int* fails);

/// Runs libs/grammar/validate_json.py (python3-jsonschema; the test's data) on `cases`,
/// [{"schema": ..., "samples": [...]}], written to $TEST_TMPDIR/`file_name`. Returns ""
/// when every sample is valid JSON of its schema, else the script's output (or why it
/// could not run).
std::string ValidateJsonSamples(const nlohmann::json& cases, const std::string& file_name);

}  // namespace herd::grammar
