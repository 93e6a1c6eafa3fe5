// GrammarCache / MaskCache shared by threads (the worker's request threads parse and the
// scheduler masks): every mask equals Matcher::CheckTokens, the caches stay bounded, and
// nothing races (run under --config=tsan, 20 times).
#include "libs/grammar/mask_cache.h"

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace herd::grammar {
namespace {

std::shared_ptr<const TokenPieces> Pieces() {
  std::vector<std::string> texts = {"<eos>"};
  std::vector<bool> eog = {true};
  const char* parts[] = {"a", "b", "{", "}", "\"", ",", ":", "1", "23", "ab", "\"a", "\",", "true", " ", "x\"}"};
  for (int i = 0; i < 600; ++i) {
    texts.push_back(std::string(parts[i % 15]) + (i >= 15 ? parts[(i / 15) % 15] : ""));
    eog.push_back(false);
  }
  return TokenPieces::Create(texts, eog);
}

TEST(MaskCacheThreads, SharedCachesGiveCheckTokensMasks) {
  auto pieces = Pieces();
  GrammarCache grammars(pieces, /*max_grammars=*/2, MaskCache::Limits{8, 1 << 16});
  const std::string kGrammars[] = {
      R"(root ::= "{" ( "\"" [a-z]* "\"" ":" ( [0-9]+ | "true" ) ( "," "\"" [a-z]* "\"" ":" [0-9]+ )* )? "}")",
      R"(root ::= ( "a" | "b" | " " )* "x")",
      R"(root ::= "\"" [^"]* "\"" ( "," root )?)",
  };
  std::atomic<int> mismatches{0}, steps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<uint32_t>(t));
      std::vector<int32_t> all(static_cast<size_t>(pieces->n_tokens()));
      for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int32_t>(i);
      std::vector<uint8_t> want(all.size()), got(all.size());
      for (int walk = 0; walk < 30; ++walk) {
        auto cache = grammars.Get(kGrammars[rng() % 3]);
        if (!cache.ok()) {
          ++mismatches;
          return;
        }
        auto m = Matcher::Create((*cache)->grammar());
        if (!m.ok()) return;
        for (int i = 0; i < 20; ++i) {
          m->CheckTokens(*pieces, all.data(), all.size(), want.data());
          (*cache)->Mask(*m, got.data());
          if (want != got) ++mismatches;
          std::vector<int32_t> ok;
          for (size_t k = 1; k < all.size(); ++k) {
            if (want[k]) ok.push_back(static_cast<int32_t>(k));
          }
          if (ok.empty() || !m->AcceptToken(*pieces, ok[rng() % ok.size()]).ok()) break;
          ++steps;
        }
        EXPECT_LE((*cache)->stats().entries, 8u);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(steps.load(), 400);
}

}  // namespace
}  // namespace herd::grammar
