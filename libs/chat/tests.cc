// Jinja2's builtin tests (`x is defined`, `x is string`, ...) for the chat-template interpreter.
#include <unordered_map>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/chat/interpreter.h"
#include "libs/chat/ops.h"
#include "libs/chat/strings.h"

namespace herd::chat::internal {

namespace {

using TestFn = absl::StatusOr<bool> (*)(const Value&, const Value*);

// str(value).islower() / .isupper(): has cased characters, all of one case.
bool IsLowerStr(const Value& v, bool upper) {
  auto s = ToStr(v);
  if (!s.ok()) return false;
  const std::string lo = PyLower(*s), up = PyUpper(*s);
  return upper ? (up == *s && lo != *s) : (lo == *s && up != *s);
}

absl::StatusOr<bool> Cmp(const char* op, const Value& v, const Value* arg) {
  if (!arg) return absl::InvalidArgumentError(absl::StrCat("test '", op, "' needs an argument"));
  return CompareOp(op, v, *arg);
}

const std::unordered_map<std::string, TestFn>& Tests() {
  using V = const Value&;
  using A = const Value*;
  static const auto* table = new std::unordered_map<std::string, TestFn>{
      {"defined", [](V v, A) -> absl::StatusOr<bool> { return !v.is_undefined(); }},
      {"undefined", [](V v, A) -> absl::StatusOr<bool> { return v.is_undefined(); }},
      {"none", [](V v, A) -> absl::StatusOr<bool> { return v.is_none(); }},
      {"string", [](V v, A) -> absl::StatusOr<bool> { return v.is_string(); }},
      {"number", [](V v, A) -> absl::StatusOr<bool> { return v.is_number(); }},
      {"integer", [](V v, A) -> absl::StatusOr<bool> { return v.type == Value::Type::kInt; }},
      {"float", [](V v, A) -> absl::StatusOr<bool> { return v.type == Value::Type::kFloat; }},
      {"boolean", [](V v, A) -> absl::StatusOr<bool> { return v.type == Value::Type::kBool; }},
      {"true", [](V v, A) -> absl::StatusOr<bool> { return v.type == Value::Type::kBool && v.b; }},
      {"false", [](V v, A) -> absl::StatusOr<bool> { return v.type == Value::Type::kBool && !v.b; }},
      {"mapping", [](V v, A) -> absl::StatusOr<bool> { return v.is_dict() && !v.dict->is_namespace; }},
      {"sequence",
       [](V v, A) -> absl::StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_seq() || (v.is_dict() && !v.dict->is_namespace);
       }},
      {"iterable",
       [](V v, A) -> absl::StatusOr<bool> {
         return v.is_undefined() || v.is_string() || v.is_list() || (v.is_dict() && !v.dict->is_namespace);
       }},
      {"callable", [](V v, A) -> absl::StatusOr<bool> { return v.type == Value::Type::kCallable; }},
      {"escaped", [](V, A) -> absl::StatusOr<bool> { return false; }},
      {"lower", [](V v, A) -> absl::StatusOr<bool> { return IsLowerStr(v, false); }},
      {"upper", [](V v, A) -> absl::StatusOr<bool> { return IsLowerStr(v, true); }},
      {"odd",
       [](V v, A) -> absl::StatusOr<bool> {
         HERD_ASSIGN_OR_RETURN(auto r, BinaryOp("%", v, Value::Int(2)));
         return Equal(r, Value::Int(1));
       }},
      {"even",
       [](V v, A) -> absl::StatusOr<bool> {
         HERD_ASSIGN_OR_RETURN(auto r, BinaryOp("%", v, Value::Int(2)));
         return Equal(r, Value::Int(0));
       }},
      {"divisibleby",
       [](V v, A a) -> absl::StatusOr<bool> {
         if (!a) return absl::InvalidArgumentError("divisibleby needs an argument");
         HERD_ASSIGN_OR_RETURN(auto r, BinaryOp("%", v, *a));
         return !Truthy(r);
       }},
      {"equalto", [](V v, A a) { return Cmp("==", v, a); }},
      {"eq", [](V v, A a) { return Cmp("==", v, a); }},
      {"==", [](V v, A a) { return Cmp("==", v, a); }},
      {"ne", [](V v, A a) { return Cmp("!=", v, a); }},
      {"!=", [](V v, A a) { return Cmp("!=", v, a); }},
      {"lt", [](V v, A a) { return Cmp("<", v, a); }},
      {"lessthan", [](V v, A a) { return Cmp("<", v, a); }},
      {"<", [](V v, A a) { return Cmp("<", v, a); }},
      {"le", [](V v, A a) { return Cmp("<=", v, a); }},
      {"<=", [](V v, A a) { return Cmp("<=", v, a); }},
      {"gt", [](V v, A a) { return Cmp(">", v, a); }},
      {"greaterthan", [](V v, A a) { return Cmp(">", v, a); }},
      {">", [](V v, A a) { return Cmp(">", v, a); }},
      {"ge", [](V v, A a) { return Cmp(">=", v, a); }},
      {">=", [](V v, A a) { return Cmp(">=", v, a); }},
      {"in", [](V v, A a) { return Cmp("in", v, a); }},
      {"sameas",
       [](V v,
          A a) -> absl::
                   StatusOr<bool> {
                     if (!a) return absl::InvalidArgumentError("sameas needs an argument");
                     if (v.type != a->type) return false;
                     if (v.is_list()) return v.list == a->list;
                     if (v.is_dict()) return v.dict == a->dict;
                     if (v.type == Value::Type::kCallable) return v.fn == a->fn;
                     return Equal(v, *a);
                   }},
  };
  return *table;
}

}  // namespace

absl::StatusOr<bool> CallTest(Interpreter&, const std::string& name, const Value& v, CallArgs& args) {
  if (name == "filter" || name == "test") {
    if (!v.is_string()) return false;
    return name == "filter" ? HasFilter(v.s) : Tests().count(v.s) > 0;
  }
  auto it = Tests().find(name);
  if (it == Tests().end()) return absl::InvalidArgumentError(absl::StrCat("No test named '", name, "'."));
  if (args.pos.size() > 1 || !args.kw.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("test '", name, "': too many arguments"));
  }
  return it->second(v, args.pos.empty() ? nullptr : args.pos.data());
}

}  // namespace herd::chat::internal
