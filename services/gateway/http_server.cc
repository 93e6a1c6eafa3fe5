#include "services/gateway/http_server.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "libs/base/log.h"
#include "services/gateway/http_generation.h"
#include "services/gateway/http_routes.h"
#include "services/gateway/http_util.h"
#include "services/gateway/embeddings.h"

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

HttpFrontEnd::HttpFrontEnd(Gateway* gateway, HttpOptions opts)
    : gw_(gateway), opts_(opts), http_(std::make_unique<httplib::Server>()) {
  const size_t threads = static_cast<size_t>(std::max(1, opts_.threads));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(opts_.max_body_bytes);
  http_->set_read_timeout(60, 0);
  http_->set_write_timeout(60, 0);

  // Errors httplib produces itself (404 for unknown paths, 413 for oversized bodies,
  // 400 for malformed HTTP) get an OpenAI-style JSON body too.
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = absl::StrCat("HTTP ", res.status);
    const char* type = res.status >= 500 ? "server_error" : "invalid_request_error";
    if (res.status == 404) {
      msg = absl::StrCat("no such endpoint: ", req.method, " ", req.path);
      type = "not_found_error";
    } else if (res.status == 413) {
      msg = absl::StrCat("request body: larger than ", opts_.max_body_bytes, " bytes");
    }
    res.set_content(http::Dump(json{{"error", {{"message", msg}, {"type", type}, {"code", res.status}}}}),
                    "application/json");
  });

  http::RegisterInfoRoutes(http_.get(), gw_);

  // Embeddings (services/gateway/embeddings.h): /v1/embeddings in OpenAI's shape,
  // /embedding and /embeddings in llama.cpp's.
  http_->Post(R"(/(v1/)?embeddings?)",
              [this](const httplib::Request& q, httplib::Response& r) { HandleEmbeddingsHttp(gw_, q, r); });

  http_->Post("/v1/completions", [this](const httplib::Request& hreq, httplib::Response& res) {
    const absl::Time t0 = absl::Now();
    absl::StatusOr<json> body = http::ParseJsonObject(hreq.body);
    absl::StatusOr<CompletionRequest> cr = body.ok() ? ParseCompletionRequest(*body) : body.status();
    if (cr.ok()) {
      if (absl::Status cs = http::ApplyConstraints(gw_, *body, &*cr); !cs.ok()) cr = cs;
    }
    if (!cr.ok()) {
      gw_->RecordRequest("http_completions", cr.status(), absl::Now() - t0);
      SendError(res, cr.status());
      return;
    }
    http::ServeGeneration(gw_, *std::move(cr), http::ApiKind::kCompletions, "http_completions", res);
  });
  http::RegisterChatRoutes(http_.get(), gw_);
}

HttpFrontEnd::~HttpFrontEnd() { Stop(); }

absl::StatusOr<int> HttpFrontEnd::Start(const std::string& host, int port) {
  int bound = port;
  if (port == 0) {
    bound = http_->bind_to_any_port(host);
    if (bound < 0) return absl::UnavailableError(absl::StrCat("http: cannot bind ", host, ":0"));
  } else if (!http_->bind_to_port(host, port)) {
    return absl::UnavailableError(absl::StrCat("http: cannot bind ", host, ":", port));
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  // httplib's stop() is a no-op until the listener runs: wait for it, so that a Stop()
  // right after Start() cannot leave the thread listening forever.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (!http_->is_running() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(1));
  return bound;
}

void HttpFrontEnd::Stop() {
  if (thread_.joinable()) {
    const absl::Time end = absl::Now() + absl::Seconds(10);  // see Start()
    while (!http_->is_running() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(1));
    http_->stop();
    thread_.join();
  }
}

}  // namespace herd::gateway

