// Informational and tokenizer routes of the HTTP front end: health, models, and
// llama.cpp server's /tokenize and /detokenize.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/status_macros.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_routes.h"
#include "services/gateway/http_util.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway::http {
namespace {

json ModelJson(const v1::ModelCard& c) {
  json backends = json::array();
  for (const std::string& b : c.backends()) backends.push_back(b);
  return json{{"id", c.name()},
              {"object", "model"},
              {"created", 0},
              {"owned_by", "herd"},
              {"architecture", c.architecture()},
              {"n_ctx", c.n_ctx()},
              {"n_vocab", c.n_vocab()},
              {"workers", c.workers()},
              {"pooling", c.pooling()},
              {"matryoshka", c.matryoshka()},
              {"backends", backends}};
}

// The request's model; when it names none and exactly one model is served, that one
// (llama.cpp's server has one model, so its /tokenize has no model field).
absl::StatusOr<std::string> ResolveModel(Gateway* gw, const json& body) {
  std::string model;
  bool has = false;
  HERD_RETURN_IF_ERROR(GetString(body, "model", &model, &has));
  if (has) return model;
  const v1::ListModelsResponse models = gw->ListModels();
  if (models.models_size() == 1) return models.models(0).name();
  std::vector<std::string> names;
  for (const v1::ModelCard& c : models.models()) names.push_back(c.name());
  return Bad(absl::StrCat("model: required when the gateway serves ", names.size(), " models (",
                          names.empty() ? "none" : absl::StrJoin(names, ", "), ")"));
}

// POST /tokenize {content, add_special = false, parse_special = true, with_pieces =
// false[, model]} -> {tokens: [id...]} or, with_pieces, [{id, piece}] where piece is the
// text, or its bytes when they are not valid UTF-8 (llama-server's shape).
absl::StatusOr<json> Tokenize(Gateway* gw, const json& body) {
  absl::Status s = CheckKnownFields(body, {"model", "content", "add_special", "parse_special", "with_pieces"});
  if (!s.ok()) return s;
  HERD_ASSIGN_OR_RETURN(auto model, ResolveModel(gw, body));
  v1::TokenizeRequest req;
  req.set_model(model);
  std::string content;
  bool has = false, add_special = false, parse_special = true, with_pieces = false;
  if (!(s = GetString(body, "content", &content, &has)).ok()) return s;
  if (!has) return Bad("content: required");
  req.set_text(content);
  if (!(s = GetBool(body, "add_special", &add_special, &has)).ok()) return s;
  if (!(s = GetBool(body, "parse_special", &parse_special, &has)).ok()) return s;
  if (!(s = GetBool(body, "with_pieces", &with_pieces, &has)).ok()) return s;
  req.set_add_special(add_special);
  req.set_parse_special(parse_special);
  HERD_ASSIGN_OR_RETURN(auto r, gw->Tokenize(req, absl::Now() + absl::Seconds(30)));
  json tokens = json::array();
  if (!with_pieces) {
    for (int32_t id : r.ids()) tokens.push_back(id);
    return json{{"tokens", tokens}};
  }
  HERD_ASSIGN_OR_RETURN(auto vocab, gw->vocabs().Get(model, absl::Now() + absl::Seconds(30)));
  for (int32_t id : r.ids()) {
    const std::string piece = vocab->TokenToPiece(id, /*special=*/true);
    json p;
    if (IsValidUtf8(piece)) {
      p = piece;
    } else {
      p = json::array();
      for (unsigned char c : piece) p.push_back(static_cast<int>(c));
    }
    tokens.push_back(json{{"id", id}, {"piece", p}});
  }
  return json{{"tokens", tokens}};
}

// POST /detokenize {tokens[, model]} -> {content}: the tokens' pieces concatenated as
// llama-server does (special tokens rendered, the leading space of an SPM piece kept),
// with each incomplete or invalid UTF-8 sequence as one U+FFFD.
absl::StatusOr<json> Detokenize(Gateway* gw, const json& body) {
  HERD_RETURN_IF_ERROR(CheckKnownFields(body, {"model", "tokens"}));
  HERD_ASSIGN_OR_RETURN(auto model, ResolveModel(gw, body));
  auto tokens = body.find("tokens");
  if (tokens == body.end() || tokens->is_null()) return Bad("tokens: required");
  if (!tokens->is_array()) return Bad("tokens: must be an array of token ids");
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const json& v = (*tokens)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return Bad(absl::StrCat("tokens[", i, "]: must be a token id (integer >= 0)"));
    }
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  HERD_ASSIGN_OR_RETURN(auto vocab, gw->vocabs().Get(model, absl::Now() + absl::Seconds(30)));
  if (absl::Status vs = vocab->ValidateTokens(ids); !vs.ok()) return Bad(absl::StrCat("tokens: ", vs.message()));
  std::string text;
  for (int32_t id : ids) text += vocab->TokenToPiece(id, /*special=*/true);
  return json{{"content", SanitizeUtf8(text)}};
}

// A POST route whose handler maps a JSON object to a JSON answer.
template <typename Fn>
void PostJson(serving::http::Server* server, Gateway* gw, const std::string& path, const std::string& method, Fn fn) {
  server->Post(path, [gw, method, fn](const HttpRequest& hreq, HttpResponse& res) {
    const absl::Time t0 = absl::Now();
    absl::StatusOr<json> body = ParseJsonObject(hreq.body);
    absl::StatusOr<json> out = body.ok() ? fn(gw, *body) : body.status();
    gw->RecordRequest(method, out.status(), absl::Now() - t0);
    if (!out.ok()) {
      SendError(res, out.status());
      return;
    }
    SendJson(res, *out);
  });
}

}  // namespace

void RegisterInfoRoutes(serving::http::Server* server, Gateway* gw) {
  // These read in-memory state only: they run on the I/O thread (no handler slot), so
  // they answer even when every slot is busy.
  constexpr bool kInline = true;
  server->Get(
      "/healthz", [](const HttpRequest&, HttpResponse& res) { res.SetContent("ok\n", "text/plain"); }, kInline);
  // llama.cpp's /health: 200 {"status":"ok"} when it can serve, else 503 with an error.
  server->Get(
      "/health",
      [gw](const HttpRequest&, HttpResponse& res) {
        if (gw->ListModels().models_size() == 0) {
          SendError(res, absl::UnavailableError("no live worker serves a model"));
          return;
        }
        SendJson(res, json{{"status", "ok"}});
      },
      kInline);
  server->Get(
      "/v1/models",
      [gw](const HttpRequest&, HttpResponse& res) {
        const absl::Time t0 = absl::Now();
        json data = json::array();
        const v1::ListModelsResponse models = gw->ListModels();
        for (const v1::ModelCard& c : models.models()) data.push_back(ModelJson(c));
        SendJson(res, json{{"object", "list"}, {"data", data}});
        gw->RecordRequest("http_models", absl::OkStatus(), absl::Now() - t0);
      },
      kInline);
  server->Get(R"(/v1/models/(.+))",
              [gw](const HttpRequest& req, HttpResponse& res) {
                const std::string id = req.matches[1];
                const v1::ListModelsResponse models = gw->ListModels();
                for (const v1::ModelCard& c : models.models()) {
                  if (c.name() == id) {
                    SendJson(res, ModelJson(c));
                    return;
                  }
                }
                SendError(res, absl::NotFoundError(absl::StrCat("model '", id, "' not found")));
              },
              kInline);
  PostJson(server, gw, "/tokenize", "http_tokenize", Tokenize);
  PostJson(server, gw, "/detokenize", "http_detokenize", Detokenize);
}

}  // namespace herd::gateway::http
