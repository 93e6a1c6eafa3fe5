#include "services/gateway/request_validation.h"

#include <string>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/engine/sampling_proto.h"
#include "libs/engine/spec/spec_proto.h"
#include "services/gateway/chat_prompt.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway {
namespace {

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

}  // namespace

absl::Status ValidateSampling(const v1::SamplingParams& s) { return engine::SamplingParamsFromProto(s).status(); }

absl::Status ValidateLogitBiasIds(const v1::SamplingParams& s, int32_t n_vocab) {
  return engine::CheckLogitBiasIds(s, n_vocab);
}

absl::StatusOr<engine::spec::SpecConfig> ValidateGenerateRequest(const v1::GenerateRequest& req,
                                                                 int64_t max_prompt_bytes,
                                                                 const engine::spec::SpecConfig& spec_defaults) {
  if (req.model().empty()) return Invalid("model: required (a name from ListModels)");
  switch (req.prompt_case()) {
    case v1::GenerateRequest::kText: {
      // llama.cpp's server generates from BOS alone; herd asks for a prompt (protocol.md).
      if (req.text().empty()) return Invalid("prompt.text: empty (a prompt is required)");
      if (static_cast<int64_t>(req.text().size()) > max_prompt_bytes) {
        return Invalid(absl::StrCat("prompt.text: ", req.text().size(), " bytes exceeds the limit of ",
                                    max_prompt_bytes, " bytes"));
      }
      size_t bad = 0;
      if (!IsValidUtf8(req.text(), &bad)) return Invalid(absl::StrCat("prompt.text: invalid UTF-8 at byte ", bad));
      break;
    }
    case v1::GenerateRequest::kTokens: {
      if (req.tokens().ids().empty()) return Invalid("prompt.tokens: no token ids");
      for (int i = 0; i < req.tokens().ids_size(); ++i) {
        if (req.tokens().ids(i) < 0) {
          return Invalid(absl::StrCat("prompt.tokens.ids[", i, "]: ", req.tokens().ids(i), " is not a token id"));
        }
      }
      break;
    }
    case v1::GenerateRequest::kChat: {
      HERD_RETURN_IF_ERROR(ValidateChatPrompt(req.chat(), max_prompt_bytes));
      break;
    }
    default:
      return Invalid("prompt: required (text, tokens or chat)");
  }
  HERD_RETURN_IF_ERROR(ValidateSampling(req.sampling()));
  if (req.has_n_predict() && (req.n_predict() < -1 || req.n_predict() == 0)) {
    return Invalid(absl::StrCat("n_predict: must be -1 or 1..n_ctx (got ", req.n_predict(), ")"));
  }
  if (req.stop_size() > kMaxStops) {
    return Invalid(absl::StrCat("stop: at most ", kMaxStops, " strings (got ", req.stop_size(), ")"));
  }
  for (int i = 0; i < req.stop_size(); ++i) {
    const std::string& stop = req.stop(i);
    if (stop.empty() || stop.size() > kMaxStopBytes) {
      return Invalid(absl::StrCat("stop[", i, "]: must be 1..", kMaxStopBytes, " bytes (got ", stop.size(), ")"));
    }
    if (!IsValidUtf8(stop)) return Invalid(absl::StrCat("stop[", i, "]: invalid UTF-8"));
  }
  if (req.has_logprobs() && (req.logprobs() < 0 || req.logprobs() > kMaxLogprobs)) {
    return Invalid(absl::StrCat("logprobs: must be in 0..", kMaxLogprobs, " (got ", req.logprobs(), ")"));
  }
  return engine::spec::SpecConfigFromProto(req.speculative(), spec_defaults, "speculative.");
}

}  // namespace herd::gateway
