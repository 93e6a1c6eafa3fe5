// Output constraints of the OpenAI / llama.cpp HTTP API -> herd.v1.SamplingParams.
//
// Reads, like llama.cpp's server (tools/server/utils.hpp params_from_json_cmpl and
// oaicompat_completion_params_parse):
//   - "grammar": a GBNF string (llama.cpp syntax);
//   - "json_schema": a JSON schema (llama.cpp extension), converted to GBNF;
//   - "response_format": {"type": "text"} (nothing), {"type": "json_object"} (any JSON
//     object), {"type": "json_object", "schema": {...}}, or {"type": "json_schema",
//     "json_schema": {"name": ..., "schema": {...}, "strict": ...}} (a missing schema
//     means any JSON object, as llama.cpp);
//   - "logit_bias": OpenAI's object {"<token id>": bias, ...} or llama.cpp's array
//     [[token id or string, bias or false], ...] (a string is tokenized without special
//     tokens and every token of it is biased; false bans the token(s), i.e. -inf).
// JSON schemas go through grammar::JsonSchemaToGrammar (llama.cpp's
// json-schema-to-grammar semantics; unsupported keywords are errors, see json_schema.h).
// Note: nlohmann::json keeps object keys sorted, so schema properties come out in
// alphabetical order (llama.cpp keeps the declaration order).
#pragma once
#include "absl/status/status.h"
#include "nlohmann/json.hpp"

#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/common.pb.h"

namespace herd::gateway {

/// True when `body` has any of grammar / json_schema / response_format / logit_bias
/// (non-null), i.e. when ParseConstraints has work to do (the caller can skip fetching
/// the vocabulary otherwise).
bool HasConstraints(const nlohmann::json& body);

/// Sets out->grammar (GBNF) and appends out->logit_bias from `body` (see the file
/// comment). The grammar is parsed here too, so a bad one is reported up front.
/// Errors (INVALID_ARGUMENT naming the field): a field of the wrong JSON type; more than
/// one of grammar / json_schema / a non-text response_format ("grammar, json_schema:
/// give only one"); an unknown response_format.type; a schema the converter refuses
/// ("response_format.json_schema.schema: ..."); a GBNF that does not parse
/// ("grammar: undefined rule 'x' at line 1, column 10 ..."); a logit_bias key that is
/// not a token id, an id outside [0, n_vocab), a bias that is not a finite number (or
/// false), or a string that tokenizes to nothing.
absl::Status ParseConstraints(const nlohmann::json& body, const tokenizer::Vocab& vocab, v1::SamplingParams* out);

}  // namespace herd::gateway
