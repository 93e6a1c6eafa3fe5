#include "libs/chat/value.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"

namespace herd::chat::internal {
namespace {

constexpr int kMaxNesting = 256;  // str/repr/json/== depth (self-referencing namespaces)

absl::Status TooDeep() { return absl::InvalidArgumentError("value nesting too deep (recursive structure?)"); }

}  // namespace

namespace {

// Moves the children of containers that are about to die onto a worklist, so that
// destroying a deeply nested value never recurses.
void Drain(std::vector<Value>* work) {
  while (!work->empty()) {
    Value v = std::move(work->back());
    work->pop_back();
    if (v.list && v.list.use_count() == 1) {
      for (auto& item : v.list->items) work->push_back(std::move(item));
      v.list->items.clear();
    }
    if (v.dict && v.dict.use_count() == 1) {
      for (auto& e : v.dict->entries) {
        work->push_back(std::move(e.first));
        work->push_back(std::move(e.second));
      }
      v.dict->entries.clear();
    }
  }
}

}  // namespace

ListObj::~ListObj() {
  std::vector<Value> work(std::make_move_iterator(items.begin()), std::make_move_iterator(items.end()));
  items.clear();
  Drain(&work);
}

DictObj::~DictObj() {
  std::vector<Value> work;
  for (auto& e : entries) {
    work.push_back(std::move(e.first));
    work.push_back(std::move(e.second));
  }
  entries.clear();
  Drain(&work);
}

const Value* DictObj::Find(const Value& key) const {
  for (const auto& e : entries) {
    if (Equal(e.first, key)) return &e.second;
  }
  return nullptr;
}

const Value* DictObj::Find(std::string_view key) const {
  for (const auto& e : entries) {
    if (e.first.is_string() && e.first.s == key) return &e.second;
  }
  return nullptr;
}

void DictObj::Set(Value key, Value value) {
  for (auto& e : entries) {
    if (Equal(e.first, key)) {
      e.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string why) {
  Value v;
  v.s = std::move(why);
  return v;
}
Value Value::None() {
  Value v;
  v.type = Type::kNone;
  return v;
}
Value Value::Bool(bool x) {
  Value v;
  v.type = Type::kBool;
  v.b = x;
  return v;
}
Value Value::Int(int64_t x) {
  Value v;
  v.type = Type::kInt;
  v.i = x;
  return v;
}
Value Value::Float(double x) {
  Value v;
  v.type = Type::kFloat;
  v.f = x;
  return v;
}
Value Value::String(std::string x) {
  Value v;
  v.type = Type::kString;
  v.s = std::move(x);
  return v;
}
Value Value::Markup(std::string x) {
  Value v = String(std::move(x));
  v.markup = true;
  return v;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

Value Value::List(std::vector<Value> items, ListObj::Kind kind) {
  Value v;
  v.type = Type::kList;
  v.list = std::make_shared<ListObj>();
  v.list->kind = kind;
  v.list->items = std::move(items);
  return v;
}
Value Value::Tuple(std::vector<Value> items) { return List(std::move(items), ListObj::Kind::kTuple); }
Value Value::Dict() {
  Value v;
  v.type = Type::kDict;
  v.dict = std::make_shared<DictObj>();
  return v;
}
Value Value::Callable(std::string name, NativeFn fn) {
  Value v;
  v.type = Type::kCallable;
  v.fn = std::make_shared<CallableObj>();
  v.fn->name = std::move(name);
  v.fn->fn = std::move(fn);
  return v;
}

bool Truthy(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return false;
    case Value::Type::kBool:
      return v.b;
    case Value::Type::kInt:
      return v.i != 0;
    case Value::Type::kFloat:
      return v.f != 0;
    case Value::Type::kString:
      return !v.s.empty();
    case Value::Type::kList:
      return v.list->kind == ListObj::Kind::kGenerator || !v.list->items.empty();
    case Value::Type::kDict:
      return v.dict->is_namespace || !v.dict->entries.empty();
    case Value::Type::kCallable:
      return true;
  }
  return false;
}

std::string TypeName(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined:
      return "Undefined";
    case Value::Type::kNone:
      return "NoneType";
    case Value::Type::kBool:
      return "bool";
    case Value::Type::kInt:
      return "int";
    case Value::Type::kFloat:
      return "float";
    case Value::Type::kString:
      return "str";
    case Value::Type::kList:
      switch (v.list->kind) {
        case ListObj::Kind::kList:
          return "list";
        case ListObj::Kind::kTuple:
          return "tuple";
        case ListObj::Kind::kGenerator:
          return "generator";
        case ListObj::Kind::kDictItems:
          return "dict_items";
        case ListObj::Kind::kDictKeys:
          return "dict_keys";
        case ListObj::Kind::kDictValues:
          return "dict_values";
      }
      return "list";
    case Value::Type::kDict:
      return v.dict->is_namespace ? "Namespace" : "dict";
    case Value::Type::kCallable:
      return "function";
  }
  return "object";
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
    if (std::strtod(buf, nullptr) == d) break;
  }
  std::string s(buf);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  const size_t epos = s.find('e');
  const int exp = std::atoi(s.c_str() + epos + 1);
  std::string digits;
  for (size_t k = 0; k < epos; ++k) {
    if (s[k] != '.') digits += s[k];
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int n = static_cast<int>(digits.size());
  if (exp >= 16 || exp < -4) {
    std::string out = sign + digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + eb;
  }
  if (exp < 0) return sign + "0." + std::string(-exp - 1, '0') + digits;
  std::string ip = digits.substr(0, std::min(n, exp + 1));
  if (n < exp + 1) ip += std::string(exp + 1 - n, '0');
  std::string fp = n > exp + 1 ? digits.substr(exp + 1) : "0";
  return sign + ip + "." + fp;
}

namespace {

void ReprString(const std::string& s, std::string* out) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  *out += q;
  for (char32_t c : DecodeUtf8(s)) {
    if (c == '\\')
      *out += "\\\\";
    else if (c == static_cast<char32_t>(q))
      *out += std::string("\\") + q;
    else if (c == '\n')
      *out += "\\n";
    else if (c == '\r')
      *out += "\\r";
    else if (c == '\t')
      *out += "\\t";
    else if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      *out += b;
    } else if (c == 0x2028 || c == 0x2029) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      *out += b;
    } else {
      AppendUtf8(c, out);
    }
  }
  *out += q;
}

