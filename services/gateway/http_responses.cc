// POST /v1/responses: OpenAI's Responses API over the chat path. The request becomes
// the equivalent chat completions body (input items -> messages, instructions -> a
// first system message, flat function tools -> chat tools, text.format ->
// response_format, max_output_tokens -> max_tokens, reasoning.effort ->
// reasoning_effort), which ParseChatRequest and ApplyConstraints read as for
// /v1/chat/completions: the model sees the same rendered prompt and constraints. The
// output is split by the same OutputSplitter (http_generation.h) into reasoning, content
// and tool calls, which become Responses output items (reasoning, message,
// function_call), whole or as the Responses stream's named events. Errors name the
// Responses fields (input[2].content, max_output_tokens, text.format.schema, ...).
//
// Nothing is stored: previous_response_id and item references are refused, `store` is
// accepted and answered false, reasoning items in the input are accepted and dropped.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#include "libs/base/status_macros.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_generation.h"
#include "services/gateway/http_routes.h"
#include "services/gateway/http_util.h"

namespace herd::gateway::http {
namespace {

using ojson = nlohmann::ordered_json;

constexpr char kMethod[] = "http_responses";

// An id with OpenAI's prefixes (resp_, msg_, rs_, fc_): 24 random hex digits.
std::string NewId(absl::string_view prefix) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return absl::StrCat(prefix, absl::StrFormat("%016x%08x", rng(), static_cast<uint32_t>(rng())));
}

// A Responses request as its equivalent chat body, with what the response object
// repeats (OpenAI echoes the request's settings) and the request field each chat
// message came from (for error messages).
struct ResponsesRequest {
  json chat;           // the equivalent chat completions body
  ojson chat_ordered;  // the same with the client's key order (tools reach the template)
  bool stream = false;
  json echo = json::object();
  std::vector<std::string> message_fields;
};

// A message's content: a string or an array of input_text / output_text parts (joined
// with "\n", as chat content parts are).
absl::StatusOr<std::string> ContentText(const json& content, const std::string& f) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return Bad(absl::StrCat(f, ": must be a string or an array of input_text parts"));
  std::string out;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& part = content[j];
    const std::string pf = absl::StrCat(f, "[", j, "]");
    if (!part.is_object()) return Bad(absl::StrCat(pf, ": must be an object"));
    for (auto it = part.begin(); it != part.end(); ++it) {
      const std::string& k = it.key();
      if (k != "type" && k != "text" && k != "annotations" && k != "logprobs") {
        return Bad(absl::StrCat(pf, ".", k, ": unknown or unsupported field"));
      }
    }
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) return Bad(absl::StrCat(pf, ".type: required"));
    if (*type != "input_text" && *type != "output_text") {
      return Bad(absl::StrCat(pf, ".type: '", type->get<std::string>(),
                              "' is not supported (input_text and output_text only)"));
    }
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) return Bad(absl::StrCat(pf, ".text: must be a string"));
    if (!out.empty()) out += "\n";
    out += text->get<std::string>();
  }
  return out;
}

absl::Status CheckKeys(const json& item, const std::string& f, std::initializer_list<const char*> known) {
  for (auto it = item.begin(); it != item.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok |= it.key() == k;
    if (!ok) return Bad(absl::StrCat(f, ".", it.key(), ": unknown or unsupported field"));
  }
  return absl::OkStatus();
}

absl::Status RequiredString(const json& item, const std::string& f, const char* key, std::string* out) {
  auto it = item.find(key);
  if (it == item.end() || it->is_null()) return Bad(absl::StrCat(f, ".", key, ": required"));
  if (!it->is_string()) return Bad(absl::StrCat(f, ".", key, ": must be a string"));
  *out = it->get<std::string>();
  return absl::OkStatus();
}

