#include "services/gateway/constraints.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

#include "libs/base/status_macros.h"
#include "libs/grammar/gbnf.h"
#include "libs/grammar/json_schema.h"
#include "libs/grammar/matcher.h"

namespace herd::gateway {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

bool Present(const json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

// Schema -> GBNF with the converter's message under `field`.
absl::Status FromSchema(const json& schema, const std::string& field, std::string* grammar) {
  auto g = grammar::JsonSchemaToGrammar(schema);
  if (!g.ok()) {
    // The converter names the keyword as "json_schema/<pointer>: ..."; keep the pointer.
    return Bad(absl::StrCat(field, absl::StripPrefix(g.status().message(), "json_schema")));
  }
  *grammar = *std::move(g);
  return absl::OkStatus();
}

// response_format -> grammar ("" for type text).
absl::Status ResponseFormat(const json& rf, std::string* grammar) {
  if (!rf.is_object()) return Bad("response_format: must be an object");
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string()) {
    return Bad("response_format.type: required, one of \"text\", \"json_object\", \"json_schema\"");
  }
  const std::string t = type->get<std::string>();
  if (t == "text") return absl::OkStatus();
  if (t == "json_object") {
    auto schema = rf.find("schema");
    if (schema == rf.end() || schema->is_null()) {
      *grammar = grammar::JsonObjectGrammar();
      return absl::OkStatus();
    }
    return FromSchema(*schema, "response_format.schema", grammar);
  }
  if (t == "json_schema") {
    auto js = rf.find("json_schema");
    if (js == rf.end() || js->is_null()) {
      *grammar = grammar::JsonObjectGrammar();
      return absl::OkStatus();
    }
    if (!js->is_object()) return Bad("response_format.json_schema: must be an object");
    auto name = js->find("name");
    if (name != js->end() && !name->is_null() && !name->is_string()) {
      return Bad("response_format.json_schema.name: must be a string");
    }
    auto strict = js->find("strict");
    if (strict != js->end() && !strict->is_null() && !strict->is_boolean()) {
      return Bad("response_format.json_schema.strict: must be a boolean");
    }
    auto schema = js->find("schema");
    if (schema == js->end() || schema->is_null()) {
      *grammar = grammar::JsonObjectGrammar();
      return absl::OkStatus();
    }
    return FromSchema(*schema, "response_format.json_schema.schema", grammar);
  }
  return Bad(
      absl::StrCat("response_format.type: \"", t, "\" is not one of \"text\", \"json_object\", \"json_schema\""));
}

// A bias value: a finite number, or false (= ban).
absl::Status BiasValue(const json& v, const std::string& field, float* out) {
  if (v.is_boolean()) {
    if (v.get<bool>()) return Bad(absl::StrCat(field, ": must be a number or false (got true)"));
    *out = -std::numeric_limits<float>::infinity();
    return absl::OkStatus();
  }
  if (!v.is_number()) return Bad(absl::StrCat(field, ": must be a number or false"));
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > 3e38) return Bad(absl::StrCat(field, ": must be a finite number"));
  *out = static_cast<float>(d);
  return absl::OkStatus();
}

absl::Status AddBias(int64_t id, float bias, const tokenizer::Vocab& vocab, const std::string& field,
                     v1::SamplingParams* out) {
  if (id < 0 || id >= vocab.n_tokens()) {
    return Bad(absl::StrCat(field, ": token id ", id, " is outside the vocabulary [0, ", vocab.n_tokens(), ")"));
  }
  v1::LogitBias* b = out->add_logit_bias();
  b->set_token_id(static_cast<int32_t>(id));
  b->set_bias(bias);
  return absl::OkStatus();
}

