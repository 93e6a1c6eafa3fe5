// What the serving benchmarks (serve_bench, spec_serve_bench) share: a streaming
// POST /v1/completions client over raw sockets, plain HTTP calls (/tokenize, /metrics),
// C concurrent clients working through a list of request bodies, the word prompts, and
// the random-weight model files (bench_models) they serve.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd::bench {

using Clock = std::chrono::steady_clock;

/// Milliseconds in `d`.
double Ms(Clock::duration d);

/// "/proc/loadavg"'s three load averages ("1.52 1.40 1.33"), or "?".
std::string LoadAverage();

/// The whole file at `path`; "" when it cannot be read.
std::string ReadFile(const std::string& path);

/// `n` words drawn with `seed` from a fixed 70-word list, in sentences of 5 to 8 words
/// ("Old trees grow near the river. ..."). 24 words are ~30 tokens with the Llama-2
/// vocabulary (with BOS), most of these words one token each.
std::string Words(int n, uint32_t seed);

/// Where requests go: host, port and the model name to put in the bodies.
struct Target {
  std::string host;
  int port = 0;
  std::string model;
};

/// Target of "HOST:PORT" (port 0 when it does not parse).
Target TargetOf(const std::string& addr, const std::string& model);

/// One streamed completion.
struct RequestResult {
  std::string error;  // "" = success
  double ttft_ms = 0;
  std::vector<double> itl_ms;
  std::string text;  // the generated text, the events' "text" joined
  int64_t completion_tokens = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // usage.prompt_tokens_details.cached_tokens
};

/// POSTs `body` (a JSON object with "stream": true) to /v1/completions and reads the
/// event stream. Times are taken when the bytes carrying an event arrive; TTFT = request
/// start -> first event with text; ITL = the gaps between consecutive events with text
/// (one token each, unless the server sent several at once). Sets `error` on a failed
/// connection, a non-200 status, an "error" event, a missing [DONE] or usage, no text,
/// or completion_tokens other than `max_tokens`; `timeout_s` bounds the whole request.
RequestResult StreamCompletion(const Target& t, const std::string& body, int max_tokens, int timeout_s);

/// One plain HTTP/1.1 exchange (Connection: close, 30 s limit). Returns the body of a 200
/// answer. Errors: UNAVAILABLE (connect, send), DEADLINE_EXCEEDED, DATA_LOSS /
/// INVALID_ARGUMENT (a broken response), INTERNAL (another status, with its body).
absl::StatusOr<std::string> HttpCall(const Target& t, const std::string& method, const std::string& path,
                                     const std::string& body);

/// Sum of the values of every sample named `name` (with any labels) in Prometheus text
/// `metrics`; 0 when there is none.
double MetricSum(absl::string_view metrics, absl::string_view name);

/// C concurrent clients through a list of bodies.
struct LoadResult {
  std::vector<RequestResult> results;  // per body, in the order given
  double seconds = 0;                  // wall time, first request to last answer
  std::string error;                   // the first failed request's ("request i of n: ...")
};

/// Runs `concurrency` client threads that take the next of `bodies` until none is left
/// (StreamCompletion each). The first failure sets `error` and `*abort`, which stops the
/// clients from starting more requests.
LoadResult RunClients(const Target& t, const std::vector<std::string>& bodies, int concurrency, int max_tokens,
                      int timeout_s, std::atomic<bool>* abort);

/// A random-weight model file written by bench_models::CachedModel.
struct PreparedModel {
  std::string dir;   // CACHE_DIR/models
  std::string name;  // "<shape>-<type>", e.g. "llama-110m-q4_0" (the file name without .gguf)
  std::string path;  // dir/name.gguf
};

/// The `shape` model ("llama-110m", ...) in weight type `type` ("q4_0", "f16", ...) with
/// the tokenizer of `vocab` ("" = SHARED/models/vocab/ggml-vocab-llama-spm.gguf, where
/// SHARED is `shared`), written into `cache_dir` ("" = DefaultCacheDir()) unless the
/// same recipe is there already. The weights depend only on the shape: two types of a
/// shape are the same weights quantized differently. Errors: INVALID_ARGUMENT (shape,
/// type), NOT_FOUND (no vocab), CachedModel's.
absl::StatusOr<PreparedModel> PrepareModel(const std::string& shape, const std::string& type,
                                           const std::string& cache_dir, const std::string& vocab,
                                           const std::string& shared);

}  // namespace herd::bench
