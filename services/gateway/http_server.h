// OpenAI-compatible HTTP front end of the gateway (cpp-httplib):
//   POST /v1/completions   text completion, streaming (server-sent events) or not; with
//                          speculation the response (the last event when streaming)
//                          carries "speculative": [{type, calls, gen_drafts, acc_drafts,
//                          gen_tokens, acc_tokens, acceptance_rate}]
//   POST /v1/embeddings    embeddings (OpenAI shape; /embedding, /embeddings: llama.cpp's),
//                          see embeddings.h
//   GET  /v1/models        models served by at least one live worker
//   GET  /healthz          "ok"
// Requests run through the same Gateway::Prepare/Run path as gRPC Generate.
#pragma once
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "proto/herd/v1/gateway.pb.h"
#include "services/gateway/gateway.h"

namespace httplib {
class Server;
}

namespace herd::gateway {

/// A parsed POST /v1/completions body.
struct CompletionRequest {
  v1::GenerateRequest req;
  bool stream = false;
};

/// Maps an OpenAI /v1/completions JSON body to a GenerateRequest:
/// model, prompt (string, array of token ids, or an array holding one string),
/// max_tokens (-> n_predict; also accepted as n_predict), temperature, top_p, top_k,
/// min_p, seed (-1 = random), stop (string or array), stream, logprobs,
/// presence_penalty, frequency_penalty, repeat_penalty, repeat_last_n, ignore_eos,
/// speculative (an object with GenerateRequest.speculative's fields: type, draft_max,
/// draft_min, draft_p_min, ngram_size_n, ngram_size_m, ngram_check_rate, ngram_min_hits);
/// n / best_of must be 1 and echo false when present. Range checks are left to the
/// gateway. Errors: INVALID_ARGUMENT naming the JSON field (wrong type, unsupported
/// option, missing model/prompt).
absl::StatusOr<CompletionRequest> ParseCompletionRequest(const nlohmann::json& body);

/// HTTP status for an error code: 400 (INVALID_ARGUMENT, FAILED_PRECONDITION,
/// OUT_OF_RANGE), 404, 429 (RESOURCE_EXHAUSTED), 503 (UNAVAILABLE), 504
/// (DEADLINE_EXCEEDED), 499 (CANCELLED), else 500.
int HttpStatusFor(absl::StatusCode code);
/// {"error": {"message", "type", "code"}} as OpenAI and llama.cpp's server send it.
nlohmann::json ErrorJson(const absl::Status& s);

struct HttpOptions {
  /// Connections served at once (each streaming completion holds one thread).
  int threads = 32;
  /// Largest request body (bytes); larger bodies get 413.
  size_t max_body_bytes = 16 << 20;
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
  /// Stops accepting connections and waits for requests in flight to end (idempotent).
  void Stop();

 private:
  Gateway* gw_;
  HttpOptions opts_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
};

}  // namespace herd::gateway