// One input item -> chat messages appended to `msgs` (a function_call joins the
// assistant message before it, as one turn's calls are one chat message).
absl::Status AddInputItem(const json& item, const std::string& f, ojson* msgs, std::vector<std::string>* fields) {
  if (!item.is_object()) return Bad(absl::StrCat(f, ": must be an object"));
  std::string type = "message";
  if (auto t = item.find("type"); t != item.end() && !t->is_null()) {
    if (!t->is_string()) return Bad(absl::StrCat(f, ".type: must be a string"));
    type = t->get<std::string>();
  }
  if (type == "message") {
    HERD_RETURN_IF_ERROR(CheckKeys(item, f, {"type", "role", "content", "id", "status"}));
    std::string role;
    HERD_RETURN_IF_ERROR(RequiredString(item, f, "role", &role));
    if (role != "user" && role != "system" && role != "developer" && role != "assistant") {
      return Bad(absl::StrCat(f, ".role: '", role, "' is not one of user, system, developer, assistant"));
    }
    auto content = item.find("content");
    if (content == item.end() || content->is_null()) return Bad(absl::StrCat(f, ".content: required"));
    HERD_ASSIGN_OR_RETURN(auto text, ContentText(*content, f + ".content"));
    msgs->push_back(ojson{{"role", role}, {"content", text}});
    fields->push_back(f);
    return absl::OkStatus();
  }
  if (type == "function_call") {
    if (absl::Status s = CheckKeys(item, f, {"type", "call_id", "name", "arguments", "id", "status"}); !s.ok()) {
      return s;
    }
    std::string call_id, name, arguments;
    absl::Status s = RequiredString(item, f, "call_id", &call_id);
    if (s.ok()) s = RequiredString(item, f, "name", &name);
    if (s.ok()) s = RequiredString(item, f, "arguments", &arguments);
    if (!s.ok()) return s;
    ojson call = {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
    if (msgs->empty() || msgs->back()["role"] != "assistant") {
      msgs->push_back(ojson{{"role", "assistant"}, {"content", nullptr}});
      fields->push_back(f);
    }
    ojson& last = msgs->back();
    if (!last.contains("tool_calls")) last["tool_calls"] = ojson::array();
    last["tool_calls"].push_back(std::move(call));
    return absl::OkStatus();
  }
  if (type == "function_call_output") {
    HERD_RETURN_IF_ERROR(CheckKeys(item, f, {"type", "call_id", "output", "id", "status"}));
    std::string call_id;
    HERD_RETURN_IF_ERROR(RequiredString(item, f, "call_id", &call_id));
    auto output = item.find("output");
    if (output == item.end() || output->is_null()) return Bad(absl::StrCat(f, ".output: required"));
    HERD_ASSIGN_OR_RETURN(auto text, ContentText(*output, f + ".output"));
    msgs->push_back(ojson{{"role", "tool"}, {"tool_call_id", call_id}, {"content", text}});
    fields->push_back(f);
    return absl::OkStatus();
  }
  // A previous turn's reasoning, sent back with its output: templates drop earlier
  // reasoning from the prompt, and so does herd.
  if (type == "reasoning") return absl::OkStatus();
  if (type == "item_reference") {
    return Bad(absl::StrCat(f, ".type: 'item_reference' is not supported (herd stores no responses; send the items)"));
  }
  return Bad(absl::StrCat(f, ".type: '", type,
                          "' is not supported (message, function_call, function_call_output, reasoning)"));
}

// Flat Responses function tools -> chat tools, in the client's key order.
absl::Status ConvertTools(const json& tools, const ojson& ordered, ojson* out) {
  if (!tools.is_array()) return Bad("tools: must be an array");
  *out = ojson::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string f = absl::StrCat("tools[", i, "]");
    const json& t = tools[i];
    if (!t.is_object()) return Bad(absl::StrCat(f, ": must be an object"));
    std::string type;
    HERD_RETURN_IF_ERROR(RequiredString(t, f, "type", &type));
    if (type != "function") {
      return Bad(absl::StrCat(f, ".type: '", type, "' is not supported (function tools only)"));
    }
    HERD_RETURN_IF_ERROR(CheckKeys(t, f, {"type", "name", "description", "parameters", "strict"}));
    std::string name;
    HERD_RETURN_IF_ERROR(RequiredString(t, f, "name", &name));
    if (name.empty()) return Bad(absl::StrCat(f, ".name: must be a non-empty string"));
    if (auto d = t.find("description"); d != t.end() && !d->is_null() && !d->is_string()) {
      return Bad(absl::StrCat(f, ".description: must be a string"));
    }
    if (auto p = t.find("parameters"); p != t.end() && !p->is_null() && !p->is_object()) {
      return Bad(absl::StrCat(f, ".parameters: must be an object"));
    }
    ojson fn = ojson::object();
    for (auto it = ordered[i].begin(); it != ordered[i].end(); ++it) {
      if (it.key() != "type" && !it.value().is_null()) fn[it.key()] = it.value();
    }
    out->push_back(ojson{{"type", "function"}, {"function", std::move(fn)}});
  }
  return absl::OkStatus();
}

