#include "libs/toolcall/forced_call.h"

#include <cctype>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/status_macros.h"
#include "libs/grammar/gbnf.h"
#include "libs/grammar/json_schema.h"

namespace herd::toolcall {
namespace {

using json = nlohmann::json;

// A GBNF string literal for `s` (UTF-8 passes through; quotes, backslashes and control
// characters escaped).
std::string Lit(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppend(&out, "\\x", absl::Hex(c, absl::kZeroPad2));
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string JsonText(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct Tool {
  std::string name;
  json parameters;  // the schema ({"type": "object"} when absent)
  size_t index;     // in the request's tools array
};

absl::StatusOr<std::vector<Tool>> ReadTools(const json& tools, absl::string_view only) {
  if (!tools.is_array() || tools.empty()) return absl::InvalidArgumentError("tools: required (a non-empty array)");
  if (tools.size() > kMaxForcedTools) {
    return absl::InvalidArgumentError(
        absl::StrCat("tools: at most ", kMaxForcedTools, " tools when a call is forced (got ", tools.size(), ")"));
  }
  std::vector<Tool> out;
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string f = absl::StrCat("tools[", i, "]");
    const json& t = tools[i];
    if (!t.is_object()) return absl::InvalidArgumentError(absl::StrCat(f, ": must be an object"));
    auto type = t.find("type");
    if (type != t.end() && *type != "function") {
      return absl::InvalidArgumentError(absl::StrCat(f, ".type: only \"function\" tools can be called"));
    }
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return absl::InvalidArgumentError(absl::StrCat(f, ".function: required"));
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(f, ".function.name: required"));
    }
    const std::string n = name->get<std::string>();
    for (char c : n) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) {
        return absl::InvalidArgumentError(
            absl::StrCat(f, ".function.name: '", n, "' must be letters, digits, '_', '-' or '.'"));
      }
    }
    if (!only.empty() && n != only) continue;
    auto params = fn->find("parameters");
    Tool tool{n, params != fn->end() && !params->is_null() ? *params : json{{"type", "object"}}, i};
    out.push_back(std::move(tool));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tool_choice.function.name: '", only, "' is not one of the tools"));
  }
  return out;
}

// The grammar of a JSON value for `schema`, its rules prefixed; `*root` is its start rule.
absl::Status SchemaRules(const json& schema, const std::string& prefix, const std::string& field, std::string* rules,
                         std::string* root) {
  absl::StatusOr<std::string> g = grammar::JsonSchemaToGrammar(schema);
  if (!g.ok()) return absl::InvalidArgumentError(absl::StrCat(field, ": ", g.status().message()));
  absl::StrAppend(rules, PrefixGbnfRules(*g, prefix), "\n");
  *root = prefix + "root";
  return absl::OkStatus();
}

// An XML-family parameter value: raw text for strings, JSON otherwise.
absl::Status XmlValueRule(const json& p, const std::string& prefix, const std::string& field, std::string* rules,
                          std::string* value) {
  if (p.is_object()) {
    auto e = p.find("enum");
    if (e != p.end() && e->is_array() && !e->empty()) {
      std::vector<std::string> alts;
      bool all_strings = true;
      for (const json& v : *e) {
        if (!v.is_string()) all_strings = false;
        if (v.is_string()) alts.push_back(Lit(v.get<std::string>()));
      }
      if (all_strings) {
        *value = absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
        return absl::OkStatus();
      }
    }
    auto type = p.find("type");
    if (type != p.end() && *type == "string" && p.find("enum") == p.end() && p.find("const") == p.end()) {
      *value = "[^<]*";
      return absl::OkStatus();
    }
  }
  return SchemaRules(p, prefix, field, rules, value);
}

// One call of `tool` in an XML family: the required parameters in order.
absl::StatusOr<std::string> XmlCall(Format f, const Tool& tool, const std::string& prefix, std::string* rules) {
  const std::string field = absl::StrCat("tools[", tool.index, "].function.parameters");
  std::string params;
  const json& s = tool.parameters;
  auto props = s.find("properties");
  auto req = s.find("required");
  if (req != s.end() && req->is_array()) {
    for (size_t j = 0; j < req->size(); ++j) {
      if (!(*req)[j].is_string())
        return absl::InvalidArgumentError(absl::StrCat(field, ".required[", j, "]: not a string"));
      const std::string key = (*req)[j].get<std::string>();
      json p = json::object();
      if (props != s.end() && props->is_object() && props->contains(key)) p = (*props)[key];
      std::string value;
      absl::Status st =
          XmlValueRule(p, absl::StrCat(prefix, "p", j, "-"), absl::StrCat(field, ".properties.", key), rules, &value);
      if (!st.ok()) return st;
      if (f == Format::kQwen3Coder) {
        absl::StrAppend(&params, " ", Lit(absl::StrCat("<parameter=", key, ">\n")), " ", value, " ",
                        Lit("\n</parameter>\n"));
      } else {
        absl::StrAppend(&params, " ", Lit(absl::StrCat("<arg_key>", key, "</arg_key>\n<arg_value>")), " ", value, " ",
                        Lit("</arg_value>\n"));
      }
    }
  }
  if (f == Format::kQwen3Coder) {
    return absl::StrCat(Lit(absl::StrCat("<tool_call>\n<function=", tool.name, ">\n")), params, " ",
                        Lit("</function>\n</tool_call>"));
  }
  return absl::StrCat(Lit(absl::StrCat("<tool_call>", tool.name, "\n")), params, " ", Lit("</tool_call>"));
}

}  // namespace

