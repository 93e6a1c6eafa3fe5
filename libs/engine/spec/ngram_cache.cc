#include "libs/engine/spec/ngram_cache.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/base/mmap.h"

namespace herd::engine::spec {
namespace {

// Draft thresholds of llama.cpp's ngram-cache.cpp, indexed by n-gram size - 1.
constexpr int kMinSampleLax[kNgramCacheMax] = {2, 2, 1, 1};
constexpr int kMinPercentLax[kNgramCacheMax] = {66, 50, 50, 50};
constexpr int kMinSampleStrict[kNgramCacheMax] = {4, 3, 2, 2};
constexpr int kMinPercentStrict[kNgramCacheMax] = {75, 66, 66, 66};

int32_t SatAdd(int32_t a, int32_t b) {
  const int64_t s = static_cast<int64_t>(a) + b;
  return s > INT32_MAX ? INT32_MAX : static_cast<int32_t>(s);
}

// The static cache alone (llama.cpp try_draft(nc_static, ngram_static)).
int32_t TryStatic(const NgramCache& nc_static, const Ngram& ngram) {
  auto it = nc_static.find(ngram);
  if (it == nc_static.end()) return -1;
  int64_t max_count = 0, sum = 0;
  int32_t max_token = -1;
  for (const auto& [token, count] : it->second) {
    if (count > max_count || (count == max_count && token < max_token)) {
      max_token = token;
      max_count = count;
    }
    sum += count;
  }
  if (sum < kMinSampleLax[kNgramCacheStatic - 1]) return -1;
  if (100 * max_count < kMinPercentLax[kNgramCacheStatic - 1] * sum) return -1;
  return max_token;
}

// A primary cache (context or dynamic), longest n-gram first, candidates weighted by
// the static cache (llama.cpp try_draft(nc_primary, ngrams_primary, part_static, ...)).
int32_t TryPrimary(const NgramCache& primary, const std::vector<std::pair<int, Ngram>>& ngrams,
                   const NgramCachePart* part_static, const int* min_sample, const int* min_percent) {
  for (auto g = ngrams.rbegin(); g != ngrams.rend(); ++g) {
    auto it = primary.find(g->second);
    if (it == primary.end()) continue;
    int64_t max_primary = 0, max_static = 0, sum = 0;
    int32_t max_token = -1;
    for (const auto& [token, count] : it->second) {
      int64_t count_static = 1;
      if (part_static != nullptr) {
        auto s = part_static->find(token);
        if (s != part_static->end()) count_static = 100 * static_cast<int64_t>(s->second);
      }
      const int64_t score = count * count_static, best = max_primary * max_static;
      if (score > best || (score == best && max_token >= 0 && token < max_token)) {
        max_token = token;
        max_primary = count;
        max_static = count_static;
      }
      sum += count;
    }
    const int idx = g->first - 1;
    if (sum < min_sample[idx]) continue;
    if (100 * max_primary < min_percent[idx] * sum) continue;
    return max_token;
  }
  return -1;
}

void PutI32(std::string* out, int32_t v) {
  char b[4];
  std::memcpy(b, &v, 4);
  out->append(b, 4);
}

int32_t GetI32(const std::string& s, size_t off) {
  int32_t v;
  std::memcpy(&v, s.data() + off, 4);
  return v;
}

}  // namespace

size_t NgramHash::operator()(const Ngram& g) const {
  // llama.cpp common_ngram_hash_function: Fibonacci hashing of each token, xor-ed.
  size_t h = 0;
  for (int i = 0; i < kNgramCacheMax; ++i)
    h ^= static_cast<size_t>(static_cast<int64_t>(g.tokens[i])) * 11400714819323198485llu;
  return h;
}

void NgramCacheUpdate(NgramCache* cache, int ngram_min, int ngram_max, const std::vector<int32_t>& tokens,
                      int64_t n_new) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  ngram_min = std::max(ngram_min, 1);
  ngram_max = std::min(ngram_max, kNgramCacheMax);
  for (int64_t ngram_size = ngram_min; ngram_size <= ngram_max; ++ngram_size) {
    const int64_t i_start = std::max(size - n_new, ngram_size);
    for (int64_t i = i_start; i < size; ++i) {
      const Ngram ngram(&tokens[static_cast<size_t>(i - ngram_size)], static_cast<int>(ngram_size));
      int32_t& c = (*cache)[ngram][tokens[static_cast<size_t>(i)]];
      c = SatAdd(c, 1);
    }
  }
}

