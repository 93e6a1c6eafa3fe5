// JSON schema -> GBNF, with llama.cpp's common/json-schema-to-grammar.cpp semantics
// (SchemaConverter) for the common subset of JSON schema.
//
// Supported: type object / array / string / number / integer / boolean / null (and a
// list of types), properties + required (properties are emitted in declaration order,
// required ones first, optional ones in any subset keeping the order, as llama.cpp),
// additionalProperties false / true / a schema (missing = false, as llama.cpp), items
// (a schema or, old style, a list = tuple), prefixItems, minItems / maxItems, enum,
// const, anyOf / oneOf, allOf (merging the properties of object components, as
// llama.cpp), $ref to #/definitions/... and #/$defs/..., string minLength / maxLength,
// string format date / time / date-time / uuid / email (a dot-atom local part @ a DNS
// name with a letters-only top-level domain: no quoted local parts, IP literals or
// non-ASCII addresses), {} and true (llama.cpp: an object for {}, any value for true). Whitespace between tokens
// follows llama.cpp's `space ::= | " " | "\n"{1,2} [ \t]{0,20}`.
//
// minimum / maximum / exclusiveMinimum / exclusiveMaximum (numbers; integer or not; the
// stricter of minimum and exclusiveMinimum wins), on type integer and number, as
// digit-range rules (the idea of llama.cpp's _generate_min_max_int, which does integers
// only): the grammar accepts exactly the integers in range, written without leading
// zeros, whatever the width (zod's .int() +-(2^53-1) is a ~1 KB rule), "-0" only when 0
// is in range and the minimum is negative (or absent); an unbounded side stops at 16
// digits (as the unbounded integer rule) or at the bound's digit count if larger. Bounds
// beyond +-1e18 are dropped on the open side and refused on the other. A bounded number
// has no exponent and at most 15 significant digits (so a validator parsing doubles sees
// it on the right side of every bound); it is an integer in range, or I.ddd whose whole
// [I, I+1) lies in range, or L.ddd with a non-zero fraction above an exclusive integer
// minimum L: conservative (the maximum itself written "7.0" and, for a fractional bound,
// the part of the range below one unit next to it are not generated); a range with no
// such text (e.g. [0.25, 0.75]) is refused.
//
// pattern, as llama.cpp's _visit_pattern but a search like the validators (ECMA-262;
// python-jsonschema uses Python's re.search): ^ and $ anchor (at the start / end of the
// pattern or of a top-level alternative); an unanchored side matches any characters.
// Literals, escapes (\d \D \w \W \s \S \t \n \r \f \v \0 \xHH \uHHHH and escaped
// punctuation), classes [a-z0-9_] and [^...] (with those escapes inside, \b =
// backspace), groups ( ) and (?: ), alternation |, quantifiers * + ? {n} {n,} {n,m}
// (lazy ? accepted), and `.`. Where ECMA-262 and Python differ, the grammar generates
// what both match: \d \w \s are ASCII ([0-9], [A-Za-z0-9_], [ \t\n\v\f\r]), their
// negations and negated classes containing them are ASCII-only, `.` excludes \n \r
// U+2028 U+2029. Characters JSON must escape come out as JSON escapes. Limits: 1000
// bytes, 32 nested groups, counts up to 2000, 200000 grammar elements once repetitions
// are expanded (each checked before recursing further). Refused (naming /pattern):
// backreferences, lookaround, named groups, inline flags, \b \B outside classes, \p
// and other escapes, ^ $ elsewhere, a repeated part that can match the empty string
// under * + {n,}, '{' that does not start a quantifier, and pattern together with
// minLength / maxLength / format.
//
// Refused with INVALID_ARGUMENT (never silently ignored, since they change what is
// valid): multipleOf, uniqueItems, contains, not, if/then/else, patternProperties,
// propertyNames, dependentRequired / dependentSchemas, min/maxProperties, unevaluated*,
// external or unresolvable $ref, unknown formats, a `false` schema, malformed keyword
// values, and keywords of another type in a list of types (e.g. {"type": ["integer",
// "null"], "minimum": 0}: the null branch refuses minimum; use anyOf). Annotations
// (title, description, default, examples, $schema, $id, $comment, deprecated, readOnly,
// writeOnly, strict) are ignored.
//
// Known gaps, as in llama.cpp: oneOf is matched like anyOf (a text may satisfy several
// alternatives); the date rule allows days 29-31 in every month; object keys spelled
// with JSON escapes are not recognized as declared keys by additionalProperties; string
// lengths count a \uXXXX escape as one character (a surrogate pair as two).
// nlohmann::json sorts object keys, so properties come out in alphabetical order when
// the schema went through nlohmann::json (llama.cpp keeps the declaration order).
#pragma once
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace herd::grammar {

/// Converts `schema` to a GBNF grammar whose `root` matches exactly the JSON texts
/// (with llama.cpp's optional whitespace) that the converter's subset allows; every such
/// text validates against the schema. Errors: INVALID_ARGUMENT naming the JSON pointer
/// of the offending keyword ("json_schema/properties/a/pattern: not supported"); a schema
/// nested deeper than 64 schema levels (objects, arrays, alternatives, $ref chains), or a
/// document deeper than kMaxJsonNesting (libs/base/json_nesting.h) arrays and objects,
/// checked before any walk.
absl::StatusOr<std::string> JsonSchemaToGrammar(const nlohmann::json& schema);

/// The grammar of any JSON object (llama.cpp server's response_format json_object):
/// root ::= object, with value / array / string / number / boolean / null rules.
std::string JsonObjectGrammar();

}  // namespace herd::grammar
