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
// string format date / time / date-time / uuid, {} and true (llama.cpp: an object for
// {}, any value for true). Whitespace between tokens follows llama.cpp's
// `space ::= | " " | "\n"{1,2} [ \t]{0,20}`.
//
// Refused with INVALID_ARGUMENT (never silently ignored, since they change what is
// valid): pattern, minimum / maximum / exclusiveMinimum / exclusiveMaximum / multipleOf,
// uniqueItems, contains, not, if/then/else, patternProperties, propertyNames,
// dependentRequired / dependentSchemas, min/maxProperties, unevaluated*, external or
// unresolvable $ref, unknown formats, a `false` schema, and malformed keyword values.
// Annotations (title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly, strict) are ignored.
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
