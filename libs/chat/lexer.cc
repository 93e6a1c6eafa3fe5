#include "libs/chat/lexer.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/chat/value.h"

namespace herd::chat::internal {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
int HexVal(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Jinja2 splits the source on \r\n, \r and \n, joins with \n and drops one trailing newline.
std::string NormalizeNewlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t k = 0; k < src.size(); ++k) {
    if (src[k] == '\r') {
      out += '\n';
      if (k + 1 < src.size() && src[k + 1] == '\n') ++k;
    } else {
      out += src[k];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's "unicode_escape" decoding of a string literal body (unknown escapes stay).
std::string DecodeEscapes(std::string_view body) {
  std::string out;
  for (size_t k = 0; k < body.size(); ++k) {
    const char c = body[k];
    if (c != '\\' || k + 1 >= body.size()) {
      out += c;
      continue;
    }
    const char e = body[++k];
    switch (e) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        size_t m = 0;
        for (; m < n && k + 1 + m < body.size() && HexVal(body[k + 1 + m]) >= 0; ++m) {
          cp = cp * 16 + HexVal(body[k + 1 + m]);
        }
        if (m == n && cp <= 0x10FFFF) {
          AppendUtf8(cp, &out);
          k += n;
        } else {
          out += '\\';
          out += e;
        }
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = e - '0';
          for (int m = 0; m < 2 && k + 1 < body.size() && body[k + 1] >= '0' && body[k + 1] <= '7'; ++m) {
            cp = cp * 8 + (body[++k] - '0');
          }
          AppendUtf8(cp, &out);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    int after = 0;  // whitespace rule for the next text: 0 none, 1 one newline, 2 all
    while (pos < src_.size()) {
      const size_t open = FindOpen(pos);
      std::string text = src_.substr(pos, (open == std::string::npos ? src_.size() : open) - pos);
      size_t text_pos = pos;
      if (after == 2) {
        size_t k = 0;
        while (k < text.size() && IsSpace(text[k])) ++k;
        text.erase(0, k);
        text_pos += k;
      } else if (after == 1 && !text.empty() && text[0] == '\n') {
        text.erase(0, 1);
        ++text_pos;
      }
      after = 0;
      if (open == std::string::npos) {
        EmitText(std::move(text), text_pos);
        break;
      }
      const char kind = src_[open + 1];
      const char sign = open + 2 < src_.size() ? src_[open + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          if (text.find_first_not_of(" \t", l_pos) == std::string::npos) text.resize(l_pos);
        }
      }
      EmitText(std::move(text), text_pos);
      const size_t body = open + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      HERD_ASSIGN_OR_RETURN(pos, kind == '#'   ? Comment(open, body, &after)
                                 : kind == '%' ? Tag(open, body, true, &after)
                                               : Tag(open, body, false, &after));
      line_starting = after == 1 && pos < src_.size() && src_[pos] == '\n';
      if (after == 2) {
        size_t k = pos;
        while (k < src_.size() && IsSpace(src_[k])) ++k;
        line_starting = k > pos && src_[k - 1] == '\n';
      }
    }
    Token eof;
    eof.type = Token::Type::kEof;
    SetPos(&eof, src_.size());
    toks_.push_back(eof);
    return std::move(toks_);
  }

 private:
  size_t FindOpen(size_t pos) const {
    while (true) {
      const size_t k = src_.find('{', pos);
      if (k == std::string::npos || k + 1 >= src_.size()) return std::string::npos;
      const char c = src_[k + 1];
      if (c == '{' || c == '%' || c == '#') return k;
      pos = k + 1;
    }
  }

  void SetPos(Token* t, size_t off) {
    while (line_idx_ < off) {
      if (src_[line_idx_] == '\n') {
        ++line_;
        line_start_ = line_idx_ + 1;
      }
      ++line_idx_;
    }
    t->line = line_;
    t->col = static_cast<int>(off - line_start_) + 1;
  }

  // Positions are requested in increasing order except within a tag; keep a cheap
  // monotone cursor and recompute from scratch when asked to go back.
  void Pos(Token* t, size_t off) {
    if (off < line_idx_) {
      line_idx_ = 0;
      line_ = 1;
      line_start_ = 0;
    }
    SetPos(t, off);
  }

  void EmitText(std::string text, size_t off) {
    if (text.empty()) return;
    Token t;
    t.type = Token::Type::kText;
    t.text = std::move(text);
    Pos(&t, off);
    toks_.push_back(std::move(t));
  }

  void Emit(Token::Type type, std::string text, size_t off) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    Pos(&t, off);
    toks_.push_back(std::move(t));
  }

  absl::Status Error(size_t off, const std::string& what) {
    Token t;
    Pos(&t, off);
    return absl::InvalidArgumentError(absl::StrCat(t.line, ":", t.col, ": ", what));
  }

  absl::StatusOr<size_t> Comment(size_t open, size_t body, int* after) {
    const size_t end = src_.find("#}", body);
    if (end == std::string::npos) return Error(open, "unterminated comment");
    *after = (end > body && src_[end - 1] == '-') ? 2 : (end > body && src_[end - 1] == '+') ? 0 : 1;
    return end + 2;
  }

  // Checks for the tag end at pos: returns its length (0 if none) and the rule for what follows.
  size_t TagEnd(size_t pos, bool block, int* after) const {
    const char* close = block ? "%}" : "}}";
    if (src_.compare(pos, 3, std::string("-") + close) == 0) {
      *after = 2;
      return 3;
    }
    if (block && src_.compare(pos, 3, std::string("+") + close) == 0) {
      *after = 0;
      return 3;
    }
    if (src_.compare(pos, 2, close) == 0) {
      *after = block ? 1 : 0;
      return 2;
    }
    return 0;
  }

  absl::StatusOr<size_t> Tag(size_t open, size_t pos, bool block, int* after);
  absl::StatusOr<size_t> Raw(size_t open, size_t pos, int* after);
  absl::StatusOr<size_t> Number(size_t pos);
  absl::StatusOr<size_t> String(size_t pos);

  std::string src_;
  std::vector<Token> toks_;
  size_t line_idx_ = 0;
  size_t line_start_ = 0;
  int line_ = 1;
};

absl::StatusOr<size_t> Lexer::Number(size_t pos) {
  size_t k = pos;
  auto digits = [&](size_t q) {
    if (q >= src_.size() || !IsDigit(src_[q])) return q;
    while (q < src_.size() && (IsDigit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && IsDigit(src_[q + 1]))))
      ++q;
    return q;
  };
  k = digits(k);
  bool is_float = false;
  if (k + 1 < src_.size() && src_[k] == '.' && IsDigit(src_[k + 1])) {
    k = digits(k + 1);
    is_float = true;
  }
  if (k < src_.size() && (src_[k] == 'e' || src_[k] == 'E')) {
    size_t q = k + 1;
    if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
    if (q < src_.size() && IsDigit(src_[q])) {
      k = digits(q);
      is_float = true;
    }
  }
  std::string text;
  for (size_t q = pos; q < k; ++q) {
    if (src_[q] != '_') text += src_[q];
  }
  Token t;
  t.type = is_float ? Token::Type::kFloat : Token::Type::kInt;
  t.text = text;
  Pos(&t, pos);
  errno = 0;
  if (is_float) {
    t.fval = std::strtod(text.c_str(), nullptr);
  } else {
    t.ival = std::strtoll(text.c_str(), nullptr, 10);
    if (errno == ERANGE) return Error(pos, "integer literal out of range");
  }
  toks_.push_back(std::move(t));
  return k;
}

