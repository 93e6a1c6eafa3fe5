#include "libs/chat/interpreter.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/chat/ops.h"

namespace herd::chat::internal {

Interpreter::Interpreter(RenderLimits limits, std::optional<int64_t> now_utc_seconds)
    : limits_(limits), now_(now_utc_seconds) {}

Interpreter::~Interpreter() {
  // namespace() objects are the only mutable values: clearing them breaks any reference
  // cycle a template built through them (ns.self = ns), so nothing leaks.
  for (auto& ns : namespaces_) ns->entries.clear();
}

Scope* Interpreter::NewScope(Scope* parent) {
  scopes_.push_back(std::make_unique<Scope>());
  scopes_.back()->parent = parent;
  return scopes_.back().get();
}

const Value* Interpreter::Lookup(Scope* scope, const std::string& name) const {
  for (Scope* s = scope; s; s = s->parent) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

absl::Status Interpreter::CountIteration() {
  if (++iterations_ > limits_.max_iterations) {
    return absl::InvalidArgumentError(
        absl::StrCat("template exceeded the limit of ", limits_.max_iterations, " loop iterations and calls"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Append(std::string* out, std::string_view text) {
  if (out->size() + text.size() > limits_.max_output_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("template output exceeds the limit of ", limits_.max_output_bytes, " bytes"));
  }
  out->append(text);
  return absl::OkStatus();
}

absl::Status Interpreter::CheckStack() const {
  char here = 0;
  const uintptr_t now = reinterpret_cast<uintptr_t>(&here);
  const uintptr_t used = now > stack_base_ ? now - stack_base_ : stack_base_ - now;
  if (used > limits_.max_stack_bytes) {
    return absl::InvalidArgumentError("template nesting too deep (blocks, expressions and macro calls)");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Interpreter::Render(const Body& body, const DictObj& vars) {
  char base = 0;
  stack_base_ = reinterpret_cast<uintptr_t>(&base);
  Scope* globals = NewScope(nullptr);
  AddGlobals(*this, globals);
  Scope* top = NewScope(globals);
  for (const auto& e : vars.entries) {
    if (e.first.is_string()) top->vars[e.first.s] = e.second;
  }
  std::string out;
  HERD_RETURN_IF_ERROR(Exec(body, top, &out));
  return out;
}

absl::Status Interpreter::Exec(const Body& body, Scope* scope, std::string* out) {
  HERD_RETURN_IF_ERROR(CheckStack());
  for (const auto& s : body) {
    if (auto st = ExecStmt(*s, scope, out); !st.ok()) {
      if (!located_ && st.code() == absl::StatusCode::kInvalidArgument) {
        located_ = true;
        return absl::InvalidArgumentError(absl::StrCat(s->line, ":", s->col, ": ", st.message()));
      }
      located_ = true;
      return st;
    }
    if (flow_ != Flow::kNone) return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status Interpreter::ExecStmt(const Stmt& s, Scope* scope, std::string* out) {
  switch (s.kind) {
    case Stmt::Kind::kText:
      return Append(out, s.text);
    case Stmt::Kind::kOutput: {
      HERD_ASSIGN_OR_RETURN(auto v, Eval(*s.expr, scope));
      HERD_ASSIGN_OR_RETURN(auto str, ToStr(v));
      return Append(out, str);
    }
    case Stmt::Kind::kIf:
      return ExecIf(s, scope, out);
    case Stmt::Kind::kFor:
      return ExecFor(s, scope, out);
    case Stmt::Kind::kSet:
    case Stmt::Kind::kSetBlock:
      return ExecSet(s, scope, out);
    case Stmt::Kind::kMacro:
      scope->vars[s.name] = MakeMacro(s, scope, s.name);
      return absl::OkStatus();
    case Stmt::Kind::kCallBlock:
      return ExecCallBlock(s, scope, out);
    case Stmt::Kind::kFilterBlock: {
      std::string buf;  // the body has its own scope, as in Jinja2
      HERD_RETURN_IF_ERROR(Exec(s.body, NewScope(scope), &buf));
      block_value_ = Value::String(std::move(buf));
      HERD_ASSIGN_OR_RETURN(auto v, Eval(*s.expr, scope));
      HERD_ASSIGN_OR_RETURN(auto str, ToStr(v));
      return Append(out, str);
    }
    case Stmt::Kind::kBreak:
      flow_ = Flow::kBreak;
      return absl::OkStatus();
    case Stmt::Kind::kContinue:
      flow_ = Flow::kContinue;
      return absl::OkStatus();
    case Stmt::Kind::kScope:
      return Exec(s.body, scope, out);
  }
  return absl::InternalError("unknown statement");
}

absl::Status Interpreter::ExecIf(const Stmt& s, Scope* scope, std::string* out) {
  for (size_t k = 0; k < s.conds.size(); ++k) {
    HERD_ASSIGN_OR_RETURN(auto c, Eval(*s.conds[k], scope));
    if (Truthy(c)) return Exec(s.bodies[k], scope, out);
  }
  return Exec(s.else_body, scope, out);
}

absl::Status Interpreter::BindTargets(const std::vector<std::string>& targets, const Value& item, Scope* scope) {
  if (targets.size() == 1) {
    scope->vars[targets[0]] = item;
    return absl::OkStatus();
  }
  if (item.is_undefined()) return UndefinedError(item);
  auto parts = Iterate(item);
  if (!parts.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot unpack non-iterable ", TypeName(item), " object"));
  }
  if (parts->size() != targets.size()) {
    return absl::InvalidArgumentError(absl::StrCat(parts->size() > targets.size()
                                                       ? "too many values to unpack (expected "
                                                       : "not enough values to unpack (expected ",
                                                   targets.size(), ", got ", parts->size(), ")"));
  }
  for (size_t k = 0; k < targets.size(); ++k) scope->vars[targets[k]] = (*parts)[k];
  return absl::OkStatus();
}

Value Interpreter::MakeLoop(const std::vector<Value>& items, size_t k) {
  const int64_t n = static_cast<int64_t>(items.size());
  const int64_t i = static_cast<int64_t>(k);
  Value loop = Value::Dict();
  auto& d = *loop.dict;
  d.entries.reserve(12);
  auto add = [&d](Value k, Value v) { d.entries.emplace_back(std::move(k), std::move(v)); };
  add(Value::String("index"), Value::Int(i + 1));
  add(Value::String("index0"), Value::Int(i));
  add(Value::String("revindex"), Value::Int(n - i));
  add(Value::String("revindex0"), Value::Int(n - i - 1));
  add(Value::String("first"), Value::Bool(i == 0));
  add(Value::String("last"), Value::Bool(i == n - 1));
  add(Value::String("length"), Value::Int(n));
  add(Value::String("depth"), Value::Int(1));
  add(Value::String("depth0"), Value::Int(0));
  add(Value::String("previtem"), i > 0 ? items[k - 1] : Value::Undefined("there is no previous item"));
  add(Value::String("nextitem"), i + 1 < n ? items[k + 1] : Value::Undefined("there is no next item"));
  add(Value::String("cycle"), Value::Callable("cycle", [i](Interpreter&, CallArgs& a) -> absl::StatusOr<Value> {
        if (a.pos.empty()) return absl::InvalidArgumentError("no items for cycling given");
        return a.pos[static_cast<size_t>(i) % a.pos.size()];
      }));
  return loop;
}

absl::Status Interpreter::ExecFor(const Stmt& s, Scope* scope, std::string* out) {
  HERD_ASSIGN_OR_RETURN(auto iter, Eval(*s.expr, scope));
  HERD_ASSIGN_OR_RETURN(auto all, Iterate(iter));
  Scope* ls = NewScope(scope);
  std::vector<Value> items;
  if (s.cond) {
    for (const auto& item : all) {
      HERD_RETURN_IF_ERROR(BindTargets(s.targets, item, ls));
      HERD_ASSIGN_OR_RETURN(auto keep, Eval(*s.cond, ls));
      if (Truthy(keep)) items.push_back(item);
    }
  } else {
    items = std::move(all);
  }
  // Jinja2 runs the else block unless some iteration reached the end of the body (an
  // iteration left by break or continue does not count).
  bool completed = false;
  for (size_t k = 0; k < items.size(); ++k) {
    HERD_RETURN_IF_ERROR(CountIteration());
    ls->vars.clear();  // Jinja2: what one iteration sets is gone in the next
    HERD_RETURN_IF_ERROR(BindTargets(s.targets, items[k], ls));
    ls->vars["loop"] = MakeLoop(items, k);
    HERD_RETURN_IF_ERROR(Exec(s.body, ls, out));
    const Flow f = flow_;
    flow_ = Flow::kNone;
    if (f == Flow::kNone) completed = true;
    if (f == Flow::kBreak) break;
  }
  if (!completed) return Exec(s.else_body, scope, out);
  return absl::OkStatus();
}

absl::Status Interpreter::Assign(const Expr& target, const Value& v, Scope* scope) {
  if (target.kind == Expr::Kind::kName) {
    scope->vars[target.name] = v;
    return absl::OkStatus();
  }
  if (target.kind == Expr::Kind::kTuple) {
    std::vector<std::string> names;
    for (const auto& t : target.args) names.push_back(t->name);
    return BindTargets(names, v, scope);
  }
  const std::string& ns_name = target.args[0]->name;
  const Value* ns = Lookup(scope, ns_name);
  if (!ns || !ns->is_dict() || !ns->dict->is_namespace) {
    return absl::InvalidArgumentError(absl::StrCat("cannot assign attribute on non-namespace object '", ns_name, "'"));
  }
  ns->dict->Set(Value::String(target.name), v);
  return absl::OkStatus();
}

absl::Status Interpreter::ExecSet(const Stmt& s, Scope* scope, std::string*) {
  if (s.kind == Stmt::Kind::kSet) {
    HERD_ASSIGN_OR_RETURN(auto v, Eval(*s.expr, scope));
    return Assign(*s.target, v, scope);
  }
  std::string buf;  // the body has its own scope, as in Jinja2
  HERD_RETURN_IF_ERROR(Exec(s.body, NewScope(scope), &buf));
  Value v = Value::String(std::move(buf));
  if (s.expr) {
    block_value_ = v;
    HERD_ASSIGN_OR_RETURN(auto f, Eval(*s.expr, scope));
    v = std::move(f);
  }
  return Assign(*s.target, v, scope);
}

Value Interpreter::MakeMacro(const Stmt& s, Scope* scope, std::string name) {
  const Stmt* stmt = &s;
  return Value::Callable(std::move(name),
                         [stmt, scope](Interpreter& in, CallArgs& args) { return in.CallMacro(*stmt, scope, args); });
}

absl::StatusOr<Value> Interpreter::CallMacro(const Stmt& s, Scope* scope, CallArgs& args) {
  if (depth_ >= limits_.max_call_depth) {
    return absl::InvalidArgumentError(absl::StrCat("macro calls nested deeper than ", limits_.max_call_depth));
  }
  HERD_RETURN_IF_ERROR(CountIteration());
  Scope* ms = NewScope(scope);
  std::vector<bool> bound(s.params.size(), false);
  std::vector<Value> varargs;
  for (size_t k = 0; k < args.pos.size(); ++k) {
    if (k < s.params.size()) {
      ms->vars[s.params[k].name] = args.pos[k];
      bound[k] = true;
    } else {
      varargs.push_back(args.pos[k]);
    }
  }
  Value kwargs = Value::Dict();
  for (auto& [key, v] : args.kw) {
    bool matched = false;
    for (size_t k = 0; k < s.params.size(); ++k) {
      if (s.params[k].name == key) {
        ms->vars[key] = v;
        bound[k] = matched = true;
      }
    }
    if (!matched && key == "caller")
      ms->vars["caller"] = v;
    else if (!matched)
      kwargs.dict->Set(Value::String(key), v);
  }
  for (size_t k = 0; k < s.params.size(); ++k) {
    if (bound[k]) continue;
    if (s.params[k].default_value) {
      HERD_ASSIGN_OR_RETURN(auto d, Eval(*s.params[k].default_value, ms));
      ms->vars[s.params[k].name] = std::move(d);
    } else {
      ms->vars[s.params[k].name] =
          Value::Undefined(absl::StrCat("parameter '", s.params[k].name, "' was not provided"));
    }
  }
  ms->vars["varargs"] = Value::Tuple(std::move(varargs));
  ms->vars["kwargs"] = kwargs;
  std::string buf;
  const Flow saved = flow_;
  flow_ = Flow::kNone;
  ++depth_;
  absl::Status st = Exec(s.body, ms, &buf);
  --depth_;
  flow_ = saved;
  if (!st.ok()) return st;
  return Value::String(std::move(buf));
}

absl::Status Interpreter::ExecCallBlock(const Stmt& s, Scope* scope, std::string* out) {
  const Expr& call = *s.expr;
  HERD_ASSIGN_OR_RETURN(auto fn, Eval(*call.args[0], scope));
  CallArgs args;
  HERD_RETURN_IF_ERROR(EvalArgs(call, scope, 1, &args));
  args.kw.emplace_back("caller", MakeMacro(s, scope, "caller"));
  HERD_ASSIGN_OR_RETURN(auto r, Call(fn, args));
  HERD_ASSIGN_OR_RETURN(auto str, ToStr(r));
  return Append(out, str);
}

}  // namespace herd::chat::internal
