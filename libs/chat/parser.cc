#include "libs/chat/parser.h"

#include <initializer_list>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/chat/lexer.h"

namespace herd::chat::internal {
namespace {

constexpr int kMaxDepth = 128;  // nesting of expressions and blocks

using T = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  absl::StatusOr<Body> Template() {
    Body body;
    std::string end;
    HERD_RETURN_IF_ERROR(SubParse({}, &body, &end));
    if (!end.empty()) return Fail(Cur(), absl::StrCat("unexpected '", end, "'"));
    return body;
  }

 private:
  const Token& Cur() const { return toks_[idx_]; }
  const Token& Peek(size_t n = 1) const { return toks_[std::min(idx_ + n, toks_.size() - 1)]; }
  void Next() {
    if (idx_ + 1 < toks_.size()) ++idx_;
  }
  bool IsOp(const char* op) const { return Cur().type == T::kOp && Cur().text == op; }
  bool IsName(const char* n) const { return Cur().type == T::kName && Cur().text == n; }
  bool SkipOp(const char* op) {
    if (!IsOp(op)) return false;
    Next();
    return true;
  }
  bool SkipName(const char* n) {
    if (!IsName(n)) return false;
    Next();
    return true;
  }

  static std::string Describe(const Token& t) {
    switch (t.type) {
      case T::kEof:
        return "end of template";
      case T::kVarEnd:
        return "'}}'";
      case T::kBlockEnd:
        return "'%}'";
      case T::kString:
        return "string";
      case T::kInt:
      case T::kFloat:
        return "number";
      default:
        return "'" + t.text + "'";
    }
  }

  absl::Status Fail(const Token& t, const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat(t.line, ":", t.col, ": ", what));
  }
  absl::Status Expect(const char* op) {
    if (SkipOp(op)) return absl::OkStatus();
    return Fail(Cur(), absl::StrCat("expected '", op, "', got ", Describe(Cur())));
  }
  absl::Status ExpectType(T type, const char* what) {
    if (Cur().type == type) {
      Next();
      return absl::OkStatus();
    }
    return Fail(Cur(), absl::StrCat("expected ", what, ", got ", Describe(Cur())));
  }
  absl::Status ExpectBlockEnd() { return ExpectType(T::kBlockEnd, "'%}'"); }

  ExprPtr Node(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }

  // ---- statements ----
  absl::Status SubParse(const std::set<std::string>& ends, Body* body, std::string* end);
  absl::StatusOr<StmtPtr> Statement();
  absl::StatusOr<StmtPtr> If(const Token& at);
  absl::StatusOr<StmtPtr> For(const Token& at);
  absl::StatusOr<StmtPtr> Set(const Token& at);
  absl::StatusOr<StmtPtr> Macro(const Token& at);
  absl::StatusOr<StmtPtr> CallBlock(const Token& at);
  absl::StatusOr<StmtPtr> FilterBlock(const Token& at);
  absl::Status Params(std::vector<MacroParam>* params);
  absl::Status BodyUntil(const char* end_name, Body* body);

  // ---- expressions ----
  absl::StatusOr<ExprPtr> Tuple(bool with_cond, bool explicit_parens,
                                std::initializer_list<const char*> extra_ends = {});
  absl::StatusOr<ExprPtr> Expression(bool with_cond = true) { return with_cond ? CondExpr() : Or(); }
  absl::StatusOr<ExprPtr> CondExpr();
  absl::StatusOr<ExprPtr> Or();
  absl::StatusOr<ExprPtr> And();
  // OPERAND (KEYWORD OPERAND)*, left-associative: the `or` and `and` levels.
  absl::StatusOr<ExprPtr> KeywordChain(const char* keyword, Expr::Kind kind,
                                       absl::StatusOr<ExprPtr> (Parser::*operand)());
  absl::StatusOr<ExprPtr> Not();
  absl::StatusOr<ExprPtr> Compare();
  absl::StatusOr<ExprPtr> Binary(int level);
  absl::StatusOr<ExprPtr> Unary(bool with_filter);
  absl::StatusOr<ExprPtr> Primary();
  absl::StatusOr<ExprPtr> Postfix(ExprPtr node);
  absl::StatusOr<ExprPtr> FilterExpr(ExprPtr node);
  absl::StatusOr<ExprPtr> Subscript(ExprPtr node);
  absl::StatusOr<ExprPtr> Subscribed();
  absl::StatusOr<ExprPtr> Filter(ExprPtr node, bool start_inline);
  absl::StatusOr<ExprPtr> Test(ExprPtr node);
  // A call of `callee` with the argument list at the current "(".
  absl::StatusOr<ExprPtr> Call(ExprPtr callee);
  absl::Status CallArgs(Expr* call);
  absl::StatusOr<ExprPtr> ListOrDict(bool dict);

