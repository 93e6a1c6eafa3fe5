// Lexer of the chat-template interpreter: Jinja2's tokenizer with the settings of
// transformers' chat-template environment (trim_blocks, lstrip_blocks, newline
// normalization, no keep_trailing_newline). Internal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::chat::internal {

struct Token {
  enum class Type {
    kText,        // template data (whitespace control already applied)
    kVarBegin,    // {{
    kVarEnd,      // }}
    kBlockBegin,  // {%
    kBlockEnd,    // %}
    kName,
    kString,  // text holds the decoded value
    kInt,
    kFloat,
    kOp,  // text holds the operator: + - * / // % ** ~ ( ) [ ] { } , . : | = == != < > <= >=
    kEof,
  };
  Type type = Type::kEof;
  std::string text;
  int64_t ival = 0;
  double fval = 0;
  int line = 1;
  int col = 1;
};

/// Splits a template into tokens. INVALID_ARGUMENT "line:col: what" on unterminated
/// tags, strings or comments, bad characters or numbers out of range.
absl::StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace herd::chat::internal
