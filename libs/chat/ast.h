// Syntax tree of a chat template (what the parser builds and the interpreter walks).
// Internal.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "libs/chat/value.h"

namespace herd::chat::internal {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // value
    kName,     // name
    kList,     // args
    kTuple,    // args
    kDict,     // args = k0, v0, k1, v1, ...
    kGetAttr,  // args[0] . name
    kGetItem,  // args[0] [ args[1] ]
    kSlice,    // args[0] [ args[1] : args[2] : args[3] ] (null parts allowed)
    kCall,     // args[0] ( call args )
    kFilter,   // name: call args with args[0] the filtered value
    kTest,     // name: call args with args[0] the tested value
    kNeg,      // - args[0]
    kPos,      // + args[0]
    kNot,      // not args[0]
    kBinary,   // args[0] name args[1]; name is + - * / // % ** ~
    kAnd,
    kOr,
    kCompare,     // args[0] ops[0] args[1] ops[1] args[2] ...
    kCond,        // args[1] if args[0] else args[2] (args[2] may be null)
    kBlockValue,  // the body of a {% filter %} or {% set x | f %} block
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int col = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  // Call-like nodes (kCall/kFilter/kTest): arguments after args[0].
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args;              // *expr
  ExprPtr dyn_kwargs;            // **expr
  std::vector<std::string> ops;  // kCompare: == != < <= > >= in notin
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // conds[i] -> bodies[i]; else_body
    kFor,          // targets in expr [if cond] : body; else_body
    kSet,          // target = expr (target: kName, kTuple of names, or kGetAttr on a namespace)
    kSetBlock,     // target = body, optionally through filter (expr with a kBlockValue inside)
    kMacro,        // name(params): body
    kCallBlock,    // expr is the call; params are caller's; body is caller's body
    kFilterBlock,  // expr applied to the rendered body
    kBreak,
    kContinue,
    kScope,  // body rendered in place ({% generation %})
  };
  Kind kind = Kind::kText;
  int line = 0;
  int col = 0;
  std::string text;
  std::string name;
  ExprPtr expr;
  ExprPtr target;
  ExprPtr cond;
  std::vector<std::string> targets;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<MacroParam> params;
};

}  // namespace herd::chat::internal
