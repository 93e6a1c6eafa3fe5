#include "libs/grammar/gbnf.h"

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"

namespace herd::grammar {
namespace {

constexpr size_t kNpos = static_cast<size_t>(-1);

bool IsWordChar(char c) {
  return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c == '-' || ('0' <= c && c <= '9');
}
bool IsDigit(char c) { return '0' <= c && c <= '9'; }
int HexValue(char c) {
  if ('0' <= c && c <= '9') return c - '0';
  if ('a' <= c && c <= 'f') return c - 'a' + 10;
  if ('A' <= c && c <= 'F') return c - 'A' + 10;
  return -1;
}
bool IsEndOfSequence(const Element& e) { return e.type == ElementType::kEnd || e.type == ElementType::kAlt; }

// llama_grammar_parser, over a string_view with explicit bounds. Every parse_* returns
// the position after what it consumed, or kNpos after recording the first error.
class Parser {
 public:
  Parser(absl::string_view src, const GrammarLimits& limits) : src_(src), lim_(limits) {}

  absl::Status Run(std::vector<Rule>* rules, std::vector<std::string>* names, uint32_t* root);

 private:
  char At(size_t pos) const { return pos < src_.size() ? src_[pos] : '\0'; }
  bool Ok() const { return status_.ok(); }
  size_t Fail(size_t pos, const std::string& what);
  size_t ParseSpace(size_t pos, bool newline_ok) const;
  size_t ParseName(size_t pos);
  size_t ParseChar(size_t pos, uint32_t* out);
  size_t ParseHex(size_t pos, int n, uint32_t* out);
  size_t ParseInt(size_t pos, uint32_t* out);
  size_t ParseRule(size_t pos);
  size_t ParseAlternates(size_t pos, const std::string& rule_name, uint32_t rule_id, bool nested);
  size_t ParseSequence(size_t pos, const std::string& rule_name, Rule* rule, bool nested);
  bool HandleRepetitions(size_t pos, const std::string& rule_name, Rule* rule, size_t last_sym_start,
                         uint32_t min_times, int64_t max_times);
  uint32_t GetSymbolId(absl::string_view name);
  uint32_t GenerateSymbolId(const std::string& base);
  bool AddRule(uint32_t id, Rule rule, size_t pos);
  bool CountElements(size_t n, size_t pos);

