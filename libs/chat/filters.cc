// Jinja2's builtin filters (and transformers' tojson) for the chat-template interpreter.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "libs/base/status_macros.h"
#include "libs/chat/interpreter.h"
#include "libs/chat/ops.h"
#include "libs/chat/strings.h"

namespace herd::chat::internal {

ArgBinder::ArgBinder(const char* fn, CallArgs& args, std::vector<const char*> names) : bound_(names.size(), nullptr) {
  for (size_t k = 0; k < args.pos.size(); ++k) {
    if (k < names.size())
      bound_[k] = &args.pos[k];
    else
      rest.push_back(args.pos[k]);
  }
  for (auto& [key, v] : args.kw) {
    bool found = false;
    for (size_t k = 0; k < names.size(); ++k) {
      if (key == names[k]) {
        if (bound_[k]) {
          status_ = absl::InvalidArgumentError(absl::StrCat(fn, "() got multiple values for argument '", key, "'"));
        }
        bound_[k] = &v;
        found = true;
      }
    }
    if (!found) {
      status_ = absl::InvalidArgumentError(absl::StrCat(fn, "() got an unexpected keyword argument '", key, "'"));
    }
  }
}

namespace {

using FilterFn = absl::StatusOr<Value> (*)(Interpreter&, const Value&, CallArgs&);

absl::Status Err(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::StatusOr<std::string> Str(const Value& v) { return ToStr(v); }

// Functions of markupsafe.Markup (str methods) return Markup again.
Value Keep(const Value& src, std::string s) {
  return src.markup ? Value::Markup(std::move(s)) : Value::String(std::move(s));
}

std::optional<std::string> OptStr(const Value* v) {
  if (!v || v->is_none()) return std::nullopt;
  auto s = ToStr(*v);
  return s.ok() ? std::optional<std::string>(*s) : std::nullopt;
}

#define BIND(fn, ...)                   \
  ArgBinder b(fn, args, {__VA_ARGS__}); \
  if (!b.status().ok()) return b.status()

// Jinja2's make_attrgetter: "a.b.0" looked up item-first, part by part.
absl::StatusOr<Value> AttrPath(Interpreter& in, const Value& obj, const std::string& path) {
  Value cur = obj;
  for (const auto& part : absl::StrSplit(path, '.')) {
    std::string p(part);
    Value key = Value::String(p);
    if (!p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      key = Value::Int(std::strtoll(p.c_str(), nullptr, 10));
    }
    HERD_ASSIGN_OR_RETURN(auto next, in.GetItem(cur, key));
    cur = std::move(next);
  }
  return cur;
}

absl::StatusOr<Value> FTojson(Interpreter&, const Value& v, CallArgs& args) {
  BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
  JsonDumpOptions opt;
  opt.ensure_ascii = b.Get(0) && Truthy(*b.Get(0));
  if (b.Get(1)) opt.indent = *b.Get(1);
  if (!opt.indent.is_none()) opt.item_sep = ",";
  if (const Value* sep = b.Get(2); sep && !sep->is_none()) {
    if (!sep->is_list() || sep->list->items.size() != 2 || !sep->list->items[0].is_string() ||
        !sep->list->items[1].is_string()) {
      return Err("tojson: separators must be a pair of strings");
    }
    opt.item_sep = sep->list->items[0].s;
    opt.key_sep = sep->list->items[1].s;
  }
  opt.sort_keys = b.Get(3) && Truthy(*b.Get(3));
  if (v.is_undefined()) return Err("Object of type Undefined is not JSON serializable");
  HERD_ASSIGN_OR_RETURN(auto s, JsonDumps(v, opt));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> FLength(Interpreter&, const Value& v, CallArgs& args) {
  BIND("length");
  HERD_ASSIGN_OR_RETURN(auto n, Len(v));
  return Value::Int(n);
}

absl::StatusOr<Value> FTrim(Interpreter&, const Value& v, CallArgs& args) {
  BIND("trim", "chars");
  HERD_ASSIGN_OR_RETURN(auto s, Str(v));
  return Keep(v, PyStrip(s, OptStr(b.Get(0)), true, true));
}

template <std::string (*F)(std::string_view)>
absl::StatusOr<Value> FCase(Interpreter&, const Value& v, CallArgs& args) {
  BIND("case");
  HERD_ASSIGN_OR_RETURN(auto s, Str(v));
  return Keep(v, F(s));
}

// Jinja2's title filter: words start after '-', whitespace, or an opening bracket;
// each word is item[0].upper() + item[1:].lower().
std::string JinjaTitle(std::string_view s) {
  std::string out;
  bool start = true;
  for (char32_t c : DecodeUtf8(s)) {
    const bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || PyIsSpace(c);
    std::string one;
    AppendUtf8(c, &one);
    if (sep) {
      out += one;
      start = true;
    } else {
      out += start ? PyUpper(one) : PyLower(one);
      start = false;
    }
  }
  return out;
}

absl::StatusOr<Value> FReplace(Interpreter&, const Value& v, CallArgs& args) {
  BIND("replace", "old", "new", "count");
  if (!b.Get(0) || !b.Get(1)) return Err("replace() needs old and new");
  auto s = Str(v);
  auto o = Str(*b.Get(0));
  auto n = Str(*b.Get(1));
  if (!s.ok() || !o.ok() || !n.ok()) return Err("replace: bad arguments");
  const Value* c = b.Get(2);
  std::string r = PyReplace(*s, *o, *n, c && !c->is_none() ? c->as_int() : -1);
  if (r.size() > kMaxReplaceBytes) return Err("replace: result too large");
  return Value::String(std::move(r));
}

absl::StatusOr<Value> FJoin(Interpreter& in, const Value& v, CallArgs& args) {
  BIND("join", "d", "attribute");
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  const std::string sep = b.Get(0) ? OptStr(b.Get(0)).value_or("None") : "";
  std::string out;
  for (size_t k = 0; k < items.size(); ++k) {
    Value item = items[k];
    if (const Value* attr = b.Get(1); attr && !attr->is_none()) {
      HERD_ASSIGN_OR_RETURN(auto a, AttrPath(in, item, OptStr(attr).value_or("")));
      item = std::move(a);
    }
    HERD_ASSIGN_OR_RETURN(auto s, Str(item));
    if (k) out += sep;
    out += s;
    if (out.size() > kMaxBuiltSize) return Err("join: result too large");
  }
  return Value::String(std::move(out));
}

absl::StatusOr<Value> FDefault(Interpreter&, const Value& v, CallArgs& args) {
  BIND("default", "default_value", "boolean");
  const bool boolean = b.Get(1) && Truthy(*b.Get(1));
  if (v.is_undefined() || (boolean && !Truthy(v))) {
    return b.Get(0) ? *b.Get(0) : Value::String("");
  }
  return v;
}

absl::StatusOr<Value> FFirst(Interpreter&, const Value& v, CallArgs& args) {
  BIND("first");
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

absl::StatusOr<Value> FLast(Interpreter&, const Value& v, CallArgs& args) {
  BIND("last");
  if (v.is_generator()) return Err("'generator' object is not reversible");
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

absl::StatusOr<Value> FList(Interpreter&, const Value& v, CallArgs& args) {
  BIND("list");
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  return Value::List(std::move(items));
}

absl::StatusOr<Value> FString(Interpreter&, const Value& v, CallArgs& args) {
  BIND("string");
  if (v.is_string()) return v;
  HERD_ASSIGN_OR_RETURN(auto s, Str(v));
  return Value::String(std::move(s));
}

std::optional<double> ParseFloat(const std::string& raw) {
  const std::string s = PyStrip(raw, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  std::string t;
  for (char c : s) {
    if (c != '_') t += c;
  }
  char* end = nullptr;
  const double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

absl::StatusOr<Value> FInt(Interpreter&, const Value& v, CallArgs& args) {
  BIND("int", "default", "base");
  const Value dflt = b.Get(0) ? *b.Get(0) : Value::Int(0);
  const int base = b.Get(1) ? static_cast<int>(b.Get(1)->as_int()) : 10;
  if (v.is_undefined()) return absl::InvalidArgumentError(v.s);  // int(Undefined) raises
  if (v.type == Value::Type::kInt || v.type == Value::Type::kBool) return Value::Int(v.as_int());
  if (v.type == Value::Type::kFloat) {
    if (!std::isfinite(v.f) || std::fabs(v.f) > 9.2e18) return dflt;
    return Value::Int(static_cast<int64_t>(v.f));
  }
  if (!v.is_string()) return dflt;
  const std::string s = PyStrip(v.s, std::nullopt, true, true);
  if (!s.empty() && base >= 2 && base <= 36) {
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(s.c_str(), &end, base);
    if (end == s.c_str() + s.size() && errno == 0) return Value::Int(x);
  }
  if (auto d = ParseFloat(v.s); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
    return Value::Int(static_cast<int64_t>(*d));
  }
  return dflt;
}

absl::StatusOr<Value> FFloat(Interpreter&, const Value& v, CallArgs& args) {
  BIND("float", "default");
  const Value dflt = b.Get(0) ? *b.Get(0) : Value::Float(0.0);
  if (v.is_undefined()) return absl::InvalidArgumentError(v.s);  // float(Undefined) raises
  if (v.is_number()) return Value::Float(v.as_double());
  if (v.is_string()) {
    if (auto d = ParseFloat(v.s)) return Value::Float(*d);
  }
  return dflt;
}

absl::StatusOr<Value> FAbs(Interpreter&, const Value& v, CallArgs& args) {
  BIND("abs");
  if (v.type == Value::Type::kFloat) return Value::Float(std::fabs(v.f));
  if (v.is_number() && v.as_int() != INT64_MIN) return Value::Int(std::llabs(v.as_int()));
  return Err(absl::StrCat("bad operand type for abs(): '", TypeName(v), "'"));
}

absl::StatusOr<Value> FRound(Interpreter&, const Value& v, CallArgs& args) {
  BIND("round", "precision", "method");
  const int64_t p = b.Get(0) ? b.Get(0)->as_int() : 0;
  const std::string method = b.Get(1) ? OptStr(b.Get(1)).value_or("common") : "common";
  if (!v.is_number()) return Err(absl::StrCat("type ", TypeName(v), " doesn't define __round__"));
  if (method != "common" && method != "floor" && method != "ceil") {
    return Err("method must be 'common', 'ceil' or 'floor'");
  }
  if (method == "common" && v.type != Value::Type::kFloat) return Value::Int(v.as_int());
  const double scale = std::pow(10.0, static_cast<double>(p));
  const double x = v.as_double() * scale;
  const double r = method == "floor" ? std::floor(x) : method == "ceil" ? std::ceil(x) : std::nearbyint(x);
  return Value::Float(r / scale);
}

absl::StatusOr<Value> FItems(Interpreter&, const Value& v, CallArgs& args) {
  BIND("items");
  // Jinja2 3.1's items filter is a generator (printing or serializing it fails).
  if (v.is_undefined()) return Value::List({}, ListObj::Kind::kGenerator);
  if (!v.is_dict() || v.dict->is_namespace) return Err("Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& e : v.dict->entries) out.push_back(Value::Tuple({e.first, e.second}));
  return Value::List(std::move(out), ListObj::Kind::kGenerator);
}

// Sort key of Jinja2's sort/dictsort/unique/min/max: strings lowercased unless case_sensitive.
Value SortKey(const Value& v, bool case_sensitive) {
  if (v.is_string() && !case_sensitive) return Value::String(PyLower(v.s));
  return v;
}

absl::Status SortValues(std::vector<std::pair<Value, Value>>* keyed, bool reverse) {
  absl::Status err;
  std::stable_sort(keyed->begin(), keyed->end(), [&](const auto& a, const auto& b) {
    auto r = reverse ? Less(b.first, a.first) : Less(a.first, b.first);
    if (!r.ok()) {
      err = r.status();
      return false;
    }
    return *r;
  });
  return err;
}

absl::StatusOr<Value> FDictsort(Interpreter&, const Value& v, CallArgs& args) {
  BIND("dictsort", "case_sensitive", "by", "reverse");
  if (!v.is_dict() || v.dict->is_namespace) return Err("dictsort: can only sort a mapping");
  const bool cs = b.Get(0) && Truthy(*b.Get(0));
  const std::string by = b.Get(1) ? OptStr(b.Get(1)).value_or("key") : "key";
  if (by != "key" && by != "value") return Err("You can only sort by either 'key' or 'value'");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& e : v.dict->entries) {
    keyed.emplace_back(SortKey(by == "key" ? e.first : e.second, cs), Value::Tuple({e.first, e.second}));
  }
  HERD_RETURN_IF_ERROR(SortValues(&keyed, b.Get(2) && Truthy(*b.Get(2))));
  std::vector<Value> out;
  for (auto& k : keyed) out.push_back(std::move(k.second));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FSort(Interpreter& in, const Value& v, CallArgs& args) {
  BIND("sort", "reverse", "case_sensitive", "attribute");
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  const bool cs = b.Get(1) && Truthy(*b.Get(1));
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& item : items) {
    Value key = item;
    if (const Value* attr = b.Get(2); attr && !attr->is_none()) {
      std::vector<Value> parts;
      for (const auto& a : absl::StrSplit(OptStr(attr).value_or(""), ',')) {
        HERD_ASSIGN_OR_RETURN(auto k, AttrPath(in, item, std::string(a)));
        parts.push_back(SortKey(k, cs));
      }
      key = parts.size() == 1 ? parts[0] : Value::List(std::move(parts));
    } else {
      key = SortKey(item, cs);
    }
    keyed.emplace_back(std::move(key), item);
  }
  HERD_RETURN_IF_ERROR(SortValues(&keyed, b.Get(0) && Truthy(*b.Get(0))));
  std::vector<Value> out;
  for (auto& k : keyed) out.push_back(std::move(k.second));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> FUnique(Interpreter& in, const Value& v, CallArgs& args) {
  BIND("unique", "case_sensitive", "attribute");
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  const bool cs = b.Get(0) && Truthy(*b.Get(0));
  std::vector<Value> seen, out;
  for (const auto& item : items) {
    Value key = item;
    if (const Value* attr = b.Get(1); attr && !attr->is_none()) {
      HERD_ASSIGN_OR_RETURN(key, AttrPath(in, item, OptStr(attr).value_or("")));
    }
    key = SortKey(key, cs);
    if ((key.is_list() && !key.is_tuple()) || key.is_dict()) {
      return Err(absl::StrCat("unhashable type: '", TypeName(key), "'"));
    }
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return Equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::List(std::move(out), ListObj::Kind::kGenerator);
}

absl::StatusOr<Value> FReverse(Interpreter&, const Value& v, CallArgs& args) {
  BIND("reverse");
  if (v.is_string()) {
    std::u32string u = DecodeUtf8(v.s);
    std::reverse(u.begin(), u.end());
    return Value::String(EncodeUtf8(u));
  }
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::List(std::move(items), ListObj::Kind::kGenerator);
}

absl::StatusOr<Value> FSafe(Interpreter&, const Value& v, CallArgs& args) {
  BIND("safe");
  HERD_ASSIGN_OR_RETURN(auto s, Str(v));
  return Value::Markup(std::move(s));
}

absl::StatusOr<Value> FEscape(Interpreter&, const Value& v, CallArgs& args) {
  BIND("escape");
  if (v.markup) return v;
  HERD_ASSIGN_OR_RETURN(auto s, Str(v));
  return Value::Markup(HtmlEscape(s));
}

absl::StatusOr<Value> FIndent(Interpreter&, const Value& v, CallArgs& args) {
  BIND("indent", "width", "first", "blank");
  if (!v.is_string()) {  // Jinja2 does `s += "\n"`
    if (v.is_undefined()) return absl::InvalidArgumentError(v.s);
    return Err(absl::StrCat("unsupported operand type(s) for +=: '", TypeName(v), "' and 'str'"));
  }
  HERD_ASSIGN_OR_RETURN(auto str, Str(v));
  std::string ind = "    ";
  if (const Value* w = b.Get(0)) {
    if (w->is_string())
      ind = w->s;
    else
      ind = std::string(std::max<int64_t>(0, std::min<int64_t>(w->as_int(), 1024)), ' ');
  }
  const bool first = b.Get(1) && Truthy(*b.Get(1));
  const bool blank = b.Get(2) && Truthy(*b.Get(2));
  std::vector<std::string> lines = PySplitLines(str + "\n");
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) rv += (k ? "\n" + ind : "") + lines[k];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) rv += "\n" + (lines[k].empty() ? "" : ind) + lines[k];
  }
  if (first) rv = ind + rv;
  return Keep(v, std::move(rv));
}

absl::StatusOr<Value> FWordcount(Interpreter&, const Value& v, CallArgs& args) {
  BIND("wordcount");
  HERD_ASSIGN_OR_RETURN(auto s, Str(v));
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : DecodeUtf8(s)) {
    const bool w = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                   (c >= 0xc0 && !PyIsSpace(c));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::Int(n);
}

absl::StatusOr<Value> FBatch(Interpreter&, const Value& v, CallArgs& args) {
  BIND("batch", "linecount", "fill_with");
  if (!b.Get(0) || !b.Get(0)->is_number() || b.Get(0)->as_int() <= 0) return Err("batch: linecount must be > 0");
  const size_t n = static_cast<size_t>(b.Get(0)->as_int());
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  std::vector<Value> out, cur;
  for (auto& item : items) {
    cur.push_back(item);
    if (cur.size() == n) {
      out.push_back(Value::List(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (const Value* fill = b.Get(1); fill && !fill->is_none()) {
      while (cur.size() < n) cur.push_back(*fill);
    }
    out.push_back(Value::List(std::move(cur)));
  }
  return Value::List(std::move(out), ListObj::Kind::kGenerator);
}

absl::StatusOr<Value> FSum(Interpreter& in, const Value& v, CallArgs& args) {
  BIND("sum", "attribute", "start");
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  Value total = b.Get(1) ? *b.Get(1) : Value::Int(0);
  for (const auto& item : items) {
    Value x = item;
    if (const Value* attr = b.Get(0); attr && !attr->is_none()) {
      HERD_ASSIGN_OR_RETURN(x, AttrPath(in, item, OptStr(attr).value_or("")));
    }
    HERD_ASSIGN_OR_RETURN(auto t, BinaryOp("+", total, x));
    total = std::move(t);
  }
  return total;
}

absl::StatusOr<Value> MinMax(Interpreter& in, const Value& v, CallArgs& args, bool max) {
  BIND(max ? "max" : "min", "case_sensitive", "attribute");
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const bool cs = b.Get(0) && Truthy(*b.Get(0));
  size_t best = 0;
  Value best_key;
  for (size_t k = 0; k < items.size(); ++k) {
    Value key = items[k];
    if (const Value* attr = b.Get(1); attr && !attr->is_none()) {
      HERD_ASSIGN_OR_RETURN(key, AttrPath(in, key, OptStr(attr).value_or("")));
    }
    key = SortKey(key, cs);
    if (k == 0) {
      best_key = key;
      continue;
    }
    HERD_ASSIGN_OR_RETURN(auto better, max ? Less(best_key, key) : Less(key, best_key));
    if (better) {
      best = k;
      best_key = key;
    }
  }
  return items[best];
}

absl::StatusOr<Value> FMin(Interpreter& in, const Value& v, CallArgs& args) { return MinMax(in, v, args, false); }
absl::StatusOr<Value> FMax(Interpreter& in, const Value& v, CallArgs& args) { return MinMax(in, v, args, true); }

absl::StatusOr<Value> FCenter(Interpreter&, const Value& v, CallArgs& args) {
  BIND("center", "width");
  HERD_ASSIGN_OR_RETURN(auto s, Str(v));
  const int64_t width = std::min<int64_t>(b.Get(0) ? b.Get(0)->as_int() : 80, 1 << 20);
  const int64_t len = static_cast<int64_t>(DecodeUtf8(s).size());
  if (width <= len) return Value::String(s);
  const int64_t marg = width - len;
  const int64_t left = marg / 2 + (marg & width & 1);
  return Value::String(std::string(left, ' ') + s + std::string(marg - left, ' '));
}

absl::StatusOr<Value> FAttr(Interpreter& in, const Value& v, CallArgs& args) {
  BIND("attr", "name");
  if (!b.Get(0) || !b.Get(0)->is_string()) return Err("attr: name must be a string");
  if (v.is_dict() && !v.dict->is_namespace) {
    HERD_ASSIGN_OR_RETURN(auto m, GetMethod(v, b.Get(0)->s));
    if (m.has_value()) return *m;
    return Value::Undefined(absl::StrCat("'dict object' has no attribute '", b.Get(0)->s, "'"));
  }
  return in.GetAttr(v, b.Get(0)->s);
}

absl::StatusOr<Value> FFormat(Interpreter&, const Value& v, CallArgs& args) {
  HERD_ASSIGN_OR_RETURN(auto s, Str(v));
  if (!args.kw.empty()) return Err("format filter: keyword arguments are not supported");
  HERD_ASSIGN_OR_RETURN(auto r, PercentFormat(s, Value::Tuple(args.pos)));
  return Value::String(std::move(r));
}

// select/reject/selectattr/rejectattr: keep items whose test (or truthiness) == keep.
absl::StatusOr<Value> SelectReject(Interpreter& in, const Value& v, CallArgs& args, bool keep, bool attr) {
  if (!Truthy(v)) return Value::List({}, ListObj::Kind::kGenerator);  // Jinja2: `if value:`
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  size_t off = 0;
  std::string path;
  if (attr) {
    if (args.pos.empty() || !args.pos[0].is_string()) return Err("selectattr/rejectattr need an attribute name");
    path = args.pos[0].s;
    off = 1;
  }
  std::optional<std::string> test;
  if (args.pos.size() > off) {
    HERD_ASSIGN_OR_RETURN(test, ToStr(args.pos[off]));
  }
  CallArgs targs;
  for (size_t k = off + 1; k < args.pos.size(); ++k) targs.pos.push_back(args.pos[k]);
  targs.kw = args.kw;
  std::vector<Value> out;
  for (const auto& item : items) {
    Value x = item;
    if (attr) {
      HERD_ASSIGN_OR_RETURN(auto a, AttrPath(in, item, path));
      x = std::move(a);
    }
    bool r = false;
    if (test) {
      CallArgs copy = targs;
      HERD_ASSIGN_OR_RETURN(r, in.ApplyTest(*test, x, copy));
    } else {
      r = Truthy(x);
    }
    if (r == keep) out.push_back(item);
  }
  return Value::List(std::move(out), ListObj::Kind::kGenerator);
}

absl::StatusOr<Value> FSelect(Interpreter& in, const Value& v, CallArgs& a) {
  return SelectReject(in, v, a, true, false);
}
absl::StatusOr<Value> FReject(Interpreter& in, const Value& v, CallArgs& a) {
  return SelectReject(in, v, a, false, false);
}
absl::StatusOr<Value> FSelectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return SelectReject(in, v, a, true, true);
}
absl::StatusOr<Value> FRejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return SelectReject(in, v, a, false, true);
}

absl::StatusOr<Value> FMap(Interpreter& in, const Value& v, CallArgs& args) {
  if (!Truthy(v)) return Value::List({}, ListObj::Kind::kGenerator);  // Jinja2: `if value:`
  HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
  std::vector<Value> out;
  if (args.pos.empty()) {
    std::optional<std::string> attribute;
    Value dflt = Value::None();
    bool has_default = false;
    for (auto& [k, val] : args.kw) {
      if (k == "attribute")
        attribute = OptStr(&val);
      else if (k == "default") {
        dflt = val;
        has_default = true;
      } else {
        return Err(absl::StrCat("map() got an unexpected keyword argument '", k, "'"));
      }
    }
    if (!attribute) return Err("map requires a filter argument");
    for (const auto& item : items) {
      HERD_ASSIGN_OR_RETURN(auto a, AttrPath(in, item, *attribute));
      out.push_back(a.is_undefined() && has_default ? dflt : a);
    }
    return Value::List(std::move(out), ListObj::Kind::kGenerator);
  }
  HERD_ASSIGN_OR_RETURN(auto name, ToStr(args.pos[0]));
  CallArgs fargs;
  fargs.pos.assign(args.pos.begin() + 1, args.pos.end());
  fargs.kw = args.kw;
  for (const auto& item : items) {
    CallArgs copy = fargs;
    HERD_ASSIGN_OR_RETURN(auto r, in.ApplyFilter(name, item, copy));
    out.push_back(std::move(r));
  }
  return Value::List(std::move(out), ListObj::Kind::kGenerator);
}

const std::unordered_map<std::string, FilterFn>& Filters() {
  static const auto* table = new std::unordered_map<std::string, FilterFn>{
      {"tojson", FTojson},
      {"length", FLength},
      {"count", FLength},
      {"trim", FTrim},
      {"upper", FCase<PyUpper>},
      {"lower", FCase<PyLower>},
      {"title", FCase<JinjaTitle>},
      {"capitalize", FCase<PyCapitalize>},
      {"replace", FReplace},
      {"join", FJoin},
      {"default", FDefault},
      {"d", FDefault},
      {"first", FFirst},
      {"last", FLast},
      {"list", FList},
      {"string", FString},
      {"int", FInt},
      {"float", FFloat},
      {"abs", FAbs},
      {"round", FRound},
      {"items", FItems},
      {"dictsort", FDictsort},
      {"sort", FSort},
      {"unique", FUnique},
      {"reverse", FReverse},
      {"safe", FSafe},
      {"escape", FEscape},
      {"e", FEscape},
      {"forceescape", FEscape},
      {"indent", FIndent},
      {"wordcount", FWordcount},
      {"batch", FBatch},
      {"sum", FSum},
      {"min", FMin},
      {"max", FMax},
      {"center", FCenter},
      {"attr", FAttr},
      {"format", FFormat},
      {"select", FSelect},
      {"reject", FReject},
      {"selectattr", FSelectattr},
      {"rejectattr", FRejectattr},
      {"map", FMap},
  };
  return *table;
}

}  // namespace

bool HasFilter(const std::string& name) { return Filters().count(name) > 0; }

absl::StatusOr<Value> CallFilter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  auto it = Filters().find(name);
  if (it == Filters().end()) return Err(absl::StrCat("No filter named '", name, "'."));
  return it->second(in, v, args);
}

}  // namespace herd::chat::internal