  std::vector<Token> toks_;
  size_t idx_ = 0;
  int depth_ = 0;
};

// Guards recursion depth for the parser's recursive functions.
class DepthGuard {
 public:
  explicit DepthGuard(int* d) : d_(d) { ++*d_; }
  ~DepthGuard() { --*d_; }
  bool too_deep() const { return *d_ > kMaxDepth; }

 private:
  int* d_;
};

absl::Status Parser::SubParse(const std::set<std::string>& ends, Body* body, std::string* end) {
  end->clear();
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Fail(Cur(), "blocks nested too deeply");
  while (true) {
    const Token& t = Cur();
    if (t.type == T::kEof) {
      if (!ends.empty()) {
        return Fail(t, absl::StrCat("unexpected end of template, expected '", *ends.begin(), "'"));
      }
      return absl::OkStatus();
    }
    if (t.type == T::kText) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kText;
      s->line = t.line;
      s->col = t.col;
      s->text = t.text;
      body->push_back(std::move(s));
      Next();
    } else if (t.type == T::kVarBegin) {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kOutput;
      s->line = t.line;
      s->col = t.col;
      Next();
      HERD_ASSIGN_OR_RETURN(auto e, Tuple(true, false));
      s->expr = std::move(e);
      HERD_RETURN_IF_ERROR(ExpectType(T::kVarEnd, "'}}'"));
      body->push_back(std::move(s));
    } else if (t.type == T::kBlockBegin) {
      const Token& name = Peek();
      if (name.type == T::kName && ends.count(name.text)) {
        Next();
        *end = name.text;
        return absl::OkStatus();
      }
      HERD_ASSIGN_OR_RETURN(auto s, Statement());
      body->push_back(std::move(s));
    } else {
      return Fail(t, absl::StrCat("unexpected ", Describe(t)));
    }
  }
}

absl::Status Parser::BodyUntil(const char* end_name, Body* body) {
  std::string end;
  HERD_RETURN_IF_ERROR(SubParse({end_name}, body, &end));
  Next();  // the end tag's name
  return ExpectBlockEnd();
}

absl::StatusOr<StmtPtr> Parser::Statement() {
  Next();  // {%
  const Token at = Cur();
  if (at.type != T::kName) return Fail(at, "expected a tag name");
  const std::string& n = at.text;
  Next();
  if (n == "if") return If(at);
  if (n == "for") return For(at);
  if (n == "set") return Set(at);
  if (n == "macro") return Macro(at);
  if (n == "call") return CallBlock(at);
  if (n == "filter") return FilterBlock(at);
  auto s = std::make_unique<Stmt>();
  s->line = at.line;
  s->col = at.col;
  if (n == "break" || n == "continue") {
    s->kind = n == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
    HERD_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }
  if (n == "generation") {
    s->kind = Stmt::Kind::kScope;
    HERD_RETURN_IF_ERROR(ExpectBlockEnd());
    HERD_RETURN_IF_ERROR(BodyUntil("endgeneration", &s->body));
    return s;
  }
  return Fail(at, absl::StrCat("unknown tag '", n, "'"));
}

absl::StatusOr<StmtPtr> Parser::If(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kIf;
  s->line = at.line;
  s->col = at.col;
  while (true) {
    HERD_ASSIGN_OR_RETURN(auto cond, Tuple(false, false));
    HERD_RETURN_IF_ERROR(ExpectBlockEnd());
    s->conds.push_back(std::move(cond));
    s->bodies.emplace_back();
    std::string end;
    HERD_RETURN_IF_ERROR(SubParse({"elif", "else", "endif"}, &s->bodies.back(), &end));
    Next();
    if (end == "elif") continue;
    if (end == "else") {
      HERD_RETURN_IF_ERROR(ExpectBlockEnd());
      HERD_RETURN_IF_ERROR(BodyUntil("endif", &s->else_body));
      return s;
    }
    HERD_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }
}

