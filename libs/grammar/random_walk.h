// Random sentences of a grammar, for tests: draw allowed code points until the grammar
// can end. Test-only helper (//libs/grammar:random_walk, testonly).
#pragma once
#include <random>
#include <string>

#include "absl/status/statusor.h"

#include "libs/grammar/matcher.h"

namespace herd::grammar {

/// Walks from `m`'s state: while fewer than `soft_steps` code points were drawn, draws a
/// random allowed code point (mostly printable ASCII when the class allows it) and stops
/// with probability 1/8 whenever the grammar can end; after that, picks the code point
/// that leads closest to completion (smallest stack depth) and stops as soon as it can.
/// Returns the UTF-8 text, or NOT_FOUND when `hard_steps` code points did not complete.
absl::StatusOr<std::string> RandomWalk(Matcher m, std::mt19937& rng, int soft_steps, int hard_steps);

}  // namespace herd::grammar