absl::Status ConvertToolChoice(const json& tc, ojson* chat) {
  if (tc.is_string()) {
    const std::string c = tc.get<std::string>();
    if (c != "auto" && c != "none" && c != "required") {
      return Bad(absl::StrCat("tool_choice: '", c,
                              R"(' is not one of "auto", "none", "required" or {"type": "function", "name": ...})"));
    }
    (*chat)["tool_choice"] = c;
    return absl::OkStatus();
  }
  if (!tc.is_object()) return Bad("tool_choice: must be a string or an object");
  std::string type;
  HERD_RETURN_IF_ERROR(RequiredString(tc, "tool_choice", "type", &type));
  if (type != "function")
    return Bad(absl::StrCat("tool_choice.type: '", type, "' is not supported (\"function\" only)"));
  HERD_RETURN_IF_ERROR(CheckKeys(tc, "tool_choice", {"type", "name"}));
  std::string name;
  HERD_RETURN_IF_ERROR(RequiredString(tc, "tool_choice", "name", &name));
  if (name.empty()) return Bad("tool_choice.name: must be a non-empty string");
  (*chat)["tool_choice"] = ojson{{"type", "function"}, {"function", {{"name", name}}}};
  return absl::OkStatus();
}

// text.format -> chat's response_format.
absl::Status ConvertTextFormat(const json& text, ojson* chat) {
  if (!text.is_object()) return Bad("text: must be an object");
  HERD_RETURN_IF_ERROR(CheckKeys(text, "text", {"format"}));
  auto format = text.find("format");
  if (format == text.end() || format->is_null()) return absl::OkStatus();
  if (!format->is_object()) return Bad("text.format: must be an object");
  std::string type;
  HERD_RETURN_IF_ERROR(RequiredString(*format, "text.format", "type", &type));
  if (type == "text" || type == "json_object") {
    HERD_RETURN_IF_ERROR(CheckKeys(*format, "text.format", {"type"}));
    if (type == "json_object") (*chat)["response_format"] = ojson{{"type", "json_object"}};
    return absl::OkStatus();
  }
  if (type != "json_schema") {
    return Bad(absl::StrCat("text.format.type: '", type, "' is not one of text, json_schema, json_object"));
  }
  if (absl::Status s = CheckKeys(*format, "text.format", {"type", "name", "schema", "strict", "description"});
      !s.ok()) {
    return s;
  }
  auto schema = format->find("schema");
  if (schema == format->end() || schema->is_null()) return Bad("text.format.schema: required");
  if (!schema->is_object()) return Bad("text.format.schema: must be an object");
  ojson js = {{"schema", *schema}};
  for (const char* k : {"name", "strict"}) {
    if (auto v = format->find(k); v != format->end() && !v->is_null()) js[k] = *v;
  }
  (*chat)["response_format"] = ojson{{"type", "json_schema"}, {"json_schema", std::move(js)}};
  return absl::OkStatus();
}

const json& Field(const json& body, const char* key) {
  static const json kNull;
  auto it = body.find(key);
  return it != body.end() ? *it : kNull;
}

