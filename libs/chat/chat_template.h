// Chat templates: our own Jinja2 interpreter for the `chat_template` a model ships (in
// tokenizer_config.json, or in its GGUF as `tokenizer.chat_template`), rendering
// OpenAI-style conversations exactly as Hugging Face's apply_chat_template does.
//
// Semantics: Python Jinja2 3.1 in transformers' environment — an
// ImmutableSandboxedEnvironment with trim_blocks=True, lstrip_blocks=True, the
// loopcontrols extension (break/continue), a {% generation %} block that renders its
// body, globals raise_exception(msg) and strftime_now(fmt), and a tojson filter equal
// to Python's json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False). Conformance: libs/chat/chat_template_conformance_test.cc renders
// 56 real templates x 8 conversations and compares byte for byte with Jinja2's output.
//
// Not supported (a clear INVALID_ARGUMENT, never a crash): {% include/import/extends/
// block %}, recursive for loops, {% with %}, {% do %} (not enabled in transformers'
// environment either), str.format specs beyond "{}"/"{0}"/"{name}", "%" formatting
// beyond %s %r %d %i %f %x %e %g. Known differences from Python that real templates do
// not meet: integers are 64-bit (overflow is an error, not a bigint), str.upper/lower
// map ASCII, Latin-1/Extended-A, Greek and Cyrillic only, |items on a non-mapping fails
// at once (Jinja2 fails when the generator is iterated), and Jinja2's compile-time
// folding of constant expressions (which can hide errors in literal-only expressions
// such as {{ 1.5[:2] }}) is not imitated.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace herd::chat {

namespace internal {
struct Stmt;
}

/// Limits of one render. Exceeding one fails the render with INVALID_ARGUMENT.
struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{16} << 20;  // the rendered prompt (and any one buffer)
  int max_call_depth = 64;                     // nested macro calls
  int64_t max_iterations = 1000000;            // loop iterations + macro calls in total
  size_t max_stack_bytes = size_t{1} << 20;    // machine stack a render may use (the
                                               // calling thread needs this much free)
};

/// The variables a chat template sees. JSON values are nlohmann::ordered_json so that
/// object key order (which tojson and dict iteration expose, as Python does) is kept:
/// renders are byte-exact only when the caller parses requests with ordered_json too.
/// Plain nlohmann::json values convert (`in.tools = j;`, or
/// `push_back(nlohmann::ordered_json(j))`), with their keys in sorted order.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, tool_calls?, ...}]
  nlohmann::ordered_json tools;  // null = no `tools` variable defined; else OpenAI tool list
  bool add_generation_prompt = true;
  std::string bos_token = "<s>";
  std::string eos_token = "</s>";
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();  // more top-level variables
  /// The time strftime_now formats, as Unix seconds rendered in UTC; nullopt = the real
  /// current local time. (The conformance oracle fixed 2026-01-15 10:30:00.)
  std::optional<int64_t> now_unix_seconds;
  ChatTemplateLimits limits;
};

/// A parsed chat template. Cheap to copy (the syntax tree is shared and immutable);
/// Apply is const and safe to call from several threads at once.
class ChatTemplate {
 public:
  /// Parses a template. INVALID_ARGUMENT "line:column: what is wrong" on syntax errors.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source);

  /// Renders. Template errors are INVALID_ARGUMENT with "line:column: what" (undefined
  /// values used, type errors, unsupported operations, sandbox refusals such as
  /// list.append, limits); raise_exception(msg) in the template is FAILED_PRECONDITION
  /// with msg as the message.
  absl::StatusOr<std::string> Apply(const ChatTemplateInputs& in) const;

  const std::string& source() const { return *source_; }

 private:
  struct Tree;
  ChatTemplate(std::shared_ptr<const std::string> source, std::shared_ptr<const Tree> tree)
      : source_(std::move(source)), tree_(std::move(tree)) {}
  std::shared_ptr<const std::string> source_;
  std::shared_ptr<const Tree> tree_;
};

/// The ChatML template used when a model ships none (llama.cpp's and transformers'
/// documented default): <|im_start|>{role}\n{content}<|im_end|>\n per message, then
/// <|im_start|>assistant\n when add_generation_prompt.
std::string_view ChatMlTemplate();

}  // namespace herd::chat
