// POST /v1/chat/completions: OpenAI's chat API over Gateway::Prepare/Run. Messages
// become a herd.v1.ChatPrompt, which the gateway renders with the model's chat template
// (chat_prompt.h), exactly as the gRPC Generate path does for GenerateRequest.chat.
// The output is split into reasoning_content, content and tool_calls by
// libs/toolcall in http_generation.cc, per the rules the gateway derived from the
// template (Generation::parse); tool_choice "required" or a named function is forced by
// a grammar (libs/toolcall/forced_call.h).
#include <string>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_generation.h"
#include "services/gateway/http_routes.h"
#include "services/gateway/http_util.h"

namespace herd::gateway::http {
namespace {

// OpenAI content: a string, null, or an array of parts of which only {"type": "text"}
// is supported (joined with "\n", as llama.cpp does for templates without typed parts).
absl::StatusOr<std::string> ContentText(const json& content, const std::string& field) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return Bad(absl::StrCat(field, ": must be a string or an array of content parts"));
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string pf = absl::StrCat(field, "[", i, "]");
    if (!part.is_object()) return Bad(absl::StrCat(pf, ": must be an object"));
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return Bad(absl::StrCat(pf, ".type: required"));
    if (*type != "text")
      return Bad(absl::StrCat(pf, ".type: '", type->get<std::string>(), "' is not supported (text only)"));
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) return Bad(absl::StrCat(pf, ".text: must be a string"));
    if (!out.empty()) out += "\n";
    out += text->get<std::string>();
  }
  return out;
}

// Compact JSON keeping the request's key order (templates print tools with tojson).
std::string DumpOrdered(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// `ordered`: the same message parsed with key order kept (nullptr: not available).
absl::Status ParseMessage(const json& m, const nlohmann::ordered_json* ordered, size_t i, v1::ChatMessage* out) {
  const std::string f = absl::StrCat("messages[", i, "]");
  if (!m.is_object()) return Bad(absl::StrCat(f, ": must be an object"));
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string& k = it.key();
    if (k != "role" && k != "content" && k != "name" && k != "tool_call_id" && k != "tool_calls") {
      return Bad(absl::StrCat(f, ".", k, ": unknown or unsupported field"));
    }
  }
  std::string s;
  bool has = false;
  absl::Status st = GetString(m, "role", &s, &has);
  if (!st.ok()) return Bad(absl::StrCat(f, ".", st.message()));
  if (!has || s.empty()) return Bad(absl::StrCat(f, ".role: required"));
  if (s == "developer") s = "system";  // OpenAI's newer name for the system role
  out->set_role(s);
  auto content = m.find("content");
  if (content != m.end()) {
    HERD_ASSIGN_OR_RETURN(auto text, ContentText(*content, f + ".content"));
    out->set_content(text);
  }
  for (const auto& [key, set] :
       {std::pair<const char*, void (v1::ChatMessage::*)(const std::string&)>{"name", &v1::ChatMessage::set_name},
        {"tool_call_id", &v1::ChatMessage::set_tool_call_id}}) {
    if (!(st = GetString(m, key, &s, &has)).ok()) return Bad(absl::StrCat(f, ".", st.message()));
    if (has) (out->*set)(s);
  }
  auto calls = m.find("tool_calls");
  if (calls != m.end() && !calls->is_null()) {
    if (!calls->is_array()) return Bad(absl::StrCat(f, ".tool_calls: must be an array"));
    out->set_tool_calls_json(ordered != nullptr ? DumpOrdered((*ordered)["tool_calls"]) : Dump(*calls));
  }
  return absl::OkStatus();
}

absl::Status ParseTools(const json& body, const nlohmann::ordered_json* ordered, v1::ChatPrompt* chat) {
  std::string choice = "auto";
  auto tc = body.find("tool_choice");
  if (tc != body.end() && !tc->is_null()) {
    if (tc->is_string()) {
      choice = tc->get<std::string>();
      if (choice != "auto" && choice != "none" && choice != "required") {
        return Bad(absl::StrCat("tool_choice: '", choice,
                                "' is not one of \"auto\", \"none\", \"required\" or "
                                "{\"type\": \"function\", \"function\": {\"name\": ...}}"));
      }
    } else if (tc->is_object()) {
      auto type = tc->find("type");
      if (type == tc->end() || !type->is_string() || *type != "function") {
        return Bad("tool_choice.type: must be \"function\"");
      }
      auto fn = tc->find("function");
      if (fn == tc->end() || !fn->is_object()) return Bad("tool_choice.function: must be an object with a name");
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
        return Bad("tool_choice.function.name: must be a non-empty string");
      }
      choice = "function";
      chat->set_tool_choice_function(name->get<std::string>());
    } else {
      return Bad("tool_choice: must be a string or an object");
    }
  }
  bool parallel = true, has = false;
  HERD_RETURN_IF_ERROR(GetBool(body, "parallel_tool_calls", &parallel, &has));
  if (has) chat->set_parallel_tool_calls(parallel);
  auto tools = body.find("tools");
  const bool forced = choice == "required" || choice == "function";
  if (tools == body.end() || tools->is_null()) {
    if (forced) return Bad(absl::StrCat("tool_choice: \"", choice, "\" needs a non-empty tools array"));
    return absl::OkStatus();
  }
  if (!tools->is_array()) return Bad("tools: must be an array");
  for (size_t i = 0; i < tools->size(); ++i) {
    if (!(*tools)[i].is_object()) return Bad(absl::StrCat("tools[", i, "]: must be an object"));
  }
  if (forced && tools->empty()) return Bad(absl::StrCat("tool_choice: \"", choice, "\" needs a non-empty tools array"));
  if (choice != "auto") chat->set_tool_choice(choice);
  if (choice != "none" && !tools->empty()) {
    chat->set_tools_json(ordered != nullptr ? DumpOrdered((*ordered)["tools"]) : Dump(*tools));
  }
  return absl::OkStatus();
}

