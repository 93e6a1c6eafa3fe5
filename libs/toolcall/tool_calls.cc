#include "libs/toolcall/tool_calls.h"

#include <algorithm>
#include <optional>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include "libs/base/json_nesting.h"

namespace herd::toolcall {
namespace {

using json = nlohmann::json;

constexpr absl::string_view kThinkOpen = "<think>";
constexpr absl::string_view kThinkClose = "</think>";
constexpr absl::string_view kToolCall = "<tool_call>";
constexpr absl::string_view kToolCallEnd = "</tool_call>";
constexpr absl::string_view kDsCallsBegin = "<｜tool▁calls▁begin｜>";
constexpr absl::string_view kDsCallsEnd = "<｜tool▁calls▁end｜>";
constexpr absl::string_view kDsCallBegin = "<｜tool▁call▁begin｜>";
constexpr absl::string_view kDsCallEnd = "<｜tool▁call▁end｜>";
constexpr absl::string_view kDsSep = "<｜tool▁sep｜>";
constexpr absl::string_view kMistralCalls = "[TOOL_CALLS]";
constexpr absl::string_view kMistralArgs = "[ARGS]";
constexpr absl::string_view kPythonTag = "<|python_tag|>";

bool IsWs(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
absl::string_view TrimLeft(absl::string_view s) {
  while (!s.empty() && IsWs(s.front())) s.remove_prefix(1);
  return s;
}
absl::string_view TrimRight(absl::string_view s) {
  while (!s.empty() && IsWs(s.back())) s.remove_suffix(1);
  return s;
}
absl::string_view Trim(absl::string_view s) { return TrimRight(TrimLeft(s)); }

// Length of the longest suffix of `s` that is a proper prefix of `marker`: text held back
// while streaming, since the next piece may complete the marker.
size_t PartialMarkerSuffix(absl::string_view s, absl::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

// Parses JSON from model output: nesting bounded first (libs/base/json_nesting.h), no
// exceptions. nullopt when it is not one complete JSON value.
std::optional<json> ParseJson(absl::string_view text) {
  if (!CheckJsonNesting(text, "tool call").ok()) return std::nullopt;
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return j;
}

// A call's arguments as a JSON object's text: an object, a string holding one (some
// models quote their arguments), or absent/null (no arguments: "{}").
std::optional<std::string> ArgumentsText(const json* args) {
  if (args == nullptr || args->is_null()) return std::string("{}");
  if (args->is_object()) return args->dump(-1, ' ', false, json::error_handler_t::replace);
  if (args->is_string()) {
    std::optional<json> inner = ParseJson(args->get<std::string>());
    if (inner && inner->is_object()) return inner->dump(-1, ' ', false, json::error_handler_t::replace);
  }
  return std::nullopt;
}

// {"name": "f", "arguments"|"parameters": {...}} or {"function": {"name", "arguments"}}
// (OpenAI's own shape, which some models copy from the prompt).
bool CallFromJson(const json& j, ToolCall* out) {
  if (!j.is_object()) return false;
  const json* obj = &j;
  auto fn = j.find("function");
  if (fn != j.end() && fn->is_object() && j.find("name") == j.end()) obj = &*fn;
  auto name = obj->find("name");
  if (name == obj->end() || !name->is_string() || name->get<std::string>().empty()) return false;
  const json* args = nullptr;
  for (const char* key : {"arguments", "parameters"}) {
    auto a = obj->find(key);
    if (a != obj->end()) args = &*a;
  }
  std::optional<std::string> text = ArgumentsText(args);
  if (!text) return false;
  out->name = name->get<std::string>();
  out->arguments = *text;
  return true;
}

bool CallsFromJson(const json& j, std::vector<ToolCall>* out) {
  if (j.is_array()) {
    if (j.empty()) return false;
    for (const json& e : j) {
      ToolCall c;
      if (!CallFromJson(e, &c)) return false;
      out->push_back(std::move(c));
    }
    return true;
  }
  ToolCall c;
  if (!CallFromJson(j, &c)) return false;
  out->push_back(std::move(c));
  return true;
}

// An XML-family parameter value: JSON when it parses as a non-string JSON value (numbers,
// booleans, null, objects, arrays), else the text as a string.
json XmlValue(absl::string_view v) {
  absl::string_view t = Trim(v);
  if (!t.empty() && t.front() != '"') {
    std::optional<json> j = ParseJson(t);
    if (j) return *j;
  }
  return json(std::string(v));
}

// Qwen3-Coder: <function=NAME> (<parameter=KEY>\nVALUE\n</parameter>)* </function>.
bool ParseQwen3CoderBody(absl::string_view body, std::vector<ToolCall>* out) {
  absl::string_view t = Trim(body);
  constexpr absl::string_view kFn = "<function=", kFnEnd = "</function>",
                              kParam = "<parameter=", kParamEnd = "</parameter>";
  if (!absl::StartsWith(t, kFn) || !absl::EndsWith(t, kFnEnd)) return false;
  t.remove_prefix(kFn.size());
  t.remove_suffix(kFnEnd.size());
  const size_t gt = t.find('>');
  if (gt == absl::string_view::npos) return false;
  ToolCall c;
  c.name = std::string(Trim(t.substr(0, gt)));
  if (c.name.empty()) return false;
  json args = json::object();
  absl::string_view rest = t.substr(gt + 1);
  while (!(rest = TrimLeft(rest)).empty()) {
    if (!absl::StartsWith(rest, kParam)) return false;
    rest.remove_prefix(kParam.size());
    const size_t kgt = rest.find('>');
    const size_t vend = rest.find(kParamEnd);
    if (kgt == absl::string_view::npos || vend == absl::string_view::npos || vend < kgt) return false;
    absl::string_view value = rest.substr(kgt + 1, vend - kgt - 1);
    if (absl::StartsWith(value, "\n")) value.remove_prefix(1);
    if (absl::EndsWith(value, "\n")) value.remove_suffix(1);
    args[std::string(Trim(rest.substr(0, kgt)))] = XmlValue(value);
    rest = rest.substr(vend + kParamEnd.size());
  }
  c.arguments = args.dump(-1, ' ', false, json::error_handler_t::replace);
  out->push_back(std::move(c));
  return true;
}

// GLM-4.5+: NAME (<arg_key>KEY</arg_key> <arg_value>VALUE</arg_value>)*.
bool ParseGlmBody(absl::string_view body, std::vector<ToolCall>* out) {
  constexpr absl::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>", kVal = "<arg_value>",
                              kValEnd = "</arg_value>";
  const size_t first = body.find(kKey);
  ToolCall c;
  c.name = std::string(Trim(body.substr(0, first)));
  if (c.name.empty() || c.name.find_first_of("<>\n") != std::string::npos) return false;
  json args = json::object();
  absl::string_view rest = first == absl::string_view::npos ? absl::string_view() : body.substr(first);
  while (!(rest = TrimLeft(rest)).empty()) {
    if (!absl::StartsWith(rest, kKey)) return false;
    const size_t ke = rest.find(kKeyEnd);
    if (ke == absl::string_view::npos) return false;
    const std::string key(Trim(rest.substr(kKey.size(), ke - kKey.size())));
    rest = TrimLeft(rest.substr(ke + kKeyEnd.size()));
    if (!absl::StartsWith(rest, kVal)) return false;
    const size_t ve = rest.find(kValEnd);
    if (ve == absl::string_view::npos) return false;
    args[key] = XmlValue(rest.substr(kVal.size(), ve - kVal.size()));
    rest = rest.substr(ve + kValEnd.size());
  }
  c.arguments = args.dump(-1, ' ', false, json::error_handler_t::replace);
  out->push_back(std::move(c));
  return true;
}

// DeepSeek: (<｜tool▁call▁begin｜>TYPE<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>)+ (R1)
// or (<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>)+ (V3.1).
bool ParseDeepSeekBody(absl::string_view body, std::vector<ToolCall>* out) {
  std::vector<ToolCall> calls;
  absl::string_view rest = body;
  while (!(rest = TrimLeft(rest)).empty()) {
    if (!absl::StartsWith(rest, kDsCallBegin)) return false;
    const size_t end = rest.find(kDsCallEnd);
    if (end == absl::string_view::npos) return false;
    absl::string_view call = rest.substr(kDsCallBegin.size(), end - kDsCallBegin.size());
    rest = rest.substr(end + kDsCallEnd.size());
    const size_t sep = call.find(kDsSep);
    if (sep == absl::string_view::npos) return false;
    absl::string_view head = Trim(call.substr(0, sep));
    absl::string_view tail = call.substr(sep + kDsSep.size());
    absl::string_view name = head, args = tail;
    const size_t fence = tail.find("```json");
    if (fence != absl::string_view::npos) {  // R1: TYPE<sep>NAME\n```json\nARGS\n```
      name = Trim(tail.substr(0, fence));
      args = tail.substr(fence + 7);
      const size_t close = args.rfind("```");
      if (close == absl::string_view::npos) return false;
      args = args.substr(0, close);
    }
    std::optional<json> a = ParseJson(Trim(args));
    ToolCall c;
    c.name = std::string(name);
    std::optional<std::string> text = a ? ArgumentsText(&*a) : std::nullopt;
    if (c.name.empty() || !text) return false;
    c.arguments = *text;
    calls.push_back(std::move(c));
  }
  if (calls.empty()) return false;
  for (ToolCall& c : calls) out->push_back(std::move(c));
  return true;
}

// Mistral Small 3.2 / Devstral: NAME[ARGS]{...}, repeated with [TOOL_CALLS] between.
bool ParseMistralArgsBody(absl::string_view body, std::vector<ToolCall>* out) {
  std::vector<ToolCall> calls;
  absl::string_view rest = body;
  while (true) {
    const size_t next = rest.find(kMistralCalls);
    absl::string_view one = rest.substr(0, next);
    const size_t a = one.find(kMistralArgs);
    if (a == absl::string_view::npos) return false;
    ToolCall c;
    c.name = std::string(Trim(one.substr(0, a)));
    std::optional<json> args = ParseJson(Trim(one.substr(a + kMistralArgs.size())));
    std::optional<std::string> text = args ? ArgumentsText(&*args) : std::nullopt;
    if (c.name.empty() || !text) return false;
    c.arguments = *text;
    calls.push_back(std::move(c));
    if (next == absl::string_view::npos) break;
    rest = rest.substr(next + kMistralCalls.size());
  }
  for (ToolCall& c : calls) out->push_back(std::move(c));
  return true;
}

// The calls of one segment's body (between a family's start and end markers).
bool ParseBody(Format f, absl::string_view body, std::vector<ToolCall>* out) {
  switch (f) {
    case Format::kHermes:
    case Format::kMistral:
    case Format::kLlama3: {
      std::optional<json> j = ParseJson(Trim(body));
      return j && CallsFromJson(*j, out);
    }
    case Format::kMistralArgs:
      return ParseMistralArgsBody(body, out);
    case Format::kQwen3Coder:
      return ParseQwen3CoderBody(body, out);
    case Format::kGlm:
      return ParseGlmBody(body, out);
    case Format::kDeepSeek:
    case Format::kDeepSeekV3:
      return ParseDeepSeekBody(body, out);
    case Format::kNone:
    case Format::kGeneric:
      return false;
  }
  return false;
}

// Where a family's calls sit in the text: a start marker, an end marker ("" = the call
// runs to the end of the output), and whether the end marker may be missing at the end
// of the output (the model stopped right after its last call).
struct Syntax {
  absl::string_view start, end;
  bool end_optional = false;
};
Syntax SyntaxOf(Format f) {
  switch (f) {
    case Format::kHermes:
    case Format::kQwen3Coder:
    case Format::kGlm:
      return {kToolCall, kToolCallEnd, false};
    case Format::kDeepSeek:
    case Format::kDeepSeekV3:
      return {kDsCallsBegin, kDsCallsEnd, true};
    case Format::kMistral:
    case Format::kMistralArgs:
      return {kMistralCalls, "", true};
    case Format::kLlama3:
      return {kPythonTag, "", true};
    case Format::kNone:
    case Format::kGeneric:
      break;
  }
  return {};
}

// The whole output as one JSON value (kGeneric; kLlama3 without <|python_tag|>).
// `response`: the generic format's {"response": "..."} text, which is content.
bool ParseWholeJson(Format f, absl::string_view text, std::vector<ToolCall>* calls, std::string* response,
                    bool* is_response) {
  std::optional<json> j = ParseJson(text);
  if (!j) return false;
  if (f == Format::kLlama3) return j->is_object() && CallsFromJson(*j, calls);
  if (j->is_object()) {
    auto r = j->find("response");
    if (r != j->end() && j->size() == 1 && r->is_string()) {
      *response = r->get<std::string>();
      *is_response = true;
      return true;
    }
    auto one = j->find("tool_call");
    if (one != j->end() && j->size() == 1) return CallsFromJson(*one, calls);
    auto many = j->find("tool_calls");
    if (many != j->end() && j->size() == 1) return many->is_array() && CallsFromJson(*many, calls);
  }
  return CallsFromJson(*j, calls);
}

// Content and calls of the text after any reasoning. `trim_left`: the text follows a
// reasoning block (its leading whitespace is dropped).
void ParseContent(const ParserConfig& c, absl::string_view s, bool partial, bool trim_left, Message* m) {
  if (trim_left) s = TrimLeft(s);
  if (c.format == Format::kNone) {
    m->content = std::string(s);
    return;
  }
  if (c.format == Format::kGeneric || c.format == Format::kLlama3) {
    const absl::string_view t = Trim(s);
    const bool json_like = !t.empty() && (t.front() == '{' || (c.format == Format::kGeneric && t.front() == '['));
    if (t.empty() ? partial : json_like) {
      if (partial) return;  // decided at the end of the output
      std::vector<ToolCall> calls;
      std::string response;
      bool is_response = false;
      if (ParseWholeJson(c.format, t, &calls, &response, &is_response)) {
        if (is_response) {
          m->content = response;
        } else {
          m->tool_calls = std::move(calls);
        }
        return;
      }
    }
    if (c.format == Format::kGeneric) {
      m->content = std::string(s);
      return;
    }
  }
  const Syntax syn = SyntaxOf(c.format);
  bool after_call = false;  // the previous segment was a call: drop the whitespace after it
  auto add_piece = [&](absl::string_view piece, bool before_segment) {
    if (after_call) piece = TrimLeft(piece);
    if (before_segment) piece = TrimRight(piece);
    m->content.append(piece.data(), piece.size());
  };
  size_t pos = 0;
  while (true) {
    const size_t st = s.find(syn.start, pos);
    if (st == absl::string_view::npos) {
      absl::string_view piece = s.substr(pos);
      if (partial) {
        // Hold back what may become a marker, and trailing whitespace (dropped if a call
        // follows).
        piece.remove_suffix(PartialMarkerSuffix(piece, syn.start));
        piece = TrimRight(piece);
      }
      add_piece(piece, false);
      return;
    }
    add_piece(s.substr(pos, st - pos), true);
    const size_t body = st + syn.start.size();
    const size_t en = syn.end.empty() ? absl::string_view::npos : s.find(syn.end, body);
    std::vector<ToolCall> calls;
    if (en == absl::string_view::npos) {
      if (partial) return;  // an open call: decided when it ends
      if (syn.end_optional && ParseBody(c.format, s.substr(body), &calls)) {
        for (ToolCall& call : calls) m->tool_calls.push_back(std::move(call));
      } else {
        after_call = false;
        add_piece(s.substr(st), false);
      }
      return;
    }
    const size_t next = en + syn.end.size();
    if (ParseBody(c.format, s.substr(body, en - body), &calls)) {
      for (ToolCall& call : calls) m->tool_calls.push_back(std::move(call));
      after_call = true;
    } else {
      after_call = false;
      add_piece(s.substr(st, next - st), false);
    }
    pos = next;
  }
}

std::string RandomId(std::mt19937_64& rng) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id(9, 'a');
  for (char& ch : id) ch = kAlnum[rng() % 62];
  return id;
}

}  // namespace

const char* FormatName(Format f) {
  switch (f) {
    case Format::kNone:
      return "none";
    case Format::kGeneric:
      return "generic";
    case Format::kHermes:
      return "hermes";
    case Format::kLlama3:
      return "llama3";
    case Format::kMistral:
      return "mistral";
    case Format::kMistralArgs:
      return "mistral-args";
    case Format::kQwen3Coder:
      return "qwen3-coder";
    case Format::kGlm:
      return "glm";
    case Format::kDeepSeek:
      return "deepseek-r1";
    case Format::kDeepSeekV3:
      return "deepseek-v3";
  }
  return "none";
}

Format DetectFormat(absl::string_view src) {
  if (absl::StrContains(src, "<function=") && absl::StrContains(src, "<parameter=")) return Format::kQwen3Coder;
  if (absl::StrContains(src, "<arg_key>")) return Format::kGlm;
  if (absl::StrContains(src, "tool▁calls▁begin")) {
    return absl::StrContains(src, "```json") ? Format::kDeepSeek : Format::kDeepSeekV3;
  }
  if (absl::StrContains(src, kMistralCalls)) {
    return absl::StrContains(src, kMistralArgs) ? Format::kMistralArgs : Format::kMistral;
  }
  if (absl::StrContains(src, kToolCall)) return Format::kHermes;
  if (absl::StrContains(src, "<|start_header_id|>") &&
      (absl::StrContains(src, "ipython") || absl::StrContains(src, kPythonTag))) {
    return Format::kLlama3;
  }
  return Format::kGeneric;
}

std::vector<std::string> MarkerTexts(const ParserConfig& c) {
  std::vector<absl::string_view> m;
  switch (c.format) {
    case Format::kHermes:
    case Format::kQwen3Coder:
      m = {kToolCall, kToolCallEnd};
      break;
    case Format::kGlm:
      m = {kToolCall, kToolCallEnd, "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
      break;
    case Format::kLlama3:
      m = {kPythonTag};
      break;
    case Format::kMistral:
      m = {kMistralCalls};
      break;
    case Format::kMistralArgs:
      m = {kMistralCalls, kMistralArgs};
      break;
    case Format::kDeepSeek:
    case Format::kDeepSeekV3:
      m = {kDsCallsBegin, kDsCallsEnd, kDsCallBegin, kDsCallEnd, kDsSep};
      break;
    case Format::kNone:
    case Format::kGeneric:
      break;
  }
  if (c.reasoning) {
    m.push_back(kThinkOpen);
    m.push_back(kThinkClose);
  }
  return std::vector<std::string>(m.begin(), m.end());
}

bool TemplateHasThinking(absl::string_view src) { return absl::StrContains(src, kThinkOpen); }

bool PromptOpensThinking(absl::string_view prompt) { return absl::EndsWith(TrimRight(prompt), kThinkOpen); }

Message Parse(const ParserConfig& c, absl::string_view text, bool partial) {
  Message m;
  absl::string_view rest = text;
  bool after_reasoning = false;
  if (c.reasoning) {
    size_t r0 = absl::string_view::npos;
    if (c.reasoning_open) {
      r0 = 0;
    } else {
      const absl::string_view t = TrimLeft(text);
      // Output that may still become "<think>" is held back.
      if (partial && t.size() < kThinkOpen.size() && kThinkOpen.substr(0, t.size()) == t) return m;
      if (absl::StartsWith(t, kThinkOpen)) r0 = (text.size() - t.size()) + kThinkOpen.size();
    }
    if (r0 != absl::string_view::npos) {
      const size_t e = text.find(kThinkClose, r0);
      if (e == absl::string_view::npos) {  // still reasoning (or never closed)
        absl::string_view r = TrimLeft(text.substr(r0));
        if (partial) r.remove_suffix(PartialMarkerSuffix(r, kThinkClose));
        m.reasoning = std::string(TrimRight(r));
        return m;
      }
      m.reasoning = std::string(Trim(text.substr(r0, e - r0)));
      rest = text.substr(e + kThinkClose.size());
      after_reasoning = true;
    }
  }
  ParseContent(c, rest, partial, after_reasoning, &m);
  return m;
}

StreamParser::StreamParser(ParserConfig config) : config_(config), rng_(std::random_device{}()) {}

StreamParser::Delta StreamParser::Feed(absl::string_view text) {
  if (finished_) return {};
  if (config_.format == Format::kNone && !config_.reasoning) {  // plain text: nothing to parse
    Delta d;
    d.content = std::string(text);
    emitted_.content.append(text.data(), text.size());
    return d;
  }
  text_.append(text.data(), text.size());
  return Update(/*partial=*/true);
}

StreamParser::Delta StreamParser::Finish() {
  if (finished_) return {};
  Delta d = Update(/*partial=*/false);
  finished_ = true;
  return d;
}

StreamParser::Delta StreamParser::Update(bool partial) {
  Delta d;
  if (config_.format == Format::kNone && !config_.reasoning) return d;  // Feed emitted it all
  Message m = Parse(config_, text_, partial);
  // What was emitted never changes; Parse only reports what is final, so each field
  // extends what went before (a field that did not would keep its emitted value).
  if (absl::StartsWith(m.reasoning, emitted_.reasoning)) {
    d.reasoning = m.reasoning.substr(emitted_.reasoning.size());
    emitted_.reasoning = std::move(m.reasoning);
  }
  if (absl::StartsWith(m.content, emitted_.content)) {
    d.content = m.content.substr(emitted_.content.size());
    emitted_.content = std::move(m.content);
  }
  for (size_t i = emitted_.tool_calls.size(); i < m.tool_calls.size(); ++i) {
    ToolCall call = std::move(m.tool_calls[i]);
    call.id = RandomId(rng_);
    emitted_.tool_calls.push_back(call);
    d.calls.emplace_back(static_cast<int>(i), std::move(call));
  }
  return d;
}

}  // namespace herd::toolcall
