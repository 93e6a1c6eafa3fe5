// herd.v1.SpeculativeConfig / SpeculativeStats / DraftTokenProbs <-> SpecConfig / SpecStats /
// SparseDist.
#pragma once
#include "absl/status/statusor.h"

#include "libs/engine/spec/drafter.h"
#include "libs/engine/spec/spec_config.h"
#include "proto/herd/v1/common.pb.h"

namespace herd::engine::spec {

/// `defaults` with every field that `proto` sets laid over it (an empty type keeps
/// the default type), then validated. INVALID_ARGUMENT naming the field (prefixed by
/// `field_prefix`, e.g. "speculative.") for an unknown type or a value out of range.
absl::StatusOr<SpecConfig> SpecConfigFromProto(const herd::v1::SpeculativeConfig& proto, const SpecConfig& defaults,
                                               const std::string& field_prefix = "");

/// Every field set.
void SpecConfigToProto(const SpecConfig& config, herd::v1::SpeculativeConfig* proto);

void SpecStatsToProto(const SpecStats& stats, herd::v1::SpeculativeStats* proto);
/// An unknown type name reads as kNone.
SpecStats SpecStatsFromProto(const herd::v1::SpeculativeStats& proto);

/// A draft token's distribution (common.proto DraftTokenProbs: parallel ids and p).
/// INVALID_ARGUMENT "N ids but M probabilities" when the lists differ in length (values
/// are checked where they are used: RejectionStep, SanitizeDraft).
absl::StatusOr<SparseDist> SparseDistFromProto(const herd::v1::DraftTokenProbs& proto);
void SparseDistToProto(const SparseDist& dist, herd::v1::DraftTokenProbs* proto);

}  // namespace herd::engine::spec