absl::StatusOr<size_t> Lexer::String(size_t pos) {
  const char q = src_[pos];
  size_t k = pos + 1;
  while (k < src_.size() && src_[k] != q) {
    if (src_[k] == '\\') ++k;
    ++k;
  }
  if (k >= src_.size()) return Error(pos, "unterminated string literal");
  Emit(Token::Type::kString, DecodeEscapes(std::string_view(src_).substr(pos + 1, k - pos - 1)), pos);
  return k + 1;
}

absl::StatusOr<size_t> Lexer::Raw(size_t open, size_t pos, int* after) {
  // {% raw %}...{% endraw %}: the body is text as is.
  size_t search = pos;
  while (true) {
    const size_t k = src_.find("{%", search);
    if (k == std::string::npos) return Error(open, "missing endraw");
    size_t q = k + 2;
    if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
    while (q < src_.size() && IsSpace(src_[q])) ++q;
    if (src_.compare(q, 6, "endraw") != 0) {
      search = k + 2;
      continue;
    }
    q += 6;
    while (q < src_.size() && IsSpace(src_[q])) ++q;
    const size_t end_len = TagEnd(q, true, after);
    if (end_len == 0) return Error(q, "expected '%}' after endraw");
    std::string body = src_.substr(pos, k - pos);
    if (src_[k + 2] == '-') {
      while (!body.empty() && IsSpace(body.back())) body.pop_back();
    }
    EmitText(std::move(body), pos);
    return q + end_len;
  }
}

