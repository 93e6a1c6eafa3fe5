// Tool calls and reasoning in a chat model's output: the call syntax of each chat
// template family, detected from the template's source, and one parser that splits a
// generated text into reasoning, content and tool calls, incrementally for streaming.
//
// The families and their syntax (as the templates in ../shared/reference/chat-templates
// render an assistant's tool_calls, and as llama.cpp's common/chat.cpp parses them):
//   kHermes      <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//                (Hermes 2/3, Qwen2.5, Qwen3, QwQ)
//   kLlama3      {"name": "f", "parameters": {...}}, optionally after <|python_tag|>
//                (Llama 3.1 / 3.2 / 3.3)
//   kMistral     [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]   (Mistral Nemo)
//   kMistralArgs [TOOL_CALLS]f[ARGS]{...}            (Mistral Small 3.2, Devstral)
//   kQwen3Coder  <tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>
//   kGlm         <tool_call>f\n<arg_key>k</arg_key>\n<arg_value>v</arg_value>\n</tool_call>
//                (GLM-4.5 / 4.6 / 4.7)
//   kDeepSeek    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{...}\n```
//                <｜tool▁call▁end｜><｜tool▁calls▁end｜> (R1)
//   kDeepSeekV3  the same with <｜tool▁call▁begin｜>f<｜tool▁sep｜>{...}<｜tool▁call▁end｜> (V3.1)
//   kGeneric     the whole output is JSON: {"tool_call": {"name", "arguments"}},
//                {"tool_calls": [...]}, {"name", "arguments"}, or {"response": "text"}
//                (llama.cpp's generic format, for templates without a syntax of their own)
// Reasoning (llama-server --reasoning-format deepseek): <think>...</think> at the start of
// the output, or from the start when the prompt already opened <think>.
//
// Streaming and whole responses give the same message by construction: both feed the
// text to a StreamParser; a whole response is its state after Finish(). A call is
// reported once complete (its closing marker seen, or the output ended) and with
// arguments that parse as a JSON object; a call that never completes or does not parse
// stays in the content as text.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace herd::toolcall {

/// Tool-call syntax of a chat template family (see the file comment).
enum class Format {
  kNone,  // no tool-call parsing (no tools in the request, or tool_choice "none")
  kGeneric,
  kHermes,
  kLlama3,
  kMistral,
  kMistralArgs,
  kQwen3Coder,
  kGlm,
  kDeepSeek,
  kDeepSeekV3,
};

/// "none", "generic", "hermes", "llama3", "mistral", "mistral-args", "qwen3-coder",
/// "glm", "deepseek-r1", "deepseek-v3".
const char* FormatName(Format f);

/// The family of a chat template from markers in its source (the order matters: Qwen3
/// Coder's and GLM's templates also contain "<tool_call>"); kGeneric when none matches.
Format DetectFormat(absl::string_view template_source);

/// Whether the template knows <think> reasoning (its source mentions "<think>").
bool TemplateHasThinking(absl::string_view template_source);

/// Whether a rendered prompt leaves the model inside a reasoning block: it ends (after
/// whitespace) with "<think>" (Qwen3, DeepSeek-R1 and GLM generation prompts do so).
bool PromptOpensThinking(absl::string_view rendered_prompt);

struct ParserConfig;
/// The marker texts of `config`'s syntax (tool-call markers of its format, <think> and
/// </think> when it splits reasoning). A marker that is one control token of the
/// model's vocabulary must be detokenized with its text for the parser to see it
/// (tokenizer::StreamingDetokenizer::Preserve; llama.cpp's preserved_tokens).
std::vector<std::string> MarkerTexts(const ParserConfig& config);

/// What a parser looks for.
struct ParserConfig {
  Format format = Format::kNone;
  /// Split <think>...</think> into reasoning (llama-server's --reasoning-format
  /// deepseek); false = reasoning stays in the content (--reasoning-format none).
  bool reasoning = false;
  /// The generation starts inside a reasoning block (PromptOpensThinking).
  bool reasoning_open = false;
};

/// One parsed call. `arguments` is a JSON object's text (OpenAI's
/// function.arguments): the model's own text for JSON families, built from the
/// parameters for the XML families (a value that parses as JSON is kept as JSON, else
/// it is a string).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

/// A whole assistant message.
struct Message {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
};

/// Parses `text` as the complete output (`partial` = false), or as the output so far
/// (`partial` = true): then only what cannot change any more is reported (content up
/// to a possible marker start, calls whose end is seen). Ids are left empty.
Message Parse(const ParserConfig& config, absl::string_view text, bool partial);

/// Incremental parsing for streaming: Feed() the output's text as it arrives, Finish()
/// at its end; each returns what became final since the last call. The concatenated
/// deltas equal message() after Finish(). A call's id is 9 random alphanumerics (the
/// form Mistral's templates require of ids that come back in the next turn).
class StreamParser {
 public:
  struct Delta {
    std::string reasoning;
    std::string content;
    /// New complete calls, with their index in the message.
    std::vector<std::pair<int, ToolCall>> calls;
    bool empty() const { return reasoning.empty() && content.empty() && calls.empty(); }
  };

  explicit StreamParser(ParserConfig config);
  Delta Feed(absl::string_view text);
  Delta Finish();
  /// The message so far (complete after Finish()).
  const Message& message() const { return emitted_; }
  const ParserConfig& config() const { return config_; }

 private:
  Delta Update(bool partial);
  ParserConfig config_;
  std::string text_;
  Message emitted_;
  bool finished_ = false;
  std::mt19937_64 rng_;
};

}  // namespace herd::toolcall
