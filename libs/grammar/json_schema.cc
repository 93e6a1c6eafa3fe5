#include "libs/grammar/json_schema.h"

#include <functional>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/json_nesting.h"
#include "libs/grammar/gbnf.h"
#include "libs/grammar/matcher.h"

namespace herd::grammar {
namespace {

using json = nlohmann::json;

constexpr int kMaxRepetition = 2000;  // GrammarLimits::max_repetition
constexpr int kMaxDepth = 64;         // nesting of schemas

const char* kSpaceRule = "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}";

struct BuiltinRule {
  std::string content;
  std::vector<std::string> deps;
};

// PRIMITIVE_RULES and STRING_FORMAT_RULES of json-schema-to-grammar.cpp.
const std::map<std::string, BuiltinRule>& Builtins() {
  static const auto* rules = new std::map<std::string, BuiltinRule>{
      {"boolean", {"(\"true\" | \"false\") space", {}}},
      {"decimal-part", {"[0-9]{1,16}", {}}},
      {"integral-part", {"[0] | [1-9] [0-9]{0,15}", {}}},
      {"number",
       {"(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
        {"integral-part", "decimal-part"}}},
      {"integer", {"(\"-\"? integral-part) space", {"integral-part"}}},
      {"value",
       {"object | array | string | number | boolean | null",
        {"object", "array", "string", "number", "boolean", "null"}}},
      {"object",
       {"\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
        {"string", "value"}}},
      {"array", {"\"[\" space ( value (\",\" space value)* )? \"]\" space", {"value"}}},
      {"uuid",
       {"\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
        "[0-9a-fA-F]{12} \"\\\"\" space",
        {}}},
      {"char", {"[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", {}}},
      {"string", {"\"\\\"\" char* \"\\\"\" space", {"char"}}},
      {"null", {"\"null\" space", {}}},
      {"date", {"[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", {}}},
      {"time",
       {"([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | "
        "\"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
        {}}},
      {"date-time", {"date \"T\" time", {"date", "time"}}},
      {"date-string", {"\"\\\"\" date \"\\\"\" space", {"date"}}},
      {"time-string", {"\"\\\"\" time \"\\\"\" space", {"time"}}},
      {"date-time-string", {"\"\\\"\" date-time \"\\\"\" space", {"date-time"}}},
  };
  return *rules;
}

bool IsReservedName(const std::string& n) { return n == "root" || n == "space" || Builtins().count(n) > 0; }

// Keywords that never change what is valid (ignored like llama.cpp does).
bool IsAnnotation(const std::string& k) {
  static const std::set<std::string> kAnn = {
      "title",    "description", "default",  "examples",         "$schema",        "$id",
      "$comment", "deprecated",  "readOnly", "writeOnly",        "strict",         "definitions",
      "$defs",    "$anchor",     "name",     "contentMediaType", "contentEncoding"};
  return kAnn.count(k) > 0;
}

// GBNF string literal of raw text (format_literal, with \xNN for control characters).
std::string FormatLiteral(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '\r':
        out += "\\r";
        break;
      case '\n':
        out += "\\n";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          static const char* kHex = "0123456789ABCDEF";
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// build_repetition of json-schema-to-grammar.cpp (max_items = INT_MAX: unbounded).
std::string BuildRepetition(const std::string& item, int min_items, int max_items, const std::string& sep = "") {
  const bool has_max = max_items != std::numeric_limits<int>::max();
  if (max_items == 0) return "";
  if (min_items == 0 && max_items == 1) return item + "?";
  if (sep.empty()) {
    if (min_items == 1 && !has_max) return item + "+";
    if (min_items == 0 && !has_max) return item + "*";
    return absl::StrCat(item, "{", min_items, ",", has_max ? std::to_string(max_items) : "", "}");
  }
  const std::string result =
      absl::StrCat(item, " ",
                   BuildRepetition(absl::StrCat("(", sep, " ", item, ")"), min_items == 0 ? 0 : min_items - 1,
                                   has_max ? max_items - 1 : max_items));
  return min_items == 0 ? absl::StrCat("(", result, ")?") : result;
}

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) { rules_["space"] = kSpaceRule; }

  absl::StatusOr<std::string> Run() {
    Visit(root_, "", "", 0);
    if (!status_.ok()) return status_;
    std::string out;
    for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    return out;
  }

 private:
  using Used = std::set<std::string>;