absl::Status AppendStr(const Value& v, bool repr, int depth, std::string* out);

absl::Status AppendSeq(const Value& v, int depth, std::string* out) {
  const bool tuple = v.list->kind == ListObj::Kind::kTuple;
  const bool view = !tuple && v.list->kind != ListObj::Kind::kList;
  if (view) *out += TypeName(v) + "(";
  *out += tuple ? '(' : '[';
  for (size_t k = 0; k < v.list->items.size(); ++k) {
    if (k) *out += ", ";
    HERD_RETURN_IF_ERROR(AppendStr(v.list->items[k], true, depth + 1, out));
  }
  if (tuple && v.list->items.size() == 1) *out += ',';
  *out += tuple ? ')' : ']';
  if (view) *out += ')';
  return absl::OkStatus();
}

absl::Status AppendDict(const Value& v, int depth, std::string* out) {
  if (v.dict->is_namespace) *out += "<Namespace ";
  *out += '{';
  bool first = true;
  for (const auto& e : v.dict->entries) {
    if (!first) *out += ", ";
    first = false;
    HERD_RETURN_IF_ERROR(AppendStr(e.first, true, depth + 1, out));
    *out += ": ";
    HERD_RETURN_IF_ERROR(AppendStr(e.second, true, depth + 1, out));
  }
  *out += '}';
  if (v.dict->is_namespace) *out += '>';
  return absl::OkStatus();
}

