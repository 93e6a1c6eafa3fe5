// herd.v1.SamplingParams <-> engine::SamplingParams: the one conversion (and the one
// validation of the wire values) that the gateway and the worker share.
#pragma once
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/engine/sampling.h"
#include "proto/herd/v1/common.pb.h"

namespace herd::engine {

/// SamplingParams defaults (llama.cpp's common_params_sampling) with every field that
/// `proto` sets laid over them; seed unset = kRandomSeed, grammar "" = none; n_probs
/// stays 0 (logprobs travel outside SamplingParams). Validated with proto field names,
/// each prefixed by `field_prefix` ("sampling." at the gateway, "start.sampling." at
/// the worker). Errors, all INVALID_ARGUMENT:
///   "<prefix>temperature: must be a finite number >= 0 (got -1)",
///   "<prefix>top_p: must be in [0, 1] (got 1.5)" (min_p alike),
///   "<prefix>repeat_penalty: must be a finite number > 0 (got 0)",
///   "<prefix>repeat_last_n: must be >= -1 (got -2)",
///   "<prefix>presence_penalty: must be finite (got inf)" (frequency_penalty alike),
///   "<prefix>logit_bias[2].token_id: -1 is negative (token ids are in [0, n_vocab))",
///   "<prefix>logit_bias[2].bias: must be a finite number or -inf (got nan)",
///   "<prefix>grammar: undefined rule 'x' at line 1, column 10 ..." (the GBNF parser's
///   message, llama_grammar_init_impl / llama_grammar_parser::parse).
/// Token ids against a vocabulary: CheckLogitBiasIds.
absl::StatusOr<SamplingParams> SamplingParamsFromProto(const herd::v1::SamplingParams& proto,
                                                       const std::string& field_prefix = "sampling.");

/// INVALID_ARGUMENT "<prefix>logit_bias[i].token_id: 99999 is outside the vocabulary
/// [0, 512)" for the first logit_bias entry of `proto` whose id is not in [0, n_vocab).
absl::Status CheckLogitBiasIds(const herd::v1::SamplingParams& proto, int64_t n_vocab,
                               const std::string& field_prefix = "sampling.");

/// Every field of `params` except n_probs (not on the wire); seed only when it is not
/// kRandomSeed, grammar only when not empty. SamplingParamsFromProto(the result) ==
/// `params` (n_probs aside). Clears `proto` first.
void SamplingParamsToProto(const SamplingParams& params, herd::v1::SamplingParams* proto);

}  // namespace herd::engine
