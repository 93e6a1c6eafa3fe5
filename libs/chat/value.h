// Internal value model of the chat-template interpreter: Python's values as Jinja2 sees
// them (None, bool, int, float, str, list, tuple, dict, generator results, callables)
// plus Jinja2's default Undefined. Not part of the public API (see chat_template.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace herd::chat::internal {

class Interpreter;
struct Value;

/// list, tuple, a one-shot iterator (what Jinja2's select/map/... filters return;
/// Python cannot print it usefully, take len() of it or serialize it), or a dict view
/// (dict.items()/keys()/values(): iterable and sized, not subscriptable or serializable).
struct ListObj {
  enum class Kind { kList, kTuple, kGenerator, kDictItems, kDictKeys, kDictValues };
  Kind kind = Kind::kList;
  std::vector<Value> items;
  ~ListObj();  // iterative: a template can build lists nested arbitrarily deep
};

/// An insertion-ordered dict (Python 3.7+ dict order); also Jinja2's namespace() object.
struct DictObj {
  bool is_namespace = false;
  std::vector<std::pair<Value, Value>> entries;
  ~DictObj();  // iterative, like ~ListObj
  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  void Set(Value key, Value value);
};

/// Arguments of a call: positional, then keyword, in source order.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

using NativeFn = std::function<absl::StatusOr<Value>(Interpreter&, CallArgs&)>;

/// Something callable: a global (range, namespace, ...), a bound method, a macro.
struct CallableObj {
  std::string name;
  NativeFn fn;
};

struct Value {
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  Type type = Type::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;        // the string; for Undefined, why it is undefined ("'x' is undefined")
  bool markup = false;  // a markupsafe.Markup string (|safe, |escape): `+` escapes plain str
  std::shared_ptr<ListObj> list;
  std::shared_ptr<DictObj> dict;
  std::shared_ptr<CallableObj> fn;

  static Value Undefined(std::string why);
  static Value None();
  static Value Bool(bool v);
  static Value Int(int64_t v);
  static Value Float(double v);
  static Value String(std::string v);
  static Value Markup(std::string v);
  static Value List(std::vector<Value> items = {}, ListObj::Kind kind = ListObj::Kind::kList);
  static Value Tuple(std::vector<Value> items);
  static Value Dict();
  static Value Callable(std::string name, NativeFn fn);

  bool is_undefined() const { return type == Type::kUndefined; }
  bool is_none() const { return type == Type::kNone; }
  bool is_string() const { return type == Type::kString; }
  bool is_number() const { return type == Type::kInt || type == Type::kFloat || type == Type::kBool; }
  bool is_list() const { return type == Type::kList; }  // list, tuple or generator
  bool is_dict() const { return type == Type::kDict; }
  bool is_generator() const { return is_list() && list->kind == ListObj::Kind::kGenerator; }
  /// A real sequence: list or tuple (not a generator or dict view).
  bool is_seq() const {
    return is_list() && (list->kind == ListObj::Kind::kList || list->kind == ListObj::Kind::kTuple);
  }
  bool is_tuple() const { return is_list() && list->kind == ListObj::Kind::kTuple; }
  double as_double() const { return type == Type::kFloat ? f : static_cast<double>(as_int()); }
  int64_t as_int() const { return type == Type::kBool ? (b ? 1 : 0) : i; }
};

/// markupsafe.escape of a plain string: & < > " ' as &amp; &lt; &gt; &#34; &#39;.
std::string HtmlEscape(std::string_view s);

/// Python truthiness (Undefined is false).
bool Truthy(const Value& v);
/// Python str(v); Undefined prints as "". Fails only on absurd nesting depth.
absl::StatusOr<std::string> ToStr(const Value& v);
/// Python repr(v).
absl::StatusOr<std::string> Repr(const Value& v);
/// Python float repr: shortest round-trip digits, "1.0", "1e+16", "inf", "nan".
std::string FloatRepr(double d);
/// Python type name for error messages ("str", "dict", "list", "NoneType", ...).
std::string TypeName(const Value& v);
/// Python ==.
bool Equal(const Value& a, const Value& b);
/// Python <: INVALID_ARGUMENT when the types cannot be ordered.
absl::StatusOr<bool> Less(const Value& a, const Value& b);

/// Converts parsed JSON (insertion order kept) to a Value. INVALID_ARGUMENT when it is
/// nested deeper than 512 levels.
absl::StatusOr<Value> FromJson(const nlohmann::ordered_json& j);

/// Python json.dumps(v, ensure_ascii, indent, separators, sort_keys); indent is null
/// (None), an int or a string; separators null or a 2-item list/tuple.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  Value indent = Value::None();
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
absl::StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& opt);

/// UTF-8 <-> code points (invalid bytes map to U+FFFD on decode).
std::u32string DecodeUtf8(std::string_view s);
std::string EncodeUtf8(std::u32string_view s);
void AppendUtf8(char32_t c, std::string* out);

}  // namespace herd::chat::internal
