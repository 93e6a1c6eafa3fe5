// Python methods of str/dict/list that templates call (as transformers' immutable
// sandbox allows) and the globals (range, dict, namespace, raise_exception, strftime_now).
#include <ctime>
#include <unordered_set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/status_macros.h"
#include "libs/chat/interpreter.h"
#include "libs/chat/ops.h"
#include "libs/chat/strings.h"

namespace herd::chat::internal {

absl::Status RaisedError(const std::string& msg) { return absl::FailedPreconditionError(msg); }

namespace {

absl::Status Err(const std::string& msg) { return absl::InvalidArgumentError(msg); }

#define BIND(fn, ...)                   \
  ArgBinder b(fn, args, {__VA_ARGS__}); \
  if (!b.status().ok()) return b.status()

std::optional<std::string> OptStr(const Value* v) {
  if (!v || v->is_none()) return std::nullopt;
  if (v->is_string()) return v->s;
  return std::nullopt;
}

absl::StatusOr<std::string> NeedStr(const Value* v, const char* what) {
  if (!v || !v->is_string()) return Err(absl::StrCat(what, " must be a str"));
  return v->s;
}

Value StrList(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  for (const auto& p : parts) out.push_back(Value::String(p));
  return Value::List(std::move(out));
}

// str.format: {} {0} {name} with !r/!s, {{ }}; format specs beyond "" are unsupported.
absl::StatusOr<std::string> StrFormat(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    const char c = fmt[k];
    if (c == '}') {
      if (k + 1 < fmt.size() && fmt[k + 1] == '}')
        ++k;
      else
        return Err("Single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (k + 1 < fmt.size() && fmt[k + 1] == '{') {
      out += '{';
      ++k;
      continue;
    }
    const size_t end = fmt.find('}', k);
    if (end == std::string::npos) return Err("Single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, end - k - 1);
    k = end;
    std::string conv, spec;
    if (size_t p = field.find(':'); p != std::string::npos) {
      spec = field.substr(p + 1);
      field.resize(p);
    }
    if (size_t p = field.find('!'); p != std::string::npos) {
      conv = field.substr(p + 1);
      field.resize(p);
    }
    if (!spec.empty()) return Err(absl::StrCat("str.format: format spec ':", spec, "' is not supported"));
    const Value* v = nullptr;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const size_t idx = field.empty() ? auto_idx++ : std::stoul(field.substr(0, 9));
      if (idx >= args.pos.size()) return Err("Replacement index out of range for positional args tuple");
      v = &args.pos[idx];
    } else {
      for (auto& [key, val] : args.kw) {
        if (key == field) v = &val;
      }
      if (!v) return Err(absl::StrCat("str.format: missing argument '", field, "'"));
    }
    HERD_ASSIGN_OR_RETURN(auto s, conv == "r" ? Repr(*v) : ToStr(*v));
    out += s;
  }
  return out;
}

absl::StatusOr<Value> StrFind(const std::string& s, CallArgs& args, bool from_right, bool raise) {
  BIND("find", "sub", "start", "end");
  HERD_ASSIGN_OR_RETURN(auto sub, NeedStr(b.Get(0), "find() argument"));
  std::u32string u = DecodeUtf8(s);
  const int64_t n = static_cast<int64_t>(u.size());
  auto clamp = [n](const Value* v, int64_t dflt) {
    if (!v || v->is_none()) return dflt;
    int64_t k = v->as_int();
    if (k < 0) k += n;
    return std::max<int64_t>(0, std::min(k, n));
  };
  const int64_t lo = clamp(b.Get(1), 0), hi = clamp(b.Get(2), n);
  int64_t r = -1;
  if (lo <= hi) {
    const std::u32string hay = u.substr(lo, hi - lo);
    const std::u32string needle = DecodeUtf8(sub);
    const size_t p = from_right ? hay.rfind(needle) : hay.find(needle);
    if (p != std::u32string::npos) r = lo + static_cast<int64_t>(p);
  }
  if (r < 0 && raise) return Err("substring not found");
  return Value::Int(r);
}

absl::StatusOr<Value> StrAffix(const std::string& s, CallArgs& args, bool prefix) {
  BIND(prefix ? "startswith" : "endswith", "prefix", "start", "end");
  if (!b.Get(0)) return Err("startswith/endswith need an argument");
  std::vector<Value> cands;
  if (b.Get(0)->is_tuple())
    cands = b.Get(0)->list->items;
  else
    cands.push_back(*b.Get(0));
  std::string hay = s;
  if (b.Get(1) || b.Get(2)) {
    HERD_ASSIGN_OR_RETURN(auto sl, SliceOf(Value::String(s), b.Get(1) ? *b.Get(1) : Value::None(),
                                           b.Get(2) ? *b.Get(2) : Value::None(), Value::None()));
    hay = sl.s;
  }
  for (const auto& c : cands) {
    if (!c.is_string()) return Err("startswith/endswith first arg must be str or a tuple of str");
    if (prefix ? absl::StartsWith(hay, c.s) : absl::EndsWith(hay, c.s)) return Value::Bool(true);
  }
  return Value::Bool(false);
}

absl::StatusOr<Value> StrSplitMethod(const std::string& s, CallArgs& args, bool right) {
  BIND("split", "sep", "maxsplit");
  const std::optional<std::string> sep = OptStr(b.Get(0));
  if (b.Get(0) && !b.Get(0)->is_none() && !sep) return Err("must be str or None");
  if (sep && sep->empty()) return Err("empty separator");
  const int64_t maxsplit = b.Get(1) ? b.Get(1)->as_int() : -1;
  return StrList(PySplit(s, sep, maxsplit, right));
}

absl::StatusOr<Value> StrPad(const std::string& s, CallArgs& args, const std::string& name) {
  BIND(name.c_str(), "width", "fillchar");
  const int64_t width = std::min<int64_t>(b.Get(0) ? b.Get(0)->as_int() : 0, 1 << 20);
  const std::string fill = b.Get(1) && b.Get(1)->is_string() ? b.Get(1)->s : " ";
  if (DecodeUtf8(fill).size() != 1) return Err("The fill character must be exactly one character long");
  const int64_t len = static_cast<int64_t>(DecodeUtf8(s).size());
  if (width <= len) return Value::String(s);
  const int64_t marg = width - len;
  int64_t left = name == "rjust" ? marg : name == "ljust" ? 0 : marg / 2 + (marg & width & 1);
  if (name == "zfill") {
    std::string body = s, sign;
    if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
      sign = body.substr(0, 1);
      body.erase(0, 1);
    }
    return Value::String(sign + std::string(marg, '0') + body);
  }
  std::string out;
  for (int64_t k = 0; k < left; ++k) out += fill;
  out += s;
  for (int64_t k = 0; k < marg - left; ++k) out += fill;
  return Value::String(std::move(out));
}

bool AllChars(const std::string& s, bool (*pred)(char32_t)) {
  const std::u32string u = DecodeUtf8(s);
  if (u.empty()) return false;
  for (char32_t c : u) {
    if (!pred(c)) return false;
  }
  return true;
}

bool IsAlphaCp(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= 0xc0 && !PyIsSpace(c)); }
bool IsDigitCp(char32_t c) { return c >= '0' && c <= '9'; }
bool IsAlnumCp(char32_t c) { return IsAlphaCp(c) || IsDigitCp(c); }