  bool Fail(const std::string& ptr, const std::string& msg) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat("json_schema", ptr, ": ", msg));
    return false;
  }

  // _add_rule: name made GBNF-safe; a different body under a taken name gets a suffix.
  std::string AddRule(const std::string& name, const std::string& body) {
    std::string esc;
    for (char c : name) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      if (ok) {
        esc += c;
      } else if (esc.empty() || esc.back() != '-') {
        esc += '-';
      }
    }
    if (esc.empty()) esc = "r";
    std::string key = esc;
    auto it = rules_.find(esc);
    if (it != rules_.end() && it->second != body) {
      for (int i = 0;; ++i) {
        key = absl::StrCat(esc, i);
        auto jt = rules_.find(key);
        if (jt == rules_.end() || jt->second == body) break;
      }
    }
    rules_[key] = body;
    return key;
  }

  // _add_primitive: the builtin rule (under `name`) and its dependencies.
  std::string AddPrimitive(const std::string& name, const std::string& builtin) {
    const BuiltinRule& r = Builtins().at(builtin);
    const std::string n = AddRule(name, r.content);
    for (const std::string& dep : r.deps) {
      if (rules_.count(dep) == 0) AddPrimitive(dep, dep);
    }
    return n;
  }

  // Rejects keys of `schema` that the chosen branch did not use.
  bool CheckUsed(const json& schema, const Used& used, const std::string& ptr) {
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (used.count(it.key()) || IsAnnotation(it.key())) continue;
      return Fail(absl::StrCat(ptr, "/", it.key()), "keyword not supported here (it would be ignored)");
    }
    return true;
  }

  bool GetCount(const json& schema, const char* key, const std::string& ptr, int* out) {
    auto it = schema.find(key);
    if (it == schema.end()) return true;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Fail(absl::StrCat(ptr, "/", key), "must be a non-negative integer");
    }
    if (it->get<int64_t>() > kMaxRepetition) {
      return Fail(absl::StrCat(ptr, "/", key), absl::StrCat("over ", kMaxRepetition, " is not supported"));
    }
    *out = static_cast<int>(it->get<int64_t>());
    return true;
  }

  std::string Visit(const json& schema, const std::string& name, const std::string& ptr, int depth);
  std::string VisitObject(const json& schema, const std::string& name, const std::string& rule_name,
                          const std::string& ptr, int depth, Used* used);
  std::string VisitAllOf(const json& schema, const std::string& name, const std::string& rule_name,
                         const std::string& ptr, int depth, Used* used);
  std::string VisitArray(const json& schema, const std::string& name, const std::string& rule_name,
                         const std::string& ptr, int depth, Used* used);
  std::string VisitString(const json& schema, const std::string& rule_name, const std::string& ptr, Used* used);
  std::string ResolveRef(const std::string& ref, const std::string& ptr, int depth);
  std::string BuildObjectRule(const std::vector<std::pair<std::string, json>>& props,
                              const std::set<std::string>& required, const std::string& name, const json* additional,
                              const std::string& ptr, int depth);
  std::string NotStrings(const std::vector<std::string>& strings);

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;  // resolved $ref -> rule name
  absl::Status status_;
};

// The schema a local reference ("#/definitions/x", "#/$defs/x", any "#/..." pointer)
// points at; nullptr if it is not local or does not resolve.
const json* ResolveLocal(const json& root, const std::string& ref) {
  if (ref.rfind('#', 0) != 0) return nullptr;
  try {
    const json::json_pointer jp(ref.substr(1));
    if (!root.contains(jp)) return nullptr;
    return &root.at(jp);
  } catch (const std::exception&) {
    return nullptr;
  }
}

// _resolve_ref: the definition is visited once under its last path segment's name;
// references met while it is being visited (recursion) use that name.
std::string Converter::ResolveRef(const std::string& ref, const std::string& ptr, int depth) {
  auto done = ref_rules_.find(ref);
  if (done != ref_rules_.end()) return done->second;
  const json* target = ResolveLocal(root_, ref);
  if (target == nullptr) {
    return Fail(ptr + "/$ref", absl::StrCat("unresolvable or non-local reference \"", ref,
                                            "\" (use #/definitions/... or #/$defs/...)")),
           "";
  }
  std::string ref_name = ref.substr(ref.find_last_of('/') + 1);
  if (ref_name.empty() || ref_name == "#") ref_name = "root-ref";
  if (IsReservedName(ref_name)) ref_name += "-";
  for (int i = 0; rules_.count(ref_name); ++i) ref_name = absl::StrCat(ref_name, i);
  ref_rules_[ref] = ref_name;  // what recursive references see
  const std::string r = Visit(*target, ref_name, ref.substr(1), depth + 1);
  ref_rules_[ref] = r;
  return r;
}

