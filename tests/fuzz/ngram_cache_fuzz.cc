// libFuzzer target: the llama.cpp n-gram cache file parser (libs/engine/spec). A file
// that parses must serialize to bytes that parse to the same cache, and serializing that
// again must give the same bytes (the serialization is canonical).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "libs/engine/spec/ngram_cache.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "ngram_cache_fuzz: invariant failed: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace spec = herd::engine::spec;
  auto cache = spec::NgramCacheParse(std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  if (!cache.ok()) return 0;
  const std::string bytes = spec::NgramCacheSerialize(*cache);
  auto again = spec::NgramCacheParse(bytes, "fuzz (re-parse)");
  Check(again.ok(), "serialized cache parses");
  Check(*again == *cache, "re-parsed cache equals the parsed one");
  Check(spec::NgramCacheSerialize(*again) == bytes, "serialization is canonical");
  if (!cache->empty()) {
    std::vector<int32_t> inp = {cache->begin()->first.tokens[0]};
    spec::NgramCacheDraft(inp, 4, 1, 4, *cache, *cache, *cache);
  }
  return 0;
}