// At most n_vocab entries (more can only repeat ids), and at most n_vocab biased ids
// after strings are tokenized: the request's size cannot grow the sampler past the
// vocabulary.
absl::Status LogitBias(const json& lb, const tokenizer::Vocab& vocab, v1::SamplingParams* out) {
  const size_t max_entries = static_cast<size_t>(std::max(vocab.n_tokens(), 1));
  if ((lb.is_object() || lb.is_array()) && lb.size() > max_entries) {
    return Bad(absl::StrCat("logit_bias: ", lb.size(), " entries exceed the vocabulary's ", max_entries, " tokens"));
  }
  if (lb.is_object()) {  // OpenAI: {"123": 5.0}
    for (auto it = lb.begin(); it != lb.end(); ++it) {
      const std::string field = absl::StrCat("logit_bias[\"", it.key(), "\"]");
      int64_t id = 0;
      if (!absl::SimpleAtoi(it.key(), &id)) return Bad(absl::StrCat(field, ": key must be a token id"));
      float bias = 0;
      HERD_RETURN_IF_ERROR(BiasValue(it.value(), field, &bias));
      HERD_RETURN_IF_ERROR(AddBias(id, bias, vocab, field, out));
    }
    return absl::OkStatus();
  }
  if (!lb.is_array())
    return Bad("logit_bias: must be an object {\"token id\": bias} or an array of [token, bias] pairs");
  for (size_t i = 0; i < lb.size(); ++i) {  // llama.cpp: [[15043, 1.0], ["Hello", false]]
    const json& e = lb[i];
    const std::string field = absl::StrCat("logit_bias[", i, "]");
    if (!e.is_array() || e.size() != 2) return Bad(absl::StrCat(field, ": must be a [token, bias] pair"));
    float bias = 0;
    HERD_RETURN_IF_ERROR(BiasValue(e[1], field, &bias));
    if (e[0].is_number_integer()) {
      HERD_RETURN_IF_ERROR(AddBias(e[0].get<int64_t>(), bias, vocab, field, out));
    } else if (e[0].is_string()) {
      const std::vector<int32_t> ids =
          vocab.Tokenize(e[0].get<std::string>(), /*add_special=*/false, /*parse_special=*/false);
      if (ids.empty()) return Bad(absl::StrCat(field, ": the string has no tokens"));
      for (int32_t id : ids) {
        HERD_RETURN_IF_ERROR(AddBias(id, bias, vocab, field, out));
      }
      if (static_cast<size_t>(out->logit_bias_size()) > max_entries) {
        return Bad(absl::StrCat(field, ": more than ", max_entries, " biased tokens (the vocabulary's size)"));
      }
    } else {
      return Bad(absl::StrCat(field, ": the token must be an integer id or a string"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool HasConstraints(const nlohmann::json& body) {
  if (!body.is_object()) return false;
  for (const char* k : {"grammar", "json_schema", "response_format", "logit_bias"}) {
    if (Present(body, k)) return true;
  }
  return false;
}

absl::Status ParseConstraints(const nlohmann::json& body, const tokenizer::Vocab& vocab, v1::SamplingParams* out) {
  if (!body.is_object()) return Bad("request body: must be a JSON object");
  std::string grammar;
  std::vector<std::string> sources;  // which fields set a grammar
  if (Present(body, "grammar")) {
    const json& g = body["grammar"];
    if (!g.is_string()) return Bad("grammar: must be a string (GBNF)");
    if (!g.get<std::string>().empty()) {
      grammar = g.get<std::string>();
      sources.push_back("grammar");
    }
  }
  if (Present(body, "json_schema")) {
    std::string g;
    HERD_RETURN_IF_ERROR(FromSchema(body["json_schema"], "json_schema", &g));
    grammar = g;
    sources.push_back("json_schema");
  }
  if (Present(body, "response_format")) {
    std::string g;
    HERD_RETURN_IF_ERROR(ResponseFormat(body["response_format"], &g));
    if (!g.empty()) {
      grammar = g;
      sources.push_back("response_format");
    }
  }
  if (sources.size() > 1) {
    return Bad(absl::StrCat(sources[0], ", ", sources[1], ": give only one of grammar, json_schema, response_format"));
  }
  if (!grammar.empty()) {
    auto parsed = grammar::Grammar::Parse(grammar);
    if (!parsed.ok()) {
      return Bad(absl::StrCat(sources[0], ": ", absl::StripPrefix(parsed.status().message(), "grammar: ")));
    }
    if (absl::Status cost = grammar::CheckMatchCost(*parsed); !cost.ok()) {
      return Bad(absl::StrCat(sources[0], ": ", absl::StripPrefix(cost.message(), "grammar: ")));
    }
    out->set_grammar(grammar);
  }
  if (Present(body, "logit_bias")) {
    HERD_RETURN_IF_ERROR(LogitBias(body["logit_bias"], vocab, out));
  }
  return absl::OkStatus();
}

}  // namespace herd::gateway