std::string Converter::Visit(const json& schema, const std::string& name, const std::string& ptr, int depth) {
  if (!status_.ok()) return "";
  if (depth > kMaxDepth) return Fail(ptr, absl::StrCat("schema nested deeper than ", kMaxDepth)), "";
  const std::string rule_name = IsReservedName(name) ? name + "-" : name.empty() ? "root" : name;
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) return Fail(ptr, "the schema `false` matches nothing"), "";
    return AddRule(rule_name, AddPrimitive("value", "value"));
  }
  if (!schema.is_object()) return Fail(ptr, "a schema must be an object or a boolean"), "";
  const json type = schema.contains("type") ? schema["type"] : json();
  Used used;
  std::string r;
  if (schema.contains("$ref")) {
    used.insert("$ref");
    if (!schema["$ref"].is_string()) return Fail(ptr + "/$ref", "must be a string"), "";
    const std::string target = ResolveRef(schema["$ref"].get<std::string>(), ptr, depth);
    r = target.empty() ? "" : AddRule(rule_name, target);
  } else if (schema.contains("oneOf") || schema.contains("anyOf")) {
    const char* key = schema.contains("oneOf") ? "oneOf" : "anyOf";
    used.insert(key);
    const json& alts = schema[key];
    if (!alts.is_array() || alts.empty()) return Fail(absl::StrCat(ptr, "/", key), "must be a non-empty array"), "";
    std::vector<std::string> parts;
    for (size_t i = 0; i < alts.size(); ++i) {
      parts.push_back(Visit(alts[i], absl::StrCat(name, name.empty() ? "alternative-" : "-", i),
                            absl::StrCat(ptr, "/", key, "/", i), depth + 1));
    }
    r = AddRule(rule_name, absl::StrJoin(parts, " | "));
  } else if (type.is_array()) {
    if (type.empty()) return Fail(ptr + "/type", "must not be empty"), "";
    std::vector<std::string> parts;
    for (size_t i = 0; i < type.size(); ++i) {
      json copy = schema;
      copy["type"] = type[i];
      parts.push_back(Visit(copy, absl::StrCat(name, name.empty() ? "alternative-" : "-", i), ptr, depth + 1));
    }
    return status_.ok() ? AddRule(rule_name, absl::StrJoin(parts, " | ")) : "";
  } else if (schema.contains("const")) {
    used.insert({"const", "type"});
    r = AddRule(rule_name, FormatLiteral(Dump(schema["const"])) + " space");
  } else if (schema.contains("enum")) {
    used.insert({"enum", "type"});
    const json& e = schema["enum"];
    if (!e.is_array() || e.empty()) return Fail(ptr + "/enum", "must be a non-empty array"), "";
    std::vector<std::string> parts;
    for (const json& v : e) parts.push_back(FormatLiteral(Dump(v)));
    r = AddRule(rule_name, absl::StrCat("(", absl::StrJoin(parts, " | "), ") space"));
  } else if ((type.is_null() || type == "object") && schema.contains("allOf")) {
    r = VisitAllOf(schema, name, rule_name, ptr, depth, &used);
  } else if ((type.is_null() || type == "object") &&
             (schema.contains("properties") ||
              (schema.contains("additionalProperties") && schema["additionalProperties"] != true))) {
    r = VisitObject(schema, name, rule_name, ptr, depth, &used);
  } else if ((type.is_null() || type == "array") && (schema.contains("items") || schema.contains("prefixItems"))) {
    r = VisitArray(schema, name, rule_name, ptr, depth, &used);
  } else if (type == "array") {
    r = VisitArray(schema, name, rule_name, ptr, depth, &used);
  } else if (type == "string" || (type.is_null() && (schema.contains("format") || schema.contains("pattern")))) {
    r = VisitString(schema, rule_name, ptr, &used);
  } else if (type.is_null() || type == "object") {
    used.insert({"type", "additionalProperties"});
    r = AddRule(rule_name, AddPrimitive("object", "object"));
  } else if (type == "number" || type == "integer" || type == "boolean" || type == "null") {
    used.insert("type");
    r = AddPrimitive(rule_name == "root" ? "root" : type.get<std::string>(), type.get<std::string>());
  } else {
    return Fail(ptr + "/type", absl::StrCat("unknown type ", Dump(type))), "";
  }
  if (!status_.ok() || !CheckUsed(schema, used, ptr)) return "";
  return r;
}