// The Responses body -> the equivalent chat completions body and what to echo.
absl::StatusOr<ResponsesRequest> ToChat(const json& body, const ojson& ordered) {
  absl::Status s = CheckKnownFields(
      body, {"model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens",
             "temperature", "top_p", "stream", "reasoning", "text", "seed", "previous_response_id", "include",
             "truncation", "prompt_cache_key", "safety_identifier"});
  if (!s.ok()) return s;
  if (!Field(body, "previous_response_id").is_null()) {
    return Bad("previous_response_id: not supported (herd stores no responses; send the whole input)");
  }
  ResponsesRequest r;
  ojson& chat = r.chat_ordered;
  chat = ojson::object();
  if (body.contains("model")) chat["model"] = ordered["model"];
  bool has = false, bv = false;
  if (!(s = GetBool(body, "stream", &bv, &has)).ok()) return s;
  r.stream = has && bv;
  if (!(s = GetBool(body, "store", &bv, &has)).ok()) return s;
  if (const json& m = Field(body, "metadata"); !m.is_null() && !m.is_object()) {
    return Bad("metadata: must be an object");
  }
  std::string str;
  if (!(s = GetString(body, "user", &str, &has)).ok()) return s;
  if (const json& inc = Field(body, "include"); !inc.is_null()) {
    if (!inc.is_array()) return Bad("include: must be an array");
    if (!inc.empty()) return Bad(absl::StrCat("include[0]: ", inc[0].dump(), " is not supported"));
  }
  if (!(s = GetString(body, "truncation", &str, &has)).ok()) return s;
  if (has && str != "disabled") {
    return Bad(absl::StrCat("truncation: '", str,
                            "' is not supported (\"disabled\" only: an input longer than the context is refused)"));
  }
  int64_t iv = 0;
  if (!(s = GetInt(body, "max_output_tokens", &iv, &has)).ok()) return s;
  if (has && iv < 1) return Bad(absl::StrCat("max_output_tokens: must be at least 1 (got ", iv, ")"));
  if (has) chat["max_tokens"] = iv;
  for (const char* k : {"temperature", "top_p", "seed", "parallel_tool_calls"}) {
    if (!Field(body, k).is_null()) chat[k] = ordered[k];
  }
  if (const json& re = Field(body, "reasoning"); !re.is_null()) {
    if (!re.is_object()) return Bad("reasoning: must be an object");
    if (!(s = CheckKeys(re, "reasoning", {"effort", "summary", "generate_summary"})).ok()) return s;
    if (!Field(re, "effort").is_null()) chat["reasoning_effort"] = re["effort"];
  }
  if (const json& text = Field(body, "text"); !text.is_null()) {
    if (!(s = ConvertTextFormat(text, &chat)).ok()) return s;
  }
  if (const json& tools = Field(body, "tools"); !tools.is_null()) {
    ojson converted;
    if (!(s = ConvertTools(tools, ordered["tools"], &converted)).ok()) return s;
    chat["tools"] = std::move(converted);
  }
  if (const json& tc = Field(body, "tool_choice"); !tc.is_null()) {
    if (!(s = ConvertToolChoice(tc, &chat)).ok()) return s;
  }

  ojson msgs = ojson::array();
  if (!(s = GetString(body, "instructions", &str, &has)).ok()) return s;
  if (has) {
    msgs.push_back(ojson{{"role", "system"}, {"content", str}});
    r.message_fields.push_back("instructions");
  }
  const json& input = Field(body, "input");
  if (input.is_null()) return Bad("input: required");
  if (input.is_string()) {
    msgs.push_back(ojson{{"role", "user"}, {"content", input.get<std::string>()}});
    r.message_fields.push_back("input");
  } else if (input.is_array()) {
    for (size_t i = 0; i < input.size(); ++i) {
      if (!(s = AddInputItem(input[i], absl::StrCat("input[", i, "]"), &msgs, &r.message_fields)).ok()) return s;
    }
  } else {
    return Bad("input: must be a string or an array of input items");
  }
  if (msgs.empty()) return Bad("input: no messages (give input items or instructions)");
  chat["messages"] = std::move(msgs);
  r.chat = chat;

  // What the response object repeats.
  json& e = r.echo;
  e["instructions"] = Field(body, "instructions");
  e["max_output_tokens"] = Field(body, "max_output_tokens");
  e["metadata"] = Field(body, "metadata").is_null() ? json::object() : body["metadata"];
  e["parallel_tool_calls"] = Field(body, "parallel_tool_calls").is_null() ? json(true) : body["parallel_tool_calls"];
  e["previous_response_id"] = nullptr;
  const json& re = Field(body, "reasoning");
  e["reasoning"] = {{"effort", re.is_object() ? Field(re, "effort") : json(nullptr)},
                    {"summary", re.is_object() ? Field(re, "summary") : json(nullptr)}};
  e["store"] = false;  // nothing is stored
  e["temperature"] = Field(body, "temperature");
  e["top_p"] = Field(body, "top_p");
  const json& text = Field(body, "text");
  e["text"] = {
      {"format", text.is_object() && !Field(text, "format").is_null() ? text["format"] : json{{"type", "text"}}}};
  e["tool_choice"] = Field(body, "tool_choice").is_null() ? json("auto") : body["tool_choice"];
  e["tools"] = Field(body, "tools").is_null() ? json::array() : body["tools"];
  e["truncation"] = "disabled";
  if (!Field(body, "user").is_null()) e["user"] = body["user"];
  return r;
}

