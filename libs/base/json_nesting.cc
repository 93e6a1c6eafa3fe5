#include "libs/base/json_nesting.h"

#include "absl/strings/str_cat.h"

namespace herd {

absl::Status CheckJsonNesting(absl::string_view text, absl::string_view what, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\0') {
      // nlohmann's parser stops at a NUL byte and accepts the text before it, so
      // `{...}\0anything` would pass as `{...}`; RFC 8259 allows no raw control byte.
      return absl::InvalidArgumentError(absl::StrCat(what, ": NUL byte at offset ", i, " (not valid in JSON text)"));
    }
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
