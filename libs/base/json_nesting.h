// Bounding the nesting of JSON text before anything parses or walks it.
//
// nlohmann::json parses iteratively, but copying, comparing or walking a parsed value
// recurses once per level: a 3 MB body of 10^6 nested objects exhausts a thread's stack
// (SIGSEGV) long before any size limit trips. Every place that takes JSON from a client
// or a file checks the text with CheckJsonNesting first, so nothing downstream ever sees
// a document deeper than the limit.
#ifndef HERD_LIBS_BASE_JSON_NESTING_H_
#define HERD_LIBS_BASE_JSON_NESTING_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace herd {

/// Deepest nesting of arrays and objects accepted in JSON from a client or a file
/// (request bodies, tools, chat messages, JSON schemas). `{}` and `[]` are depth 1; a
/// scalar alone is depth 0. Deep enough for any real schema (the JSON-schema converter
/// allows 64 schema levels, about 130 JSON levels with "properties"), shallow enough that
/// every recursive walk of a parsed document stays far inside a thread's stack.
inline constexpr int kMaxJsonNesting = 256;

/// Scans `text` once, without allocating, and fails with InvalidArgument
/// "<what>: JSON nested deeper than <max_depth> levels (arrays and objects)" as soon as
/// the nesting of `[`/`{` outside strings exceeds `max_depth`. Brackets inside strings
/// (escapes included) do not count. A NUL byte anywhere fails with InvalidArgument
/// "<what>: NUL byte at offset <i> (not valid in JSON text)": nlohmann's parser would end
/// the text there and accept what came before. Other malformed JSON is not diagnosed
/// here: the parser that follows reports it. O(size of text) and never recursive.
absl::Status CheckJsonNesting(absl::string_view text, absl::string_view what, int max_depth = kMaxJsonNesting);

/// The same bound on a parsed document (nlohmann::json or ordered_json, or any type with
/// is_structured() and iteration over its children), for libraries handed a value by a
/// caller they cannot vouch for: walks it with an explicit stack, never recursing, and
/// fails with the message of CheckJsonNesting.
template <typename Json>
absl::Status CheckJsonValueNesting(const Json& root, absl::string_view what, int max_depth = kMaxJsonNesting) {
  std::vector<std::pair<const Json*, int>> stack;  // value, its depth (1 for root's level)
  if (root.is_structured()) stack.emplace_back(&root, 1);
  while (!stack.empty()) {
    const auto [v, depth] = stack.back();
    stack.pop_back();
    if (depth > max_depth) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": JSON nested deeper than ", max_depth, " levels (arrays and objects)"));
    }
    for (const Json& child : *v) {
      if (child.is_structured()) stack.emplace_back(&child, depth + 1);
    }
  }
  return absl::OkStatus();
}

}  // namespace herd

#endif  // HERD_LIBS_BASE_JSON_NESTING_H_