absl::StatusOr<Value> StrMethod2(const std::string& s, const std::string& name, CallArgs& args);

absl::StatusOr<Value> StrMethod(const std::string& s, const std::string& name, CallArgs& args) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    BIND(name.c_str(), "chars");
    if (b.Get(0) && !b.Get(0)->is_none() && !b.Get(0)->is_string()) return Err(name + " arg must be None or str");
    return Value::String(PyStrip(s, OptStr(b.Get(0)), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") return StrSplitMethod(s, args, name == "rsplit");
  if (name == "startswith" || name == "endswith") return StrAffix(s, args, name == "startswith");
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    return StrFind(s, args, name[0] == 'r', name.find("index") != std::string::npos);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "casefold") {
    BIND(name.c_str());
    if (name == "upper") return Value::String(PyUpper(s));
    if (name == "title") return Value::String(PyTitle(s));
    if (name == "capitalize") return Value::String(PyCapitalize(s));
    return Value::String(PyLower(s));
  }
  if (name == "replace") {
    BIND("replace", "old", "new", "count");
    auto o = NeedStr(b.Get(0), "replace() argument 1");
    auto n = NeedStr(b.Get(1), "replace() argument 2");
    if (!o.ok()) return o.status();
    if (!n.ok()) return n.status();
    std::string r = PyReplace(s, *o, *n, b.Get(2) ? b.Get(2)->as_int() : -1);
    if (r.size() > kMaxReplaceBytes) return Err("replace: result too large");
    return Value::String(std::move(r));
  }
  if (name == "format") {
    HERD_ASSIGN_OR_RETURN(auto r, StrFormat(s, args));
    return Value::String(std::move(r));
  }
  return StrMethod2(s, name, args);
}

