#include "libs/serving/prefix_blocks.h"

namespace herd::serving {
namespace {

// SplitMix64's finalizer (Steele, Lea, Flood 2014).
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

std::vector<uint64_t> PrefixBlockHashes(absl::Span<const int32_t> tokens, int32_t block_tokens) {
  std::vector<uint64_t> out;
  if (block_tokens < 1) return out;
  const size_t b = static_cast<size_t>(block_tokens);
  out.reserve(tokens.size() / b);
  uint64_t h = Mix(0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(block_tokens));
  for (size_t i = 0; i + b <= tokens.size(); i += b) {
    for (size_t j = i; j < i + b; ++j) h = Mix(h + 0x9e3779b97f4a7c15ULL + static_cast<uint32_t>(tokens[j]));
    out.push_back(h);
  }
  return out;
}

void AddPrefixBlockHashes(absl::Span<const int32_t> tokens, int32_t block_tokens, absl::flat_hash_set<uint64_t>* set) {
  for (uint64_t h : PrefixBlockHashes(tokens, block_tokens)) set->insert(h);
}

}  // namespace herd::serving