std::vector<int32_t> NgramCacheDraft(const std::vector<int32_t>& inp, int n_draft, int ngram_min, int ngram_max,
                                     const NgramCache& context, const NgramCache& dynamic,
                                     const NgramCache& static_cache) {
  std::vector<int32_t> draft;
  const int64_t L = static_cast<int64_t>(inp.size());
  if (L < kNgramCacheStatic) return draft;
  ngram_min = std::max(ngram_min, 1);
  ngram_max = std::min(ngram_max, kNgramCacheMax);
  auto token_at = [&](int64_t i) { return i < L ? inp[static_cast<size_t>(i)] : draft[static_cast<size_t>(i - L)]; };
  int32_t window[kNgramCacheMax];
  while (static_cast<int>(draft.size()) < n_draft) {
    const int64_t end = L + static_cast<int64_t>(draft.size());  // tokens so far
    for (int j = 0; j < kNgramCacheStatic; ++j) window[j] = token_at(end - kNgramCacheStatic + j);
    const Ngram ngram_static(window, kNgramCacheStatic);
    auto st = static_cache.find(ngram_static);
    const NgramCachePart* part_static = st == static_cache.end() ? nullptr : &st->second;

    std::vector<std::pair<int, Ngram>> ngrams;  // (size, n-gram), ascending size
    for (int s = ngram_min; s <= ngram_max && s <= end; ++s) {
      for (int j = 0; j < s; ++j) window[j] = token_at(end - s + j);
      ngrams.emplace_back(s, Ngram(window, s));
    }
    int32_t token = TryPrimary(context, ngrams, part_static, kMinSampleLax, kMinPercentLax);
    if (token < 0) token = TryPrimary(dynamic, ngrams, part_static, kMinSampleStrict, kMinPercentStrict);
    if (token < 0) token = TryStatic(static_cache, ngram_static);
    if (token < 0) break;
    draft.push_back(token);
  }
  return draft;
}

void NgramCacheMerge(NgramCache* target, const NgramCache& add) {
  for (const auto& [ngram, part] : add) {
    NgramCachePart& dst = (*target)[ngram];
    for (const auto& [token, count] : part) {
      int32_t& c = dst[token];
      c = SatAdd(c, count);
    }
  }
}

std::string NgramCacheSerialize(const NgramCache& cache) {
  std::vector<const std::pair<const Ngram, NgramCachePart>*> items;
  items.reserve(cache.size());
  for (const auto& item : cache) {
    if (!item.second.empty()) items.push_back(&item);
  }
  std::sort(items.begin(), items.end(), [](const auto* a, const auto* b) {
    return std::lexicographical_compare(a->first.tokens, a->first.tokens + kNgramCacheMax, b->first.tokens,
                                        b->first.tokens + kNgramCacheMax);
  });
  std::string out;
  std::vector<std::pair<int32_t, int32_t>> counts;
  for (const auto* item : items) {
    for (int i = 0; i < kNgramCacheMax; ++i) PutI32(&out, item->first.tokens[i]);
    counts.assign(item->second.begin(), item->second.end());
    std::sort(counts.begin(), counts.end());
    PutI32(&out, static_cast<int32_t>(counts.size()));
    for (const auto& [token, count] : counts) {
      PutI32(&out, token);
      PutI32(&out, count);
    }
  }
  return out;
}

absl::StatusOr<NgramCache> NgramCacheParse(const std::string& bytes, const std::string& what) {
  NgramCache cache;
  size_t off = 0;
  const size_t n = bytes.size();
  constexpr size_t kHead = 4 * (kNgramCacheMax + 1);
  while (off < n) {
    if (n - off < kHead) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": truncated record at byte ", off));
    }
    Ngram ngram;
    for (int i = 0; i < kNgramCacheMax; ++i) ngram.tokens[i] = GetI32(bytes, off + 4 * i);
    const int32_t ntokens = GetI32(bytes, off + 4 * kNgramCacheMax);
    if (ntokens < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": record at byte ", off, " has ", ntokens, " tokens (must be >= 1)"));
    }
    const size_t rec_off = off;
    off += kHead;
    if ((n - off) / 8 < static_cast<size_t>(ntokens)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": truncated record at byte ", rec_off));
    }
    NgramCachePart part;
    for (int32_t i = 0; i < ntokens; ++i, off += 8) {
      const int32_t token = GetI32(bytes, off), count = GetI32(bytes, off + 4);
      if (count < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": count ", count, " of token ", token, " at byte ", off, " (must be >= 1)"));
      }
      part.emplace(token, count);
    }
    cache.emplace(ngram, std::move(part));  // like llama.cpp, a repeated n-gram keeps its first record
  }
  return cache;
}

absl::Status NgramCacheSave(const NgramCache& cache, const std::string& path) {
  const std::string bytes = NgramCacheSerialize(cache);
  return WriteFileAtomic(path, bytes.data(), bytes.size());
}

absl::StatusOr<NgramCache> NgramCacheLoad(const std::string& path) {
  auto bytes = ReadFileToString(path);
  if (!bytes.ok()) return bytes.status();
  return NgramCacheParse(*bytes, path);
}

NgramCache NgramCacheCreateStatic(const std::vector<int32_t>& tokens) {
  NgramCache cache;
  NgramCacheUpdate(&cache, kNgramCacheStatic, kNgramCacheStatic, tokens, static_cast<int64_t>(tokens.size()));
  return cache;
}

DraftResult NgramCacheDrafter::Draft(const std::vector<int32_t>& history, const DraftParams& params) {
  DraftResult r;
  if (history.size() < n_seen_) {  // not expected (histories only grow): start over
    context_.clear();
    n_seen_ = 0;
  }
  if (history.size() > n_seen_) {
    NgramCacheUpdate(&context_, kNgramCacheMin, kNgramCacheMax, history,
                     static_cast<int64_t>(history.size() - n_seen_));
    n_seen_ = history.size();
  }
  static const NgramCache kEmpty;
  r.tokens = NgramCacheDraft(history, params.n_max, kNgramCacheMin, kNgramCacheMax, context_,
                             files_.dynamic_cache ? *files_.dynamic_cache : kEmpty,
                             files_.static_cache ? *files_.static_cache : kEmpty);
  return r;
}

}  // namespace herd::engine::spec
