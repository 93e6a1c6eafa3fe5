// Expression evaluation of the chat-template interpreter.
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/chat/interpreter.h"
#include "libs/chat/ops.h"

namespace herd::chat::internal {

absl::StatusOr<Value> Interpreter::Eval(const Expr& e, Scope* scope) {
  HERD_RETURN_IF_ERROR(CheckStack());
  return EvalNode(e, scope);
}

absl::StatusOr<Value> Interpreter::EvalNode(const Expr& e, Scope* scope) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName: {
      if (const Value* v = Lookup(scope, e.name)) return *v;
      return Value::Undefined(absl::StrCat("'", e.name, "' is undefined"));
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple:
    case Expr::Kind::kDict:
      return EvalCollection(e, scope);
    case Expr::Kind::kGetAttr: {
      HERD_ASSIGN_OR_RETURN(auto obj, Eval(*e.args[0], scope));
      return GetAttr(obj, e.name);
    }
    case Expr::Kind::kGetItem: {
      HERD_ASSIGN_OR_RETURN(auto obj, Eval(*e.args[0], scope));
      HERD_ASSIGN_OR_RETURN(auto key, Eval(*e.args[1], scope));
      return GetItem(obj, key);
    }
    case Expr::Kind::kSlice: {
      Value parts[4];
      for (int k = 0; k < 4; ++k) {
        if (!e.args[k]) {
          parts[k] = Value::None();
          continue;
        }
        HERD_ASSIGN_OR_RETURN(auto v, Eval(*e.args[k], scope));
        parts[k] = std::move(v);
      }
      return SliceOf(parts[0], parts[1], parts[2], parts[3]);
    }
    case Expr::Kind::kCall:
    case Expr::Kind::kFilter:
    case Expr::Kind::kTest:
      return EvalCallLike(e, scope);
    case Expr::Kind::kNeg:
    case Expr::Kind::kPos: {
      HERD_ASSIGN_OR_RETURN(auto v, Eval(*e.args[0], scope));
      if (v.is_undefined()) return UndefinedError(v);
      if (!v.is_number()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bad operand type for unary ", e.kind == Expr::Kind::kNeg ? "-" : "+", ": '", TypeName(v), "'"));
      }
      if (e.kind == Expr::Kind::kPos) return v.type == Value::Type::kBool ? Value::Int(v.as_int()) : v;
      if (v.type == Value::Type::kFloat) return Value::Float(-v.f);
      if (v.as_int() == INT64_MIN) return absl::InvalidArgumentError("integer overflow");
      return Value::Int(-v.as_int());
    }
    case Expr::Kind::kNot: {
      HERD_ASSIGN_OR_RETURN(auto v, Eval(*e.args[0], scope));
      return Value::Bool(!Truthy(v));
    }
    case Expr::Kind::kBinary: {
      HERD_ASSIGN_OR_RETURN(auto a, Eval(*e.args[0], scope));
      HERD_ASSIGN_OR_RETURN(auto b, Eval(*e.args[1], scope));
      return BinaryOp(e.name, a, b);
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      auto a = Eval(*e.args[0], scope);
      if (!a.ok()) return a;
      if (Truthy(*a) == (e.kind == Expr::Kind::kOr)) return a;
      return Eval(*e.args[1], scope);
    }
    case Expr::Kind::kCompare:
      return EvalCompare(e, scope);
    case Expr::Kind::kCond: {
      HERD_ASSIGN_OR_RETURN(auto c, Eval(*e.args[0], scope));
      if (Truthy(c)) return Eval(*e.args[1], scope);
      if (e.args[2]) return Eval(*e.args[2], scope);
      return Value::Undefined(absl::StrCat("the inline if-expression on line ", e.line,
                                           " evaluated to false and no else section was defined."));
    }
    case Expr::Kind::kBlockValue:
      return block_value_;
  }
  return absl::InternalError("unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalCollection(const Expr& e, Scope* scope) {
  std::vector<Value> vals;
  for (const auto& a : e.args) {
    HERD_ASSIGN_OR_RETURN(auto v, Eval(*a, scope));
    vals.push_back(std::move(v));
  }
  if (e.kind == Expr::Kind::kList) return Value::List(std::move(vals));
  if (e.kind == Expr::Kind::kTuple) return Value::Tuple(std::move(vals));
  Value d = Value::Dict();
  for (size_t k = 0; k + 1 < vals.size(); k += 2) {
    if (vals[k].is_list() && !vals[k].is_tuple()) return absl::InvalidArgumentError("unhashable type: 'list'");
    if (vals[k].is_dict()) return absl::InvalidArgumentError("unhashable type: 'dict'");
    d.dict->Set(vals[k], vals[k + 1]);
  }
  return d;
}

absl::StatusOr<Value> Interpreter::EvalCompare(const Expr& e, Scope* scope) {
  HERD_ASSIGN_OR_RETURN(auto left, Eval(*e.args[0], scope));
  Value a = std::move(left);
  for (size_t k = 0; k < e.ops.size(); ++k) {
    HERD_ASSIGN_OR_RETURN(auto right, Eval(*e.args[k + 1], scope));
    HERD_ASSIGN_OR_RETURN(auto r, CompareOp(e.ops[k], a, right));
    if (!r) return Value::Bool(false);
    a = std::move(right);
  }
  return Value::Bool(true);
}

absl::Status Interpreter::EvalArgs(const Expr& e, Scope* scope, size_t first, CallArgs* args) {
  for (size_t k = first; k < e.args.size(); ++k) {
    HERD_ASSIGN_OR_RETURN(auto v, Eval(*e.args[k], scope));
    args->pos.push_back(std::move(v));
  }
  if (e.dyn_args) {
    HERD_ASSIGN_OR_RETURN(auto v, Eval(*e.dyn_args, scope));
    HERD_ASSIGN_OR_RETURN(auto items, Iterate(v));
    for (auto& item : items) args->pos.push_back(std::move(item));
  }
  for (const auto& [key, expr] : e.kwargs) {
    HERD_ASSIGN_OR_RETURN(auto v, Eval(*expr, scope));
    args->kw.emplace_back(key, std::move(v));
  }
  if (e.dyn_kwargs) {
    HERD_ASSIGN_OR_RETURN(auto v, Eval(*e.dyn_kwargs, scope));
    if (!v.is_dict() || v.dict->is_namespace) {
      return absl::InvalidArgumentError("argument after ** must be a mapping");
    }
    for (const auto& [key, val] : v.dict->entries) {
      if (!key.is_string()) return absl::InvalidArgumentError("keywords must be strings");
      args->kw.emplace_back(key.s, val);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::EvalCallLike(const Expr& e, Scope* scope) {
  HERD_ASSIGN_OR_RETURN(auto first, Eval(*e.args[0], scope));
  CallArgs args;
  HERD_RETURN_IF_ERROR(EvalArgs(e, scope, 1, &args));
  if (e.kind == Expr::Kind::kCall) return Call(first, args);
  if (e.kind == Expr::Kind::kFilter) return ApplyFilter(e.name, first, args);
  HERD_ASSIGN_OR_RETURN(auto t, ApplyTest(e.name, first, args));
  return Value::Bool(t);
}

absl::StatusOr<Value> Interpreter::Call(const Value& fn, CallArgs& args) {
  if (fn.type == Value::Type::kCallable) return fn.fn->fn(*this, args);
  if (fn.is_undefined()) return UndefinedError(fn);
  return absl::InvalidArgumentError(absl::StrCat("'", TypeName(fn), "' object is not callable"));
}

absl::StatusOr<Value> Interpreter::ApplyFilter(const std::string& name, const Value& v, CallArgs& args) {
  return CallFilter(*this, name, v, args);
}

absl::StatusOr<bool> Interpreter::ApplyTest(const std::string& name, const Value& v, CallArgs& args) {
  return CallTest(*this, name, v, args);
}

namespace {

// Jinja2's sandbox answers an unsafe attribute with an Undefined that fails when used.
Value Unsafe(const Value& obj, const std::string& name) {
  return Value::Undefined(absl::StrCat("access to attribute '", name, "' of '", TypeName(obj), "' object is unsafe."));
}

Value NoAttribute(const Value& obj, const std::string& name) {
  const std::string what = obj.is_none() ? "'None'" : absl::StrCat("'", TypeName(obj), " object'");
  return Value::Undefined(absl::StrCat(what, " has no attribute '", name, "'"));
}

}  // namespace

absl::StatusOr<Value> Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (absl::StartsWith(name, "_")) return Unsafe(obj, name);
  if (obj.is_dict() && obj.dict->is_namespace) {
    if (const Value* v = obj.dict->Find(name)) return *v;
    return NoAttribute(obj, name);
  }
  HERD_ASSIGN_OR_RETURN(auto m, GetMethod(obj, name));
  if (m.has_value()) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict->Find(name)) return *v;
  }
  return NoAttribute(obj, name);
}

absl::StatusOr<Value> Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict() && obj.dict->is_namespace && key.is_string()) return GetAttr(obj, key.s);
  auto r = ItemOf(obj, key);
  if (!r.ok() || !r->is_undefined()) return r;
  if (key.is_string()) {
    if (absl::StartsWith(key.s, "_")) return r;
    HERD_ASSIGN_OR_RETURN(auto m, GetMethod(obj, key.s));
    if (m.has_value()) return *m;
  }
  return r;
}

}  // namespace herd::chat::internal
