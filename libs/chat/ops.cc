#include "libs/chat/ops.h"

#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"

namespace herd::chat::internal {
namespace {

absl::Status TypeError(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::Status Unsupported(std::string_view op, const Value& a, const Value& b) {
  return TypeError(absl::StrCat("unsupported operand type(s) for ", std::string(op), ": '", TypeName(a), "' and '",
                                TypeName(b), "'"));
}

bool IsIntLike(const Value& v) { return v.type == Value::Type::kInt || v.type == Value::Type::kBool; }

absl::StatusOr<Value> Arith(std::string_view op, const Value& a, const Value& b) {
  if (IsIntLike(a) && IsIntLike(b)) {
    const int64_t x = a.as_int(), y = b.as_int();
    int64_t r = 0;
    bool overflow = false;
    if (op == "+")
      overflow = __builtin_add_overflow(x, y, &r);
    else if (op == "-")
      overflow = __builtin_sub_overflow(x, y, &r);
    else if (op == "*")
      overflow = __builtin_mul_overflow(x, y, &r);
    else if (op == "/") {
      if (y == 0) return TypeError("division by zero");
      return Value::Float(static_cast<double>(x) / static_cast<double>(y));
    } else if (op == "//" || op == "%") {
      if (y == 0) return TypeError("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) return TypeError("integer overflow");
      int64_t q = x / y, m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {
        --q;
        m += y;
      }
      r = op == "//" ? q : m;
    } else if (op == "**") {
      if (y < 0) return Value::Float(std::pow(static_cast<double>(x), static_cast<double>(y)));
      r = 1;
      for (int64_t k = 0; k < y && !overflow; ++k) {
        overflow = __builtin_mul_overflow(r, x, &r);
        if (r == 0 || r == 1) break;
      }
      if (x == -1) r = (y % 2) ? -1 : 1;
    }
    if (overflow) return TypeError("integer overflow");
    return Value::Int(r);
  }
  const double x = a.as_double(), y = b.as_double();
  if (op == "+") return Value::Float(x + y);
  if (op == "-") return Value::Float(x - y);
  if (op == "*") return Value::Float(x * y);
  if (op == "**") return Value::Float(std::pow(x, y));
  if (y == 0) return TypeError("float division by zero");
  if (op == "/") return Value::Float(x / y);
  if (op == "//") return Value::Float(std::floor(x / y));
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  return Value::Float(m);
}

absl::StatusOr<Value> Repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (n > 0 && seq.s.size() > kMaxBuiltSize / static_cast<size_t>(n)) return TypeError("string too large");
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::String(std::move(out));
  }
  const auto& items = seq.list->items;
  if (n > 0 && items.size() > kMaxBuiltSize / 64 / static_cast<size_t>(n)) return TypeError("list too large");
  std::vector<Value> out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), items.begin(), items.end());
  return Value::List(std::move(out), seq.list->kind);
}

}  // namespace

absl::Status UndefinedError(const Value& v) {
  return absl::InvalidArgumentError(v.s.empty() ? "value is undefined" : v.s);
}

absl::StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined:
      return std::vector<Value>{};
    case Value::Type::kList:
      return v.list->items;
    case Value::Type::kDict: {
      if (v.dict->is_namespace) break;
      std::vector<Value> keys;
      for (const auto& e : v.dict->entries) keys.push_back(e.first);
      return keys;
    }
    case Value::Type::kString: {
      std::vector<Value> chars;
      for (char32_t c : DecodeUtf8(v.s)) {
        std::string s;
        AppendUtf8(c, &s);
        chars.push_back(Value::String(std::move(s)));
      }
      return chars;
    }
    default:
      break;
  }
  return TypeError(absl::StrCat("'", TypeName(v), "' object is not iterable"));
}

absl::StatusOr<int64_t> Len(const Value& v) {
  switch (v.type) {
    case Value::Type::kUndefined:
      return 0;
    case Value::Type::kString:
      return static_cast<int64_t>(DecodeUtf8(v.s).size());
    case Value::Type::kList:
      if (v.is_generator()) break;
      return static_cast<int64_t>(v.list->items.size());
    case Value::Type::kDict:
      if (v.dict->is_namespace) break;
      return static_cast<int64_t>(v.dict->entries.size());
    default:
      break;
  }
  return TypeError(absl::StrCat("object of type '", TypeName(v), "' has no len()"));
}

absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "~") {
    HERD_ASSIGN_OR_RETURN(auto x, ToStr(a));
    HERD_ASSIGN_OR_RETURN(auto y, ToStr(b));
    if (x.size() + y.size() > kMaxBuiltSize) return TypeError("string too large");
    return Value::String(x + y);
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  if (a.is_number() && b.is_number()) return Arith(op, a, b);
  if (op == "+") {
    if ((a.is_string() && b.is_string() && a.s.size() + b.s.size() > kMaxBuiltSize) ||
        (a.is_seq() && b.is_seq() && a.list->items.size() + b.list->items.size() > kMaxBuiltSize / 64)) {
      return TypeError("result too large");
    }
    if (a.is_string() && b.is_string()) {
      if (a.markup || b.markup) {  // Markup.__add__ / __radd__ escape the plain side
        return Value::Markup((a.markup ? a.s : HtmlEscape(a.s)) + (b.markup ? b.s : HtmlEscape(b.s)));
      }
      return Value::String(a.s + b.s);
    }
    if (a.is_seq() && b.is_seq() && a.list->kind == b.list->kind) {
      std::vector<Value> items = a.list->items;
      items.insert(items.end(), b.list->items.begin(), b.list->items.end());
      return Value::List(std::move(items), a.list->kind);
    }
    if (a.is_string()) {
      return TypeError(absl::StrCat("can only concatenate str (not \"", TypeName(b), "\") to str"));
    }
    if (a.is_seq()) {
      return TypeError(
          absl::StrCat("can only concatenate ", TypeName(a), " (not \"", TypeName(b), "\") to ", TypeName(a)));
    }
  }
  if (op == "*") {
    if ((a.is_string() || a.is_seq()) && IsIntLike(b)) return Repeat(a, b.as_int());
    if ((b.is_string() || b.is_seq()) && IsIntLike(a)) return Repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) {
    HERD_ASSIGN_OR_RETURN(auto s, PercentFormat(a.s, b));
    return Value::String(std::move(s));
  }
  return Unsupported(op, a, b);
}

absl::StatusOr<bool> Contains(const Value& c, const Value& item) {
  switch (c.type) {
    case Value::Type::kUndefined:
      return false;
    case Value::Type::kString:
      if (!item.is_string()) {
        return TypeError(absl::StrCat("'in <string>' requires string as left operand, not ", TypeName(item)));
      }
      return c.s.find(item.s) != std::string::npos;
    case Value::Type::kList:
      for (const auto& v : c.list->items) {
        if (Equal(v, item)) return true;
      }
      return false;
    case Value::Type::kDict:
      if (c.dict->is_namespace) break;
      if ((item.is_list() && !item.is_tuple()) || item.is_dict()) {
        return TypeError(absl::StrCat("unhashable type: '", TypeName(item), "'"));
      }
      return c.dict->Find(item) != nullptr;
    default:
      break;
  }
  return TypeError(absl::StrCat("argument of type '", TypeName(c), "' is not iterable"));
}

absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b) {
  if (op == "==") return Equal(a, b);
  if (op == "!=") return !Equal(a, b);
  if (op == "in") return Contains(b, a);
  if (op == "notin") {
    HERD_ASSIGN_OR_RETURN(auto r, Contains(b, a));
    return !r;
  }
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  absl::StatusOr<bool> r = (op == "<" || op == ">=") ? Less(a, b) : Less(b, a);
  if (!r.ok()) {
    if (absl::StrContains(r.status().message(), "nesting too deep")) return r.status();
    return TypeError(absl::StrCat("'", std::string(op), "' not supported between instances of '", TypeName(a),
                                  "' and '", TypeName(b), "'"));
  }
  if (op == "<" || op == ">") return *r;
  return !*r;  // >= is not <, <= is not >
}

namespace {

absl::StatusOr<Value> Index(const Value& obj, int64_t k) {
  if (obj.is_string()) {
    const std::u32string u = DecodeUtf8(obj.s);
    const int64_t n = static_cast<int64_t>(u.size());
    if (k < 0) k += n;
    if (k < 0 || k >= n) return Value::Undefined("string index out of range");
    std::string s;
    AppendUtf8(u[k], &s);
    return Value::String(std::move(s));
  }
  const auto& items = obj.list->items;
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t orig = k;
  if (k < 0) k += n;
  if (k < 0 || k >= n) {
    return Value::Undefined(absl::StrCat("'", TypeName(obj), " object' has no element ", orig));
  }
  return items[k];
}

}  // namespace

absl::StatusOr<Value> ItemOf(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict() && !obj.dict->is_namespace) {
    if (const Value* v = obj.dict->Find(key)) return *v;
  } else if ((obj.is_string() || obj.is_seq()) && (key.type == Value::Type::kInt || key.type == Value::Type::kBool)) {
    return Index(obj, key.as_int());
  }
  const std::string what = obj.is_none() ? "'None'" : absl::StrCat("'", TypeName(obj), " object'");
  if (key.is_string()) return Value::Undefined(absl::StrCat(what, " has no attribute '", key.s, "'"));
  auto k = Repr(key);
  return Value::Undefined(absl::StrCat(what, " has no element ", k.ok() ? *k : std::string("?")));
}

