// The evaluator of the chat-template interpreter: renders a parsed template (ast.h)
// with Jinja2 3.1's semantics in transformers' ImmutableSandboxedEnvironment. Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/chat/ast.h"
#include "libs/chat/value.h"

namespace herd::chat::internal {

struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;  // any one output buffer
  int max_call_depth = 64;                     // macro calls and nested blocks
  int64_t max_iterations = 1000000;            // loop iterations + macro calls, in total
  size_t max_stack_bytes = size_t{1} << 20;    // machine stack the render may use
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;
};

class Interpreter {
 public:
  /// now_utc_seconds: the time strftime_now formats (in UTC); nullopt = real local time.
  Interpreter(RenderLimits limits, std::optional<int64_t> now_utc_seconds);
  ~Interpreter();

  /// Renders body with the given top-level variables (plus the globals).
  absl::StatusOr<std::string> Render(const Body& body, const DictObj& vars);

  // ---- used by the builtins ----
  absl::StatusOr<Value> Call(const Value& fn, CallArgs& args);
  absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, CallArgs& args);
  absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, CallArgs& args);
  /// Jinja2's environment.getattr (attribute, then item) in the immutable sandbox.
  absl::StatusOr<Value> GetAttr(const Value& obj, const std::string& name);
  /// Jinja2's environment.getitem (item, then attribute).
  absl::StatusOr<Value> GetItem(const Value& obj, const Value& key);
  std::optional<int64_t> now() const { return now_; }
  /// Registers a namespace() object so that reference cycles through it are broken
  /// when rendering ends.
  void Track(const Value& ns) { namespaces_.push_back(ns.dict); }
  absl::Status CountIteration();

 private:
  enum class Flow { kNone, kBreak, kContinue };

  Scope* NewScope(Scope* parent);
  const Value* Lookup(Scope* scope, const std::string& name) const;

  absl::Status Exec(const Body& body, Scope* scope, std::string* out);
  absl::Status ExecStmt(const Stmt& s, Scope* scope, std::string* out);
  absl::Status ExecIf(const Stmt& s, Scope* scope, std::string* out);
  absl::Status ExecFor(const Stmt& s, Scope* scope, std::string* out);
  absl::Status ExecSet(const Stmt& s, Scope* scope, std::string* out);
  absl::Status ExecCallBlock(const Stmt& s, Scope* scope, std::string* out);
  absl::Status Assign(const Expr& target, const Value& v, Scope* scope);
  absl::Status BindTargets(const std::vector<std::string>& targets, const Value& item, Scope* scope);
  Value MakeLoop(const std::vector<Value>& items, size_t k);
  Value MakeMacro(const Stmt& s, Scope* scope, std::string name);
  absl::StatusOr<Value> CallMacro(const Stmt& s, Scope* scope, CallArgs& args);
  absl::Status Append(std::string* out, std::string_view text);
  /// INVALID_ARGUMENT once the render has used more than max_stack_bytes of stack
  /// (deeply nested blocks and expressions inside recursive macros).
  absl::Status CheckStack() const;

  absl::StatusOr<Value> Eval(const Expr& e, Scope* scope);
  absl::StatusOr<Value> EvalNode(const Expr& e, Scope* scope);
  absl::StatusOr<Value> EvalCompare(const Expr& e, Scope* scope);
  absl::StatusOr<Value> EvalCallLike(const Expr& e, Scope* scope);
  absl::Status EvalArgs(const Expr& e, Scope* scope, size_t first, CallArgs* args);
  absl::StatusOr<Value> EvalCollection(const Expr& e, Scope* scope);

  RenderLimits limits_;
  std::optional<int64_t> now_;
  std::vector<std::unique_ptr<Scope>> scopes_;
  std::vector<std::shared_ptr<DictObj>> namespaces_;
  Flow flow_ = Flow::kNone;
  int depth_ = 0;
  int64_t iterations_ = 0;
  bool located_ = false;
  uintptr_t stack_base_ = 0;
  Value block_value_;
};

// ---- builtins (filters.cc, methods.cc) ----

/// Applies filter `name` (Jinja2's builtin filters + transformers' tojson).
absl::StatusOr<Value> CallFilter(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
/// Whether a filter of that name exists (the `filter` test).
bool HasFilter(const std::string& name);
/// Applies test `name` (Jinja2's builtin tests).
absl::StatusOr<bool> CallTest(Interpreter& in, const std::string& name, const Value& v, CallArgs& args);
/// A bound method of str/dict/list as the immutable sandbox allows; nullopt when obj has
/// no such attribute; an error for the mutating methods the sandbox refuses.
absl::StatusOr<std::optional<Value>> GetMethod(const Value& obj, const std::string& name);
/// The globals: range, dict, namespace, raise_exception, strftime_now.
void AddGlobals(Interpreter& in, Scope* scope);

/// Binds call arguments to parameter names like Python does (positional first, then
/// keywords); INVALID_ARGUMENT for unknown keywords or too many arguments.
class ArgBinder {
 public:
  ArgBinder(const char* fn, CallArgs& args, std::vector<const char*> names);
  const absl::Status& status() const { return status_; }
  /// The bound value of parameter k, or nullptr when not given.
  const Value* Get(size_t k) const { return k < bound_.size() ? bound_[k] : nullptr; }
  const Value& Get(size_t k, const Value& dflt) const {
    const Value* v = Get(k);
    return v ? *v : dflt;
  }
  /// Positional arguments beyond the named parameters (for *args functions).
  std::vector<Value> rest;

 private:
  std::vector<const Value*> bound_;
  absl::Status status_;
};

/// FAILED_PRECONDITION status used for raise_exception (so callers can tell it apart).
absl::Status RaisedError(const std::string& msg);

}  // namespace herd::chat::internal
