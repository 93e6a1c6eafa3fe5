// Helpers shared by the HTTP front end's handlers (http_*.cc): JSON field readers that
// name the field on a type error, OpenAI-style error bodies, and the JSON shapes of
// usage, timings and speculative statistics. Internal to services/gateway.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/repeated_ptr_field.h"
#include "nlohmann/json.hpp"

#include "libs/serving/http_server.h"
#include "proto/herd/v1/common.pb.h"

namespace herd::gateway {

using HttpRequest = serving::http::Request;
using HttpResponse = serving::http::Response;

/// HTTP status for an error code: 400 (INVALID_ARGUMENT, FAILED_PRECONDITION,
/// OUT_OF_RANGE), 404, 429 (RESOURCE_EXHAUSTED), 503 (UNAVAILABLE), 504
/// (DEADLINE_EXCEEDED), 499 (CANCELLED), else 500.
int HttpStatusFor(absl::StatusCode code);
/// OpenAI's error body {"error": {"message", "type", "param", "code"}}: `type` from the
/// HTTP status (invalid_request_error, authentication_error, not_found_error,
/// rate_limit_error, unavailable_error, timeout_error, server_error), `param` the
/// request field the message starts with ("temperature: ..." -> "temperature"; null
/// when it names none), `code` a string: ErrorCode.
nlohmann::json ErrorJson(const absl::Status& s);
nlohmann::json ErrorJson(int http_status, const std::string& message);
/// The field path a message starts with ("messages[0].role: required" ->
/// "messages[0].role"); "" when its prefix is not a field path.
std::string ErrorParam(absl::string_view message);
/// OpenAI-style string code: invalid_value, unknown_parameter,
/// missing_required_parameter, context_length_exceeded (400), invalid_api_key (401),
/// model_not_found / not_found (404), request_too_large (413), rate_limit_exceeded
/// (429), cancelled (499), service_unavailable (503), timeout (504), internal_error.
std::string ErrorCode(int http_status, absl::string_view message);

namespace http {

using json = nlohmann::json;

/// INVALID_ARGUMENT with `msg` (which names the JSON field).
absl::Status Bad(const std::string& msg);
/// Compact JSON; invalid UTF-8 in strings becomes U+FFFD instead of throwing.
std::string Dump(const json& j);

/// Optional field readers: absent or null leaves *present false and returns OK; a value
/// of the wrong type is INVALID_ARGUMENT "KEY: must be ...". GetInt accepts integral
/// floats (1.0) below 2^53.
absl::Status GetNumber(const json& body, const char* key, double* out, bool* present);
absl::Status GetInt(const json& body, const char* key, int64_t* out, bool* present);
absl::Status GetBool(const json& body, const char* key, bool* out, bool* present);
absl::Status GetString(const json& body, const char* key, std::string* out, bool* present);

/// Saturates to the int32 range (range checks with the real limits come later).
int32_t ClampI32(int64_t v);

/// INVALID_ARGUMENT naming the first key of `body` that is neither in `known` nor in
/// the output-neutral keys every endpoint tolerates (user, metadata, store,
/// service_tier, cache_prompt): unknown options that could change the output are refused,
/// never ignored.
absl::Status CheckKnownFields(const json& body, const std::vector<const char*>& known);

/// The request body as a JSON object. INVALID_ARGUMENT "request body: ..." otherwise:
/// invalid JSON, not an object, or nested deeper than kMaxJsonNesting (checked on the
/// text before parsing, libs/base/json_nesting.h).
absl::StatusOr<json> ParseJsonObject(const std::string& body);

/// OpenAI finish_reason ("stop" for EOS and stop strings, "length", "cancelled"), or
/// nullptr for FINISH_REASON_UNSPECIFIED.
const char* FinishString(v1::FinishReason r);
/// {prompt_tokens, completion_tokens, total_tokens}.
json UsageJson(const v1::Usage& u);
/// llama.cpp server's "timings" object (ms and tokens/s).
json TimingsJson(const v1::Usage& u);
/// llama.cpp-style speculative statistics of the last message (an empty array: none).
json SpeculativeJson(const google::protobuf::RepeatedPtrField<v1::SpeculativeStats>& stats);

/// An error of the gateway's request (proto field paths) in the HTTP client's field
/// names: n_predict -> `max_tokens_key` (the key the client sent), sampling.X -> X,
/// chat.X -> X, prompt.text / prompt.tokens -> prompt, prompt.tokens.ids[i] -> prompt[i].
/// Other messages unchanged.
absl::Status ToClientFields(const absl::Status& s, absl::string_view max_tokens_key);

/// Sets the status from HttpStatusFor(s.code()) and an ErrorJson(s) body.
void SendError(HttpResponse& res, const absl::Status& s);
/// Sets a 200 application/json body.
void SendJson(HttpResponse& res, const json& body);

}  // namespace http
}  // namespace herd::gateway
