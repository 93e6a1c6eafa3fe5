#include "libs/engine/spec/ngram.h"

#include <algorithm>

namespace herd::engine::spec {
namespace {

bool SameTokens(const std::vector<int32_t>& h, size_t a, size_t b, size_t len) {
  return std::equal(h.begin() + static_cast<ptrdiff_t>(a), h.begin() + static_cast<ptrdiff_t>(a + len),
                    h.begin() + static_cast<ptrdiff_t>(b));
}

// Most recent start j <= j_max with h[j..j+n) == h[L-n..L); -1 if none.
int64_t FindEarlier(const std::vector<int32_t>& h, size_t n, int64_t j_max) {
  const size_t key = h.size() - n;
  const int32_t first = h[key];
  for (int64_t j = j_max; j >= 0; --j) {
    if (h[static_cast<size_t>(j)] == first && SameTokens(h, static_cast<size_t>(j), key, n)) return j;
  }
  return -1;
}

// The check-rate gate of llama.cpp: search only when at least `rate` tokens arrived
// since the previous search.
bool PassGate(bool* checked, size_t* last, size_t len, int32_t rate) {
  if (*checked && len >= *last && len - *last < static_cast<size_t>(rate)) return false;
  *checked = true;
  *last = len;
  return true;
}

}  // namespace

DraftResult NgramSimpleDrafter::Draft(const std::vector<int32_t>& h, const DraftParams& params) {
  (void)params;
  DraftResult r;
  const size_t L = h.size(), n = static_cast<size_t>(n_);
  if (L < n + 1) return r;  // no room for an earlier occurrence
  if (!PassGate(&checked_, &last_check_, L, check_rate_)) return r;
  const int64_t j = FindEarlier(h, n, static_cast<int64_t>(L - n) - 1);
  if (j < 0) return r;
  // The tokens after the occurrence; past the end of the history they continue with
  // the draft itself (the pattern repeats with period L - n - j).
  const size_t begin = static_cast<size_t>(j) + n;
  r.tokens.reserve(static_cast<size_t>(m_));
  for (size_t k = 0; k < static_cast<size_t>(m_); ++k) {
    const size_t i = begin + k;
    r.tokens.push_back(i < L ? h[i] : r.tokens[i - L]);
  }
  return r;
}

size_t NgramMapDrafter::VecHash::operator()(const std::vector<int32_t>& v) const {
  uint64_t x = 1469598103934665603ull;
  for (int32_t t : v) x = (x ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return static_cast<size_t>(x);
}

const NgramMapDrafter::Key* NgramMapDrafter::FindKey(const std::vector<int32_t>& key) const {
  auto it = keys_.find(key);
  return it == keys_.end() ? nullptr : &it->second;
}

DraftResult NgramMapDrafter::Draft(const std::vector<int32_t>& h, const DraftParams& params) {
  (void)params;
  DraftResult r;
  last_value_ = nullptr;
  const size_t L = h.size(), n = static_cast<size_t>(n_), m = static_cast<size_t>(m_);
  if (L < n + m + 1) return r;  // an earlier occurrence needs a whole m-gram after it
  if (!PassGate(&checked_, &last_check_, L, check_rate_)) return r;
  // Most recent earlier occurrence followed by a whole m-gram: j + n + m <= L.
  const int64_t match = FindEarlier(h, n, static_cast<int64_t>(L - n - m));
  if (match < 0) return r;

  std::vector<int32_t> key_tokens(h.end() - static_cast<ptrdiff_t>(n), h.end());
  auto [it, inserted] = keys_.try_emplace(std::move(key_tokens));
  Key& key = it->second;
  if (inserted) {
    for (Value& v : key.values) v.n_accepted = m_;
  }
  key.hits = std::min(key.hits + 1, kNgramMaxCount);
  if (key.hits < min_hits_) return r;

  const size_t key_pos = L - n;
  Value* chosen = nullptr;
  if (!four_values_) {
    // ngram-map-k: the m-gram after the most recent occurrence; value slot 0 keeps the
    // key's accepted count.
    chosen = &key.values[0];
    chosen->pos = match + static_cast<int64_t>(n);
  } else {
    // Count the values of the occurrences not yet seen, up to and including `match`.
    for (int64_t i = key.scanned_to; i <= match; ++i) {
      if (!SameTokens(h, static_cast<size_t>(i), key_pos, n)) continue;
      const int64_t vpos = i + static_cast<int64_t>(n);
      for (Value& v : key.values) {
        if (v.pos < 0) {  // new value in a free slot
          v.pos = vpos;
          v.count = 1;
          v.n_accepted = m_;
          break;
        }
        if (SameTokens(h, static_cast<size_t>(v.pos), static_cast<size_t>(vpos), m)) {
          v.count = std::min(v.count + 1, kNgramMaxCount);
          break;
        }
      }  // all slots taken by other values: this occurrence is not counted
    }
    key.scanned_to = match + 1;
    int top = 0;
    for (int v = 1; v < kNgramMaxValues; ++v) {
      if (key.values[v].count > key.values[top].count) top = v;
    }
    int64_t others = 0;
    for (int v = 0; v < kNgramMaxValues; ++v) {
      if (v != top) others += key.values[v].count;
    }
    if (key.values[top].count == 0) return r;
    if (others > 0 && key.values[top].count < 3 * others) return r;  // not dominant enough
    chosen = &key.values[top];
  }
  const size_t len = std::min(m, static_cast<size_t>(std::max(chosen->n_accepted, 0)));
  const size_t begin = static_cast<size_t>(chosen->pos);
  r.tokens.assign(h.begin() + static_cast<ptrdiff_t>(begin), h.begin() + static_cast<ptrdiff_t>(begin + len));
  if (!r.tokens.empty()) last_value_ = chosen;
  return r;
}

void NgramMapDrafter::Accepted(int32_t n_accepted) {
  if (last_value_ == nullptr) return;
  last_value_->n_accepted = std::clamp(n_accepted, 0, m_);
  last_value_ = nullptr;
}

}  // namespace herd::engine::spec