std::string PrefixGbnfRules(absl::string_view g, absl::string_view prefix) {
  std::string out;
  out.reserve(g.size() * 2);
  auto is_name = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-'; };
  size_t i = 0;
  while (i < g.size()) {
    const char c = g[i];
    if (c == '#') {  // comment to the end of the line
      const size_t e = g.find('\n', i);
      const size_t end = e == absl::string_view::npos ? g.size() : e;
      absl::StrAppend(&out, g.substr(i, end - i));
      i = end;
    } else if (c == '"' || c == '[') {  // literal or class: copy through its (unescaped) end
      const char close = c == '"' ? '"' : ']';
      size_t j = i + 1;
      while (j < g.size() && g[j] != close) j += g[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, g.size());
      absl::StrAppend(&out, g.substr(i, j - i));
      i = j;
    } else if (c == '{') {  // repetition count
      const size_t e = g.find('}', i);
      const size_t end = e == absl::string_view::npos ? g.size() : e + 1;
      absl::StrAppend(&out, g.substr(i, end - i));
      i = end;
    } else if (is_name(c)) {
      size_t j = i;
      while (j < g.size() && is_name(g[j])) ++j;
      absl::StrAppend(&out, prefix);
      absl::StrAppend(&out, g.substr(i, j - i));
      i = j;
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

absl::StatusOr<std::string> ForcedCallGrammar(Format format, const json& tools, absl::string_view function_name,
                                              bool parallel) {
  if (format == Format::kNone) return absl::InvalidArgumentError("tool_choice: the template has no tool-call syntax");
  HERD_ASSIGN_OR_RETURN(std::vector<Tool> list, ReadTools(tools, function_name));
  std::string rules;
  std::vector<std::string> calls;
  for (size_t i = 0; i < list.size(); ++i) {
    const Tool& tool = list[i];
    const std::string prefix = absl::StrCat("t", i, "-");
    if (format == Format::kQwen3Coder || format == Format::kGlm) {
      HERD_ASSIGN_OR_RETURN(std::string call, XmlCall(format, tool, prefix, &rules));
      calls.push_back(std::move(call));
      continue;
    }
    std::string args;
    HERD_RETURN_IF_ERROR(SchemaRules(tool.parameters, prefix,
                                     absl::StrCat("tools[", tool.index, "].function.parameters"), &rules, &args));
    const std::string name = JsonText(tool.name);
    std::string call;
    switch (format) {
      case Format::kHermes:
        call = absl::StrCat(Lit(absl::StrCat("<tool_call>\n{\"name\": ", name, ", \"arguments\": ")), " ", args, " ",
                            Lit("}\n</tool_call>"));
        break;
      case Format::kLlama3:
        call = absl::StrCat(Lit(absl::StrCat("{\"name\": ", name, ", \"parameters\": ")), " ", args, " ", Lit("}"));
        break;
      case Format::kMistralArgs:
        call = absl::StrCat(Lit(absl::StrCat("[TOOL_CALLS]", tool.name, "[ARGS]")), " ", args);
        break;
      case Format::kDeepSeek:
        call = absl::StrCat(Lit(absl::StrCat("<｜tool▁call▁begin｜>function<｜tool▁sep｜>", tool.name, "\n```json\n")),
                            " ", args, " ", Lit("\n```<｜tool▁call▁end｜>"));
        break;
      case Format::kDeepSeekV3:
        call = absl::StrCat(Lit(absl::StrCat("<｜tool▁call▁begin｜>", tool.name, "<｜tool▁sep｜>")), " ", args, " ",
                            Lit("<｜tool▁call▁end｜>"));
        break;
      default:  // kMistral, kGeneric: {"name": ..., "arguments": ...} inside a wrapper
        call = absl::StrCat(Lit(absl::StrCat("{\"name\": ", name, ", \"arguments\": ")), " ", args, " ", Lit("}"));
        break;
    }
    calls.push_back(std::move(call));
  }
  absl::StrAppend(&rules, "call ::= ", absl::StrJoin(calls, " | "), "\n");
  if (format == Format::kLlama3) parallel = false;
  std::string root;
  switch (format) {
    case Format::kMistral:
      root = parallel ? "\"[TOOL_CALLS][\" call (\", \" call)* \"]\"" : "\"[TOOL_CALLS][\" call \"]\"";
      break;
    case Format::kGeneric:
      root = parallel ? "\"{\\\"tool_calls\\\": [\" call (\", \" call)* \"]}\"" : "\"{\\\"tool_call\\\": \" call \"}\"";
      break;
    case Format::kDeepSeek:
    case Format::kDeepSeekV3:
      root = absl::StrCat(Lit("<｜tool▁calls▁begin｜>"), parallel ? " call (\"\\n\" call)* " : " call ",
                          Lit("<｜tool▁calls▁end｜>"));
      break;
    case Format::kMistralArgs:
      root = parallel ? "call+" : "call";
      break;
    default:
      root = parallel ? "call (\"\\n\" call)*" : "call";
      break;
  }
  absl::StrAppend(&rules, "root ::= ", root, "\n");
  if (auto g = grammar::Grammar::Parse(rules); !g.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tool_choice: the forced-call grammar is invalid: ", g.status().message()));
  }
  return rules;
}

}  // namespace herd::toolcall
