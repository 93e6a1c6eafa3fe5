// Locates the read-only shared data directory (models, reference outputs) for tests.
#pragma once
#include <string>

namespace herd {

/// Absolute path of the shared data directory (the one holding models/ and reference/),
/// or "" when it cannot be found. Looks at, in order:
///  1. $HERD_SHARED, when set and non-empty (returned as given; tools/test.sh and
///     `bazel test --test_env=HERD_SHARED=/abs/path` set it);
///  2. the current directory and each parent, for a "shared/models" subdirectory;
///  3. $BUILD_WORKSPACE_DIRECTORY (set by `bazel run`) and its parents, likewise.
/// Tests should skip when it returns "": GTEST_SKIP() << kSharedDirMissing;
std::string SharedDir();

/// The skip message for tests that need the shared data.
inline constexpr char kSharedDirMissing[] = "../shared not found: set HERD_SHARED";

}  // namespace herd

// Also callable unqualified from test code outside namespace herd.
using herd::SharedDir;
