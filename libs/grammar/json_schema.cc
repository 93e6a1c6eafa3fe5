#include "libs/grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/json_nesting.h"
#include "libs/base/status_macros.h"
#include "libs/grammar/gbnf.h"
#include "libs/grammar/matcher.h"

namespace herd::grammar {
namespace {

using json = nlohmann::json;

constexpr int kMaxRepetition = 2000;  // GrammarLimits::max_repetition
constexpr int kMaxDepth = 64;         // nesting of schemas

const char* kSpaceRule = "| \" \" | \"\\n\"{1,2} [ \\t]{0,20}";

struct BuiltinRule {
  std::string content;
  std::vector<std::string> deps;
};

// PRIMITIVE_RULES and STRING_FORMAT_RULES of json-schema-to-grammar.cpp.
const std::map<std::string, BuiltinRule>& Builtins() {
  static const auto* rules = new std::map<std::string, BuiltinRule>{
      {"boolean", {"(\"true\" | \"false\") space", {}}},
      {"decimal-part", {"[0-9]{1,16}", {}}},
      {"integral-part", {"[0] | [1-9] [0-9]{0,15}", {}}},
      {"number",
       {"(\"-\"? integral-part) (\".\" decimal-part)? ([eE] [-+]? integral-part)? space",
        {"integral-part", "decimal-part"}}},
      {"integer", {"(\"-\"? integral-part) space", {"integral-part"}}},
      {"value",
       {"object | array | string | number | boolean | null",
        {"object", "array", "string", "number", "boolean", "null"}}},
      {"object",
       {"\"{\" space ( string \":\" space value (\",\" space string \":\" space value)* )? \"}\" space",
        {"string", "value"}}},
      {"array", {"\"[\" space ( value (\",\" space value)* )? \"]\" space", {"value"}}},
      {"uuid",
       {"\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
        "[0-9a-fA-F]{12} \"\\\"\" space",
        {}}},
      {"char", {"[^\"\\\\\\x7F\\x00-\\x1F] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})", {}}},
      {"string", {"\"\\\"\" char* \"\\\"\" space", {"char"}}},
      {"null", {"\"null\" space", {}}},
      {"date", {"[0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [1-2] [0-9] | \"3\" [0-1] )", {}}},
      {"time",
       {"([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{3} )? ( \"Z\" | ( \"+\" | "
        "\"-\" ) ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
        {}}},
      {"date-time", {"date \"T\" time", {"date", "time"}}},
      {"date-string", {"\"\\\"\" date \"\\\"\" space", {"date"}}},
      {"time-string", {"\"\\\"\" time \"\\\"\" space", {"time"}}},
      {"date-time-string", {"\"\\\"\" date-time \"\\\"\" space", {"date-time"}}},
      // A dot-atom local part (RFC 5322 atext) @ host name labels (letters, digits,
      // inner hyphens) and a letters-only top-level domain. (One flat rule: the domain
      // written as label ("." label)* "." tld rather than (label ".")+ tld, the same
      // language, keeps the test walker's depth heuristic moving forward.)
      {"email",
       {"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+ (\".\" [A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)* \"@\" "
        "[A-Za-z0-9] ([A-Za-z0-9-]* [A-Za-z0-9])? (\".\" [A-Za-z0-9] ([A-Za-z0-9-]* [A-Za-z0-9])?)* "
        "\".\" [A-Za-z]{2,}",
        {}}},
      {"email-string", {"\"\\\"\" email \"\\\"\" space", {"email"}}},
  };
  return *rules;
}

bool IsReservedName(const std::string& n) { return n == "root" || n == "space" || Builtins().count(n) > 0; }

// Keywords that never change what is valid (ignored like llama.cpp does).
bool IsAnnotation(const std::string& k) {
  static const std::set<std::string> kAnn = {
      "title",    "description", "default",  "examples",         "$schema",        "$id",
      "$comment", "deprecated",  "readOnly", "writeOnly",        "strict",         "definitions",
      "$defs",    "$anchor",     "name",     "contentMediaType", "contentEncoding"};
  return kAnn.count(k) > 0;
}

// GBNF string literal of raw text (format_literal, with \xNN for control characters).
std::string FormatLiteral(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '\r':
        out += "\\r";
        break;
      case '\n':
        out += "\\n";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          static const char* kHex = "0123456789ABCDEF";
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

// The code points of UTF-8 `s`, each as its bytes (an invalid byte alone).
std::vector<std::string> CodePointUnits(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    if (i + n > s.size()) n = 1;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

// A prefix tree of literal texts, for LiteralChoice.
struct LiteralTrie {
  std::map<std::string, std::unique_ptr<LiteralTrie>> children;  // by code point
  bool terminal = false;
};

std::string TrieAlternatives(const LiteralTrie& node, int depth, bool* too_deep);

// One edge and what follows it: the edge's code point plus the single-child chain
// below it as one literal, then the alternatives of the first branching node.
std::string TrieEdge(const std::string& unit, const LiteralTrie* child, int depth, bool* too_deep) {
  std::string lit = unit;
  while (!child->terminal && child->children.size() == 1) {
    lit += child->children.begin()->first;
    child = child->children.begin()->second.get();
  }
  std::string out = FormatLiteral(lit);
  if (child->children.empty()) return out;
  const std::string rest = TrieAlternatives(*child, depth + 1, too_deep);
  return absl::StrCat(out, " (", rest, ")", child->terminal ? "?" : "");
}

std::string TrieAlternatives(const LiteralTrie& node, int depth, bool* too_deep) {
  if (depth > 48) {
    *too_deep = true;
    return "";
  }
  std::vector<std::string> alts;
  for (const auto& [unit, child] : node.children) alts.push_back(TrieEdge(unit, child.get(), depth, too_deep));
  return absl::StrJoin(alts, " | ");
}

// A GBNF alternative matching exactly one of `texts`, their common prefixes factored
// (a prefix tree), so that a matcher holds one parse stack per distinct next character
// instead of one per text: an enum of 10,000 strings stays cheap to match. Texts that
// branch more than 48 times deep fall back to the flat alternatives.
std::string LiteralChoice(const std::vector<std::string>& texts) {
  LiteralTrie root;
  bool has_empty = false;
  for (const std::string& t : texts) {
    if (t.empty()) {
      has_empty = true;
      continue;
    }
    LiteralTrie* n = &root;
    for (const std::string& u : CodePointUnits(t)) {
      auto& c = n->children[u];
      if (c == nullptr) c = std::make_unique<LiteralTrie>();
      n = c.get();
    }
    n->terminal = true;
  }
  bool too_deep = false;
  std::string out = TrieAlternatives(root, 0, &too_deep);
  if (too_deep) {
    std::vector<std::string> flat;
    for (const std::string& t : texts) flat.push_back(FormatLiteral(t));
    return absl::StrJoin(flat, " | ");
  }
  if (has_empty) out = out.empty() ? "\"\"" : absl::StrCat("(", out, ")?");
  return out;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// build_repetition of json-schema-to-grammar.cpp (max_items = INT_MAX: unbounded).
std::string BuildRepetition(const std::string& item, int min_items, int max_items, const std::string& sep = "") {
  const bool has_max = max_items != std::numeric_limits<int>::max();
  if (max_items == 0) return "";
  if (min_items == 0 && max_items == 1) return item + "?";
  if (sep.empty()) {
    if (min_items == 1 && !has_max) return item + "+";
    if (min_items == 0 && !has_max) return item + "*";
    return absl::StrCat(item, "{", min_items, ",", has_max ? std::to_string(max_items) : "", "}");
  }
  const std::string result =
      absl::StrCat(item, " ",
                   BuildRepetition(absl::StrCat("(", sep, " ", item, ")"), min_items == 0 ? 0 : min_items - 1,
                                   has_max ? max_items - 1 : max_items));
  return min_items == 0 ? absl::StrCat("(", result, ")?") : result;
}

// ---- Numeric bounds (the idea of llama.cpp's _generate_min_max_int) ----
//
// The texts of a bounded integer are built from digit-range rules: the canonical decimal
// texts (no leading zeros) of the integers in [lo, hi] are split by digit count, and each
// fixed-length range [a, b] becomes a common prefix, then the first differing digit:
// a's digit followed by the range (rest of a, 99..9), the digits strictly between
// followed by any digits, b's digit followed by (00..0, rest of b). The grammar has
// O(digits^2) elements whatever the width of the range.

// Largest supported magnitude of a bound (exclusive): 10^18 (int64 arithmetic is exact).
constexpr int64_t kMaxBoundMagnitude = 1000000000000000000LL;
// Digits of an integer part when one side is unbounded (as integral-part: 16).
constexpr int kUnboundedDigits = 16;
// A bounded number's texts have at most 15 significant digits (DBL_DIG): distinct such
// decimals stay distinct and ordered as doubles, so a validator that parses them into
// binary floating point sees them on the same side of every integer bound.
constexpr int kMaxNumberDigits = 15;

int64_t Pow10(int n) {
  int64_t v = 1;
  for (int i = 0; i < n; ++i) v *= 10;
  return v;
}

int DigitCount(int64_t v) {
  int d = 1;
  while (v >= 10) {
    v /= 10;
    ++d;
  }
  return d;
}

std::string DigitClass(char lo, char hi) {
  return lo == hi ? std::string("[") + lo + "]" : std::string("[") + lo + "-" + hi + "]";
}

// [0-9] repeated min..max times ("" for 0..0).
std::string AnyDigits(int min, int max) {
  if (max == 0) return "";
  if (min == 1 && max == 1) return "[0-9]";
  if (min == max) return absl::StrCat("[0-9]{", min, "}");
  return absl::StrCat("[0-9]{", min, ",", max, "}");
}

std::string JoinSeq(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

// Digit strings of one length n between a and b inclusive (a <= b; leading zeros are
// part of the strings: these are inner positions).
std::string FixedRange(const std::string& a, const std::string& b) {
  size_t i = 0;
  while (i < a.size() && a[i] == b[i]) ++i;
  const std::string prefix = i > 0 ? absl::StrCat("\"", a.substr(0, i), "\"") : "";
  if (i == a.size()) return prefix;
  const std::string ra = a.substr(i + 1), rb = b.substr(i + 1);
  const int n = static_cast<int>(ra.size());
  const bool a_zeros = ra == std::string(ra.size(), '0');
  const bool b_nines = rb == std::string(rb.size(), '9');
  const char lo = a[i], hi = b[i];
  const char mid_lo = a_zeros ? lo : static_cast<char>(lo + 1);
  const char mid_hi = b_nines ? hi : static_cast<char>(hi - 1);
  std::vector<std::string> alts;
  if (!a_zeros) alts.push_back(JoinSeq(DigitClass(lo, lo), FixedRange(ra, std::string(ra.size(), '9'))));
  if (mid_lo <= mid_hi) alts.push_back(JoinSeq(DigitClass(mid_lo, mid_hi), AnyDigits(n, n)));
  if (!b_nines) alts.push_back(JoinSeq(DigitClass(hi, hi), FixedRange(std::string(rb.size(), '0'), rb)));
  const std::string body = alts.size() == 1 ? alts[0] : absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
  return JoinSeq(prefix, body);
}

// The canonical decimal texts of the integers in [lo, hi] (0 <= lo <= hi), one
// alternative per digit count; with `merge`, runs of complete digit counts (10..99,
// 100..999, ...) share one alternative. Each entry: {digit count, GBNF sequence}.
std::vector<std::pair<int, std::string>> UIntPieces(int64_t lo, int64_t hi, bool merge) {
  std::vector<std::pair<int, std::string>> out;
  const int dlo = DigitCount(lo), dhi = DigitCount(hi);
  int run_from = 0, run_to = 0;  // a pending run of complete digit counts
  auto flush = [&] {
    if (run_from == 0) return;
    out.emplace_back(run_to, JoinSeq("[1-9]", AnyDigits(run_from - 1, run_to - 1)));
    run_from = 0;
  };
  for (int d = dlo; d <= dhi; ++d) {
    const int64_t a = d == dlo ? lo : Pow10(d - 1);
    const int64_t b = d == dhi ? hi : Pow10(d) - 1;
    if (merge && d >= 2 && a == Pow10(d - 1) && b == Pow10(d) - 1) {
      if (run_from == 0) run_from = d;
      run_to = d;
      continue;
    }
    flush();
    out.emplace_back(d, FixedRange(std::to_string(a), std::to_string(b)));
  }
  flush();
  return out;
}

// One side of a range: absent, or a value (|v| < kMaxBoundMagnitude), inclusive or not.
struct Bound {
  bool present = false;
  bool exclusive = false;
  long double v = 0;
  int64_t Floor() const { return static_cast<int64_t>(std::floor(v)); }
  int64_t Ceil() const { return static_cast<int64_t>(std::ceil(v)); }
  bool IsInteger() const { return std::floor(v) == v; }
  Bound Negated() const { return Bound{present, exclusive, -v}; }
};

// The GBNF alternatives of the magnitudes M >= 0 (texts without sign) with low <= M <=
// high (strict where exclusive): integer texts, and with `fractions` texts "I.ddd"
// whose whole interval [I, I+1) lies inside (plus "L.ddd" with a non-zero fraction for
// an exclusive integer low bound L). `limit`: the largest integer part of an unbounded
// side.
std::vector<std::string> MagnitudeAlternatives(const Bound& low, const Bound& high, int64_t limit, bool fractions) {
  std::vector<std::string> alts;
  int64_t ilo = !low.present ? 0 : low.exclusive ? low.Floor() + 1 : low.Ceil();
  ilo = std::max<int64_t>(ilo, 0);
  int64_t ihi = !high.present ? limit : high.exclusive ? high.Ceil() - 1 : high.Floor();
  ihi = std::min(ihi, limit);
  if (ilo <= ihi) {
    for (auto& [d, text] : UIntPieces(ilo, ihi, /*merge=*/true)) alts.push_back(std::move(text));
  }
  if (!fractions) return alts;
  // I + 1 <= high, and at most kMaxNumberDigits - 1 integer digits (one is left for the
  // fraction).
  int64_t fhi = !high.present ? limit : high.Floor() - 1;
  fhi = std::min(fhi, Pow10(kMaxNumberDigits - 1) - 1);
  if (ilo <= fhi) {
    for (auto& [d, text] : UIntPieces(ilo, fhi, /*merge=*/false)) {
      alts.push_back(absl::StrCat(text, " \".\" ", AnyDigits(1, kMaxNumberDigits - d)));
    }
  }
  if (low.present && low.exclusive && low.IsInteger() && low.v >= 0 && low.Floor() <= fhi) {
    // L "." then a fraction with a non-zero digit: z zeros, [1-9], then more digits.
    const int64_t l = low.Floor();
    const int n = kMaxNumberDigits - DigitCount(l);  // fraction digits allowed
    std::vector<std::string> fr;
    for (int z = 0; z < n; ++z) {
      fr.push_back(
          JoinSeq(JoinSeq(z > 0 ? absl::StrCat("\"", std::string(static_cast<size_t>(z), '0'), "\"") : "", "[1-9]"),
                  AnyDigits(0, n - 1 - z)));
    }
    alts.push_back(absl::StrCat("\"", l, ".\" (", absl::StrJoin(fr, " | "), ")"));
  }
  return alts;
}

// ---- pattern: a regular expression subset -> GBNF of the JSON string's content ----
//
// Patterns are matched like JSON schema validators do (ECMA-262 in the specification,
// Python's `re` in python-jsonschema): a search, so an unanchored side gets any
// characters. Where the two engines differ (\d \w \s and `.` beyond ASCII), the grammar
// takes what both accept: \d = [0-9], \w = [A-Za-z0-9_], \s = [ \t\n\v\f\r], their
// negations and negated classes that contain them only ASCII characters, `.` anything but
// \n \r U+2028 U+2029.

constexpr size_t kMaxPatternBytes = 1000;
constexpr int kMaxPatternNesting = 32;       // depth of ( ) groups
constexpr int64_t kMaxPatternCost = 200000;  // grammar elements after expanding repetitions
constexpr uint32_t kMaxCodePoint = 0x10FFFF;

using CharRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // sorted, disjoint, inclusive

CharRanges Normalized(CharRanges r) {
  std::sort(r.begin(), r.end());
  CharRanges out;
  for (const auto& [lo, hi] : r) {
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CharRanges Complement(const CharRanges& r) {
  CharRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (r.empty() || r.back().second < kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

CharRanges Intersect(const CharRanges& a, const CharRanges& b) {
  CharRanges out;
  for (const auto& x : a) {
    for (const auto& y : b) {
      const uint32_t lo = std::max(x.first, y.first), hi = std::min(x.second, y.second);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  }
  return Normalized(out);
}

CharRanges Union(CharRanges a, const CharRanges& b) {
  a.insert(a.end(), b.begin(), b.end());
  return Normalized(std::move(a));
}

// A set of characters as both engines see it: `sure` is matched by both (what the
// grammar may produce), `maybe` contains everything either may match (what a negated
// class must leave out).
struct CharSet {
  CharRanges sure, maybe;
};

CharSet Single(uint32_t c) { return {{{c, c}}, {{c, c}}}; }
CharSet Negated(const CharSet& s) { return {Complement(s.maybe), Complement(s.sure)}; }

// \d \w \s; `upper` is \D \W \S.
CharSet ClassEscape(char c) {
  const CharRanges non_ascii = {{0x80, kMaxCodePoint}};
  CharSet s;
  switch (c | 0x20) {
    case 'd':
      s.sure = {{'0', '9'}};
      break;
    case 'w':
      s.sure = Normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
      break;
    default:  // 's'; Python's \s also has \x1c-\x1f
      s.sure = {{'\t', '\r'}, {' ', ' '}};
      s.maybe = {{'\t', '\r'}, {0x1C, ' '}};
      break;
  }
  if (s.maybe.empty()) s.maybe = s.sure;
  s.maybe = Union(s.maybe, non_ascii);
  return (c >= 'A' && c <= 'Z') ? Negated(s) : s;
}

// The JSON string text of one character (escaped where JSON requires it).
std::string JsonCharText(uint32_t c) {
  switch (c) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    default:
      break;
  }
  if (c < 0x20 || c == 0x7F) {
    char buf[8];
    snprintf(buf, sizeof buf, "\\u%04x", c);
    return buf;
  }
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

// A code point inside a GBNF character class.
std::string ClassChar(uint32_t c) {
  if ((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) return std::string(1, char(c));
  char buf[16];
  if (c < 0x80) {
    snprintf(buf, sizeof buf, "\\x%02X", c);
  } else if (c <= 0xFFFF) {
    snprintf(buf, sizeof buf, "\\u%04X", c);
  } else {
    snprintf(buf, sizeof buf, "\\U%08X", c);
  }
  return buf;
}

std::string ClassBody(const CharRanges& r) {
  std::string out;
  for (const auto& [lo, hi] : r) {
    out += ClassChar(lo);
    if (hi > lo) out += (hi == lo + 1 ? "" : "-") + ClassChar(hi);
  }
  return out;
}

// Characters a JSON string holds unescaped (as the char rule: no controls, no DEL).
const CharRanges& RawJsonChars() {
  static const auto* r = new CharRanges(Complement({{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}}));
  return *r;
}

// A fragment of the pattern's grammar.
struct Frag {
  std::string text;      // GBNF sequence ("" = the empty string)
  bool nullable = true;  // can match the empty string
  bool atom = true;      // one GBNF item (a quantifier may follow it directly)
  int64_t cost = 0;      // grammar elements, repetitions expanded
  std::string literal;   // when a plain literal: its JSON text (merged with neighbours)
  bool is_literal = false;
};

class PatternConverter {
 public:
  // `any_char`: the rule name of one JSON string character (for unanchored sides).
  PatternConverter(std::vector<uint32_t> cps, std::string any_char) : p_(std::move(cps)), any_(std::move(any_char)) {}

  // The GBNF of the string content (between the quotes), or false with error().
  bool Convert(std::string* out) {
    std::vector<std::string> branches;
    int64_t cost = 0;
    while (true) {
      bool anchored_start = false, anchored_end = false;
      if (Peek() == '^') {
        anchored_start = true;
        ++i_;
      }
      Frag seq;
      if (!ParseSequence(0, &seq, &anchored_end)) return false;
      cost += seq.cost;
      std::string text = Text(seq);
      if (!anchored_start) text = JoinSeq(any_ + "*", text);
      if (!anchored_end && !(text == any_ + "*")) text = JoinSeq(text, any_ + "*");
      branches.push_back(text.empty() ? "\"\"" : text);
      if (i_ >= p_.size()) break;
      ++i_;  // '|'
    }
    if (cost > kMaxPatternCost)
      return Error(
          absl::StrCat("too large once repetitions are expanded (over ", kMaxPatternCost, " grammar elements)"));
    *out = branches.size() == 1 ? branches[0] : absl::StrCat("(", absl::StrJoin(branches, " | "), ")");
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  uint32_t Peek(size_t k = 0) const { return i_ + k < p_.size() ? p_[i_ + k] : 0xFFFFFFFF; }
  bool AtEnd() const { return i_ >= p_.size(); }
  bool Error(const std::string& msg) {
    if (error_.empty()) error_ = absl::StrCat(msg, " (at offset ", i_, ")");
    return false;
  }
  static std::string Text(const Frag& f) { return f.is_literal ? FormatLiteral(f.literal) : f.text; }

  // A sequence up to '|' or ')' (or the end); at depth 0 a '$' before '|' or the end
  // anchors the branch.
  bool ParseSequence(int depth, Frag* out, bool* anchored_end) {
    std::vector<Frag> items;
    while (!AtEnd() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '$' && depth == 0 && (i_ + 1 == p_.size() || Peek(1) == '|')) {
        *anchored_end = true;
        ++i_;
        break;
      }
      Frag f;
      if (!ParseTerm(depth, &f)) return false;
      if (f.is_literal && !items.empty() && items.back().is_literal) {
        items.back().literal += f.literal;
        items.back().cost += f.cost;
      } else {
        items.push_back(std::move(f));
      }
    }
    if (depth == 0 && Peek() == ')') return Error("unmatched ')'");
    Frag seq;
    std::vector<std::string> texts;
    for (const Frag& f : items) {
      texts.push_back(Text(f));
      seq.nullable = seq.nullable && f.nullable;
      seq.cost += f.cost;
    }
    seq.text = absl::StrJoin(texts, " ");
    if (items.size() == 1) {
      seq = items[0];
    } else {
      seq.atom = items.empty();
    }
    *out = std::move(seq);
    return true;
  }

  // Alternatives inside a group (after '(' or '(?:'), up to the ')'.
  bool ParseGroup(int depth, Frag* out) {
    if (depth > kMaxPatternNesting) return Error(absl::StrCat("groups nested deeper than ", kMaxPatternNesting));
    std::vector<std::string> alts;
    Frag g;
    g.nullable = false;
    while (true) {
      Frag seq;
      bool unused = false;
      if (!ParseSequence(depth, &seq, &unused)) return false;
      alts.push_back(seq.text.empty() && !seq.is_literal ? "\"\"" : Text(seq));
      g.nullable = g.nullable || seq.nullable;
      g.cost += seq.cost;
      if (AtEnd()) return Error("missing ')'");
      if (Peek() == ')') break;
      ++i_;  // '|'
    }
    ++i_;  // ')'
    g.text = absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
    g.cost += 2;
    g.atom = true;
    *out = std::move(g);
    return true;
  }

  bool ParseNumber(uint32_t* out) {
    if (AtEnd() || Peek() < '0' || Peek() > '9') return Error("expecting a number in { }");
    uint64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = std::min<uint64_t>(v * 10 + (Peek() - '0'), 1u << 30);
      ++i_;
    }
    if (v > static_cast<uint64_t>(kMaxRepetition)) {
      return Error(absl::StrCat("repetition count over ", kMaxRepetition, " is not supported"));
    }
    *out = static_cast<uint32_t>(v);
    return true;
  }

  // {n}, {n,}, {n,m} at i_ (which is '{'). Anything else starting with '{' is refused:
  // engines disagree on it ({,m} is a quantifier in Python, literal text in ECMA-262).
  bool ParseBraces(uint32_t* min, int64_t* max) {
    const bool digits = i_ + 1 < p_.size() && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9';
    if (!digits) return Error("'{' must start a quantifier {n}, {n,} or {n,m} (escape a literal '{' as \\{)");
    ++i_;
    if (!ParseNumber(min)) return false;
    if (Peek() == '}') {
      ++i_;
      *max = *min;
      return true;
    }
    if (Peek() != ',') return Error("'{' must start a quantifier {n}, {n,} or {n,m} (escape a literal '{' as \\{)");
    ++i_;
    *max = -1;
    if (Peek() != '}') {
      uint32_t m = 0;
      if (!ParseNumber(&m)) return false;
      *max = m;
    }
    if (Peek() != '}') return Error("'{' must start a quantifier {n}, {n,} or {n,m} (escape a literal '{' as \\{)");
    ++i_;
    if (*max >= 0 && *max < static_cast<int64_t>(*min)) return Error("repetition {n,m} with m below n");
    return true;
  }

  bool ParseTerm(int depth, Frag* out) {
    Frag a;
    if (!ParseAtom(depth, &a)) return false;
    uint32_t min = 1;
    int64_t max = 1;
    const uint32_t q = Peek();
    if (q == '*' || q == '+' || q == '?') {
      ++i_;
      min = q == '+' ? 1 : 0;
      max = q == '?' ? 1 : -1;
    } else if (q == '{') {
      if (!ParseBraces(&min, &max)) return false;
    } else {
      *out = std::move(a);
      return true;
    }
    if (Peek() == '?') ++i_;  // lazy: the same language
    if (Peek() == '*' || Peek() == '+' || Peek() == '?' || Peek() == '{') {
      return Error("a quantifier cannot follow a quantifier (possessive or nested repetition)");
    }
    if (a.nullable && max < 0) {
      return Error("a repeated part that can match the empty string (like (a*)*) is not supported");
    }
    Frag f;
    const std::string base = a.is_literal ? FormatLiteral(a.literal) : a.atom ? a.text : "(" + a.text + ")";
    f.nullable = a.nullable || min == 0;
    const int64_t times = max < 0 ? static_cast<int64_t>(min) + 1 : std::max<int64_t>(max, 1);
    f.cost = std::max<int64_t>(a.cost, 1) * times;
    if (f.cost > kMaxPatternCost) {
      return Error(
          absl::StrCat("too large once repetitions are expanded (over ", kMaxPatternCost, " grammar elements)"));
    }
    if (max == 0) {
      f.text = "";
      f.nullable = true;
    } else if (min == 1 && max == 1) {
      f = std::move(a);
      return (*out = std::move(f)), true;
    } else if (min == 0 && max == 1) {
      f.text = base + "?";
    } else if (min == 0 && max < 0) {
      f.text = base + "*";
    } else if (min == 1 && max < 0) {
      f.text = base + "+";
    } else if (max < 0) {
      f.text = absl::StrCat(base, "{", min, ",}");
    } else if (max == min) {
      f.text = absl::StrCat(base, "{", min, "}");
    } else {
      f.text = absl::StrCat(base, "{", min, ",", max, "}");
    }
    f.atom = false;
    *out = std::move(f);
    return true;
  }

  Frag SetFrag(const CharRanges& sure) {
    Frag f;
    f.nullable = false;
    f.atom = true;
    const CharRanges raw = Intersect(sure, RawJsonChars());
    if (sure.size() == 1 && sure[0].first == sure[0].second) {
      f.is_literal = true;
      f.literal = JsonCharText(sure[0].first);
      f.cost = 1;
      return f;
    }
    std::vector<std::string> alts;
    if (!raw.empty()) {
      const CharRanges neg = Complement(raw);
      alts.push_back(neg.size() < raw.size() ? "[^" + ClassBody(neg) + "]" : "[" + ClassBody(raw) + "]");
    }
    f.cost = static_cast<int64_t>(std::min(raw.size(), Complement(raw).size())) + 1;
    for (const auto& [lo, hi] : Intersect(sure, Complement(RawJsonChars()))) {
      for (uint32_t c = lo; c <= hi; ++c) {
        alts.push_back(FormatLiteral(JsonCharText(c)));
        f.cost += 2;
      }
    }
    f.text = alts.size() == 1 ? alts[0] : absl::StrCat("(", absl::StrJoin(alts, " | "), ")");
    return f;
  }

  bool ParseAtom(int depth, Frag* out) {
    const uint32_t c = Peek();
    switch (c) {
      case '(': {
        ++i_;
        if (Peek() == '?') {
          if (Peek(1) != ':') {
            return Error("only (...) and (?:...) groups are supported (no lookaround, named groups or flags)");
          }
          i_ += 2;
        }
        return ParseGroup(depth + 1, out);
      }
      case '[': {
        ++i_;
        CharSet s;
        if (!ParseClass(&s)) return false;
        if (s.sure.empty()) return Error("a character class that matches nothing");
        *out = SetFrag(s.sure);
        return true;
      }
      case '.':
        ++i_;
        *out = SetFrag(Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
        return true;
      case '\\': {
        CharSet s;
        if (!ParseEscape(false, &s)) return false;
        *out = SetFrag(s.sure);
        return true;
      }
      case '^':
      case '$':
        return Error(
            "'^' and '$' are supported only at the start and end of the pattern (or of a top-level "
            "alternative)");
      case '*':
      case '+':
      case '?':
      case '{':
        return Error("nothing to repeat");
      default:
        ++i_;
        *out = SetFrag({{c, c}});
        return true;
    }
  }

  bool Hex(int n, uint32_t* out) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      const uint32_t h = Peek();
      int d = -1;
      if (h >= '0' && h <= '9') d = static_cast<int>(h - '0');
      if (h >= 'a' && h <= 'f') d = static_cast<int>(h - 'a' + 10);
      if (h >= 'A' && h <= 'F') d = static_cast<int>(h - 'A' + 10);
      if (d < 0) return Error(absl::StrCat("expecting ", n, " hex digits"));
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    *out = v;
    return true;
  }

  // An escape at i_ ('\\'): a class escape (\d ...) or one character.
  bool ParseEscape(bool in_class, CharSet* out) {
    ++i_;
    if (AtEnd()) return Error("pattern ends with '\\'");
    const uint32_t c = Peek();
    ++i_;
    switch (c) {
      case 'd':
      case 'D':
      case 'w':
      case 'W':
      case 's':
      case 'S':
        *out = ClassEscape(static_cast<char>(c));
        return true;
      case 't':
        *out = Single('\t');
        return true;
      case 'n':
        *out = Single('\n');
        return true;
      case 'r':
        *out = Single('\r');
        return true;
      case 'f':
        *out = Single('\f');
        return true;
      case 'v':
        *out = Single('\v');
        return true;
      case 'b':
        if (!in_class) return Error("\\b (word boundary) is not supported");
        *out = Single('\b');
        return true;
      case '0':
        if (Peek() >= '0' && Peek() <= '9') return Error("octal escapes are not supported");
        *out = Single(0);
        return true;
      case 'x': {
        uint32_t v = 0;
        if (!Hex(2, &v)) return false;
        *out = Single(v);
        return true;
      }
      case 'u': {
        uint32_t v = 0;
        if (!Hex(4, &v)) return false;
        if (v >= 0xD800 && v <= 0xDFFF) return Error("surrogate escapes are not supported");
        *out = Single(v);
        return true;
      }
      default:
        break;
    }
    if (c >= '1' && c <= '9') return Error("backreferences are not supported");
    if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')) && c >= 0x20) {
      *out = Single(c);  // escaped punctuation: the character itself
      return true;
    }
    --i_;
    return Error(absl::StrCat("the escape \\", std::string(JsonCharText(c)), " is not supported"));
  }

  // A class after '[' up to and including ']'.
  bool ParseClass(CharSet* out) {
    bool negated = false;
    if (Peek() == '^') {
      negated = true;
      ++i_;
    }
    if (Peek() == ']') return Error("']' first in a class: escape it as \\]");
    CharSet acc;
    while (true) {
      if (AtEnd()) return Error("missing ']'");
      if (Peek() == ']') {
        ++i_;
        break;
      }
      CharSet item;
      bool single = true;
      uint32_t lo = 0;
      if (Peek() == '\\') {
        if (!ParseEscape(true, &item)) return false;
        single = item.sure.size() == 1 && item.sure[0].first == item.sure[0].second && item.maybe == item.sure;
        lo = single ? item.sure[0].first : 0;
      } else {
        lo = Peek();
        ++i_;
        item = Single(lo);
      }
      if (Peek() == '-' && i_ + 1 < p_.size() && Peek(1) != ']') {
        if (!single) return Error("a class escape cannot bound a range");
        ++i_;  // '-'
        uint32_t hi = 0;
        if (Peek() == '\\') {
          CharSet h;
          if (!ParseEscape(true, &h)) return false;
          if (!(h.sure.size() == 1 && h.sure[0].first == h.sure[0].second && h.maybe == h.sure)) {
            return Error("a class escape cannot bound a range");
          }
          hi = h.sure[0].first;
        } else {
          hi = Peek();
          ++i_;
        }
        if (hi < lo) return Error("a range out of order in a class");
        item = {{{lo, hi}}, {{lo, hi}}};
      }
      acc.sure = Union(acc.sure, item.sure);
      acc.maybe = Union(acc.maybe, item.maybe);
    }
    *out = negated ? Negated(acc) : acc;
    return true;
  }

  std::vector<uint32_t> p_;
  std::string any_;
  size_t i_ = 0;
  std::string error_;
};

class Converter {
 public:
  explicit Converter(const json& root) : root_(root) { rules_["space"] = kSpaceRule; }

  absl::StatusOr<std::string> Run() {
    Visit(root_, "", "", 0);
    if (!status_.ok()) return status_;
    std::string out;
    for (const auto& [name, body] : rules_) absl::StrAppend(&out, name, " ::= ", body, "\n");
    return out;
  }

 private:
  using Used = std::set<std::string>;

  bool Fail(const std::string& ptr, const std::string& msg) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat("json_schema", ptr, ": ", msg));
    return false;
  }

  // _add_rule: name made GBNF-safe; a different body under a taken name gets a suffix.
  std::string AddRule(const std::string& name, const std::string& body) {
    std::string esc;
    for (char c : name) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-';
      if (ok) {
        esc += c;
      } else if (esc.empty() || esc.back() != '-') {
        esc += '-';
      }
    }
    if (esc.empty()) esc = "r";
    std::string key = esc;
    auto it = rules_.find(esc);
    if (it != rules_.end() && it->second != body) {
      for (int i = 0;; ++i) {
        key = absl::StrCat(esc, i);
        auto jt = rules_.find(key);
        if (jt == rules_.end() || jt->second == body) break;
      }
    }
    rules_[key] = body;
    return key;
  }

  // _add_primitive: the builtin rule (under `name`) and its dependencies.
  std::string AddPrimitive(const std::string& name, const std::string& builtin) {
    const BuiltinRule& r = Builtins().at(builtin);
    const std::string n = AddRule(name, r.content);
    for (const std::string& dep : r.deps) {
      if (rules_.count(dep) == 0) AddPrimitive(dep, dep);
    }
    return n;
  }

  // Removes from `schema` the keywords that apply only to types other than `type`.
  static void DropOtherTypesKeywords(const std::string& type, json* schema) {
    static const std::vector<std::pair<std::vector<std::string>, std::vector<const char*>>> kFamilies = {
        {{"number", "integer"}, {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
        {{"string"}, {"minLength", "maxLength", "pattern", "format"}},
        {{"array"}, {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains"}},
        {{"object"},
         {"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties",
          "maxProperties"}},
    };
    for (const auto& [types, keys] : kFamilies) {
      if (std::find(types.begin(), types.end(), type) != types.end()) continue;
      for (const char* k : keys) schema->erase(k);
    }
  }

  // Rejects keys of `schema` that the chosen branch did not use.
  bool CheckUsed(const json& schema, const Used& used, const std::string& ptr) {
    for (auto it = schema.begin(); it != schema.end(); ++it) {
      if (used.count(it.key()) || IsAnnotation(it.key())) continue;
      return Fail(absl::StrCat(ptr, "/", it.key()), "keyword not supported here (it would be ignored)");
    }
    return true;
  }

  bool GetCount(const json& schema, const char* key, const std::string& ptr, int* out) {
    auto it = schema.find(key);
    if (it == schema.end()) return true;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return Fail(absl::StrCat(ptr, "/", key), "must be a non-negative integer");
    }
    if (it->get<int64_t>() > kMaxRepetition) {
      return Fail(absl::StrCat(ptr, "/", key), absl::StrCat("over ", kMaxRepetition, " is not supported"));
    }
    *out = static_cast<int>(it->get<int64_t>());
    return true;
  }

  std::string Visit(const json& schema, const std::string& name, const std::string& ptr, int depth);
  std::string VisitObject(const json& schema, const std::string& name, const std::string& rule_name,
                          const std::string& ptr, int depth, Used* used);
  std::string VisitAllOf(const json& schema, const std::string& name, const std::string& rule_name,
                         const std::string& ptr, int depth, Used* used);
  std::string VisitArray(const json& schema, const std::string& name, const std::string& rule_name,
                         const std::string& ptr, int depth, Used* used);
  std::string VisitString(const json& schema, const std::string& rule_name, const std::string& ptr, Used* used);
  std::string VisitPattern(const json& schema, const std::string& rule_name, const std::string& ptr, Used* used);
  std::string VisitBoundedNumber(const json& schema, const std::string& rule_name, const std::string& ptr, bool integer,
                                 Used* used);
  bool ReadBound(const json& schema, const char* key, bool is_min, bool exclusive, const std::string& ptr,
                 Bound* bound);
  std::string ResolveRef(const std::string& ref, const std::string& ptr, int depth);
  std::string BuildObjectRule(const std::vector<std::pair<std::string, json>>& props,
                              const std::set<std::string>& required, const std::string& name, const json* additional,
                              const std::string& ptr, int depth);
  std::string NotStrings(const std::vector<std::string>& strings);

  const json& root_;
  std::map<std::string, std::string> rules_;
  std::map<std::string, std::string> ref_rules_;  // resolved $ref -> rule name
  absl::Status status_;
};

// The schema a local reference ("#/definitions/x", "#/$defs/x", any "#/..." pointer)
// points at; nullptr if it is not local or does not resolve.
const json* ResolveLocal(const json& root, const std::string& ref) {
  if (ref.rfind('#', 0) != 0) return nullptr;
  try {
    const json::json_pointer jp(ref.substr(1));
    if (!root.contains(jp)) return nullptr;
    return &root.at(jp);
  } catch (const std::exception&) {
    return nullptr;
  }
}

// _resolve_ref: the definition is visited once under its last path segment's name;
// references met while it is being visited (recursion) use that name.
std::string Converter::ResolveRef(const std::string& ref, const std::string& ptr, int depth) {
  auto done = ref_rules_.find(ref);
  if (done != ref_rules_.end()) return done->second;
  const json* target = ResolveLocal(root_, ref);
  if (target == nullptr) {
    return Fail(ptr + "/$ref", absl::StrCat("unresolvable or non-local reference \"", ref,
                                            "\" (use #/definitions/... or #/$defs/...)")),
           "";
  }
  std::string ref_name = ref.substr(ref.find_last_of('/') + 1);
  if (ref_name.empty() || ref_name == "#") ref_name = "root-ref";
  if (IsReservedName(ref_name)) ref_name += "-";
  for (int i = 0; rules_.count(ref_name); ++i) ref_name = absl::StrCat(ref_name, i);
  ref_rules_[ref] = ref_name;  // what recursive references see
  const std::string r = Visit(*target, ref_name, ref.substr(1), depth + 1);
  ref_rules_[ref] = r;
  return r;
}

std::string Converter::Visit(const json& schema, const std::string& name, const std::string& ptr, int depth) {
  if (!status_.ok()) return "";
  if (depth > kMaxDepth) return Fail(ptr, absl::StrCat("schema nested deeper than ", kMaxDepth)), "";
  const std::string rule_name = IsReservedName(name) ? name + "-" : name.empty() ? "root" : name;
  if (schema.is_boolean()) {
    if (!schema.get<bool>()) return Fail(ptr, "the schema `false` matches nothing"), "";
    return AddRule(rule_name, AddPrimitive("value", "value"));
  }
  if (!schema.is_object()) return Fail(ptr, "a schema must be an object or a boolean"), "";
  const json type = schema.contains("type") ? schema["type"] : json();
  Used used;
  std::string r;
  if (schema.contains("$ref")) {
    used.insert("$ref");
    if (!schema["$ref"].is_string()) return Fail(ptr + "/$ref", "must be a string"), "";
    const std::string target = ResolveRef(schema["$ref"].get<std::string>(), ptr, depth);
    r = target.empty() ? "" : AddRule(rule_name, target);
  } else if (schema.contains("oneOf") || schema.contains("anyOf")) {
    const char* key = schema.contains("oneOf") ? "oneOf" : "anyOf";
    used.insert(key);
    const json& alts = schema[key];
    if (!alts.is_array() || alts.empty()) return Fail(absl::StrCat(ptr, "/", key), "must be a non-empty array"), "";
    std::vector<std::string> parts;
    for (size_t i = 0; i < alts.size(); ++i) {
      parts.push_back(Visit(alts[i], absl::StrCat(name, name.empty() ? "alternative-" : "-", i),
                            absl::StrCat(ptr, "/", key, "/", i), depth + 1));
    }
    r = AddRule(rule_name, absl::StrJoin(parts, " | "));
  } else if (type.is_array()) {
    if (type.empty()) return Fail(ptr + "/type", "must not be empty"), "";
    std::vector<std::string> parts;
    for (size_t i = 0; i < type.size(); ++i) {
      json copy = schema;
      copy["type"] = type[i];
      // A type-specific keyword constrains only instances of its type (JSON Schema
      // validation, section 6): {"type": ["integer", "null"], "minimum": 0} (zod's
      // .int().min(0).nullable()) bounds the integers and leaves null alone.
      if (type[i].is_string()) DropOtherTypesKeywords(type[i].get<std::string>(), &copy);
      parts.push_back(Visit(copy, absl::StrCat(name, name.empty() ? "alternative-" : "-", i), ptr, depth + 1));
    }
    return status_.ok() ? AddRule(rule_name, absl::StrJoin(parts, " | ")) : "";
  } else if (schema.contains("const")) {
    used.insert({"const", "type"});
    r = AddRule(rule_name, FormatLiteral(Dump(schema["const"])) + " space");
  } else if (schema.contains("enum")) {
    used.insert({"enum", "type"});
    const json& e = schema["enum"];
    if (!e.is_array() || e.empty()) return Fail(ptr + "/enum", "must be a non-empty array"), "";
    std::vector<std::string> texts;
    for (const json& v : e) texts.push_back(Dump(v));
    r = AddRule(rule_name, absl::StrCat("(", LiteralChoice(texts), ") space"));
  } else if ((type.is_null() || type == "object") && schema.contains("allOf")) {
    r = VisitAllOf(schema, name, rule_name, ptr, depth, &used);
  } else if ((type.is_null() || type == "object") &&
             (schema.contains("properties") ||
              (schema.contains("additionalProperties") && schema["additionalProperties"] != true))) {
    r = VisitObject(schema, name, rule_name, ptr, depth, &used);
  } else if ((type.is_null() || type == "array") && (schema.contains("items") || schema.contains("prefixItems"))) {
    r = VisitArray(schema, name, rule_name, ptr, depth, &used);
  } else if (type == "array") {
    r = VisitArray(schema, name, rule_name, ptr, depth, &used);
  } else if (type == "string" || (type.is_null() && (schema.contains("format") || schema.contains("pattern")))) {
    r = VisitString(schema, rule_name, ptr, &used);
  } else if (type.is_null() || type == "object") {
    used.insert({"type", "additionalProperties"});
    r = AddRule(rule_name, AddPrimitive("object", "object"));
  } else if ((type == "number" || type == "integer") &&
             (schema.contains("minimum") || schema.contains("maximum") || schema.contains("exclusiveMinimum") ||
              schema.contains("exclusiveMaximum"))) {
    r = VisitBoundedNumber(schema, rule_name, ptr, type == "integer", &used);
  } else if (type == "number" || type == "integer" || type == "boolean" || type == "null") {
    used.insert("type");
    r = AddPrimitive(rule_name == "root" ? "root" : type.get<std::string>(), type.get<std::string>());
  } else {
    return Fail(ptr + "/type", absl::StrCat("unknown type ", Dump(type))), "";
  }
  if (!status_.ok() || !CheckUsed(schema, used, ptr)) return "";
  return r;
}

std::string Converter::VisitString(const json& schema, const std::string& rule_name, const std::string& ptr,
                                   Used* used) {
  used->insert("type");
  if (schema.contains("pattern")) return VisitPattern(schema, rule_name, ptr, used);
  if (schema.contains("format")) {
    used->insert("format");
    if (!schema["format"].is_string()) return Fail(ptr + "/format", "must be a string"), "";
    const std::string f = schema["format"].get<std::string>();
    if (schema.contains("minLength") || schema.contains("maxLength")) {
      return Fail(ptr + "/format", "together with minLength/maxLength is not supported"), "";
    }
    if (f == "uuid") return AddPrimitive(rule_name == "root" ? "root" : "uuid", "uuid");
    if (f == "date" || f == "time" || f == "date-time" || f == "email") {
      return AddRule(rule_name, AddPrimitive(f + "-string", f + "-string"));
    }
    return Fail(ptr + "/format", absl::StrCat("\"", f, "\" is not supported (date, time, date-time, uuid, email)")), "";
  }
  if (schema.contains("minLength") || schema.contains("maxLength")) {
    used->insert({"minLength", "maxLength"});
    int min_len = 0, max_len = std::numeric_limits<int>::max();
    if (!GetCount(schema, "minLength", ptr, &min_len) || !GetCount(schema, "maxLength", ptr, &max_len)) return "";
    if (max_len < min_len) return Fail(ptr + "/maxLength", "is below minLength"), "";
    const std::string char_rule = AddPrimitive("char", "char");
    return AddRule(rule_name,
                   absl::StrCat("\"\\\"\" ", BuildRepetition(char_rule, min_len, max_len), " \"\\\"\" space"));
  }
  return AddPrimitive(rule_name == "root" ? "root" : "string", "string");
}

std::string Converter::VisitPattern(const json& schema, const std::string& rule_name, const std::string& ptr,
                                    Used* used) {
  used->insert("pattern");
  const std::string pptr = ptr + "/pattern";
  for (const char* k : {"minLength", "maxLength", "format"}) {
    if (schema.contains(k)) return Fail(pptr, absl::StrCat("together with ", k, " is not supported")), "";
  }
  if (!schema["pattern"].is_string()) return Fail(pptr, "must be a string"), "";
  const std::string& pattern = schema["pattern"].get_ref<const std::string&>();
  if (pattern.size() > kMaxPatternBytes) {
    return Fail(pptr, absl::StrCat("longer than ", kMaxPatternBytes, " bytes is not supported")), "";
  }
  std::vector<uint32_t> cps;
  PartialUtf8 partial;
  DecodeUtf8(pattern, PartialUtf8{}, &cps, &partial);
  if (partial.n_remain != 0 || std::any_of(cps.begin(), cps.end(), [](uint32_t c) { return c > kMaxCodePoint; })) {
    return Fail(pptr, "is not valid UTF-8"), "";
  }
  PatternConverter pc(std::move(cps), AddPrimitive("char", "char"));
  std::string body;
  if (!pc.Convert(&body)) return Fail(pptr, pc.error()), "";
  return AddRule(rule_name, absl::StrCat("\"\\\"\" ", body, " \"\\\"\" space"));
}

// Reads minimum / maximum (exclusive*) into `bound`, keeping the stricter of two.
bool Converter::ReadBound(const json& schema, const char* key, bool is_min, bool exclusive, const std::string& ptr,
                          Bound* bound) {
  auto it = schema.find(key);
  if (it == schema.end()) return true;
  const std::string kptr = absl::StrCat(ptr, "/", key);
  if (it->is_boolean()) return Fail(kptr, "must be a number (the draft-4 boolean form is not supported)");
  if (!it->is_number()) return Fail(kptr, "must be a number");
  long double v = 0;
  if (it->is_number_unsigned()) {
    v = static_cast<long double>(it->get<uint64_t>());
  } else if (it->is_number_integer()) {
    v = static_cast<long double>(it->get<int64_t>());
  } else {
    const double d = it->get<double>();
    if (!std::isfinite(d)) return Fail(kptr, "must be finite");
    v = d;
  }
  if (v >= kMaxBoundMagnitude || v <= -kMaxBoundMagnitude) {
    // Texts have at most 18 integer digits: a bound beyond on the open side does not
    // restrict them; on the other side nothing would be left.
    if (is_min ? v < 0 : v > 0) return true;
    return Fail(kptr, "beyond +-1e18 is not supported");
  }
  const Bound b{true, exclusive, v};
  if (!bound->present) {
    *bound = b;
  } else if (is_min ? (b.v > bound->v || (b.v == bound->v && exclusive))
                    : (b.v < bound->v || (b.v == bound->v && exclusive))) {
    *bound = b;
  }
  return true;
}

// An integer or number with minimum / maximum / exclusiveMinimum / exclusiveMaximum:
// digit-range rules (see MagnitudeAlternatives); numbers without an exponent.
std::string Converter::VisitBoundedNumber(const json& schema, const std::string& rule_name, const std::string& ptr,
                                          bool integer, Used* used) {
  used->insert({"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"});
  Bound low, high;
  if (!ReadBound(schema, "minimum", true, false, ptr, &low) ||
      !ReadBound(schema, "exclusiveMinimum", true, true, ptr, &low) ||
      !ReadBound(schema, "maximum", false, false, ptr, &high) ||
      !ReadBound(schema, "exclusiveMaximum", false, true, ptr, &high)) {
    return "";
  }
  int digits = kUnboundedDigits;
  for (const Bound* b : {&low, &high}) {
    if (b->present) digits = std::max({digits, DigitCount(std::abs(b->Floor())), DigitCount(std::abs(b->Ceil()))});
  }
  const int64_t limit = Pow10(digits) - 1;
  std::vector<std::string> alts = MagnitudeAlternatives(low, high, limit, !integer);
  if (!low.present || low.v < 0) {  // negative values are in range
    const std::vector<std::string> neg = MagnitudeAlternatives(high.present ? high.Negated() : Bound{},
                                                               low.present ? low.Negated() : Bound{}, limit, !integer);
    if (!neg.empty()) alts.push_back(absl::StrCat("\"-\" (", absl::StrJoin(neg, " | "), ")"));
  }
  if (alts.empty()) {
    return Fail(ptr + (low.present ? (low.exclusive ? "/exclusiveMinimum" : "/minimum")
                                   : (high.exclusive ? "/exclusiveMaximum" : "/maximum")),
                integer ? "no integer satisfies the bounds"
                        : "no number with a bounded integer part satisfies the bounds (ranges within one unit "
                          "are not supported)"),
           "";
  }
  return AddRule(rule_name, absl::StrCat("(", absl::StrJoin(alts, " | "), ") space"));
}

std::string Converter::VisitArray(const json& schema, const std::string& name, const std::string& rule_name,
                                  const std::string& ptr, int depth, Used* used) {
  used->insert({"type", "items", "prefixItems", "minItems", "maxItems"});
  const std::string prefix = name.empty() ? "" : name + "-";
  const json* tuple = nullptr;
  if (schema.contains("prefixItems")) {
    tuple = &schema["prefixItems"];
    if (schema.contains("items") && schema["items"] != false) {
      return Fail(ptr + "/items", "with prefixItems is only supported as false"), "";
    }
  } else if (schema.contains("items") && schema["items"].is_array()) {
    tuple = &schema["items"];
  }
  if (tuple != nullptr) {
    if (!tuple->is_array()) return Fail(ptr + "/prefixItems", "must be an array"), "";
    // The grammar emits every tuple element: minItems/maxItems (zod's z.tuple writes both
    // as the tuple's length) are accepted when they admit that length.
    int min_items = 0, max_items = std::numeric_limits<int>::max();
    if (!GetCount(schema, "minItems", ptr, &min_items) || !GetCount(schema, "maxItems", ptr, &max_items)) return "";
    const int n = static_cast<int>(std::min<size_t>(tuple->size(), kMaxRepetition + 1));
    if (min_items > n) return Fail(ptr + "/minItems", "is above the tuple's length (prefixItems)"), "";
    if (max_items < n) {
      return Fail(ptr + "/maxItems", "below the tuple's length (prefixItems) is not supported"), "";
    }
    std::string rule = "\"[\" space ";
    for (size_t i = 0; i < tuple->size(); ++i) {
      if (i > 0) rule += " \",\" space ";
      rule += Visit((*tuple)[i], absl::StrCat(prefix, "tuple-", i), absl::StrCat(ptr, "/prefixItems/", i), depth + 1);
    }
    return AddRule(rule_name, rule + " \"]\" space");
  }
  std::string item;
  if (schema.contains("items")) {
    item = Visit(schema["items"], prefix + "item", ptr + "/items", depth + 1);
  } else {
    item = AddPrimitive("value", "value");
  }
  int min_items = 0, max_items = std::numeric_limits<int>::max();
  if (!GetCount(schema, "minItems", ptr, &min_items) || !GetCount(schema, "maxItems", ptr, &max_items)) return "";
  if (max_items < min_items) return Fail(ptr + "/maxItems", "is below minItems"), "";
  if (!status_.ok()) return "";
  return AddRule(rule_name, absl::StrCat("\"[\" space ", BuildRepetition(item, min_items, max_items, "\",\" space"),
                                         " \"]\" space"));
}

std::string Converter::VisitObject(const json& schema, const std::string& name, const std::string& rule_name,
                                   const std::string& ptr, int depth, Used* used) {
  used->insert({"type", "properties", "required", "additionalProperties"});
  std::set<std::string> required;
  if (schema.contains("required")) {
    if (!schema["required"].is_array()) return Fail(ptr + "/required", "must be an array of strings"), "";
    for (const json& r : schema["required"]) {
      if (!r.is_string()) return Fail(ptr + "/required", "must be an array of strings"), "";
      required.insert(r.get<std::string>());
    }
  }
  std::vector<std::pair<std::string, json>> props;
  if (schema.contains("properties")) {
    if (!schema["properties"].is_object()) return Fail(ptr + "/properties", "must be an object"), "";
    for (auto it = schema["properties"].begin(); it != schema["properties"].end(); ++it)
      props.emplace_back(it.key(), it.value());
  }
  for (const std::string& r : required) {
    bool found = false;
    for (const auto& p : props) found |= p.first == r;
    if (!found) return Fail(ptr + "/required", absl::StrCat("\"", r, "\" has no entry in properties")), "";
  }
  const json* additional = schema.contains("additionalProperties") ? &schema["additionalProperties"] : nullptr;
  const std::string body = BuildObjectRule(props, required, name, additional, ptr, depth);
  return status_.ok() ? AddRule(rule_name, body) : "";
}

std::string Converter::VisitAllOf(const json& schema, const std::string& name, const std::string& rule_name,
                                  const std::string& ptr, int depth, Used* used) {
  used->insert({"type", "allOf"});
  const json& all = schema["allOf"];
  if (!all.is_array()) return Fail(ptr + "/allOf", "must be an array"), "";
  std::vector<std::pair<std::string, json>> props;
  std::set<std::string> required;
  std::function<bool(const json&, bool, const std::string&, int)> add = [&](const json& comp, bool is_required,
                                                                            const std::string& cptr, int d) {
    if (d > kMaxDepth) return Fail(cptr, "references nested too deeply");
    if (!comp.is_object()) return Fail(cptr, "allOf components must be objects");
    if (comp.contains("$ref")) {
      const std::string ref = comp["$ref"].is_string() ? comp["$ref"].get<std::string>() : "";
      const json* target = ResolveLocal(root_, ref);
      if (target == nullptr) return Fail(cptr + "/$ref", "unresolvable or non-local reference");
      return add(*target, is_required, ref.substr(1), d + 1);
    }
    Used u{"properties", "type", "required"};
    if (comp.contains("type") && comp["type"] != "object")
      return Fail(cptr + "/type", "allOf components must be objects");
    if (comp.contains("properties")) {
      if (!comp["properties"].is_object()) return Fail(cptr + "/properties", "must be an object");
      for (auto it = comp["properties"].begin(); it != comp["properties"].end(); ++it) {
        props.emplace_back(it.key(), it.value());
        if (is_required) required.insert(it.key());
      }
    }
    return CheckUsed(comp, u, cptr);
  };
  for (size_t i = 0; i < all.size(); ++i) {
    const std::string cptr = absl::StrCat(ptr, "/allOf/", i);
    if (all[i].is_object() && all[i].contains("anyOf")) {
      if (!all[i]["anyOf"].is_array()) return Fail(cptr + "/anyOf", "must be an array"), "";
      for (size_t j = 0; j < all[i]["anyOf"].size(); ++j) {
        if (!add(all[i]["anyOf"][j], false, absl::StrCat(cptr, "/anyOf/", j), 0)) return "";
      }
    } else if (!add(all[i], true, cptr, 0)) {
      return "";
    }
  }
  const std::string body = BuildObjectRule(props, required, name, nullptr, ptr, depth);
  return status_.ok() ? AddRule(rule_name, body) : "";
}

// _build_object_rule: required properties in order, then any subset of the optional ones
// in order (with a "-rest" rule chain), then additional properties (key not declared).
std::string Converter::BuildObjectRule(const std::vector<std::pair<std::string, json>>& props,
                                       const std::set<std::string>& required, const std::string& name,
                                       const json* additional, const std::string& ptr, int depth) {
  const std::string prefix = name.empty() ? "" : name + "-";
  std::vector<std::string> required_props, optional_props, prop_names;
  std::map<std::string, std::string> kv_rules;
  for (const auto& [pname, pschema] : props) {
    const std::string prop_rule = Visit(pschema, prefix + pname, absl::StrCat(ptr, "/properties/", pname), depth + 1);
    if (!status_.ok()) return "";
    kv_rules[pname] =
        AddRule(prefix + pname + "-kv", FormatLiteral(Dump(json(pname))) + " space \":\" space " + prop_rule);
    (required.count(pname) ? required_props : optional_props).push_back(pname);
    prop_names.push_back(pname);
  }
  if (additional != nullptr && !additional->is_null() && !(additional->is_boolean() && !additional->get<bool>())) {
    if (!additional->is_boolean() && !additional->is_object()) {
      return Fail(ptr + "/additionalProperties", "must be a boolean or a schema"), "";
    }
    const std::string sub = prefix + "additional";
    const std::string value_rule = additional->is_object()
                                       ? Visit(*additional, sub + "-value", ptr + "/additionalProperties", depth + 1)
                                       : AddPrimitive("value", "value");
    const std::string key_rule =
        prop_names.empty() ? AddPrimitive("string", "string") : AddRule(sub + "-k", NotStrings(prop_names));
    kv_rules["*"] = AddRule(sub + "-kv", key_rule + " \":\" space " + value_rule);
    optional_props.push_back("*");
  }
  std::string rule = "\"{\" space ";
  for (size_t i = 0; i < required_props.size(); ++i) {
    if (i > 0) rule += " \",\" space ";
    rule += kv_rules[required_props[i]];
  }
  if (!optional_props.empty()) {
    rule += " (";
    if (!required_props.empty()) rule += " \",\" space ( ";
    std::function<std::string(size_t, bool)> chain = [&](size_t from, bool first_is_optional) {
      const std::string& k = optional_props[from];
      const std::string& kv = kv_rules[k];
      const std::string comma_ref = "( \",\" space " + kv + " )";
      std::string res =
          first_is_optional ? comma_ref + (k == "*" ? "*" : "?") : kv + (k == "*" ? " " + comma_ref + "*" : "");
      if (from + 1 < optional_props.size()) {
        res += " " + AddRule(prefix + (k == "*" ? "additional" : k) + "-rest", chain(from + 1, true));
      }
      return res;
    };
    for (size_t i = 0; i < optional_props.size(); ++i) {
      if (i > 0) rule += " | ";
      rule += chain(i, false);
    }
    if (!required_props.empty()) rule += " )";
    rule += " )?";
  }
  return rule + " \"}\" space";
}

// _not_strings: a JSON string key that is none of `strings` (a trie over code points;
// unlike llama.cpp's, the "any other" branches use the JSON char rule, so escapes stay
// well formed).
std::string Converter::NotStrings(const std::vector<std::string>& strings) {
  struct Node {
    std::map<uint32_t, Node> children;
    bool end = false;
  };
  Node trie;
  for (const std::string& s : strings) {
    std::vector<uint32_t> cps;
    PartialUtf8 p;
    DecodeUtf8(s, PartialUtf8{}, &cps, &p);
    Node* n = &trie;
    for (uint32_t c : cps) n = &n->children[c];
    n->end = true;
  }
  const std::string char_rule = AddPrimitive("char", "char");
  auto cls = [](uint32_t c) {
    char buf[16];
    snprintf(buf, sizeof buf, "\\U%08X", c);
    return std::string(buf);
  };
  std::string out = "[\"] ( ";
  std::function<void(const Node&)> visit = [&](const Node& node) {
    std::string rejects;
    bool first = true;
    for (const auto& [c, child] : node.children) {
      rejects += cls(c);
      if (!first) out += " | ";
      first = false;
      out += "[" + cls(c) + "]";
      if (!child.children.empty()) {
        out += " (";
        visit(child);
        out += ")";
      } else if (child.end) {
        out += " " + char_rule + "+";
      }
    }
    if (!node.children.empty()) {
      if (!first) out += " | ";
      out += "([^\"\\\\\\x7F\\x00-\\x1F" + rejects + "] | [\\\\] ([\"\\\\bfnrt] | \"u\" [0-9a-fA-F]{4})) " + char_rule +
             "*";
    }
  };
  visit(trie);
  out += " )";
  if (!trie.end) out += "?";
  return out + " [\"] space";
}

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGrammar(const nlohmann::json& schema) {
  // The converter copies subschemas (a recursive copy per level) before its own depth
  // check sees them: bound the whole document first, without recursing.
  HERD_RETURN_IF_ERROR(CheckJsonValueNesting(schema, "json_schema"));
  Converter c(schema);
  auto out = c.Run();
  if (!out.ok()) return out.status();
  auto g = Grammar::Parse(*out);
  if (!g.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("json_schema: the generated grammar is invalid: ", g.status().message()));
  }
  return out;
}

std::string JsonObjectGrammar() {
  auto g = JsonSchemaToGrammar(nlohmann::json::object());
  return g.ok() ? *g : std::string();
}

}  // namespace herd::grammar