absl::Status AppendStr(const Value& v, bool repr, int depth, std::string* out) {
  if (depth > kMaxNesting) return TooDeep();
  switch (v.type) {
    case Value::Type::kUndefined:
      if (repr) *out += "Undefined";
      break;
    case Value::Type::kNone:
      *out += "None";
      break;
    case Value::Type::kBool:
      *out += v.b ? "True" : "False";
      break;
    case Value::Type::kInt:
      *out += std::to_string(v.i);
      break;
    case Value::Type::kFloat:
      *out += FloatRepr(v.f);
      break;
    case Value::Type::kString:
      if (repr)
        ReprString(v.s, out);
      else
        *out += v.s;
      break;
    case Value::Type::kList:
      if (v.list->kind == ListObj::Kind::kGenerator) {
        *out += "<generator object>";
        break;
      }
      return AppendSeq(v, depth, out);
    case Value::Type::kDict:
      return AppendDict(v, depth, out);
    case Value::Type::kCallable:
      *out += "<function " + v.fn->name + ">";
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ToStr(const Value& v) {
  if (v.is_string()) return v.s;
  std::string out;
  HERD_RETURN_IF_ERROR(AppendStr(v, false, 0, &out));
  return out;
}

absl::StatusOr<std::string> Repr(const Value& v) {
  std::string out;
  HERD_RETURN_IF_ERROR(AppendStr(v, true, 0, &out));
  return out;
}

namespace {

bool EqualAt(const Value& a, const Value& b, int depth) {
  if (depth > kMaxNesting) return false;
  if (a.is_number() && b.is_number()) {
    if (a.type == Value::Type::kFloat || b.type == Value::Type::kFloat) {
      return a.as_double() == b.as_double();
    }
    return a.as_int() == b.as_int();
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::kUndefined:
    case Value::Type::kNone:
      return true;
    case Value::Type::kString:
      return a.s == b.s;
    case Value::Type::kList: {
      if (a.list == b.list) return true;
      if (a.list->kind != b.list->kind || a.list->kind == ListObj::Kind::kGenerator) return false;
      if (a.list->items.size() != b.list->items.size()) return false;
      for (size_t k = 0; k < a.list->items.size(); ++k) {
        if (!EqualAt(a.list->items[k], b.list->items[k], depth + 1)) return false;
      }
      return true;
    }
    case Value::Type::kDict: {
      if (a.dict == b.dict) return true;
      if (a.dict->is_namespace || b.dict->is_namespace) return false;
      if (a.dict->entries.size() != b.dict->entries.size()) return false;
      for (const auto& e : a.dict->entries) {
        const Value* o = b.dict->Find(e.first);
        if (!o || !EqualAt(e.second, *o, depth + 1)) return false;
      }
      return true;
    }
    case Value::Type::kCallable:
      return a.fn == b.fn;
    default:
      return false;
  }
}

}  // namespace

bool Equal(const Value& a, const Value& b) { return EqualAt(a, b, 0); }

namespace {
absl::StatusOr<bool> LessAt(const Value& a, const Value& b, int depth);
}  // namespace

absl::StatusOr<bool> Less(const Value& a, const Value& b) { return LessAt(a, b, 0); }

namespace {

absl::StatusOr<bool> LessAt(const Value& a, const Value& b, int depth) {
  if (depth > kMaxNesting) return TooDeep();
  if (a.is_number() && b.is_number()) {
    if (a.type == Value::Type::kFloat || b.type == Value::Type::kFloat) {
      return a.as_double() < b.as_double();
    }
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.s < b.s;  // UTF-8 order = code point order
  if (a.is_seq() && b.is_seq() && a.list->kind == b.list->kind) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (size_t k = 0; k < x.size() && k < y.size(); ++k) {
      if (Equal(x[k], y[k])) continue;
      return LessAt(x[k], y[k], depth + 1);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'<' not supported between instances of '", TypeName(a), "' and '", TypeName(b), "'"));
}

}  // namespace

namespace {

absl::StatusOr<Value> FromJsonAt(const nlohmann::ordered_json& j, int depth) {
  using T = nlohmann::ordered_json::value_t;
  if (depth > 512) return absl::InvalidArgumentError("input JSON nested deeper than 512 levels");
  switch (j.type()) {
    case T::null:
      return Value::None();
    case T::boolean:
      return Value::Bool(j.get<bool>());
    case T::number_integer:
      return Value::Int(j.get<int64_t>());
    case T::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case T::number_float:
      return Value::Float(j.get<double>());
    case T::string:
      return Value::String(j.get<std::string>());
    case T::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) {
        HERD_ASSIGN_OR_RETURN(auto v, FromJsonAt(e, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case T::object: {
      Value d = Value::Dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        HERD_ASSIGN_OR_RETURN(auto v, FromJsonAt(it.value(), depth + 1));
        d.dict->entries.emplace_back(Value::String(it.key()), std::move(v));
      }
      return d;
    }
    default:
      return Value::None();  // binary / discarded: not produced by the JSON parser
  }
}

}  // namespace

absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j) { return FromJsonAt(j, 0); }

std::u32string DecodeUtf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t k = 0;
  while (k < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[k]);
    int n = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
    if (n < 0 || k + n >= s.size()) {
      out += U'\uFFFD';
      ++k;
      continue;
    }
    char32_t cp = n == 0 ? c : n == 1 ? (c & 0x1f) : n == 2 ? (c & 0x0f) : (c & 0x07);
    bool ok = true;
    for (int m = 1; m <= n; ++m) {
      const unsigned char cc = static_cast<unsigned char>(s[k + m]);
      if ((cc & 0xc0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      out += U'\uFFFD';
      ++k;
      continue;
    }
    out += cp;
    k += n + 1;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string* out) {
  if (c < 0x80) {
    *out += static_cast<char>(c);
  } else if (c < 0x800) {
    *out += static_cast<char>(0xc0 | (c >> 6));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    *out += static_cast<char>(0xe0 | (c >> 12));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (c >> 18));
    *out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::string EncodeUtf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendUtf8(c, &out);
  return out;
}

}  // namespace herd::chat::internal
