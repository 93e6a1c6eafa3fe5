#include "services/gateway/http_server.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "services/gateway/embeddings.h"
#include "services/gateway/http_generation.h"
#include "services/gateway/http_routes.h"
#include "services/gateway/http_util.h"

namespace herd::gateway {

using json = nlohmann::json;
using http::Bad;
using http::GetInt;
using http::SendError;

absl::StatusOr<CompletionRequest> ParseCompletionRequest(const json& body) {
  if (!body.is_object()) return Bad("request body: must be a JSON object");
  std::vector<const char*> known = http::CommonFields();
  known.insert(known.end(), {"prompt", "logprobs", "n_probs", "echo", "suffix", "best_of"});
  absl::Status s = http::CheckKnownFields(body, known);
  if (!s.ok()) return s;
  CompletionRequest out;
  if (!(s = http::ParseCommonFields(body, http::ApiKind::kCompletions, &out)).ok()) return s;
  v1::GenerateRequest& r = out.req;

  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) return Bad("prompt: required");
  if (prompt->is_string()) {
    r.set_text(prompt->get<std::string>());
  } else if (prompt->is_array()) {
    if (prompt->size() == 1 && (*prompt)[0].is_string()) {
      r.set_text((*prompt)[0].get<std::string>());
    } else {
      v1::TokenIds* ids = r.mutable_tokens();
      for (size_t i = 0; i < prompt->size(); ++i) {
        const json& v = (*prompt)[i];
        if (v.is_string()) return Bad("prompt: only one prompt per request is supported");
        if (!v.is_number_integer()) return Bad(absl::StrCat("prompt[", i, "]: must be a token id (integer)"));
        const int64_t id = v.get<int64_t>();
        if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
          return Bad(absl::StrCat("prompt[", i, "]: token id ", id, " is out of range"));
        }
        ids->add_ids(static_cast<int32_t>(id));
      }
    }
  } else {
    return Bad("prompt: must be a string or an array of token ids");
  }

  bool has = false;
  int64_t iv = 0;
  for (const char* key : {"logprobs", "n_probs"}) {  // n_probs: llama.cpp's name
    if (!(s = GetInt(body, key, &iv, &has)).ok()) return s;
    if (has) {
      r.set_logprobs(http::ClampI32(iv));
      out.top_logprobs = http::ClampI32(iv);
    }
  }
  if (!(s = GetInt(body, "best_of", &iv, &has)).ok()) return s;
  if (has && iv != out.n) return Bad(absl::StrCat("best_of: only best_of = n is supported (got ", iv, ")"));
  auto echo = body.find("echo");
  if (echo != body.end() && !echo->is_null() && !(echo->is_boolean() && !echo->get<bool>())) {
    return Bad("echo: not supported");
  }
  auto suffix = body.find("suffix");
  if (suffix != body.end() && !suffix->is_null()) return Bad("suffix: not supported");
  // grammar, json_schema, response_format and logit_bias: ParseConstraints (needs the
  // model's vocabulary; called by the handler).
  return out;
}

HttpFrontEnd::HttpFrontEnd(Gateway* gateway, HttpOptions opts) : gw_(gateway), opts_(std::move(opts)) {
  serving::http::ServerOptions so = opts_.server;
  // The server's own errors (404, 405, 413, 429, 401, malformed HTTP) get an
  // OpenAI-style JSON body too.
  so.error_body = [](int status, const std::string& message) {
    return std::make_pair(std::string("application/json"), http::Dump(ErrorJson(status, message)));
  };
  so.open_paths.push_back("/health");
  so.open_paths.push_back("/healthz");
  http_ = std::make_unique<serving::http::Server>(std::move(so));

  http::RegisterInfoRoutes(http_.get(), gw_);

  // Embeddings (services/gateway/embeddings.h): /v1/embeddings in OpenAI's shape,
  // /embedding and /embeddings in llama.cpp's.
  http_->Post(R"(/(v1/)?embeddings?)",
              [this](const HttpRequest& q, HttpResponse& r) { HandleEmbeddingsHttp(gw_, q, r); });

  http_->RouteAsync("POST", "/v1/completions",
                    [this](std::shared_ptr<const HttpRequest> req, std::shared_ptr<serving::http::Responder> out) {
                      const HttpRequest& hreq = *req;
                      const absl::Time t0 = absl::Now();
                      absl::StatusOr<json> body = http::ParseJsonObject(hreq.body);
                      absl::StatusOr<CompletionRequest> cr = body.ok() ? ParseCompletionRequest(*body) : body.status();
                      if (cr.ok()) {
                        if (absl::Status cs = http::ApplyConstraints(gw_, *body, &*cr); !cs.ok()) cr = cs;
                      }
                      if (!cr.ok()) {
                        gw_->RecordRequest("http_completions", cr.status(), absl::Now() - t0);
                        http::Answer(*out, [&](HttpResponse& res) { SendError(res, cr.status()); });
                        return;
                      }
                      http::ServeGeneration(gw_, *std::move(cr), http::ApiKind::kCompletions, "http_completions",
                                            std::move(out));
                    });
  http::RegisterChatRoutes(http_.get(), gw_);
  http::RegisterResponsesRoutes(http_.get(), gw_);
}

HttpFrontEnd::~HttpFrontEnd() { Stop(absl::ZeroDuration()); }

absl::StatusOr<int> HttpFrontEnd::Start(const std::string& host, int port) { return http_->Start(host, port); }

void HttpFrontEnd::Stop(absl::Duration grace) { http_->Stop(grace); }

}  // namespace herd::gateway