absl::StatusOr<StmtPtr> Parser::For(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kFor;
  s->line = at.line;
  s->col = at.col;
  const bool paren = SkipOp("(");
  while (true) {
    if (Cur().type != T::kName) return Fail(Cur(), "expected a loop variable name");
    s->targets.push_back(Cur().text);
    Next();
    if (!SkipOp(",")) break;
    if (IsName("in") || IsOp(")")) break;
  }
  if (paren) {
    HERD_RETURN_IF_ERROR(Expect(")"));
  }
  if (!SkipName("in")) return Fail(Cur(), absl::StrCat("expected 'in', got ", Describe(Cur())));
  HERD_ASSIGN_OR_RETURN(auto iter, Tuple(false, false, {"recursive"}));
  s->expr = std::move(iter);
  if (SkipName("if")) {
    HERD_ASSIGN_OR_RETURN(auto cond, Expression());
    s->cond = std::move(cond);
  }
  if (IsName("recursive")) return Fail(Cur(), "recursive loops are not supported");
  HERD_RETURN_IF_ERROR(ExpectBlockEnd());
  std::string end;
  HERD_RETURN_IF_ERROR(SubParse({"endfor", "else"}, &s->body, &end));
  Next();
  HERD_RETURN_IF_ERROR(ExpectBlockEnd());
  if (end == "else") {
    HERD_RETURN_IF_ERROR(BodyUntil("endfor", &s->else_body));
  }
  return s;
}

absl::StatusOr<StmtPtr> Parser::Set(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->line = at.line;
  s->col = at.col;
  if (Cur().type != T::kName) return Fail(Cur(), "expected a variable name after 'set'");
  const Token first = Cur();
  if (Peek().type == T::kOp && Peek().text == ".") {
    auto ns = Node(Expr::Kind::kName, first);
    ns->name = first.text;
    Next();
    Next();
    if (Cur().type != T::kName) return Fail(Cur(), "expected an attribute name");
    auto target = Node(Expr::Kind::kGetAttr, first);
    target->name = Cur().text;
    target->args.push_back(std::move(ns));
    s->target = std::move(target);
    Next();
  } else {
    auto target = Node(Expr::Kind::kTuple, first);
    bool is_tuple = false;
    while (Cur().type == T::kName) {
      auto n = Node(Expr::Kind::kName, Cur());
      n->name = Cur().text;
      target->args.push_back(std::move(n));
      Next();
      if (!SkipOp(",")) break;
      is_tuple = true;
    }
    if (target->args.empty()) return Fail(Cur(), "expected a variable name after 'set'");
    s->target = is_tuple ? std::move(target) : std::move(target->args[0]);
  }
  if (SkipOp("=")) {
    s->kind = Stmt::Kind::kSet;
    HERD_ASSIGN_OR_RETURN(auto e, Tuple(true, false));
    s->expr = std::move(e);
    HERD_RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }
  s->kind = Stmt::Kind::kSetBlock;
  if (IsOp("|")) {
    HERD_ASSIGN_OR_RETURN(auto f, Filter(Node(Expr::Kind::kBlockValue, Cur()), false));
    s->expr = std::move(f);
  }
  HERD_RETURN_IF_ERROR(ExpectBlockEnd());
  HERD_RETURN_IF_ERROR(BodyUntil("endset", &s->body));
  return s;
}

absl::Status Parser::Params(std::vector<MacroParam>* params) {
  HERD_RETURN_IF_ERROR(Expect("("));
  while (!IsOp(")")) {
    if (!params->empty()) {
      HERD_RETURN_IF_ERROR(Expect(","));
      if (IsOp(")")) break;
    }
    if (Cur().type != T::kName) return Fail(Cur(), "expected a parameter name");
    MacroParam p;
    p.name = Cur().text;
    Next();
    if (SkipOp("=")) {
      HERD_ASSIGN_OR_RETURN(auto e, Expression());
      p.default_value = std::move(e);
    }
    params->push_back(std::move(p));
  }
  Next();
  return absl::OkStatus();
}

absl::StatusOr<StmtPtr> Parser::Macro(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kMacro;
  s->line = at.line;
  s->col = at.col;
  if (Cur().type != T::kName) return Fail(Cur(), "expected a macro name");
  s->name = Cur().text;
  Next();
  HERD_RETURN_IF_ERROR(Params(&s->params));
  HERD_RETURN_IF_ERROR(ExpectBlockEnd());
  HERD_RETURN_IF_ERROR(BodyUntil("endmacro", &s->body));
  return s;
}

