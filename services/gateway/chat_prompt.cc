#include "services/gateway/chat_prompt.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/base/json_nesting.h"
#include "libs/base/status_macros.h"

namespace herd::gateway {
namespace {

using json = nlohmann::ordered_json;  // key order reaches the template (tojson), as in Python

constexpr int kMaxMessages = 1024;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::StatusOr<json> ParseJsonArray(const std::string& text, const std::string& field) {
  // Bounded before parsing: the template walks (and copies) what is parsed here.
  HERD_RETURN_IF_ERROR(CheckJsonNesting(text, field));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid(absl::StrCat(field, ": invalid JSON"));
  if (!j.is_array()) return Invalid(absl::StrCat(field, ": must be a JSON array"));
  return j;
}

// The token's text for the template's bos_token / eos_token variables ("" when none).
std::string SpecialText(const tokenizer::Vocab& vocab, int32_t id) {
  return vocab.IsValid(id) ? vocab.TokenToPiece(id, /*special=*/true) : "";
}

}  // namespace

std::string ChatTemplateOriginOf(std::string_view gguf_template, std::string_view override_template) {
  if (!override_template.empty()) return "file";
  return gguf_template.empty() ? "chatml" : "gguf";
}

absl::StatusOr<ChatTemplateInfo> MakeChatTemplateInfo(std::string_view gguf_template,
                                                      std::string_view override_template) {
  ChatTemplateInfo info;
  info.origin = ChatTemplateOriginOf(gguf_template, override_template);
  std::string_view source = !override_template.empty() ? override_template
                            : !gguf_template.empty()   ? gguf_template
                                                       : chat::ChatMlTemplate();
  HERD_ASSIGN_OR_RETURN(auto t, chat::ChatTemplate::Parse(source));
  info.tmpl = std::make_shared<const chat::ChatTemplate>(std::move(t));
  return info;
}

absl::Status ValidateChatPrompt(const v1::ChatPrompt& chat, int64_t max_bytes) {
  if (chat.messages_size() == 0) return Invalid("chat.messages: at least one message is required");
  if (chat.messages_size() > kMaxMessages) {
    return Invalid(absl::StrCat("chat.messages: at most ", kMaxMessages, " messages (got ", chat.messages_size(), ")"));
  }
  int64_t bytes = 0;
  for (int i = 0; i < chat.messages_size(); ++i) {
    const v1::ChatMessage& m = chat.messages(i);
    const std::string f = absl::StrCat("chat.messages[", i, "].");
    if (m.role().empty()) return Invalid(f + "role: required");
    if (!m.tool_calls_json().empty()) {
      HERD_ASSIGN_OR_RETURN(auto j, ParseJsonArray(m.tool_calls_json(), f + "tool_calls_json"));
    }
    bytes += static_cast<int64_t>(m.content().size() + m.tool_calls_json().size());
  }
  if (!chat.tools_json().empty()) {
    HERD_ASSIGN_OR_RETURN(auto j, ParseJsonArray(chat.tools_json(), "chat.tools_json"));
    bytes += static_cast<int64_t>(chat.tools_json().size());
  }
  if (bytes > max_bytes) {
    return Invalid(
        absl::StrCat("chat.messages: ", bytes, " bytes of content exceed the limit of ", max_bytes, " bytes"));
  }
  const std::string& tc = chat.tool_choice();
  if (!tc.empty() && tc != "auto" && tc != "none" && tc != "required" && tc != "function") {
    return Invalid(absl::StrCat("chat.tool_choice: '", tc, "' is not one of auto, none, required, function"));
  }
  if (tc == "function" && chat.tool_choice_function().empty()) {
    return Invalid("chat.tool_choice_function: required when tool_choice is \"function\"");
  }
  if ((tc == "required" || tc == "function") && chat.tools_json().empty()) {
    return Invalid(absl::StrCat("chat.tool_choice: \"", tc, "\" needs tools"));
  }
  const std::string& rf = chat.reasoning_format();
  if (!rf.empty() && rf != "auto" && rf != "deepseek" && rf != "none") {
    return Invalid(absl::StrCat("chat.reasoning_format: '", rf, "' is not one of auto, deepseek, none"));
  }
  const std::string& re = chat.reasoning_effort();
  if (!re.empty() && re != "minimal" && re != "low" && re != "medium" && re != "high") {
    return Invalid(absl::StrCat("chat.reasoning_effort: '", re, "' is not one of minimal, low, medium, high"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RenderChatPrompt(const v1::ChatPrompt& chat, const ChatTemplateInfo& info,
                                             const tokenizer::Vocab& vocab) {
  chat::ChatTemplateInputs in;
  for (const v1::ChatMessage& m : chat.messages()) {
    json msg = {{"role", m.role()}, {"content", m.content()}};
    if (!m.name().empty()) msg["name"] = m.name();
    if (!m.tool_call_id().empty()) msg["tool_call_id"] = m.tool_call_id();
    if (!m.tool_calls_json().empty()) {
      HERD_ASSIGN_OR_RETURN(auto calls, ParseJsonArray(m.tool_calls_json(), "chat.messages[].tool_calls_json"));
      msg["tool_calls"] = std::move(calls);
    }
    in.messages.push_back(std::move(msg));
  }
  if (!chat.tools_json().empty() && chat.tool_choice() != "none") {
    HERD_ASSIGN_OR_RETURN(auto tools, ParseJsonArray(chat.tools_json(), "chat.tools_json"));
    in.tools = std::move(tools);
  }
  in.add_generation_prompt = chat.has_add_generation_prompt() ? chat.add_generation_prompt() : true;
  // reasoning_effort reaches templates that read it (gpt-oss); others never see it.
  if (!chat.reasoning_effort().empty() && absl::StrContains(info.tmpl->source(), "reasoning_effort")) {
    in.extra_context["reasoning_effort"] = chat.reasoning_effort();
  }
  in.bos_token = SpecialText(vocab, vocab.bos());
  in.eos_token = SpecialText(vocab, vocab.eos());
  auto text = info.tmpl->Apply(in);
  if (!text.ok()) {
    return Invalid(absl::StrCat("chat template (", info.origin, "): ", text.status().message()));
  }
  std::string out = *std::move(text);
  if (vocab.add_bos() && !in.bos_token.empty() && absl::StartsWith(out, in.bos_token)) {
    out.erase(0, in.bos_token.size());
  }
  return out;
}

}  // namespace herd::gateway