std::string Converter::VisitString(const json& schema, const std::string& rule_name, const std::string& ptr,
                                   Used* used) {
  used->insert("type");
  if (schema.contains("pattern")) return Fail(ptr + "/pattern", "not supported"), "";
  if (schema.contains("format")) {
    used->insert("format");
    if (!schema["format"].is_string()) return Fail(ptr + "/format", "must be a string"), "";
    const std::string f = schema["format"].get<std::string>();
    if (schema.contains("minLength") || schema.contains("maxLength")) {
      return Fail(ptr + "/format", "together with minLength/maxLength is not supported"), "";
    }
    if (f == "uuid") return AddPrimitive(rule_name == "root" ? "root" : "uuid", "uuid");
    if (f == "date" || f == "time" || f == "date-time") {
      return AddRule(rule_name, AddPrimitive(f + "-string", f + "-string"));
    }
    return Fail(ptr + "/format", absl::StrCat("\"", f, "\" is not supported (date, time, date-time, uuid)")), "";
  }
  if (schema.contains("minLength") || schema.contains("maxLength")) {
    used->insert({"minLength", "maxLength"});
    int min_len = 0, max_len = std::numeric_limits<int>::max();
    if (!GetCount(schema, "minLength", ptr, &min_len) || !GetCount(schema, "maxLength", ptr, &max_len)) return "";
    if (max_len < min_len) return Fail(ptr + "/maxLength", "is below minLength"), "";
    const std::string char_rule = AddPrimitive("char", "char");
    return AddRule(rule_name,
                   absl::StrCat("\"\\\"\" ", BuildRepetition(char_rule, min_len, max_len), " \"\\\"\" space"));
  }
  return AddPrimitive(rule_name == "root" ? "root" : "string", "string");
}

std::string Converter::VisitArray(const json& schema, const std::string& name, const std::string& rule_name,
                                  const std::string& ptr, int depth, Used* used) {
  used->insert({"type", "items", "prefixItems", "minItems", "maxItems"});
  const std::string prefix = name.empty() ? "" : name + "-";
  const json* tuple = nullptr;
  if (schema.contains("prefixItems")) {
    tuple = &schema["prefixItems"];
    if (schema.contains("items") && schema["items"] != false) {
      return Fail(ptr + "/items", "with prefixItems is only supported as false"), "";
    }
  } else if (schema.contains("items") && schema["items"].is_array()) {
    tuple = &schema["items"];
  }
  if (tuple != nullptr) {
    if (!tuple->is_array()) return Fail(ptr + "/prefixItems", "must be an array"), "";
    if (schema.contains("minItems") || schema.contains("maxItems")) {
      return Fail(ptr + "/minItems", "with a tuple (prefixItems) is not supported"), "";
    }
    std::string rule = "\"[\" space ";
    for (size_t i = 0; i < tuple->size(); ++i) {
      if (i > 0) rule += " \",\" space ";
      rule += Visit((*tuple)[i], absl::StrCat(prefix, "tuple-", i), absl::StrCat(ptr, "/prefixItems/", i), depth + 1);
    }
    return AddRule(rule_name, rule + " \"]\" space");
  }
  std::string item;
  if (schema.contains("items")) {
    item = Visit(schema["items"], prefix + "item", ptr + "/items", depth + 1);
  } else {
    item = AddPrimitive("value", "value");
  }
  int min_items = 0, max_items = std::numeric_limits<int>::max();
  if (!GetCount(schema, "minItems", ptr, &min_items) || !GetCount(schema, "maxItems", ptr, &max_items)) return "";
  if (max_items < min_items) return Fail(ptr + "/maxItems", "is below minItems"), "";
  if (!status_.ok()) return "";
  return AddRule(rule_name, absl::StrCat("\"[\" space ", BuildRepetition(item, min_items, max_items, "\",\" space"),
                                         " \"]\" space"));
}