absl::StatusOr<StmtPtr> Parser::CallBlock(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kCallBlock;
  s->line = at.line;
  s->col = at.col;
  if (IsOp("(")) {
    HERD_RETURN_IF_ERROR(Params(&s->params));
  }
  HERD_ASSIGN_OR_RETURN(auto e, Expression());
  if (e->kind != Expr::Kind::kCall) return Fail(at, "expected a call after 'call'");
  s->expr = std::move(e);
  HERD_RETURN_IF_ERROR(ExpectBlockEnd());
  HERD_RETURN_IF_ERROR(BodyUntil("endcall", &s->body));
  return s;
}

absl::StatusOr<StmtPtr> Parser::FilterBlock(const Token& at) {
  auto s = std::make_unique<Stmt>();
  s->kind = Stmt::Kind::kFilterBlock;
  s->line = at.line;
  s->col = at.col;
  HERD_ASSIGN_OR_RETURN(auto f, Filter(Node(Expr::Kind::kBlockValue, at), true));
  s->expr = std::move(f);
  HERD_RETURN_IF_ERROR(ExpectBlockEnd());
  HERD_RETURN_IF_ERROR(BodyUntil("endfilter", &s->body));
  return s;
}

// ---------------------------------------------------------------- expressions

absl::StatusOr<ExprPtr> Parser::Tuple(bool with_cond, bool explicit_parens,
                                      std::initializer_list<const char*> extra_ends) {
  const Token at = Cur();
  auto tuple = Node(Expr::Kind::kTuple, at);
  bool is_tuple = false;
  auto at_end = [&] {
    if (Cur().type == T::kVarEnd || Cur().type == T::kBlockEnd || IsOp(")")) return true;
    for (const char* n : extra_ends) {
      if (IsName(n)) return true;
    }
    return false;
  };
  while (true) {
    if (!tuple->args.empty()) {
      HERD_RETURN_IF_ERROR(Expect(","));
    }
    if (at_end()) break;
    HERD_ASSIGN_OR_RETURN(auto e, Expression(with_cond));
    tuple->args.push_back(std::move(e));
    if (IsOp(","))
      is_tuple = true;
    else
      break;
  }
  if (!is_tuple) {
    if (!tuple->args.empty()) return std::move(tuple->args[0]);
    if (!explicit_parens) return Fail(Cur(), absl::StrCat("expected an expression, got ", Describe(Cur())));
  }
  return tuple;
}

