// OpenAI- and llama.cpp-server-compatible HTTP front end of the gateway, on the hardened
// server of libs/serving/http_server.h (limits, 429, TLS, API keys):
//   POST /v1/completions        text completion, streaming (server-sent events) or not;
//                               with speculation the response (the last event when
//                               streaming) carries "speculative": [{type, calls, ...}]
//   POST /v1/chat/completions   chat completion: messages rendered with the model's chat
//                               template (http_chat.cc)
//   POST /v1/embeddings        embeddings (OpenAI shape; /embedding, /embeddings:
//                               llama.cpp's), see embeddings.h
//   GET  /v1/models, /v1/models/{id}   models served by at least one live worker
//   POST /tokenize, /detokenize  llama.cpp server's shapes (http_info.cc)
//   GET  /health (llama.cpp: {"status":"ok"} or 503), /healthz ("ok")
// Generation requests run through the same Gateway::Prepare/Run path as gRPC Generate.
#pragma once
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "proto/herd/v1/gateway.pb.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_generation.h"
#include "services/gateway/http_util.h"

namespace herd::gateway {

/// A parsed POST /v1/completions body.
using CompletionRequest = http::HttpGeneration;

/// Maps an OpenAI /v1/completions JSON body to a GenerateRequest: model, prompt (string,
/// array of token ids, or an array holding one string), logprobs (also n_probs), echo
/// false, suffix absent, best_of = n, plus the fields of http::ParseCommonFields
/// (max_tokens, sampling, stop, stream, n, speculative, grammar, json_schema,
/// response_format, logit_bias, ...). Any other field is refused
/// (never silently ignored). Range checks are left to the gateway. Errors:
/// INVALID_ARGUMENT naming the JSON field.
absl::StatusOr<CompletionRequest> ParseCompletionRequest(const nlohmann::json& body);

struct HttpOptions {
  /// Limits, TLS and API keys (libs/serving/http_server.h). The front end adds its own
  /// error bodies (OpenAI-style JSON) and serves /health and /healthz without a key.
  serving::http::ServerOptions server;
};

class HttpFrontEnd {
 public:
  HttpFrontEnd(Gateway* gateway, HttpOptions opts = {});
  ~HttpFrontEnd();
  HttpFrontEnd(const HttpFrontEnd&) = delete;
  HttpFrontEnd& operator=(const HttpFrontEnd&) = delete;

  /// Binds host:port (0 = any free port) and serves in a background thread. Returns the
  /// bound port. Errors: UNAVAILABLE naming the address.
  absl::StatusOr<int> Start(const std::string& host, int port);
  /// Stops accepting connections and waits up to `grace` for requests in flight to end
  /// (idempotent).
  void Stop(absl::Duration grace = absl::Seconds(5));

 private:
  Gateway* gw_;
  HttpOptions opts_;
  std::unique_ptr<serving::http::Server> http_;
};

}  // namespace herd::gateway
