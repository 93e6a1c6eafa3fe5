// GBNF grammars with llama.cpp's syntax and rule representation.
//
// The parser reproduces llama.cpp's llama_grammar_parser (src/llama-grammar.cpp):
//
//   root   ::= "{" ws pair ("," ws pair)* "}"     # comments run to the end of the line
//   pair   ::= [a-z]+ ":" ws ( "yes" | "no" )
//   ws     ::= [ \t\n]{0,4}
//
// - rules `name ::= alternatives`, one per line (newlines are allowed inside groups and
//   after `::=` / `|`); names are [a-zA-Z0-9-]+;
// - alternatives `|`, sequences, groups `( ... )`, postfix `*`, `+`, `?`, `{m}`, `{m,}`,
//   `{m,n}` (rewritten into generated rules exactly like llama.cpp's handle_repetitions);
// - string literals "..." and character classes [a-z0-9_], negated [^...], `.` (any code
//   point); escapes \t \r \n \\ \" \[ \] \xNN \uNNNN \UNNNNNNNN; literal text is UTF-8;
// - `root` is the start rule and must exist; every referenced rule must be defined;
//   left recursion (direct, indirect, or through rules that can match the empty string)
//   is refused like llama.cpp's llama_grammar_detect_left_recursion (which only sees
//   directly-empty alternatives; here emptiness is computed transitively, so some
//   grammars llama.cpp would accept and then loop on are refused instead).
//
// Not supported: llama.cpp's token references (<[123]>, <name>) — refused as a syntax
// error.
//
// The result is the llama_grammar_rules representation: per rule id a flat vector of
// elements, alternatives separated by kAlt, terminated by kEnd; a char class is a kChar
// (or kCharNot) followed by kCharRngUpper / kCharAlt elements.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd::grammar {

/// llama_gretype.
enum class ElementType : uint8_t {
  kEnd = 0,           // end of a rule definition
  kAlt = 1,           // start of an alternative
  kRuleRef = 2,       // non-terminal: value = rule id
  kChar = 3,          // terminal: value = code point
  kCharNot = 4,       // inverse char(s) ([^a], [^a-b] [^abc])
  kCharRngUpper = 5,  // modifies a preceding kChar/kCharAlt to be an inclusive range
  kCharAlt = 6,       // modifies a preceding kChar/kCharRngUpper to add an alternate char
  kCharAny = 7,       // any code point
};

/// llama_grammar_element.
struct Element {
  ElementType type;
  uint32_t value;  // code point or rule id
};

using Rule = std::vector<Element>;

/// Size limits of a grammar (a request can carry one, so they are bounded).
struct GrammarLimits {
  size_t max_text_bytes = 1 << 20;  // grammar source
  size_t max_rules = 20000;         // after expanding repetitions
  size_t max_elements = 1000000;    // total elements of all rules
  uint32_t max_repetition = 2000;   // m and n of {m,n} (llama.cpp MAX_REPETITION_THRESHOLD)
  int max_nesting = 200;            // depth of ( ... ) groups
};

/// A parsed, validated grammar. Immutable; share it with std::shared_ptr.
class Grammar {
 public:
  /// Parses GBNF `text` (llama_grammar_parser::parse + llama_grammar_init_impl's checks).
  ///
  /// Errors (INVALID_ARGUMENT, the message naming the problem and "line L, column C"):
  /// syntax errors (expecting ::=, name, ')', '}', hex digits, unknown escape,
  /// unterminated literal/class, unexpected end of input, trailing text), "undefined rule
  /// 'x'", "grammar has no 'root' rule", "left recursion in rule 'x'", repetition counts
  /// over limits.max_repetition or {m,n} with n < m, empty grammar, and grammars over the
  /// size limits (text, rules, elements, nesting).
  static absl::StatusOr<std::shared_ptr<const Grammar>> Parse(absl::string_view text, const GrammarLimits& limits = {});

  /// Rules by id (llama_grammar_rules); every rule ends with kEnd.
  const std::vector<Rule>& rules() const { return rules_; }
  /// Id of "root".
  uint32_t root_id() const { return root_id_; }
  /// Rule names by id (generated rules are "<parent>_<n>" like llama.cpp).
  const std::vector<std::string>& rule_names() const { return names_; }
  /// The grammar printed back as GBNF (like llama_grammar_parser::print, generated rule
  /// names written "x-3" so that the output parses again to the same language).
  std::string ToString() const;

 private:
  Grammar() = default;
  std::vector<Rule> rules_;
  std::vector<std::string> names_;
  uint32_t root_id_ = 0;
};

}  // namespace herd::grammar
