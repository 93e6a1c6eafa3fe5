#include "libs/grammar/mask_cache.h"

#include <utility>

#include "libs/base/status_macros.h"

namespace herd::grammar {

MaskCache::MaskCache(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenPieces> pieces, Limits limits)
    : grammar_(std::move(grammar)), pieces_(std::move(pieces)), limits_(limits) {
  all_ids_.resize(static_cast<size_t>(pieces_->n_tokens()));
  for (size_t i = 0; i < all_ids_.size(); ++i) all_ids_[i] = static_cast<int32_t>(i);
}

std::shared_ptr<const TokenMask> MaskCache::Compute(const Matcher& m) const {
  const size_t n = all_ids_.size();
  std::vector<uint8_t> ok(n);
  m.CheckTokens(*pieces_, all_ids_.data(), n, ok.data());
  auto mask = std::make_shared<TokenMask>((n + 63) / 64, 0);
  for (size_t i = 0; i < n; ++i) (*mask)[i / 64] |= static_cast<uint64_t>(ok[i]) << (i % 64);
  return mask;
}

std::shared_ptr<const TokenMask> MaskCache::Mask(const Matcher& m) {
  std::string key;
  if (&m.grammar() != grammar_.get() || !m.AppendStateKey(&key, limits_.max_key_bytes)) return Compute(m);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = masks_.find(key);
    if (it != masks_.end()) {
      ++stats_.hits;
      return it->second;
    }
    ++stats_.misses;
  }
  // Computed outside the lock: sequences with other states are not held up (two
  // sequences reaching a new state at once both compute it; the first insert wins).
  std::shared_ptr<const TokenMask> mask = Compute(m);
  std::lock_guard<std::mutex> lock(mu_);
  if (limits_.max_entries == 0) return mask;
  auto [it, inserted] = masks_.emplace(key, mask);
  if (!inserted) return it->second;
  order_.push_back(std::move(key));
  while (masks_.size() > limits_.max_entries) {
    masks_.erase(order_.front());
    order_.pop_front();
  }
  stats_.entries = masks_.size();
  return mask;
}

bool MaskCache::Cached(const Matcher& m) const {
  std::string key;
  if (&m.grammar() != grammar_.get() || !m.AppendStateKey(&key, limits_.max_key_bytes)) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return masks_.contains(key);
}

void MaskCache::Mask(const Matcher& m, uint8_t* allowed) {
  std::shared_ptr<const TokenMask> mask = Mask(m);
  const size_t n = all_ids_.size();
  for (size_t i = 0; i < n; ++i) allowed[i] = static_cast<uint8_t>(((*mask)[i / 64] >> (i % 64)) & 1u);
}

MaskCache::Stats MaskCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenPieces> pieces, size_t max_grammars,
                           MaskCache::Limits mask_limits)
    : pieces_(std::move(pieces)), max_grammars_(max_grammars), mask_limits_(mask_limits) {}

absl::StatusOr<std::shared_ptr<MaskCache>> GrammarCache::Get(const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(text);
    if (it != entries_.end()) {
      it->second.last_use = ++clock_;
      return it->second.cache;
    }
  }
  // Parsed outside the lock (a large grammar takes milliseconds).
  HERD_ASSIGN_OR_RETURN(auto g, Grammar::Parse(text));
  auto cache = std::make_shared<MaskCache>(std::shared_ptr<const Grammar>(std::move(g)), pieces_, mask_limits_);
  std::lock_guard<std::mutex> lock(mu_);
  if (max_grammars_ == 0) return cache;
  auto [it, inserted] = entries_.try_emplace(text);
  if (!inserted) {
    it->second.last_use = ++clock_;
    return it->second.cache;
  }
  it->second = {cache, ++clock_};
  if (entries_.size() > max_grammars_) {
    auto oldest = entries_.begin();
    for (auto e = entries_.begin(); e != entries_.end(); ++e) {
      if (e->second.last_use < oldest->second.last_use) oldest = e;
    }
    entries_.erase(oldest);
  }
  return cache;
}

}  // namespace herd::grammar