// llama-server's reasoning_format and OpenAI's reasoning_effort.
absl::Status ParseReasoning(const json& body, v1::ChatPrompt* chat) {
  std::string s;
  bool has = false;
  HERD_RETURN_IF_ERROR(GetString(body, "reasoning_format", &s, &has));
  if (has) {
    if (s != "auto" && s != "deepseek" && s != "none") {
      return Bad(absl::StrCat("reasoning_format: '", s, "' is not one of auto, deepseek, none"));
    }
    chat->set_reasoning_format(s);
  }
  HERD_RETURN_IF_ERROR(GetString(body, "reasoning_effort", &s, &has));
  if (has) {
    if (s != "minimal" && s != "low" && s != "medium" && s != "high") {
      return Bad(absl::StrCat("reasoning_effort: '", s, "' is not one of minimal, low, medium, high"));
    }
    chat->set_reasoning_effort(s);
  }
  return absl::OkStatus();
}

}  // namespace

/// Maps an OpenAI chat completions body to an HttpGeneration with a ChatPrompt.
absl::StatusOr<HttpGeneration> ParseChatRequest(const json& body, const nlohmann::ordered_json* ordered) {
  std::vector<const char*> known = CommonFields();
  known.insert(known.end(), {"messages", "max_completion_tokens", "logprobs", "top_logprobs", "tools", "tool_choice",
                             "parallel_tool_calls", "reasoning_format", "reasoning_effort"});
  absl::Status s = CheckKnownFields(body, known);
  if (!s.ok()) return s;
  HttpGeneration gen;
  if (!(s = ParseCommonFields(body, ApiKind::kChat, &gen)).ok()) return s;
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) return Bad("messages: required");
  if (!messages->is_array() || messages->empty()) return Bad("messages: must be a non-empty array");
  v1::ChatPrompt* chat = gen.req.mutable_chat();
  for (size_t i = 0; i < messages->size(); ++i) {
    const nlohmann::ordered_json* om = ordered != nullptr ? &(*ordered)["messages"][i] : nullptr;
    if (!(s = ParseMessage((*messages)[i], om, i, chat->add_messages())).ok()) return s;
  }
  if (!(s = ParseTools(body, ordered, chat)).ok()) return s;
  if (!(s = ParseReasoning(body, chat)).ok()) return s;
  bool logprobs = false, has = false;
  if (!(s = GetBool(body, "logprobs", &logprobs, &has)).ok()) return s;
  int64_t top = 0;
  bool has_top = false;
  if (!(s = GetInt(body, "top_logprobs", &top, &has_top)).ok()) return s;
  if (has_top && (top < 0 || top > 20)) return Bad(absl::StrCat("top_logprobs: must be in 0..20 (got ", top, ")"));
  if (has_top && !logprobs) return Bad("top_logprobs: requires logprobs: true");
  if (logprobs) {
    gen.top_logprobs = static_cast<int>(top);
    gen.req.set_logprobs(std::max<int32_t>(1, static_cast<int32_t>(top)));
  }
  return gen;
}

void RegisterChatRoutes(serving::http::Server* server, Gateway* gw) {
  auto handler = [gw](std::shared_ptr<const HttpRequest> req, std::shared_ptr<serving::http::Responder> out) {
    const HttpRequest& hreq = *req;
    const absl::Time t0 = absl::Now();
    absl::StatusOr<json> body = ParseJsonObject(hreq.body);
    // The body again with its key order kept, for what the template prints (tools).
    // (Parsed only once the nesting check in ParseJsonObject has passed.)
    const nlohmann::ordered_json ordered =
        body.ok() ? nlohmann::ordered_json::parse(hreq.body, nullptr, false) : nlohmann::ordered_json();
    absl::StatusOr<HttpGeneration> gen = body.ok() ? ParseChatRequest(*body, &ordered) : body.status();
    if (gen.ok()) {
      if (absl::Status cs = ApplyConstraints(gw, *body, &*gen); !cs.ok()) gen = cs;
    }
    if (!gen.ok()) {
      gw->RecordRequest("http_chat_completions", gen.status(), absl::Now() - t0);
      Answer(*out, [&](HttpResponse& res) { SendError(res, gen.status()); });
      return;
    }
    ServeGeneration(gw, *std::move(gen), ApiKind::kChat, "http_chat_completions", std::move(out));
  };
  server->RouteAsync("POST", "/v1/chat/completions", handler);
  server->RouteAsync("POST", "/chat/completions", handler);
}

}  // namespace herd::gateway::http