absl::StatusOr<Value> StrMethod2(const std::string& s, const std::string& name, CallArgs& args) {
  if (name == "join") {
    BIND("join", "iterable");
    if (!b.Get(0)) return Err("join() takes exactly one argument");
    HERD_ASSIGN_OR_RETURN(auto items, Iterate(*b.Get(0)));
    std::vector<std::string> parts;
    for (const auto& item : items) {
      if (!item.is_string())
        return Err(absl::StrCat("sequence item: expected str instance, ", TypeName(item), " found"));
      parts.push_back(item.s);
    }
    std::string joined = absl::StrJoin(parts, s);
    if (joined.size() > kMaxBuiltSize) return Err("join: result too large");
    return Value::String(std::move(joined));
  }
  if (name == "count") {
    BIND("count", "sub");
    HERD_ASSIGN_OR_RETURN(auto sub, NeedStr(b.Get(0), "count() argument"));
    if (sub.empty()) return Value::Int(static_cast<int64_t>(DecodeUtf8(s).size()) + 1);
    int64_t n = 0;
    for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return Value::Int(n);
  }
  if (name == "splitlines") {
    BIND("splitlines");
    return StrList(PySplitLines(s));
  }
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return Value::Bool(AllChars(s, IsDigitCp));
  if (name == "isalpha") return Value::Bool(AllChars(s, IsAlphaCp));
  if (name == "isalnum") return Value::Bool(AllChars(s, IsAlnumCp));
  if (name == "isspace") return Value::Bool(AllChars(s, PyIsSpace));
  if (name == "isupper" || name == "islower") {
    const std::string other = name == "isupper" ? PyLower(s) : PyUpper(s);
    const std::string same = name == "isupper" ? PyUpper(s) : PyLower(s);
    return Value::Bool(same == s && other != s);
  }
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill") return StrPad(s, args, name);
  if (name == "removeprefix" || name == "removesuffix") {
    BIND(name.c_str(), "affix");
    HERD_ASSIGN_OR_RETURN(auto a, NeedStr(b.Get(0), "argument"));
    if (name == "removeprefix") return Value::String(absl::StartsWith(s, a) ? s.substr(a.size()) : s);
    return Value::String(absl::EndsWith(s, a) ? s.substr(0, s.size() - a.size()) : s);
  }
  if (name == "partition" || name == "rpartition") {
    BIND(name.c_str(), "sep");
    HERD_ASSIGN_OR_RETURN(auto sep, NeedStr(b.Get(0), "argument"));
    if (sep.empty()) return Err("empty separator");
    const size_t p = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (p == std::string::npos) {
      return name == "partition" ? Value::Tuple({Value::String(s), Value::String(""), Value::String("")})
                                 : Value::Tuple({Value::String(""), Value::String(""), Value::String(s)});
    }
    return Value::Tuple({Value::String(s.substr(0, p)), Value::String(sep), Value::String(s.substr(p + sep.size()))});
  }
  return Err(absl::StrCat("str.", name, " is not supported"));
}

