#include "libs/engine/spec/spec_proto.h"

#include "absl/strings/str_cat.h"

namespace herd::engine::spec {

absl::StatusOr<SpecConfig> SpecConfigFromProto(const herd::v1::SpeculativeConfig& p, const SpecConfig& defaults,
                                               const std::string& field_prefix) {
  SpecConfig c = defaults;
  if (!p.type().empty()) {
    auto t = ParseSpecType(p.type(), field_prefix + "type");
    if (!t.ok()) return t.status();
    c.type = *t;
  }
  if (p.has_draft_max()) c.draft_max = p.draft_max();
  if (p.has_draft_min()) c.draft_min = p.draft_min();
  if (p.has_draft_p_min()) c.draft_p_min = p.draft_p_min();
  if (p.has_ngram_size_n()) c.ngram_size_n = p.ngram_size_n();
  if (p.has_ngram_size_m()) c.ngram_size_m = p.ngram_size_m();
  if (p.has_ngram_check_rate()) c.ngram_check_rate = p.ngram_check_rate();
  if (p.has_ngram_min_hits()) c.ngram_min_hits = p.ngram_min_hits();
  if (absl::Status s = ValidateSpecConfig(c); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(field_prefix, s.message()));
  }
  return c;
}

void SpecConfigToProto(const SpecConfig& c, herd::v1::SpeculativeConfig* p) {
  p->set_type(SpecTypeName(c.type));
  p->set_draft_max(c.draft_max);
  p->set_draft_min(c.draft_min);
  p->set_draft_p_min(c.draft_p_min);
  p->set_ngram_size_n(c.ngram_size_n);
  p->set_ngram_size_m(c.ngram_size_m);
  p->set_ngram_check_rate(c.ngram_check_rate);
  p->set_ngram_min_hits(c.ngram_min_hits);
}

void SpecStatsToProto(const SpecStats& s, herd::v1::SpeculativeStats* p) {
  p->set_type(SpecTypeName(s.type));
  p->set_calls(s.calls);
  p->set_gen_drafts(s.gen_drafts);
  p->set_acc_drafts(s.acc_drafts);
  p->set_gen_tokens(s.gen_tokens);
  p->set_acc_tokens(s.acc_tokens);
}

SpecStats SpecStatsFromProto(const herd::v1::SpeculativeStats& p) {
  SpecStats s;
  auto t = ParseSpecType(p.type());
  s.type = t.ok() ? *t : SpecType::kNone;
  s.calls = p.calls();
  s.gen_drafts = p.gen_drafts();
  s.acc_drafts = p.acc_drafts();
  s.gen_tokens = p.gen_tokens();
  s.acc_tokens = p.acc_tokens();
  return s;
}

absl::StatusOr<SparseDist> SparseDistFromProto(const herd::v1::DraftTokenProbs& proto) {
  if (proto.ids_size() != proto.p_size()) {
    return absl::InvalidArgumentError(absl::StrCat(proto.ids_size(), " ids but ", proto.p_size(), " probabilities"));
  }
  SparseDist d;
  d.reserve(static_cast<size_t>(proto.ids_size()));
  for (int j = 0; j < proto.ids_size(); ++j) d.push_back({proto.ids(j), proto.p(j)});
  return d;
}

void SparseDistToProto(const SparseDist& dist, herd::v1::DraftTokenProbs* proto) {
  for (const TokenProb& t : dist) {
    proto->add_ids(t.id);
    proto->add_p(t.p);
  }
}

}  // namespace herd::engine::spec
