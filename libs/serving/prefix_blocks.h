// Prompt prefixes as chained hashes of fixed-size token blocks, the currency of
// cache-aware routing (vLLM's block hashes for automatic prefix caching; llm-d's KV
// events): a worker reports the hashes of every full block of the prompts its KV cache
// holds, the gateway hashes a request's prompt the same way and counts how many leading
// blocks a worker has. Hash i covers tokens [0, (i+1) * block_tokens), so equal hashes
// mean equal prefixes (up to 64-bit collisions, which only cost routing quality).
#pragma once
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"

namespace herd::serving {

/// Largest block size accepted from a flag or a peer (tokens).
inline constexpr int32_t kMaxPrefixBlockTokens = 4096;

/// Hashes of the full blocks of `tokens` (block_tokens >= 1; a partial last block is not
/// hashed): out[i] = H(tokens[0 .. (i+1)*block_tokens)), computed incrementally with a
/// SplitMix64-style mixer seeded by block_tokens, so the values are the same on every
/// platform and process (gateway and worker must agree). Empty when block_tokens < 1.
std::vector<uint64_t> PrefixBlockHashes(absl::Span<const int32_t> tokens, int32_t block_tokens);

/// Adds PrefixBlockHashes(tokens, block_tokens) to *set.
void AddPrefixBlockHashes(absl::Span<const int32_t> tokens, int32_t block_tokens, absl::flat_hash_set<uint64_t>* set);

/// How many leading entries of `hashes` satisfy `has` (stops at the first miss: a block is
/// only reusable when every block before it is).
template <class Has>
int64_t LeadingBlocks(const std::vector<uint64_t>& hashes, Has&& has) {
  int64_t n = 0;
  while (n < static_cast<int64_t>(hashes.size()) && has(hashes[static_cast<size_t>(n)])) ++n;
  return n;
}

}  // namespace herd::serving
