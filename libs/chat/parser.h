// Parser of the chat-template interpreter: Jinja2's grammar (statements if/for/set/
// macro/call/filter/break/continue/generation/raw, expressions with Jinja2's precedence)
// to the tree in ast.h. Internal.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"

#include "libs/chat/ast.h"

namespace herd::chat::internal {

/// Parses a whole template. INVALID_ARGUMENT "line:col: what" on syntax errors, unknown
/// tags, unbalanced blocks, or nesting deeper than the parser's limit.
absl::StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace herd::chat::internal