std::string Converter::VisitObject(const json& schema, const std::string& name, const std::string& rule_name,
                                   const std::string& ptr, int depth, Used* used) {
  used->insert({"type", "properties", "required", "additionalProperties"});
  std::set<std::string> required;
  if (schema.contains("required")) {
    if (!schema["required"].is_array()) return Fail(ptr + "/required", "must be an array of strings"), "";
    for (const json& r : schema["required"]) {
      if (!r.is_string()) return Fail(ptr + "/required", "must be an array of strings"), "";
      required.insert(r.get<std::string>());
    }
  }
  std::vector<std::pair<std::string, json>> props;
  if (schema.contains("properties")) {
    if (!schema["properties"].is_object()) return Fail(ptr + "/properties", "must be an object"), "";
    for (auto it = schema["properties"].begin(); it != schema["properties"].end(); ++it)
      props.emplace_back(it.key(), it.value());
  }
  for (const std::string& r : required) {
    bool found = false;
    for (const auto& p : props) found |= p.first == r;
    if (!found) return Fail(ptr + "/required", absl::StrCat("\"", r, "\" has no entry in properties")), "";
  }
  const json* additional = schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
  const std::string body = BuildObjectRule(props, required, name, additional, ptr, depth);
  return status_.ok() ? AddRule(rule_name, body) : "";
}

std::string Converter::VisitAllOf(const json& schema, const std::string& name, const std::string& rule_name,
                                  const std::string& ptr, int depth, Used* used) {
  used->insert({"type", "allOf"});
  const json& all = schema["allOf"];
  if (!all.is_array()) return Fail(ptr + "/allOf", "must be an array"), "";
  std::vector<std::pair<std::string, json>> props;
  std::set<std::string> required;
  std::function<bool(const json&, bool, const std::string&, int)> add = [&](const json& comp, bool is_required,
                                                                            const std::string& cptr, int d) {
    if (d > kMaxDepth) return Fail(cptr, "references nested too deeply");
    if (!comp.is_object()) return Fail(cptr, "allOf components must be objects");
    if (comp.contains("$ref")) {
      const std::string ref = comp["$ref"].is_string() ? comp["$ref"].get<std::string>() : "";
      const json* target = ResolveLocal(root_, ref);
      if (target == nullptr) return Fail(cptr + "/$ref", "unresolvable or non-local reference");
      return add(*target, is_required, ref.substr(1), d + 1);
    }
    Used u{"properties", "type", "required"};
    if (comp.contains("type") && comp["type"] != "object")
      return Fail(cptr + "/type", "allOf components must be objects");
    if (comp.contains("properties")) {
      if (!comp["properties"].is_object()) return Fail(cptr + "/properties", "must be an object");
      for (auto it = comp["properties"].begin(); it != comp["properties"].end(); ++it) {
        props.emplace_back(it.key(), it.value());
        if (is_required) required.insert(it.key());
      }
    }
    return CheckUsed(comp, u, cptr);
  };
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string cptr = absl::StrCat(ptr, "/allOf/", i);
    if (all[i].is_object() && all[i].contains("anyOf")) {
      if (!all[i]["anyOf"].is_array()) return Fail(cptr + "/anyOf", "must be an array"), "";
      for (size_t j = 0; j < all[i]["anyOf"].size(); ++j) {
        if (!add(all[i]["anyOf"][j], false, absl::StrCat(cptr, "/anyOf/", j), 0)) return "";
      }
    } else if (!add(all[i], true, cptr, 0)) {
      return "";
    }
  }
  const std::string body = BuildObjectRule(props, required, name, nullptr, ptr, depth);
  return status_.ok() ? AddRule(rule_name, body) : "";
}

