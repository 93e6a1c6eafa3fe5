#include "services/gateway/http_util.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

#include "libs/base/json_nesting.h"

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

nlohmann::json ErrorJson(const absl::Status& s) {
  using nlohmann::json;
  const int http = HttpStatusFor(s.code());
  const char* type = "server_error";
  switch (http) {
    case 400:
      type = "invalid_request_error";
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
  return json{{"error", {{"message", std::string(s.message())}, {"type", type}, {"code", http}}}};
}

namespace http {

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

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
              {"total_tokens", u.prompt_tokens() + u.completion_tokens()}};
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
  if (absl::Status s = CheckJsonNesting(body, "request body"); !s.ok()) return s;
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