  absl::string_view src_;
  GrammarLimits lim_;
  absl::Status status_;
  std::map<std::string, uint32_t> symbol_ids_;
  std::vector<size_t> first_use_;  // per symbol id: position of its first reference
  std::vector<Rule> rules_;
  size_t n_elements_ = 0;
  int depth_ = 0;
};

size_t Parser::Fail(size_t pos, const std::string& what) {
  if (!status_.ok()) return kNpos;
  size_t line = 1, col = 1;
  for (size_t i = 0; i < pos && i < src_.size(); ++i) {
    if (src_[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  std::string near;
  if (pos < src_.size()) {
    near = std::string(src_.substr(pos, 20));
    for (char& c : near) {
      if (c == '\n' || c == '\r') c = ' ';
    }
    near = absl::StrCat(" near '", near, "'");
  }
  status_ = absl::InvalidArgumentError(absl::StrCat("grammar: ", what, " at line ", line, ", column ", col, near));
  return kNpos;
}

bool Parser::CountElements(size_t n, size_t pos) {
  n_elements_ += n;
  if (n_elements_ > lim_.max_elements) {
    Fail(pos,
         absl::StrCat("grammar too large (more than ", lim_.max_elements, " elements after expanding repetitions)"));
    return false;
  }
  return true;
}

size_t Parser::ParseSpace(size_t pos, bool newline_ok) const {
  while (true) {
    const char c = At(pos);
    if (c == ' ' || c == '\t' || (newline_ok && (c == '\r' || c == '\n'))) {
      ++pos;
    } else if (c == '#') {
      while (pos < src_.size() && src_[pos] != '\r' && src_[pos] != '\n') ++pos;
    } else {
      return pos;
    }
  }
}

size_t Parser::ParseName(size_t pos) {
  size_t end = pos;
  while (IsWordChar(At(end))) ++end;
  if (end == pos) return Fail(pos, "expecting name");
  return end;
}

size_t Parser::ParseInt(size_t pos, uint32_t* out) {
  size_t end = pos;
  uint64_t v = 0;
  while (IsDigit(At(end))) {
    v = std::min<uint64_t>(v * 10 + static_cast<uint64_t>(At(end) - '0'), 0xFFFFFFFFull);
    ++end;
  }
  if (end == pos) return Fail(pos, "expecting integer");
  *out = static_cast<uint32_t>(v);
  return end;
}

size_t Parser::ParseHex(size_t pos, int n, uint32_t* out) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) {
    const int h = HexValue(At(pos + static_cast<size_t>(i)));
    if (h < 0) return Fail(pos, absl::StrCat("expecting ", n, " hex chars"));
    v = (v << 4) | static_cast<uint32_t>(h);
  }
  *out = v;
  return pos + static_cast<size_t>(n);
}

// parse_char: one (possibly escaped) code point of a literal or class; UTF-8 decoded like
// llama.cpp's decode_utf8 (a lead byte's length, continuation bits taken as they come).
size_t Parser::ParseChar(size_t pos, uint32_t* out) {
  if (pos >= src_.size()) return Fail(pos, "unexpected end of input");
  const char c = src_[pos];
  if (c == '\\') {
    switch (At(pos + 1)) {
      case 'x':
        return ParseHex(pos + 2, 2, out);
      case 'u':
        return ParseHex(pos + 2, 4, out);
      case 'U':
        return ParseHex(pos + 2, 8, out);
      case 't':
        *out = '\t';
        return pos + 2;
      case 'r':
        *out = '\r';
        return pos + 2;
      case 'n':
        *out = '\n';
        return pos + 2;
      case '\\':
      case '"':
      case '[':
      case ']':
        *out = static_cast<uint8_t>(src_[pos + 1]);
        return pos + 2;
      default:
        return Fail(pos, "unknown escape");
    }
  }
  if (c == '\0') return Fail(pos, "NUL byte in grammar");
  static const int kLookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
  const uint8_t first = static_cast<uint8_t>(c);
  const int len = kLookup[first >> 4];
  if (len == 0) return Fail(pos, "invalid UTF-8");
  const uint8_t mask = static_cast<uint8_t>((1 << (8 - len)) - 1);
  uint32_t v = first & mask;
  size_t p = pos + 1;
  for (int i = 1; i < len; ++i, ++p) {
    const char b = At(p);
    if ((static_cast<uint8_t>(b) >> 6) != 2) return Fail(pos, "invalid UTF-8");
    v = (v << 6) | (static_cast<uint8_t>(b) & 0x3F);
  }
  *out = v;
  return p;
}

uint32_t Parser::GetSymbolId(absl::string_view name) {
  auto [it, inserted] = symbol_ids_.emplace(std::string(name), static_cast<uint32_t>(symbol_ids_.size()));
  return it->second;
}

uint32_t Parser::GenerateSymbolId(const std::string& base) {
  const uint32_t id = static_cast<uint32_t>(symbol_ids_.size());
  symbol_ids_.emplace(absl::StrCat(base, "_", id), id);
  return id;
}

bool Parser::AddRule(uint32_t id, Rule rule, size_t pos) {
  if (symbol_ids_.size() > lim_.max_rules) {
    Fail(pos, absl::StrCat("grammar too large (more than ", lim_.max_rules, " rules)"));
    return false;
  }
  if (rules_.size() <= id) rules_.resize(id + 1);
  rules_[id] = std::move(rule);
  return true;
}

// handle_repetitions: S{m,n} -> S..S (m times) S'(n-m) with S'(k) ::= S S'(k-1) | ;
// S{m,} -> S..S S' with S' ::= S S' | .
bool Parser::HandleRepetitions(size_t pos, const std::string& rule_name, Rule* rule, size_t last_sym_start,
                               uint32_t min_times, int64_t max_times) {
  if (last_sym_start == rule->size()) {
    Fail(pos, "expecting preceding item to */+/?/{");
    return false;
  }
  if (min_times > lim_.max_repetition || max_times > static_cast<int64_t>(lim_.max_repetition)) {
    Fail(pos, absl::StrCat("repetition count over ", lim_.max_repetition));
    return false;
  }
  if (max_times >= 0 && max_times < static_cast<int64_t>(min_times)) {
    Fail(pos, absl::StrCat("repetition {", min_times, ",", max_times, "}: maximum below minimum"));
    return false;
  }
  const Rule prev(rule->begin() + static_cast<long>(last_sym_start), rule->end());
  if (min_times == 0) {
    rule->resize(last_sym_start);
  } else {
    if (!CountElements(prev.size() * (min_times - 1), pos)) return false;
    for (uint32_t i = 1; i < min_times; ++i) rule->insert(rule->end(), prev.begin(), prev.end());
  }
  uint32_t last_rec_rule_id = 0;
  const int64_t n_opt = max_times < 0 ? 1 : max_times - min_times;
  for (int64_t i = 0; i < n_opt; ++i) {
    Rule rec(prev);
    const uint32_t rec_id = GenerateSymbolId(rule_name);
    if (i > 0 || max_times < 0) {
      rec.push_back({ElementType::kRuleRef, max_times < 0 ? rec_id : last_rec_rule_id});
    }
    rec.push_back({ElementType::kAlt, 0});
    rec.push_back({ElementType::kEnd, 0});
    if (!CountElements(rec.size(), pos) || !AddRule(rec_id, std::move(rec), pos)) return false;
    last_rec_rule_id = rec_id;
  }
  if (n_opt > 0) rule->push_back({ElementType::kRuleRef, last_rec_rule_id});
  return true;
}

size_t Parser::ParseSequence(size_t pos, const std::string& rule_name, Rule* rule, bool nested) {
  size_t last_sym_start = rule->size();
  while (Ok() && pos < src_.size()) {
    const char c = src_[pos];
    const size_t n_before = rule->size();
    if (c == '"') {  // literal string
      ++pos;
      last_sym_start = rule->size();
      while (At(pos) != '"') {
        if (pos >= src_.size()) return Fail(pos, "unterminated string literal");
        uint32_t cp = 0;
        pos = ParseChar(pos, &cp);
        if (!Ok()) return kNpos;
        rule->push_back({ElementType::kChar, cp});
      }
      pos = ParseSpace(pos + 1, nested);
    } else if (c == '[') {  // char class
      ++pos;
      ElementType start = ElementType::kChar;
      if (At(pos) == '^') {
        ++pos;
        start = ElementType::kCharNot;
      }
      last_sym_start = rule->size();
      while (At(pos) != ']') {
        if (pos >= src_.size()) return Fail(pos, "unterminated character class");
        uint32_t cp = 0;
        pos = ParseChar(pos, &cp);
        if (!Ok()) return kNpos;
        rule->push_back({last_sym_start < rule->size() ? ElementType::kCharAlt : start, cp});
        if (At(pos) == '-' && At(pos + 1) != ']') {
          if (pos + 1 >= src_.size()) return Fail(pos, "unterminated character class");
          uint32_t hi = 0;
          pos = ParseChar(pos + 1, &hi);
          if (!Ok()) return kNpos;
          rule->push_back({ElementType::kCharRngUpper, hi});
        }
      }
      if (last_sym_start == rule->size()) return Fail(pos, "empty character class");
      pos = ParseSpace(pos + 1, nested);
    } else if (IsWordChar(c)) {  // rule reference
      const size_t end = ParseName(pos);
      const uint32_t id = GetSymbolId(src_.substr(pos, end - pos));
      if (first_use_.size() <= id) first_use_.resize(id + 1, kNpos);
      if (first_use_[id] == kNpos) first_use_[id] = pos;
      pos = ParseSpace(end, nested);
      last_sym_start = rule->size();
      rule->push_back({ElementType::kRuleRef, id});
    } else if (c == '(') {  // group -> synthesized rule
      if (++depth_ > lim_.max_nesting) return Fail(pos, absl::StrCat("groups nested deeper than ", lim_.max_nesting));
      pos = ParseSpace(pos + 1, true);
      const uint32_t sub_id = GenerateSymbolId(rule_name);
      pos = ParseAlternates(pos, rule_name, sub_id, true);
      if (!Ok()) return kNpos;
      --depth_;
      last_sym_start = rule->size();
      rule->push_back({ElementType::kRuleRef, sub_id});
      if (At(pos) != ')') return Fail(pos, "expecting ')'");
      pos = ParseSpace(pos + 1, nested);
    } else if (c == '.') {
      last_sym_start = rule->size();
      rule->push_back({ElementType::kCharAny, 0});
      pos = ParseSpace(pos + 1, nested);
    } else if (c == '*' || c == '+' || c == '?') {
      const size_t at = pos;
      pos = ParseSpace(pos + 1, nested);
      if (!HandleRepetitions(at, rule_name, rule, last_sym_start, c == '+' ? 1 : 0, c == '?' ? 1 : -1)) return kNpos;
    } else if (c == '{') {
      const size_t at = pos;
      pos = ParseSpace(pos + 1, nested);
      if (!IsDigit(At(pos))) return Fail(pos, "expecting an int");
      uint32_t min_times = 0;
      pos = ParseSpace(ParseInt(pos, &min_times), nested);
      int64_t max_times = -1;
      if (At(pos) == '}') {
        max_times = min_times;
        pos = ParseSpace(pos + 1, nested);
      } else if (At(pos) == ',') {
        pos = ParseSpace(pos + 1, nested);
        if (IsDigit(At(pos))) {
          uint32_t mx = 0;
          pos = ParseSpace(ParseInt(pos, &mx), nested);
          max_times = mx;
        }
        if (At(pos) != '}') return Fail(pos, "expecting '}'");
        pos = ParseSpace(pos + 1, nested);
      } else {
        return Fail(pos, "expecting ',' or '}'");
      }
      if (!HandleRepetitions(at, rule_name, rule, last_sym_start, min_times, max_times)) return kNpos;
    } else if (c == '<') {
      return Fail(pos, "token references (<...>) are not supported");
    } else {
      break;
    }
    if (rule->size() > n_before && !CountElements(rule->size() - n_before, pos)) return kNpos;
  }
  return Ok() ? pos : kNpos;
}

size_t Parser::ParseAlternates(size_t pos, const std::string& rule_name, uint32_t rule_id, bool nested) {
  const size_t start = pos;
  Rule rule;
  pos = ParseSequence(pos, rule_name, &rule, nested);
  while (Ok() && At(pos) == '|') {
    rule.push_back({ElementType::kAlt, 0});
    pos = ParseSpace(pos + 1, true);
    pos = ParseSequence(pos, rule_name, &rule, nested);
  }
  if (!Ok()) return kNpos;
  rule.push_back({ElementType::kEnd, 0});
  if (!CountElements(1, start) || !AddRule(rule_id, std::move(rule), start)) return kNpos;
  return pos;
}

size_t Parser::ParseRule(size_t pos) {
  const size_t name_end = ParseName(pos);
  if (!Ok()) return kNpos;
  const std::string name(src_.substr(pos, name_end - pos));
  size_t p = ParseSpace(name_end, false);
  const uint32_t id = GetSymbolId(name);
  if (id < rules_.size() && !rules_[id].empty()) return Fail(pos, absl::StrCat("rule '", name, "' defined twice"));
  if (!(At(p) == ':' && At(p + 1) == ':' && At(p + 2) == '=')) return Fail(p, "expecting ::=");
  p = ParseSpace(p + 3, true);
  p = ParseAlternates(p, name, id, false);
  if (!Ok()) return kNpos;
  if (At(p) == '\r') {
    p += At(p + 1) == '\n' ? 2 : 1;
  } else if (At(p) == '\n') {
    ++p;
  } else if (p < src_.size()) {
    if (At(p) == ')') return Fail(p, "unexpected ')'");
    if (At(p) == '"' || At(p) == '[') return Fail(p, "unterminated literal or class");
    return Fail(p, "expecting newline or end");
  }
  return ParseSpace(p, true);
}

// Transitive "can match the empty string" per rule (fixpoint).
std::vector<bool> NullableRules(const std::vector<Rule>& rules) {
  std::vector<bool> nullable(rules.size(), false);
  bool changed = true;
  while (changed) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (nullable[r]) continue;
      bool alt_ok = true;  // current alternative so far only nullable refs
      for (const Element& e : rules[r]) {
        if (IsEndOfSequence(e)) {
          if (alt_ok) {
            nullable[r] = true;
            changed = true;
            break;
          }
          alt_ok = true;
        } else if (e.type == ElementType::kRuleRef) {
          alt_ok = alt_ok && nullable[e.value];
        } else {
          alt_ok = false;
        }
      }
    }
  }
  return nullable;
}

// Left recursion: a rule reachable from itself through leftmost references (each
// reference preceded only by nullable references in its alternative). Iterative DFS.
absl::Status CheckLeftRecursion(const std::vector<Rule>& rules, const std::vector<std::string>& names) {
  const std::vector<bool> nullable = NullableRules(rules);
  std::vector<std::vector<uint32_t>> left(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) {
    bool leading = true;
    for (const Element& e : rules[r]) {
      if (IsEndOfSequence(e)) {
        leading = true;
      } else if (e.type == ElementType::kRuleRef) {
        if (leading) left[r].push_back(e.value);
        leading = leading && nullable[e.value];
      } else {
        leading = false;
      }
    }
  }
  std::vector<uint8_t> state(rules.size(), 0);  // 0 new, 1 in progress, 2 done
  for (size_t start = 0; start < rules.size(); ++start) {
    if (state[start] != 0) continue;
    std::vector<std::pair<uint32_t, size_t>> stack{{static_cast<uint32_t>(start), 0}};
    state[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i == left[r].size()) {
        state[r] = 2;
        stack.pop_back();
        continue;
      }
      const uint32_t next = left[r][i++];
      if (state[next] == 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("grammar: left recursion in rule '", names[next], "' (not supported, as in llama.cpp)"));
      }
      if (state[next] == 0) {
        state[next] = 1;
        stack.push_back({next, 0});
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Parser::Run(std::vector<Rule>* rules, std::vector<std::string>* names, uint32_t* root) {
  if (src_.size() > lim_.max_text_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: larger than ", lim_.max_text_bytes, " bytes (got ", src_.size(), ")"));
  }
  size_t pos = ParseSpace(0, true);
  if (pos >= src_.size()) return absl::InvalidArgumentError("grammar: empty (no rules)");
  while (Ok() && pos < src_.size()) pos = ParseRule(pos);
  if (!Ok()) return status_;
  names->assign(symbol_ids_.size(), "");
  for (const auto& [n, id] : symbol_ids_) (*names)[id] = n;
  rules_.resize(symbol_ids_.size());
  for (size_t id = 0; id < rules_.size(); ++id) {
    if (rules_[id].empty()) {
      const size_t at = id < first_use_.size() ? first_use_[id] : 0;
      Fail(at, absl::StrCat("undefined rule '", (*names)[id], "'"));
      return status_;
    }
  }
  auto it = symbol_ids_.find("root");
  if (it == symbol_ids_.end()) return absl::InvalidArgumentError("grammar: no 'root' rule");
  *root = it->second;
  HERD_RETURN_IF_ERROR(CheckLeftRecursion(rules_, *names));
  *rules = std::move(rules_);
  return absl::OkStatus();
}

void AppendChar(std::string* out, uint32_t c) {
  if (c == '"' || c == '\\' || c == '[' || c == ']') {
    absl::StrAppend(out, "\\", std::string(1, static_cast<char>(c)));
  } else if (c >= 0x20 && c < 0x7F && c != '-' && c != '^') {
    out->push_back(static_cast<char>(c));
  } else if (c <= 0xFF) {
    static const char* kHex = "0123456789ABCDEF";
    absl::StrAppend(out, "\\x", std::string(1, kHex[c >> 4]), std::string(1, kHex[c & 15]));
  } else if (c <= 0xFFFF) {
    char buf[8];
    snprintf(buf, sizeof buf, "\\u%04X", c);
    out->append(buf);
  } else {
    char buf[12];
    snprintf(buf, sizeof buf, "\\U%08X", c);
    out->append(buf);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<const Grammar>> Grammar::Parse(absl::string_view text, const GrammarLimits& limits) {
  std::shared_ptr<Grammar> g(new Grammar());
  Parser p(text, limits);
  HERD_RETURN_IF_ERROR(p.Run(&g->rules_, &g->names_, &g->root_id_));
  return std::shared_ptr<const Grammar>(std::move(g));
}

std::string Grammar::ToString() const {
  std::vector<std::string> names = names_;  // generated "x_3" -> "x-3" (parseable)
  for (std::string& n : names) std::replace(n.begin(), n.end(), '_', '-');
  std::string out;
  for (size_t id = 0; id < rules_.size(); ++id) {
    absl::StrAppend(&out, names[id], " ::= ");
    const Rule& r = rules_[id];
    for (size_t i = 0; i + 1 < r.size(); ++i) {
      const Element& e = r[i];
      switch (e.type) {
        case ElementType::kAlt:
          out += "| ";
          break;
        case ElementType::kRuleRef:
          absl::StrAppend(&out, names[e.value], " ");
          break;
        case ElementType::kCharAny:
          out += ". ";
          break;
        case ElementType::kChar:
        case ElementType::kCharNot: {
          out += e.type == ElementType::kCharNot ? "[^" : "[";
          AppendChar(&out, e.value);
          size_t j = i + 1;
          for (; j < r.size(); ++j) {
            if (r[j].type == ElementType::kCharRngUpper) {
              out += "-";
              AppendChar(&out, r[j].value);
            } else if (r[j].type == ElementType::kCharAlt) {
              AppendChar(&out, r[j].value);
            } else {
              break;
            }
          }
          out += "] ";
          i = j - 1;
          break;
        }
        default:
          break;
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace herd::grammar