// _build_object_rule: required properties in order, then any subset of the optional ones
// in order (with a "-rest" rule chain), then additional properties (key not declared).
std::string Converter::BuildObjectRule(const std::vector<std::pair<std::string, json>>& props,
                                       const std::set<std::string>& required, const std::string& name,
                                       const json* additional, const std::string& ptr, int depth) {
  const std::string prefix = name.empty() ? "" : name + "-";
  std::vector<std::string> required_props, optional_props, prop_names;
  std::map<std::string, std::string> kv_rules;
  for (const auto& [pname, pschema] : props) {
    const std::string prop_rule = Visit(pschema, prefix + pname, absl::StrCat(ptr, "/properties/", pname), depth + 1);
    if (!status_.ok()) return "";
    kv_rules[pname] =
        AddRule(prefix + pname + "-kv", FormatLiteral(Dump(json(pname))) + " space \":\" space " + prop_rule);
    (required.count(pname) ? required_props : optional_props).push_back(pname);
    prop_names.push_back(pname);
  }
  if (additional != nullptr && !additional->is_null() && !(additional->is_boolean() && !additional->get<bool>())) {
    if (!additional->is_boolean() && !additional->is_object()) {
      return Fail(ptr + "/additionalProperties", "must be a boolean or a schema"), "";
    }
    const std::string sub = prefix + "additional";
    const std::string value_rule = additional->is_object()
                                       ? Visit(*additional, sub + "-value", ptr + "/additionalProperties", depth + 1)
                                       : AddPrimitive("value", "value");
    const std::string key_rule =
        prop_names.empty() ? AddPrimitive("string", "string") : AddRule(sub + "-k", NotStrings(prop_names));
    kv_rules["*"] = AddRule(sub + "-kv", key_rule + " \":\" space " + value_rule);
    optional_props.push_back("*");
  }
  std::string rule = "\"{\" space ";
  for (size_t i = 0; i < required_props.size(); ++i) {
    if (i > 0) rule += " \",\" space ";
    rule += kv_rules[required_props[i]];
  }
  if (!optional_props.empty()) {
    rule += " (";
    if (!required_props.empty()) rule += " \",\" space ( ";
    std::function<std::string(size_t, bool)> chain = [&](size_t from, bool first_is_optional) {
      const std::string& k = optional_props[from];
      const std::string& kv = kv_rules[k];
      const std::string comma_ref = "( \",\" space " + kv + " )";
      std::string res =
          first_is_optional ? comma_ref + (k == "*" ? "*" : "?") : kv + (k == "*" ? " " + comma_ref + "*" : "");
      if (from + 1 < optional_props.size()) {
        res += " " + AddRule(prefix + (k == "*" ? "additional" : k) + "-rest", chain(from + 1, true));
      }
      return res;
    };
    for (size_t i = 0; i < optional_props.size(); ++i) {
      if (i > 0) rule += " | ";
      rule += chain(i, false);
    }
    if (!required_props.empty()) rule += " )";
    rule += " )?";
  }
  return rule + " \"}\" space";
}

// _not_strings: a JSON string key that is none of `strings` (a trie over code points;
// unlike llama.cpp's, the "any other" branches use the JSON char rule, so escapes stay
// well formed).
std::string Converter::NotStrings(const std::vector<std::string>& strings) {
  struct Node {
    std::map<uint32_t, Node> children;
    bool end = false;
  };
  Node trie;
  for (const std::string& s : strings) {
    std::vector<uint32_t> cps;
    PartialUtf8 p;
    DecodeUtf8(s, PartialUtf8{}, &cps, &p);
    Node* n = &trie;
    for (uint32_t c : cps) n = &n->children[c];
    n->end = true;
  }
  const std::string char_rule = AddPrimitive("char", "char");
  auto cls = [](uint32_t c) {
    char buf[16];
    snprintf(buf, sizeof buf, "\\U%08X", c);
    return std::string(buf);
  };
  std::string out = "[\"] ( ";
  std::function<void(const Node&)> visit = [&](const Node& node) {
    std::string rejects;
    bool first = true;
    for (const auto& [c, child] : node.children) {
      rejects += cls(c);
      if (!first) out += " | ";
      first = false;
      out += "[" + cls(c) + "]";
      if (!child.children.empty()) {
        out += " (";
        visit(child);
        out += ")";
      } else if (child.end) {
        out += " " + char_rule + "+";
      }
    }
    if (!node.children.empty()) {
      if (!first) out += " | ";
      out += "([^\"\\\\\\x7F\\x00-\\x1F" + rejects + "] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})) " + char_rule +
             "*";
    }
  };
  visit(trie);
  out += " )";
  if (!trie.end) out += "?";
  return out + " [\"] space";
}

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGrammar(const nlohmann::json& schema) {
  // The converter copies subschemas (a recursive copy per level) before its own depth
  // check sees them: bound the whole document first, without recursing.
  if (absl::Status s = CheckJsonValueNesting(schema, "json_schema"); !s.ok()) return s;
  Converter c(schema);
  auto out = c.Run();
  if (!out.ok()) return out.status();
  auto g = Grammar::Parse(*out);
  if (!g.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: the generated grammar is invalid: ", g.status().message()));
  }
  return out;
}

std::string JsonObjectGrammar() {
  auto g = JsonSchemaToGrammar(nlohmann::json::object());
  return g.ok() ? *g : std::string();
}

}  // namespace herd::grammar