absl::StatusOr<size_t> Lexer::Tag(size_t open, size_t pos, bool block, int* after) {
  Emit(block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, block ? "{%" : "{{", open);
  std::vector<char> balance;
  bool first = true;
  while (true) {
    while (pos < src_.size() && IsSpace(src_[pos])) ++pos;
    if (pos >= src_.size()) return Error(open, block ? "unterminated '{%' tag" : "unterminated '{{' expression");
    if (balance.empty()) {
      if (const size_t len = TagEnd(pos, block, after)) {
        Emit(block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, block ? "%}" : "}}", pos);
        return pos + len;
      }
    }
    const char c = src_[pos];
    if (IsNameStart(c)) {
      size_t k = pos;
      while (k < src_.size() && (IsNameStart(src_[k]) || IsDigit(src_[k]))) ++k;
      const std::string name = src_.substr(pos, k - pos);
      Emit(Token::Type::kName, name, pos);
      if (block && first && name == "raw") {
        while (k < src_.size() && IsSpace(src_[k])) ++k;
        const size_t len = TagEnd(k, true, after);
        if (len == 0) return Error(k, "expected '%}' after raw");
        toks_.resize(toks_.size() - 2);  // the raw tag leaves only its text
        size_t body = k + len;
        if (*after == 2) {
          while (body < src_.size() && IsSpace(src_[body])) ++body;
        } else if (*after == 1 && body < src_.size() && src_[body] == '\n') {
          ++body;
        }
        return Raw(open, body, after);
      }
      pos = k;
    } else if (IsDigit(c)) {
      HERD_ASSIGN_OR_RETURN(pos, Number(pos));
    } else if (c == '\'' || c == '"') {
      HERD_ASSIGN_OR_RETURN(pos, String(pos));
    } else {
      static const char* kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
      std::string op(1, c);
      for (const char* two : kTwo) {
        if (src_.compare(pos, 2, two) == 0) op = two;
      }
      if (op.size() == 1 && !std::strchr("+-*/%~()[]{},.:|=<>", c)) {
        return Error(pos, absl::StrCat("unexpected character '", op, "'"));
      }
      if (c == '(' || c == '[' || c == '{') balance.push_back(c);
      if (c == ')' || c == ']' || c == '}') {
        const char want = c == ')' ? '(' : c == ']' ? '[' : '{';
        if (balance.empty() || balance.back() != want) {
          return Error(pos, absl::StrCat("unexpected '", op, "'"));
        }
        balance.pop_back();
      }
      Emit(Token::Type::kOp, op, pos);
      pos += op.size();
    }
    first = false;
  }
}

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  Lexer lexer(NormalizeNewlines(source));
  return lexer.Run();
}

}  // namespace herd::chat::internal
