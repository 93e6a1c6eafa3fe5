// n-gram statistics for lookup decoding (llama.cpp common/ngram-cache.{h,cpp},
// examples/lookup): for every n-gram of 1..4 tokens, how often each token followed
// it. Three caches feed a draft: the sequence's own context (built as it grows), a
// dynamic cache and a static cache (files, e.g. made from a corpus with
// NgramCacheUpdate + NgramCacheSave, combined with NgramCacheMerge).
//
// Files are byte-compatible with llama.cpp's common_ngram_cache_save / _load
// (llama-lookup-create / -merge / --lookup-cache-static / --lookup-cache-dynamic):
// a sequence of records { int32 ngram[4] (unused slots -1), int32 n, n x { int32
// token, int32 count } }, little-endian, no header.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#include "libs/engine/spec/drafter.h"

namespace herd::engine::spec {

inline constexpr int kNgramCacheMin = 1;     // LLAMA_NGRAM_MIN
inline constexpr int kNgramCacheMax = 4;     // LLAMA_NGRAM_MAX
inline constexpr int kNgramCacheStatic = 2;  // LLAMA_NGRAM_STATIC: n-gram size of static caches

/// Up to kNgramCacheMax tokens; unused slots hold -1 (llama.cpp common_ngram).
struct Ngram {
  int32_t tokens[kNgramCacheMax] = {-1, -1, -1, -1};
  Ngram() = default;
  Ngram(const int32_t* p, int size) {
    for (int i = 0; i < kNgramCacheMax; ++i) tokens[i] = i < size ? p[i] : -1;
  }
  bool operator==(const Ngram& o) const {
    for (int i = 0; i < kNgramCacheMax; ++i) {
      if (tokens[i] != o.tokens[i]) return false;
    }
    return true;
  }
};
struct NgramHash {
  size_t operator()(const Ngram& g) const;
};
/// Following token -> count.
using NgramCachePart = std::unordered_map<int32_t, int32_t>;
/// n-gram -> following-token counts (llama.cpp common_ngram_cache).
using NgramCache = std::unordered_map<Ngram, NgramCachePart, NgramHash>;

/// llama.cpp common_ngram_cache_update: counts, for each n-gram size in
/// [ngram_min, ngram_max], the token after every n-gram that ends among the last
/// `n_new` positions of `tokens` (n_new >= tokens.size() = all). Counts saturate at
/// INT32_MAX.
void NgramCacheUpdate(NgramCache* cache, int ngram_min, int ngram_max, const std::vector<int32_t>& tokens,
                      int64_t n_new);

/// llama.cpp common_ngram_cache_draft: extends `inp` token by token, up to n_draft
/// tokens. At each step the context cache is tried first (lax thresholds: at least
/// {2,2,1,1} samples and {66,50,50,50}% for n-gram sizes 1..4, longest n-gram first),
/// then the dynamic cache (strict: {4,3,2,2} and {75,66,66,66}%), both weighting a
/// candidate by 100x its count in the static cache's 2-gram entry when present; then
/// the static cache alone (>= 2 samples, >= 50%). Stops at the first position with no
/// candidate. Ties go to the lower token id (llama.cpp: hash-map order).
std::vector<int32_t> NgramCacheDraft(const std::vector<int32_t>& inp, int n_draft, int ngram_min, int ngram_max,
                                     const NgramCache& context, const NgramCache& dynamic,
                                     const NgramCache& static_cache);

/// llama.cpp common_ngram_cache_merge: adds every count of `add` to `target`
/// (saturating).
void NgramCacheMerge(NgramCache* target, const NgramCache& add);

/// The llama.cpp file image of `cache` (records sorted by n-gram, tokens by id, so
/// equal caches give equal bytes).
std::string NgramCacheSerialize(const NgramCache& cache);
/// Parses a llama.cpp cache file image. INVALID_ARGUMENT (naming `what` and the byte
/// offset) for a truncated record, a record with no tokens, or a count < 1.
absl::StatusOr<NgramCache> NgramCacheParse(const std::string& bytes, const std::string& what = "ngram cache");
/// Writes the file atomically (temp + fsync + rename). Errors name the path.
absl::Status NgramCacheSave(const NgramCache& cache, const std::string& path);
/// Reads a file written by NgramCacheSave or llama.cpp. Errors name the path.
absl::StatusOr<NgramCache> NgramCacheLoad(const std::string& path);

/// llama-lookup-create: the static cache of a token corpus (2-grams).
NgramCache NgramCacheCreateStatic(const std::vector<int32_t>& tokens);

/// The caches a ngram-cache drafter reads besides its own context (shared, read-only;
/// null = empty).
struct NgramCacheFiles {
  std::shared_ptr<const NgramCache> static_cache;   // --lookup-cache-static
  std::shared_ptr<const NgramCache> dynamic_cache;  // --lookup-cache-dynamic
};

/// ngram-cache (llama.cpp common_speculative_state_ngram_cache / llama-lookup): the
/// context cache (n-grams of 1..4 tokens) grows with the history; drafts of up to
/// n_max tokens come from NgramCacheDraft over the context, dynamic and static caches.
class NgramCacheDrafter : public Drafter {
 public:
  explicit NgramCacheDrafter(NgramCacheFiles files) : files_(std::move(files)) {}
  SpecType type() const override { return SpecType::kNgramCache; }
  DraftResult Draft(const std::vector<int32_t>& history, const DraftParams& params) override;
  /// The sequence's own statistics (e.g. to merge into a dynamic cache at its end).
  const NgramCache& context_cache() const { return context_; }

 private:
  NgramCacheFiles files_;
  NgramCache context_;
  size_t n_seen_ = 0;  // history tokens already counted in context_
};

}  // namespace herd::engine::spec
