#include "libs/base/json_nesting.h"

#include "absl/strings/str_cat.h"

namespace herd {

absl::Status CheckJsonNesting(absl::string_view text, absl::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > max_depth) {
          return absl::InvalidArgumentError(
              absl::StrCat(what, ": JSON nested deeper than ", max_depth, " levels (arrays and objects)"));
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace herd