absl::StatusOr<ExprPtr> Parser::CondExpr() {
  HERD_ASSIGN_OR_RETURN(auto e1, Or());
  ExprPtr node = std::move(e1);
  while (IsName("if")) {
    const Token at = Cur();
    Next();
    HERD_ASSIGN_OR_RETURN(auto cond, Or());
    auto c = Node(Expr::Kind::kCond, at);
    c->args.push_back(std::move(cond));
    c->args.push_back(std::move(node));
    if (SkipName("else")) {
      HERD_ASSIGN_OR_RETURN(auto other, CondExpr());
      c->args.push_back(std::move(other));
    } else {
      c->args.push_back(nullptr);
    }
    node = std::move(c);
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::KeywordChain(const char* keyword, Expr::Kind kind,
                                             absl::StatusOr<ExprPtr> (Parser::*operand)()) {
  HERD_ASSIGN_OR_RETURN(auto left, (this->*operand)());
  ExprPtr node = std::move(left);
  while (IsName(keyword)) {
    auto n = Node(kind, Cur());
    Next();
    HERD_ASSIGN_OR_RETURN(auto right, (this->*operand)());
    n->args.push_back(std::move(node));
    n->args.push_back(std::move(right));
    node = std::move(n);
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::Or() { return KeywordChain("or", Expr::Kind::kOr, &Parser::And); }

absl::StatusOr<ExprPtr> Parser::And() { return KeywordChain("and", Expr::Kind::kAnd, &Parser::Not); }

absl::StatusOr<ExprPtr> Parser::Not() {
  if (IsName("not")) {
    DepthGuard guard(&depth_);
    if (guard.too_deep()) return Fail(Cur(), "expression nested too deeply");
    auto n = Node(Expr::Kind::kNot, Cur());
    Next();
    HERD_ASSIGN_OR_RETURN(auto operand, Not());
    n->args.push_back(std::move(operand));
    return n;
  }
  return Compare();
}

absl::StatusOr<ExprPtr> Parser::Compare() {
  const Token at = Cur();
  HERD_ASSIGN_OR_RETURN(auto first, Binary(0));
  ExprPtr node = std::move(first);
  auto cmp = Node(Expr::Kind::kCompare, at);
  while (true) {
    std::string op;
    if (Cur().type == T::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == ">" ||
                                 Cur().text == "<=" || Cur().text == ">=")) {
      op = Cur().text;
      Next();
    } else if (IsName("in")) {
      op = "in";
      Next();
    } else if (IsName("not") && Peek().type == T::kName && Peek().text == "in") {
      op = "notin";
      Next();
      Next();
    } else {
      break;
    }
    HERD_ASSIGN_OR_RETURN(auto right, Binary(0));
    if (cmp->args.empty()) cmp->args.push_back(std::move(node));
    cmp->ops.push_back(op);
    cmp->args.push_back(std::move(right));
  }
  if (cmp->args.empty()) return node;
  return cmp;
}

// Levels: 0 (+ -), 1 (~), 2 (* / // %), 3 (**); all left-associative as in Jinja2.
absl::StatusOr<ExprPtr> Parser::Binary(int level) {
  static const std::vector<std::vector<std::string>> kOps = {{"+", "-"}, {"~"}, {"*", "/", "//", "%"}, {"**"}};
  auto sub = [&]() -> absl::StatusOr<ExprPtr> { return level == 3 ? Unary(true) : Binary(level + 1); };
  HERD_ASSIGN_OR_RETURN(auto left, sub());
  ExprPtr node = std::move(left);
  while (Cur().type == T::kOp) {
    bool match = false;
    for (const auto& op : kOps[level]) match = match || Cur().text == op;
    if (!match) break;
    auto n = Node(Expr::Kind::kBinary, Cur());
    n->name = Cur().text;
    Next();
    HERD_ASSIGN_OR_RETURN(auto right, sub());
    n->args.push_back(std::move(node));
    n->args.push_back(std::move(right));
    node = std::move(n);
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::Unary(bool with_filter) {
  DepthGuard guard(&depth_);
  if (guard.too_deep()) return Fail(Cur(), "expression nested too deeply");
  ExprPtr node;
  if (IsOp("-") || IsOp("+")) {
    node = Node(IsOp("-") ? Expr::Kind::kNeg : Expr::Kind::kPos, Cur());
    Next();
    HERD_ASSIGN_OR_RETURN(auto operand, Unary(false));
    node->args.push_back(std::move(operand));
  } else {
    HERD_ASSIGN_OR_RETURN(auto p, Primary());
    node = std::move(p);
  }
  auto post = Postfix(std::move(node));
  if (!post.ok() || !with_filter) return post;
  return FilterExpr(*std::move(post));
}

absl::StatusOr<ExprPtr> Parser::Primary() {
  const Token t = Cur();
  if (t.type == T::kName) {
    auto n = Node(Expr::Kind::kLiteral, t);
    if (t.text == "true" || t.text == "True")
      n->value = Value::Bool(true);
    else if (t.text == "false" || t.text == "False")
      n->value = Value::Bool(false);
    else if (t.text == "none" || t.text == "None")
      n->value = Value::None();
    else {
      n->kind = Expr::Kind::kName;
      n->name = t.text;
    }
    Next();
    return n;
  }
  if (t.type == T::kString) {
    std::string s;
    while (Cur().type == T::kString) {
      s += Cur().text;
      Next();
    }
    auto n = Node(Expr::Kind::kLiteral, t);
    n->value = Value::String(std::move(s));
    return n;
  }
  if (t.type == T::kInt || t.type == T::kFloat) {
    auto n = Node(Expr::Kind::kLiteral, t);
    n->value = t.type == T::kInt ? Value::Int(t.ival) : Value::Float(t.fval);
    Next();
    return n;
  }
  if (IsOp("(")) {
    Next();
    auto e = Tuple(true, true);
    if (!e.ok()) return e;
    HERD_RETURN_IF_ERROR(Expect(")"));
    return e;
  }
  if (IsOp("[")) return ListOrDict(false);
  if (IsOp("{")) return ListOrDict(true);
  return Fail(t, absl::StrCat("unexpected ", Describe(t)));
}

absl::StatusOr<ExprPtr> Parser::ListOrDict(bool dict) {
  auto n = Node(dict ? Expr::Kind::kDict : Expr::Kind::kList, Cur());
  Next();
  const char* close = dict ? "}" : "]";
  while (!IsOp(close)) {
    if (!n->args.empty()) {
      HERD_RETURN_IF_ERROR(Expect(","));
      if (IsOp(close)) break;
    }
    HERD_ASSIGN_OR_RETURN(auto e, Expression());
    n->args.push_back(std::move(e));
    if (dict) {
      HERD_RETURN_IF_ERROR(Expect(":"));
      HERD_ASSIGN_OR_RETURN(auto v, Expression());
      n->args.push_back(std::move(v));
    }
  }
  Next();
  return n;
}

absl::StatusOr<ExprPtr> Parser::Postfix(ExprPtr node) {
  while (true) {
    if (IsOp(".") || IsOp("[")) {
      HERD_ASSIGN_OR_RETURN(auto s, Subscript(std::move(node)));
      node = std::move(s);
    } else if (IsOp("(")) {
      HERD_ASSIGN_OR_RETURN(node, Call(std::move(node)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::FilterExpr(ExprPtr node) {
  while (true) {
    if (IsOp("|")) {
      HERD_ASSIGN_OR_RETURN(auto f, Filter(std::move(node), false));
      node = std::move(f);
    } else if (IsName("is")) {
      HERD_ASSIGN_OR_RETURN(auto t, Test(std::move(node)));
      node = std::move(t);
    } else if (IsOp("(")) {
      HERD_ASSIGN_OR_RETURN(node, Call(std::move(node)));
    } else {
      return node;
    }
  }
}

absl::StatusOr<ExprPtr> Parser::Subscript(ExprPtr node) {
  const Token at = Cur();
  if (SkipOp(".")) {
    const Token a = Cur();
    Next();
    if (a.type == T::kName) {
      auto n = Node(Expr::Kind::kGetAttr, a);
      n->name = a.text;
      n->args.push_back(std::move(node));
      return n;
    }
    if (a.type != T::kInt) return Fail(a, "expected a name or number after '.'");
    auto n = Node(Expr::Kind::kGetItem, a);
    auto idx = Node(Expr::Kind::kLiteral, a);
    idx->value = Value::Int(a.ival);
    n->args.push_back(std::move(node));
    n->args.push_back(std::move(idx));
    return n;
  }
  Next();  // [
  std::vector<ExprPtr> items;
  while (!IsOp("]")) {
    if (!items.empty()) {
      HERD_RETURN_IF_ERROR(Expect(","));
    }
    HERD_ASSIGN_OR_RETURN(auto e, Subscribed());
    items.push_back(std::move(e));
  }
  Next();
  if (items.empty()) return Fail(at, "empty subscript");
  if (items.size() == 1 && items[0]->kind == Expr::Kind::kSlice) {
    items[0]->args[0] = std::move(node);
    return std::move(items[0]);
  }
  auto n = Node(Expr::Kind::kGetItem, at);
  n->args.push_back(std::move(node));
  if (items.size() == 1) {
    n->args.push_back(std::move(items[0]));
  } else {
    auto tuple = Node(Expr::Kind::kTuple, at);
    tuple->args = std::move(items);
    n->args.push_back(std::move(tuple));
  }
  return n;
}

absl::StatusOr<ExprPtr> Parser::Subscribed() {
  const Token at = Cur();
  auto slice = Node(Expr::Kind::kSlice, at);
  slice->args.push_back(nullptr);  // the sliced object, filled in by Subscript
  if (IsOp(":")) {
    Next();
    slice->args.push_back(nullptr);
  } else {
    auto e = Expression();
    if (!e.ok()) return e;
    if (!IsOp(":")) return e;
    Next();
    slice->args.push_back(*std::move(e));
  }
  auto part = [&]() -> absl::Status {
    if (IsOp(":") || IsOp("]") || IsOp(",")) {
      slice->args.push_back(nullptr);
      return absl::OkStatus();
    }
    HERD_ASSIGN_OR_RETURN(auto e, Expression());
    slice->args.push_back(std::move(e));
    return absl::OkStatus();
  };
  HERD_RETURN_IF_ERROR(part());
  if (SkipOp(":")) {
    HERD_RETURN_IF_ERROR(part());
  } else {
    slice->args.push_back(nullptr);
  }
  return slice;
}

absl::StatusOr<ExprPtr> Parser::Call(ExprPtr callee) {
  auto call = Node(Expr::Kind::kCall, Cur());
  call->args.push_back(std::move(callee));
  HERD_RETURN_IF_ERROR(CallArgs(call.get()));
  return call;
}

absl::Status Parser::CallArgs(Expr* call) {
  const Token at = Cur();
  HERD_RETURN_IF_ERROR(Expect("("));
  bool need_comma = false;
  auto bad = [&] { return Fail(at, "invalid syntax for function call expression"); };
  while (!IsOp(")")) {
    if (need_comma) {
      HERD_RETURN_IF_ERROR(Expect(","));
      if (IsOp(")")) break;
    }
    if (IsOp("*") || IsOp("**")) {
      const bool kw = IsOp("**");
      if (call->dyn_kwargs || (!kw && call->dyn_args)) return bad();
      Next();
      HERD_ASSIGN_OR_RETURN(auto e, Expression());
      (kw ? call->dyn_kwargs : call->dyn_args) = std::move(e);
    } else if (Cur().type == T::kName && Peek().type == T::kOp && Peek().text == "=") {
      if (call->dyn_kwargs) return bad();
      std::string key = Cur().text;
      Next();
      Next();
      HERD_ASSIGN_OR_RETURN(auto e, Expression());
      call->kwargs.emplace_back(std::move(key), std::move(e));
    } else {
      if (call->dyn_args || call->dyn_kwargs || !call->kwargs.empty()) return bad();
      HERD_ASSIGN_OR_RETURN(auto e, Expression());
      call->args.push_back(std::move(e));
    }
    need_comma = true;
  }
  Next();
  return absl::OkStatus();
}

absl::StatusOr<ExprPtr> Parser::Filter(ExprPtr node, bool start_inline) {
  while (IsOp("|") || start_inline) {
    if (!start_inline) Next();
    start_inline = false;
    if (Cur().type != T::kName) return Fail(Cur(), "expected a filter name");
    auto f = Node(Expr::Kind::kFilter, Cur());
    f->name = Cur().text;
    Next();
    while (IsOp(".") && Peek().type == T::kName) {
      Next();
      f->name += "." + Cur().text;
      Next();
    }
    f->args.push_back(std::move(node));
    if (IsOp("(")) {
      HERD_RETURN_IF_ERROR(CallArgs(f.get()));
    }
    node = std::move(f);
  }
  return node;
}

absl::StatusOr<ExprPtr> Parser::Test(ExprPtr node) {
  const Token at = Cur();
  Next();  // is
  const bool negated = SkipName("not");
  if (Cur().type != T::kName) return Fail(Cur(), "expected a test name");
  auto t = Node(Expr::Kind::kTest, Cur());
  t->name = Cur().text;
  Next();
  while (IsOp(".") && Peek().type == T::kName) {
    Next();
    t->name += "." + Cur().text;
    Next();
  }
  t->args.push_back(std::move(node));
  if (IsOp("(")) {
    HERD_RETURN_IF_ERROR(CallArgs(t.get()));
  } else if ((Cur().type == T::kName || Cur().type == T::kString || Cur().type == T::kInt || Cur().type == T::kFloat ||
              IsOp("(") || IsOp("[") || IsOp("{")) &&
             !IsName("else") && !IsName("or") && !IsName("and")) {
    if (IsName("is")) return Fail(Cur(), "you cannot chain multiple tests with 'is'");
    HERD_ASSIGN_OR_RETURN(auto arg, Primary());
    HERD_ASSIGN_OR_RETURN(auto post, Postfix(std::move(arg)));
    t->args.push_back(std::move(post));
  }
  if (!negated) return t;
  auto n = Node(Expr::Kind::kNot, at);
  n->args.push_back(std::move(t));
  return n;
}

}  // namespace

absl::StatusOr<Body> ParseTemplate(std::string_view source) {
  HERD_ASSIGN_OR_RETURN(auto toks, Lex(source));
  Parser p(std::move(toks));
  return p.Template();
}

}  // namespace herd::chat::internal