absl::StatusOr<Value> DictMethod(const Value& d, const std::string& name, CallArgs& args) {
  if (name == "get") {
    BIND("get", "key", "default");
    if (!b.Get(0)) return Err("get expected at least 1 argument");
    if (const Value* v = d.dict->Find(*b.Get(0))) return *v;
    return b.Get(1) ? *b.Get(1) : Value::None();
  }
  BIND(name.c_str());
  std::vector<Value> out;
  for (const auto& e : d.dict->entries) {
    if (name == "items")
      out.push_back(Value::Tuple({e.first, e.second}));
    else
      out.push_back(name == "keys" ? e.first : e.second);
  }
  if (name == "copy") {
    Value c = Value::Dict();
    c.dict->entries = d.dict->entries;
    return c;
  }
  return Value::List(std::move(out), name == "items"  ? ListObj::Kind::kDictItems
                                     : name == "keys" ? ListObj::Kind::kDictKeys
                                                      : ListObj::Kind::kDictValues);
}

absl::StatusOr<Value> ListMethod(const Value& l, const std::string& name, CallArgs& args) {
  if (name == "copy") {
    BIND("copy");
    return Value::List(l.list->items, l.list->kind);
  }
  BIND(name.c_str(), "value");
  if (!b.Get(0)) return Err(name + "() takes exactly one argument");
  int64_t n = 0;
  for (size_t k = 0; k < l.list->items.size(); ++k) {
    if (!Equal(l.list->items[k], *b.Get(0))) continue;
    if (name == "index") return Value::Int(static_cast<int64_t>(k));
    ++n;
  }
  if (name == "index") return Err("list.index(x): x not in list");
  return Value::Int(n);
}

Value Bound(const Value& obj, const std::string& name,
            absl::StatusOr<Value> (*fn)(const Value&, const std::string&, CallArgs&)) {
  return Value::Callable(name, [obj, name, fn](Interpreter&, CallArgs& args) { return fn(obj, name, args); });
}

}  // namespace

absl::StatusOr<std::optional<Value>> GetMethod(const Value& obj, const std::string& name) {
  static const std::unordered_set<std::string> kStr = {
      "strip",   "lstrip",       "rstrip",       "split",     "rsplit",     "startswith", "endswith",   "find",
      "rfind",   "index",        "rindex",       "upper",     "lower",      "title",      "capitalize", "casefold",
      "replace", "format",       "join",         "count",     "splitlines", "isdigit",    "isnumeric",  "isdecimal",
      "isalpha", "isalnum",      "isspace",      "isupper",   "islower",    "center",     "ljust",      "rjust",
      "zfill",   "removeprefix", "removesuffix", "partition", "rpartition"};
  static const std::unordered_set<std::string> kDict = {"get", "items", "keys", "values", "copy"};
  static const std::unordered_set<std::string> kDictUnsafe = {"pop", "popitem", "update", "setdefault", "clear"};
  static const std::unordered_set<std::string> kList = {"index", "count", "copy"};
  static const std::unordered_set<std::string> kListUnsafe = {"append", "extend",  "insert", "pop",
                                                              "remove", "reverse", "sort",   "clear"};
  auto unsafe = [&]() -> absl::StatusOr<std::optional<Value>> {
    return std::optional<Value>(
        Value::Undefined(absl::StrCat("access to attribute '", name, "' of '", TypeName(obj), "' object is unsafe.")));
  };
  if (obj.is_string() && kStr.count(name)) {
    return std::optional<Value>(
        Bound(obj, name, [](const Value& o, const std::string& n, CallArgs& a) { return StrMethod(o.s, n, a); }));
  }
  if (obj.is_dict() && !obj.dict->is_namespace) {
    if (kDictUnsafe.count(name)) return unsafe();
    if (kDict.count(name)) return std::optional<Value>(Bound(obj, name, DictMethod));
  }
  if (obj.is_seq()) {
    if (kListUnsafe.count(name)) return unsafe();
    if (kList.count(name)) return std::optional<Value>(Bound(obj, name, ListMethod));
  }
  return std::optional<Value>();
}

