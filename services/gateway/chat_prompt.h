// Chat prompts at the gateway: a herd.v1.ChatPrompt (OpenAI messages) rendered with a
// model's chat template (libs/chat, Hugging Face apply_chat_template semantics) into the
// text that is then tokenized, as llama.cpp's server does for /v1/chat/completions.
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/chat/chat_template.h"
#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/gateway.pb.h"

namespace herd::gateway {

/// A model's compiled chat template and where it came from: "gguf"
/// (tokenizer.chat_template), "file" (--chat_template) or "chatml" (the fallback for
/// models without a template).
struct ChatTemplateInfo {
  std::shared_ptr<const chat::ChatTemplate> tmpl;
  std::string origin;
};

/// The origin MakeChatTemplateInfo would report for these sources.
std::string ChatTemplateOriginOf(std::string_view gguf_template, std::string_view override_template);

/// Compiles `override_template` when non-empty, else `gguf_template` when non-empty,
/// else ChatML. Errors: INVALID_ARGUMENT from the template parser (position and cause).
absl::StatusOr<ChatTemplateInfo> MakeChatTemplateInfo(std::string_view gguf_template,
                                                      std::string_view override_template);

/// Checks a chat prompt: 1..1024 messages, each with a non-empty role; total content at
/// most `max_bytes`; tool_calls_json / tools_json parse as JSON arrays. INVALID_ARGUMENT
/// naming the field ("chat.messages[2].role").
absl::Status ValidateChatPrompt(const v1::ChatPrompt& chat, int64_t max_bytes);

/// Renders `chat` with the template (variables messages, tools, add_generation_prompt,
/// bos_token and eos_token as the vocabulary's texts). As llama.cpp's
/// common_chat_templates_apply, a leading BOS text is removed when the vocabulary adds
/// BOS itself, so tokenizing the result with add_special yields one BOS. Errors:
/// INVALID_ARGUMENT for template errors (raise_exception's message, e.g. "System role
/// not supported"), naming the template's origin.
absl::StatusOr<std::string> RenderChatPrompt(const v1::ChatPrompt& chat, const ChatTemplateInfo& info,
                                             const tokenizer::Vocab& vocab);

}  // namespace herd::gateway
