#include "services/gateway/http_util.h"

#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/base/json_nesting.h"
#include "libs/base/status_macros.h"
#include "services/gateway/http_server.h"

namespace herd::gateway {

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kCancelled:
      return 499;
    default:
      return 500;
  }
}

std::string ErrorParam(absl::string_view message) {
  const size_t colon = message.find(": ");
  if (colon == absl::string_view::npos || colon == 0) return "";
  const absl::string_view path = message.substr(0, colon);
  for (char c : path) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '[' && c != ']') return "";
  }
  return std::string(path);
}

std::string ErrorCode(int http, absl::string_view message) {
  switch (http) {
    case 400:
      if (absl::StrContains(message, "unknown field") || absl::StrContains(message, "unknown or unsupported field")) {
        return "unknown_parameter";
      }
      if (absl::EndsWith(message, ": required")) return "missing_required_parameter";
      if (absl::StrContains(message, "exceeds the context") || absl::StrContains(message, "context (n_ctx")) {
        return "context_length_exceeded";
      }
      return "invalid_value";
    case 401:
      return "invalid_api_key";
    case 404:
      return absl::StartsWith(message, "model") ? "model_not_found" : "not_found";
    case 405:
      return "method_not_allowed";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_exceeded";
    case 499:
      return "cancelled";
    case 503:
      return "service_unavailable";
    case 504:
      return "timeout";
    default:
      return http >= 500 ? "internal_error" : "invalid_request";
  }
}

nlohmann::json ErrorJson(int http, const std::string& message) {
  using nlohmann::json;
  const char* type = http >= 500 && http != 503 && http != 504 ? "server_error" : "invalid_request_error";
  switch (http) {
    case 401:
      type = "authentication_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 503:
      type = "unavailable_error";
      break;
    case 504:
      type = "timeout_error";
      break;
    default:
      break;
  }
  std::string param = ErrorParam(message);
  if (param.empty() && http == 404 && absl::StartsWith(message, "model")) param = "model";
  return json{{"error",
               {{"message", message},
                {"type", type},
                {"param", param.empty() ? json(nullptr) : json(param)},
                {"code", ErrorCode(http, message)}}}};
}

nlohmann::json ErrorJson(const absl::Status& s) { return ErrorJson(HttpStatusFor(s.code()), std::string(s.message())); }

namespace http {

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::Status ToClientFields(const absl::Status& s, absl::string_view max_tokens_key) {
  if (s.ok()) return s;
  const absl::string_view m = s.message();
  std::string out;
  if (absl::StartsWith(m, "n_predict:")) {
    out = absl::StrCat(max_tokens_key, m.substr(9));
  } else if (absl::StartsWith(m, "sampling.")) {
    out = std::string(m.substr(9));
  } else if (absl::StartsWith(m, "chat.")) {
    out = std::string(m.substr(5));
  } else if (absl::StartsWith(m, "prompt.tokens.ids")) {
    out = absl::StrCat("prompt", m.substr(17));
  } else if (absl::StartsWith(m, "prompt.text:") || absl::StartsWith(m, "prompt.tokens:")) {
    out = absl::StrCat("prompt", m.substr(m.find(':')));
  } else {
    return s;
  }
  return absl::Status(s.code(), out);
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

absl::Status GetNumber(const json& body, const char* key, double* out, bool* present) {
  *present = false;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return Bad(absl::StrCat(key, ": must be a number"));
  *out = it->get<double>();
  *present = true;
  return absl::OkStatus();
}

absl::Status GetInt(const json& body, const char* key, int64_t* out, bool* present) {
  *present = false;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
  } else if (it->is_number_float() && std::isfinite(it->get<double>()) &&
             std::floor(it->get<double>()) == it->get<double>() && std::fabs(it->get<double>()) < 9e15) {
    *out = static_cast<int64_t>(it->get<double>());
  } else {
    return Bad(absl::StrCat(key, ": must be an integer"));
  }
  *present = true;
  return absl::OkStatus();
}

int32_t ClampI32(int64_t v) {
  return static_cast<int32_t>(std::max<int64_t>(std::numeric_limits<int32_t>::min(),
                                                std::min<int64_t>(std::numeric_limits<int32_t>::max(), v)));
}

const char* FinishString(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_EOS:
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return nullptr;
  }
}

json UsageJson(const v1::Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens()},
              {"completion_tokens", u.completion_tokens()},
              {"total_tokens", u.prompt_tokens() + u.completion_tokens()},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens()}}}};
}

json TimingsJson(const v1::Usage& u) {
  return json{
      {"prompt_ms", u.prompt_ms()},
      {"generation_ms", u.generation_ms()},
      {"queue_ms", u.queue_ms()},
      {"total_ms", u.total_ms()},
      {"predicted_per_second", u.generation_ms() > 0 ? u.completion_tokens() * 1000.0 / u.generation_ms() : 0.0}};
}

// llama.cpp-style speculative statistics of the last message (empty array: none).
json SpeculativeJson(const google::protobuf::RepeatedPtrField<v1::SpeculativeStats>& stats) {
  json out = json::array();
  for (const v1::SpeculativeStats& s : stats) {
    out.push_back(
        json{{"type", s.type()},
             {"calls", s.calls()},
             {"gen_drafts", s.gen_drafts()},
             {"acc_drafts", s.acc_drafts()},
             {"gen_tokens", s.gen_tokens()},
             {"acc_tokens", s.acc_tokens()},
             {"acceptance_rate",
              s.gen_tokens() > 0 ? static_cast<double>(s.acc_tokens()) / static_cast<double>(s.gen_tokens()) : 0.0}});
  }
  return out;
}

absl::Status GetBool(const json& body, const char* key, bool* out, bool* present) {
  *present = false;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return Bad(absl::StrCat(key, ": must be a boolean"));
  *out = it->get<bool>();
  *present = true;
  return absl::OkStatus();
}

absl::Status GetString(const json& body, const char* key, std::string* out, bool* present) {
  *present = false;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return Bad(absl::StrCat(key, ": must be a string"));
  *out = it->get<std::string>();
  *present = true;
  return absl::OkStatus();
}

absl::Status CheckKnownFields(const json& body, const std::vector<const char*>& known) {
  static const char* const kNeutral[] = {"user", "metadata", "store", "service_tier", "cache_prompt"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& key = it.key();
    bool ok = false;
    for (const char* k : known) ok |= key == k;
    for (const char* k : kNeutral) ok |= key == k;
    if (!ok) return Bad(absl::StrCat(key, ": unknown or unsupported field"));
  }
  return absl::OkStatus();
}

absl::StatusOr<json> ParseJsonObject(const std::string& body) {
  // Before parsing: every later walk or copy of the document recurses per level.
  HERD_RETURN_IF_ERROR(CheckJsonNesting(body, "request body"));
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Bad("request body: invalid JSON");
  if (!j.is_object()) return Bad("request body: must be a JSON object");
  return j;
}

void SendError(HttpResponse& res, const absl::Status& s) {
  res.status = HttpStatusFor(s.code());
  res.SetContent(Dump(ErrorJson(s)), "application/json");
}

void SendJson(HttpResponse& res, const json& body) { res.SetContent(Dump(body), "application/json"); }

}  // namespace http
}  // namespace herd::gateway