namespace {

absl::StatusOr<Value> Range(Interpreter& in, CallArgs& args) {
  if (!args.kw.empty() || args.pos.empty() || args.pos.size() > 3) return Err("range expects 1 to 3 integer arguments");
  for (const auto& a : args.pos) {
    if (a.type != Value::Type::kInt && a.type != Value::Type::kBool) {
      return Err(absl::StrCat("'", TypeName(a), "' object cannot be interpreted as an integer"));
    }
  }
  int64_t start = 0, stop = 0, step = 1;
  if (args.pos.size() == 1)
    stop = args.pos[0].as_int();
  else {
    start = args.pos[0].as_int();
    stop = args.pos[1].as_int();
    if (args.pos.size() == 3) step = args.pos[2].as_int();
  }
  if (step == 0) return Err("range() arg 3 must not be zero");
  const __int128 span = step > 0 ? static_cast<__int128>(stop) - start : static_cast<__int128>(start) - stop;
  const __int128 st = step > 0 ? static_cast<__int128>(step) : -static_cast<__int128>(step);
  const __int128 count = span <= 0 ? 0 : (span + st - 1) / st;
  if (count > 100000) return Err("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> out;
  int64_t cur = start;
  for (int64_t k = 0; k < count; ++k) {
    if (step > 0 ? cur >= stop : cur <= stop) break;
    out.push_back(Value::Int(cur));
    if (__builtin_add_overflow(cur, step, &cur)) break;
  }
  (void)in;
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MakeDict(CallArgs& args, bool ns) {
  Value d = Value::Dict();
  d.dict->is_namespace = ns;
  if (args.pos.size() > 1) return Err("expected at most 1 positional argument");
  if (args.pos.size() == 1) {
    const Value& src = args.pos[0];
    if (src.is_dict() && !src.dict->is_namespace) {
      d.dict->entries = src.dict->entries;
    } else {
      HERD_ASSIGN_OR_RETURN(auto items, Iterate(src));
      for (const auto& item : items) {
        if (!item.is_list() || item.list->items.size() != 2)
          return Err("dictionary update sequence element has wrong length");
        d.dict->Set(item.list->items[0], item.list->items[1]);
      }
    }
  }
  for (auto& [k, v] : args.kw) d.dict->Set(Value::String(k), v);
  return d;
}

absl::StatusOr<Value> StrftimeNow(Interpreter& in, CallArgs& args) {
  if (args.pos.size() != 1 || !args.pos[0].is_string() || !args.kw.empty()) {
    return Err("strftime_now expects one format string");
  }
  std::tm tm{};
  if (in.now()) {
    const std::time_t t = static_cast<std::time_t>(*in.now());
    gmtime_r(&t, &tm);
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  const std::string& fmt = args.pos[0].s;
  if (fmt.empty()) return Value::String("");
  std::string buf(fmt.size() * 8 + 256, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  if (n == 0) return Err("strftime_now: format produced no output or is too long");
  buf.resize(n);
  return Value::String(std::move(buf));
}

}  // namespace

void AddGlobals(Interpreter&, Scope* scope) {
  scope->vars["range"] = Value::Callable("range", Range);
  scope->vars["dict"] = Value::Callable("dict", [](Interpreter&, CallArgs& a) { return MakeDict(a, false); });
  scope->vars["namespace"] = Value::Callable("namespace", [](Interpreter& in, CallArgs& a) -> absl::StatusOr<Value> {
    auto d = MakeDict(a, true);
    if (d.ok()) in.Track(*d);
    return d;
  });
  scope->vars["raise_exception"] =
      Value::Callable("raise_exception", [](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
        std::string msg = "raise_exception called";
        if (!a.pos.empty()) {
          auto s = ToStr(a.pos[0]);
          if (s.ok()) msg = *s;
        }
        return RaisedError(msg);
      });
  scope->vars["strftime_now"] = Value::Callable("strftime_now", StrftimeNow);
}

}  // namespace herd::chat::internal
