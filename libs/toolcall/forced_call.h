// Grammars that force a tool call (OpenAI tool_choice "required" or a named function):
// the call syntax of a template family (tool_calls.h) with each function's arguments
// constrained by its JSON schema (libs/grammar/json_schema.h), so a model can only emit
// a call that parses and whose arguments validate.
#pragma once
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

#include "libs/toolcall/tool_calls.h"

namespace herd::toolcall {

/// Limits on what a forced-call grammar is built from.
inline constexpr size_t kMaxForcedTools = 128;

/// GBNF (llama.cpp syntax, start rule `root`) matching one call (`parallel` false) or
/// one or more calls (`parallel` true; separated by "\n") of `format`'s syntax to any of
/// `tools` (OpenAI's tools array: {"type": "function", "function": {"name",
/// "parameters"}}), or only to `function_name` when it is not empty. Arguments follow
/// the function's parameters schema ({"type": "object"} when absent) through
/// grammar::JsonSchemaToGrammar; in the XML families (kQwen3Coder, kGlm) the required
/// parameters are written in the schema's order, a string parameter as raw text without
/// '<' (an enum of strings as one of its values), any other as JSON. kLlama3 allows one
/// call whatever `parallel` says (Llama 3.x calls one function per turn).
/// Errors: INVALID_ARGUMENT naming the field: "tools[2].function.name: required",
/// "tool_choice.function.name: 'x' is not one of the tools", a parameters schema the
/// converter refuses ("tools[0].function.parameters: json_schema/...: not supported"),
/// more than kMaxForcedTools tools, `format` kNone.
absl::StatusOr<std::string> ForcedCallGrammar(Format format, const nlohmann::json& tools,
                                              absl::string_view function_name, bool parallel);

/// Prefixes every rule name of a GBNF grammar with `prefix` (definitions and references;
/// string literals, character classes, repetition counts and comments untouched), so
/// grammars can be combined without their rule names colliding.
std::string PrefixGbnfRules(absl::string_view gbnf, absl::string_view prefix);

}  // namespace herd::toolcall