// An error about the chat request (ParseChatRequest, ApplyConstraints, Prepare) in the
// Responses request's field names.
absl::Status ToResponsesFields(const absl::Status& st, const std::vector<std::string>& message_fields) {
  if (st.ok()) return st;
  const absl::Status s = ToClientFields(st, "max_output_tokens");
  const std::string m(s.message());
  auto with = [&](const std::string& out) { return absl::Status(s.code(), out); };
  if (absl::StartsWith(m, "messages[")) {
    const size_t close = m.find(']');
    size_t k = 0;
    if (close != std::string::npos && absl::SimpleAtoi(m.substr(9, close - 9), &k) && k < message_fields.size()) {
      return with(message_fields[k] + m.substr(close + 1));
    }
  }
  // tools[i].function.X (chat's nesting) -> tools[i].X.
  if (absl::StartsWith(m, "tools[")) {
    const size_t close = m.find(']');
    if (close != std::string::npos && m.compare(close + 1, 9, ".function") == 0) {
      return with(absl::StrCat(m.substr(0, close + 1), m.substr(close + 10)));
    }
  }
  // Longest prefixes first; a prefix ends at a field boundary.
  static const std::pair<const char*, const char*> kRenames[] = {
      {"response_format.json_schema", "text.format"},
      {"response_format", "text.format"},
      {"tool_choice.function.name", "tool_choice.name"},
      {"tool_choice.function", "tool_choice"},
      {"tool_choice_function", "tool_choice.name"},
      {"tools_json", "tools"},
      {"reasoning_effort", "reasoning.effort"},
      {"max_tokens", "max_output_tokens"},
      {"messages", "input"},
  };
  for (const auto& [from, to] : kRenames) {
    const size_t n = std::char_traits<char>::length(from);
    if (absl::StartsWith(m, from) && m.size() > n && (m[n] == ':' || m[n] == '.' || m[n] == '[')) {
      return with(absl::StrCat(to, m.substr(n)));
    }
  }
  return s;
}

// What every output item and event of one response shares.
struct ResponseInfo {
  std::string id;
  int64_t created_at = 0;
  std::string model;
  json echo;
};

json UsageOf(const v1::Usage& u) {
  return json{{"input_tokens", u.prompt_tokens()},
              {"input_tokens_details", {{"cached_tokens", 0}}},
              {"output_tokens", u.completion_tokens()},
              {"output_tokens_details", {{"reasoning_tokens", 0}}},
              {"total_tokens", u.prompt_tokens() + u.completion_tokens()}};
}

// Builds the output items of one generation as its messages arrive: reasoning, message
// and function_call items in the order the output makes them (a new item whenever the
// kind changes). With a writer it also sends the Responses stream's events; the
// streamed items are the whole response's by construction.
class ResponseSink : public GenerateSink {
 public:
  // `w` null: a whole response, cancelled when the client of `hreq` hangs up.
  ResponseSink(const ResponseInfo* info, const toolcall::ParserConfig& parse, StreamWriter* w,
               std::function<bool()> client_gone)
      : info_(info), split_(parse, OutputSplitter::Parses(parse)), w_(w), client_gone_(std::move(client_gone)) {}