absl::StatusOr<Value> SliceOf(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  auto as_index = [](const Value& v, int64_t* out) -> absl::Status {
    if (v.is_none() || v.is_undefined()) return absl::OkStatus();
    if (!IsIntLike(v)) return TypeError("slice indices must be integers or None");
    *out = v.as_int();
    return absl::OkStatus();
  };
  int64_t st = 1;
  HERD_RETURN_IF_ERROR(as_index(step, &st));
  if (st == 0) return TypeError("slice step cannot be zero");
  std::u32string u;
  const bool is_str = obj.is_string();
  // Jinja2 compiles a slice to a plain Python subscript: failures are TypeErrors.
  if (is_str)
    u = DecodeUtf8(obj.s);
  else if (obj.is_dict() && !obj.dict->is_namespace)
    return TypeError("unhashable type: 'slice'");
  else if (!obj.is_seq()) {
    return TypeError(absl::StrCat("'", TypeName(obj), "' object is not subscriptable"));
  }
  const int64_t n = is_str ? static_cast<int64_t>(u.size()) : static_cast<int64_t>(obj.list->items.size());
  int64_t lo = st > 0 ? 0 : n - 1, hi = st > 0 ? n : -1;
  auto adjust = [&](const Value& v, int64_t* out) -> absl::Status {
    if (v.is_none() || v.is_undefined()) return absl::OkStatus();
    int64_t k = 0;
    HERD_RETURN_IF_ERROR(as_index(v, &k));
    if (k < 0) k += n;
    if (st > 0)
      k = std::max<int64_t>(0, std::min(k, n));
    else
      k = std::max<int64_t>(-1, std::min(k, n - 1));
    *out = k;
    return absl::OkStatus();
  };
  HERD_RETURN_IF_ERROR(adjust(start, &lo));
  HERD_RETURN_IF_ERROR(adjust(stop, &hi));
  std::u32string su;
  std::vector<Value> items;
  for (int64_t k = lo; st > 0 ? k < hi : k > hi;) {
    if (is_str)
      su += u[k];
    else
      items.push_back(obj.list->items[k]);
    if (__builtin_add_overflow(k, st, &k)) break;
  }
  if (is_str) return Value::String(EncodeUtf8(su));
  return Value::List(std::move(items), obj.list->kind);
}

absl::StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args) {
  std::vector<Value> list;
  if (args.is_tuple())
    list = args.list->items;
  else
    list.push_back(args);
  size_t next = 0;
  std::string out;
  for (size_t k = 0; k < fmt.size(); ++k) {
    if (fmt[k] != '%') {
      out += fmt[k];
      continue;
    }
    if (++k >= fmt.size()) return TypeError("incomplete format");
    std::string spec = "%";
    while (k < fmt.size() && std::strchr("-+ #0123456789.", fmt[k])) spec += fmt[k++];
    if (k >= fmt.size()) return TypeError("incomplete format");
    const char conv = fmt[k];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (next >= list.size()) return TypeError("not enough arguments for format string");
    const Value& v = list[next++];
    char buf[512];
    if (conv == 's' || conv == 'r') {
      HERD_ASSIGN_OR_RETURN(auto s, conv == 's' ? ToStr(v) : Repr(v));
      out += s;
    } else if ((conv == 'd' || conv == 'i') && v.type == Value::Type::kFloat && !(std::fabs(v.f) < 9.2e18)) {
      return TypeError("%d format: float out of range");
    } else if ((conv == 'd' || conv == 'i') && v.is_number()) {
      std::snprintf(buf, sizeof buf, (spec + "lld").c_str(),
                    static_cast<long long>(v.type == Value::Type::kFloat ? static_cast<int64_t>(v.f) : v.as_int()));
      out += buf;
    } else if ((conv == 'f' || conv == 'x' || conv == 'e' || conv == 'g') && v.is_number()) {
      if (conv == 'x')
        std::snprintf(buf, sizeof buf, (spec + "llx").c_str(), static_cast<long long>(v.as_int()));
      else
        std::snprintf(buf, sizeof buf, (spec + conv).c_str(), v.as_double());
      out += buf;
    } else {
      return TypeError(absl::StrCat("unsupported format '%", std::string(1, conv), "' for ", TypeName(v)));
    }
  }
  // Python: an unused argument is an error unless the argument is a mapping-like
  // object (anything with __getitem__ but str: dicts and lists).
  const bool mapping_like = args.is_dict() || (args.is_seq() && !args.is_tuple());
  if (next < list.size() && !mapping_like) return TypeError("not all arguments converted during string formatting");
  return out;
}

}  // namespace herd::chat::internal
