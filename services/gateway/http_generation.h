// The generation endpoints of the HTTP front end (POST /v1/completions and
// /v1/chat/completions): the request fields they share, and one runner that prepares
// the request's `n` choices through Gateway::Prepare, runs them (concurrently when
// n > 1) and writes OpenAI's response shapes, streamed as server-sent events or whole.
// Internal to services/gateway.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

#include "libs/toolcall/tool_calls.h"
#include "proto/herd/v1/gateway.pb.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_util.h"

namespace herd::gateway::http {

/// Which OpenAI API a response is shaped for.
enum class ApiKind { kCompletions, kChat };

/// A parsed completions or chat request.
struct HttpGeneration {
  v1::GenerateRequest req;
  bool stream = false;
  /// stream_options.include_usage: a last chunk with usage (and no choices).
  bool include_usage = false;
  /// Independent choices (1..16); each is its own sequence, seeded seed + index when a
  /// seed is given.
  int n = 1;
  /// Alternatives shown per token when logprobs are requested (GenerateRequest.logprobs
  /// asks the worker for at least one).
  int top_logprobs = 0;
  /// The key the client bounded the completion with (max_tokens, max_completion_tokens
  /// or n_predict): errors about n_predict name it (ToClientFields).
  std::string max_tokens_key = "max_tokens";
};

/// Parses what both APIs share: max_tokens (-1 or absent = until the context is full,
/// as llama.cpp; also n_predict, and max_completion_tokens for chat), temperature, top_p,
/// top_k (<= 0 = off), min_p, repeat_penalty, repeat_last_n, presence_penalty,
/// frequency_penalty, seed (-1 = random), stop, stream, stream_options, ignore_eos, n,
/// speculative. INVALID_ARGUMENT naming the field.
absl::Status ParseCommonFields(const nlohmann::json& body, ApiKind kind, HttpGeneration* out);

/// The keys ParseCommonFields reads, for CheckKnownFields.
const std::vector<const char*>& CommonFields();

/// Output constraints of either API: grammar, json_schema, response_format and
/// logit_bias (constraints.h) into gen->req.sampling, fetching the model's vocabulary
/// only when one is present. INVALID_ARGUMENT naming the field.
absl::Status ApplyConstraints(Gateway* gw, const nlohmann::json& body, HttpGeneration* gen);

/// Maps an OpenAI /v1/chat/completions body to an HttpGeneration whose request carries
/// a ChatPrompt: messages (role, content as a string or text parts, name, tool_call_id,
/// tool_calls), tools, tool_choice ("auto", "none", "required" or a named function),
/// parallel_tool_calls, reasoning_format, reasoning_effort, logprobs / top_logprobs,
/// max_completion_tokens, plus ParseCommonFields' fields (grammar, json_schema,
/// response_format and logit_bias are applied by ApplyConstraints). Any other field is
/// refused. INVALID_ARGUMENT naming the field. (http_chat.cc)
/// `ordered` (optional): the same body parsed with key order kept, so that tools and
/// tool_calls reach the template in the client's order.
absl::StatusOr<HttpGeneration> ParseChatRequest(const nlohmann::json& body,
                                                const nlohmann::ordered_json* ordered = nullptr);

/// Server-sent events of one streamed response, shared by the choices that write to it
/// (thread-safe). Once a write fails (the client is gone) every later one returns false.
class StreamWriter {
 public:
  /// `client_gone` (optional): asked by gone() too, so that a client that hung up is
  /// noticed between writes (an asynchronous Responder's ClientGone).
  explicit StreamWriter(serving::http::ResponseWriter* ds, std::function<bool()> client_gone = nullptr)
      : ds_(ds), client_gone_(std::move(client_gone)) {}
  /// Writes "data: PAYLOAD\n\n"; false once the client is gone.
  bool Send(const std::string& payload) { return Write("", payload); }
  /// Writes "event: EVENT\ndata: PAYLOAD\n\n" (OpenAI's Responses streams name each event).
  bool SendEvent(const std::string& event, const std::string& payload) { return Write(event, payload); }
  bool gone() const { return gone_.load() || (client_gone_ && client_gone_()); }

 private:
  bool Write(const std::string& event, const std::string& payload);
  serving::http::ResponseWriter* ds_;
  std::function<bool()> client_gone_;
  std::mutex mu_;
  std::atomic<bool> gone_{false};
};

/// A ResponseWriter over an asynchronous Responder: Write queues and never blocks.
class ResponderWriter : public serving::http::ResponseWriter {
 public:
  explicit ResponderWriter(std::shared_ptr<serving::http::Responder> r) : r_(std::move(r)) {}
  bool Write(absl::string_view data) override { return r_->Write(data); }

 private:
  std::shared_ptr<serving::http::Responder> r_;
};

/// Answers `r` with a whole response built by the synchronous helpers (SendError,
/// SendJson).
void Answer(serving::http::Responder& r, const std::function<void(HttpResponse&)>& fill);

/// Calls `fn` with the first error (in choice order, OK when none) once all `n`
/// choices have called Done. Thread-safe.
class ChoiceJoin {
 public:
  ChoiceJoin(int n, std::function<void(const absl::Status&)> fn)
      : left_(n), st_(static_cast<size_t>(n)), fn_(std::move(fn)) {}
  void Done(int i, const absl::Status& s);

 private:
  std::mutex mu_;
  int left_;
  std::vector<absl::Status> st_;
  std::function<void(const absl::Status&)> fn_;
};

/// Splits a chat generation's output into reasoning, content and tool calls as its
/// messages arrive (toolcall::StreamParser with the Generation's rules), or passes the
/// text through as content when `parse` is false.
class OutputSplitter {
 public:
  OutputSplitter(const toolcall::ParserConfig& config, bool parse);
  /// What became final with `msg`: its text, and at its finish_reason everything left.
  toolcall::StreamParser::Delta Next(const v1::GenerateResponse& msg);
  /// Whether a tool call was reported so far.
  bool made_calls() const { return parser_ != nullptr && !parser_->message().tool_calls.empty(); }
  /// Whether output rules apply (`config` has a tool-call format or reasoning).
  static bool Parses(const toolcall::ParserConfig& config) {
    return config.format != toolcall::Format::kNone || config.reasoning;
  }

 private:
  std::unique_ptr<toolcall::StreamParser> parser_;  // null: the text as it is
};

/// Runs `gen` and answers through `out` without holding a thread while the choices
/// generate (Gateway::RunAsync). `method` labels metrics ("http_completions").
/// Validation errors (Prepare) are sent as 4xx before any output; a stream that fails
/// later ends with an error event. A generation is cancelled when its client hangs up
/// (Responder::ClientGone).
void ServeGeneration(Gateway* gw, HttpGeneration gen, ApiKind kind, const std::string& method,
                     std::shared_ptr<serving::http::Responder> out);

}  // namespace herd::gateway::http