  bool Write(const v1::GenerateResponse& msg) override {
    if (msg.has_usage()) usage_ = msg.usage();
    const toolcall::StreamParser::Delta d = split_.Next(msg);
    if (!d.reasoning.empty()) AddText(Kind::kReasoning, d.reasoning);
    if (!d.content.empty()) AddText(Kind::kMessage, d.content);
    for (const auto& call : d.calls) AddCall(call.second);
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      finish_ = msg.finish_reason();
      CloseOpen();
    }
    return w_ == nullptr || !w_->gone();
  }
  bool Cancelled() override { return w_ != nullptr ? w_->gone() : client_gone_ && client_gone_(); }

  /// The stream's first events: response.created and response.in_progress.
  void Start() {
    const json r = Object(/*done=*/false);
    Emit("response.created", {{"response", r}});
    Emit("response.in_progress", {{"response", r}});
  }
  /// The stream's last event: response.completed or response.incomplete.
  void End() {
    const json r = Object(/*done=*/true);
    Emit(r["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", r}});
  }
  /// The stream's error event (the generation failed after the stream began).
  void Error(const absl::Status& s) {
    const json e = ErrorJson(s)["error"];
    Emit("error", {{"code", e["code"]}, {"message", e["message"]}, {"param", e["param"]}});
  }
  /// The response object: in progress (no output yet), or done.
  json Object(bool done) const {
    const bool incomplete = Incomplete();
    json r = info_->echo;
    r["id"] = info_->id;
    r["object"] = "response";
    r["created_at"] = info_->created_at;
    r["model"] = info_->model;
    r["status"] = !done ? "in_progress" : incomplete ? "incomplete" : "completed";
    r["error"] = nullptr;
    r["incomplete_details"] = nullptr;
    if (done && incomplete) {
      r["incomplete_details"] = {
          {"reason", finish_ == v1::FINISH_REASON_CANCELLED ? "cancelled" : "max_output_tokens"}};
    }
    r["output"] = done ? output_ : json::array();
    r["usage"] = done ? UsageOf(usage_) : json(nullptr);
    return r;
  }

 private:
  enum class Kind { kReasoning, kMessage };

  bool Incomplete() const { return finish_ == v1::FINISH_REASON_LENGTH || finish_ == v1::FINISH_REASON_CANCELLED; }
  void Emit(const char* type, json ev) {
    if (w_ == nullptr) return;
    ev["type"] = type;
    ev["sequence_number"] = seq_++;
    w_->SendEvent(type, Dump(ev));
  }
  static json Part(Kind k, const std::string& text) {
    if (k == Kind::kMessage) return json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
    return json{{"type", "reasoning_text"}, {"text", text}};
  }
  json Where(int index) const {
    return json{{"item_id", output_[static_cast<size_t>(index)]["id"]}, {"output_index", index}};
  }
  void AddText(Kind k, const std::string& delta) {
    if (open_ < 0 || open_kind_ != k) {
      CloseOpen();
      json item = k == Kind::kMessage ? json{{"id", NewId("msg_")},
                                             {"type", "message"},
                                             {"status", "in_progress"},
                                             {"role", "assistant"},
                                             {"content", json::array()}}
                                      : json{{"id", NewId("rs_")},
                                             {"type", "reasoning"},
                                             {"summary", json::array()},
                                             {"content", json::array()}};
      output_.push_back(item);
      open_ = static_cast<int>(output_.size()) - 1;
      open_kind_ = k;
      Emit("response.output_item.added", {{"output_index", open_}, {"item", std::move(item)}});
      json ev = Where(open_);
      ev["content_index"] = 0;
      ev["part"] = Part(k, "");
      Emit("response.content_part.added", std::move(ev));
    }
    open_text_ += delta;
    json ev = Where(open_);
    ev["content_index"] = 0;
    ev["delta"] = delta;
    if (k == Kind::kMessage) ev["logprobs"] = json::array();
    Emit(k == Kind::kMessage ? "response.output_text.delta" : "response.reasoning_text.delta", std::move(ev));
  }
  void CloseOpen() {
    if (open_ < 0) return;
    const json part = Part(open_kind_, open_text_);
    json ev = Where(open_);
    ev["content_index"] = 0;
    ev["text"] = open_text_;
    if (open_kind_ == Kind::kMessage) ev["logprobs"] = json::array();
    Emit(open_kind_ == Kind::kMessage ? "response.output_text.done" : "response.reasoning_text.done", ev);
    ev.erase("text");
    ev.erase("logprobs");
    ev["part"] = part;
    Emit("response.content_part.done", std::move(ev));
    json& item = output_[static_cast<size_t>(open_)];
    item["content"] = json::array({part});
    if (open_kind_ == Kind::kMessage) item["status"] = Incomplete() ? "incomplete" : "completed";
    Emit("response.output_item.done", {{"output_index", open_}, {"item", item}});
    open_ = -1;
    open_text_.clear();
  }
  void AddCall(const toolcall::ToolCall& c) {
    CloseOpen();
    json item = {{"id", NewId("fc_")},        {"type", "function_call"}, {"status", "in_progress"},
                 {"call_id", "call_" + c.id}, {"name", c.name},          {"arguments", ""}};
    output_.push_back(item);
    const int index = static_cast<int>(output_.size()) - 1;
    Emit("response.output_item.added", {{"output_index", index}, {"item", item}});
    json ev = Where(index);
    ev["delta"] = c.arguments;
    Emit("response.function_call_arguments.delta", ev);
    ev.erase("delta");
    ev["name"] = c.name;
    ev["arguments"] = c.arguments;
    Emit("response.function_call_arguments.done", std::move(ev));
    json& done = output_[static_cast<size_t>(index)];
    done["arguments"] = c.arguments;
    done["status"] = "completed";
    Emit("response.output_item.done", {{"output_index", index}, {"item", done}});
  }

  const ResponseInfo* info_;
  OutputSplitter split_;
  StreamWriter* w_;
  std::function<bool()> client_gone_;
  json output_ = json::array();
  int open_ = -1;  // the item text is added to (reasoning or message), -1: none
  Kind open_kind_ = Kind::kMessage;
  std::string open_text_;
  int64_t seq_ = 0;
  v1::FinishReason finish_ = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage_;
};

