// Embeddings at the gateway (llama.cpp server's /v1/embeddings and /embedding, and the
// gRPC Gateway.Embed): validation, tokenization, routing of each input to a worker's
// Embed RPC, normalization (common_embd_normalize) and the OpenAI JSON shapes. One
// function, Embed(), serves both the gRPC service and the HTTP front end, so both give
// the same vectors for the same request (and the same as `herd embed`).
#pragma once
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

#include "proto/herd/v1/gateway.pb.h"
#include "services/gateway/http_util.h"

namespace herd::gateway {

class Gateway;

/// Most inputs in one request (OpenAI's limit).
inline constexpr int kMaxEmbedInputs = 2048;

/// Runs one embedding request. Each text input is tokenized like llama.cpp's server
/// does for embeddings (tokenize_input_prompts with add_special and parse_special: BOS
/// (and EOS) per the vocabulary, special-token text matched); token inputs are used as
/// is. Each input goes to the least-loaded live worker serving the model (Worker.Embed;
/// another worker is tried, up to GatewayOptions::max_attempts, after UNAVAILABLE or
/// RESOURCE_EXHAUSTED), whose pooled vector is normalized here with `normalize`
/// (common_embd_normalize's embd_norm; default 2 = Euclidean). `deadline`: the client's
/// (InfiniteFuture when none; the gateway's request timeout also applies). `method`
/// labels the metrics ("Embed", "http_embeddings").
/// Errors: INVALID_ARGUMENT naming the field ("model: required", "inputs: ...",
/// "inputs[2]: empty", "inputs[0].text: ...", "inputs[1].tokens.ids[3]: ...",
/// "inputs[0]: 900 tokens exceed the context ...", "normalize: ...", "pooling: ...");
/// NOT_FOUND (unknown model); UNAVAILABLE (no live worker, draining, or every attempt
/// failed); RESOURCE_EXHAUSTED; DEADLINE_EXCEEDED; the worker's code otherwise.
absl::StatusOr<v1::EmbedResponse> Embed(Gateway& gw, const v1::EmbedRequest& req, absl::Time deadline,
                                        const std::string& method = "Embed");

/// Whether a parsed HTTP body asks for OpenAI's shape (/v1/embeddings) or llama.cpp's
/// non-OpenAI one (/embedding).
enum class EmbeddingsApi { kOpenAi, kLlamaCpp };

/// A parsed embeddings JSON body.
struct EmbeddingsHttpRequest {
  v1::EmbedRequest req;
  bool base64 = false;  // encoding_format "base64": little-endian float32 bytes, base64
};

/// Maps a JSON body to an EmbedRequest: `model` (required), `input` -- a string, an
/// array of strings, an array of token ids (one input) or an array of token-id arrays
/// (llama.cpp's `content` is accepted for `input`) --, `encoding_format` ("float"
/// default, or "base64"), herd/llama.cpp extras `pooling` ("mean", "cls", "last") and
/// `embd_normalize` (integer >= -1); `dimensions` (EmbedRequest.dimensions: n_embd, or
/// fewer for a Matryoshka model); `user` is ignored. Errors: INVALID_ARGUMENT naming
/// the JSON field
/// ("input[2]: must be a string or an array of token ids", "encoding_format: ...").
absl::StatusOr<EmbeddingsHttpRequest> ParseEmbeddingsRequest(const nlohmann::json& body);

/// The response JSON. kOpenAi: {"object": "list", "data": [{"object": "embedding",
/// "index", "embedding": [floats] or base64 string}], "model", "usage":
/// {"prompt_tokens", "total_tokens"}}. kLlamaCpp: [{"index", "embedding": [[floats]]}]
/// (llama.cpp's /embedding: one row per input since the vectors are pooled).
nlohmann::json EmbeddingsJson(const v1::EmbedResponse& resp, EmbeddingsApi api, bool base64);

/// The HTTP handler of POST /v1/embeddings (kOpenAi) and /embedding, /embeddings
/// (kLlamaCpp): parse, Embed(), answer 200 with EmbeddingsJson or an error status with
/// ErrorJson (400 naming the field for bad input).
void HandleEmbeddingsHttp(Gateway* gw, const HttpRequest& hreq, HttpResponse& res);

}  // namespace herd::gateway