void ServeResponses(Gateway* gw, const HttpRequest& hreq, std::shared_ptr<serving::http::Responder> out) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<json> body = ParseJsonObject(hreq.body);
  // The body again with its key order kept, for what the template prints (tools).
  const ojson ordered = body.ok() ? ojson::parse(hreq.body, nullptr, false) : ojson();
  absl::StatusOr<ResponsesRequest> rr = body.ok() ? ToChat(*body, ordered) : body.status();
  absl::StatusOr<HttpGeneration> gen = rr.ok() ? ParseChatRequest(rr->chat, &rr->chat_ordered) : rr.status();
  if (gen.ok()) {
    if (absl::Status cs = ApplyConstraints(gw, rr->chat, &*gen); !cs.ok()) gen = cs;
  }
  const std::vector<std::string> fields = rr.ok() ? rr->message_fields : std::vector<std::string>();
  if (!gen.ok()) {
    const absl::Status s = ToResponsesFields(gen.status(), fields);
    gw->RecordRequest(kMethod, s, absl::Now() - t0);
    Answer(*out, [&](HttpResponse& res) { SendError(res, s); });
    return;
  }
  auto prepared = gw->Prepare(gen->req, absl::InfiniteFuture(), kMethod);
  if (!prepared.ok()) {
    Answer(*out, [&](HttpResponse& res) { SendError(res, ToResponsesFields(prepared.status(), fields)); });
    return;
  }
  std::shared_ptr<Gateway::Generation> g = std::move(*prepared);
  auto info = std::make_shared<ResponseInfo>();
  info->id = NewId("resp_");
  info->created_at = absl::ToUnixSeconds(absl::Now());
  info->model = gen->req.model();
  info->echo = std::move(rr->echo);

  if (!rr->stream) {
    auto sink = std::make_shared<ResponseSink>(info.get(), g->parse, nullptr, [out] { return out->ClientGone(); });
    gw->RunAsync(g, sink, [out, sink, info, fields](absl::Status st) {
      Answer(*out, [&](HttpResponse& res) {
        if (!st.ok()) {
          SendError(res, ToResponsesFields(st, fields));
          return;
        }
        SendJson(res, sink->Object(/*done=*/true));
      });
    });
    return;
  }
  HttpResponse head;
  head.SetHeader("Cache-Control", "no-cache");
  head.content_type = "text/event-stream";
  out->StartStream(head);
  auto ds = std::make_shared<ResponderWriter>(out);
  auto w = std::make_shared<StreamWriter>(ds.get(), [out] { return out->ClientGone(); });
  auto sink = std::make_shared<ResponseSink>(info.get(), g->parse, w.get(), nullptr);
  sink->Start();
  gw->RunAsync(g, sink, [out, ds, w, sink, info, fields](absl::Status st) {
    if (st.ok()) {
      sink->End();
    } else {
      sink->Error(ToResponsesFields(st, fields));
    }
    out->End();
  });
}

}  // namespace

void RegisterResponsesRoutes(serving::http::Server* server, Gateway* gw) {
  auto handler = [gw](std::shared_ptr<const HttpRequest> req, std::shared_ptr<serving::http::Responder> out) {
    ServeResponses(gw, *req, std::move(out));
  };
  server->RouteAsync("POST", "/v1/responses", handler);
  server->RouteAsync("POST", "/responses", handler);
}

}  // namespace herd::gateway::http
