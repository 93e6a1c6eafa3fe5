// Engine tests on the real stories260K model: batched prompt processing equals
// token-by-token, several sequences in one batch equal each one alone, chunking
// by n_batch changes nothing, the KV cache bookkeeping, and bad batches are
// rejected without touching the cache.
#include "libs/engine/engine.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"

namespace herd::engine {
namespace {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shared = SharedDir();
    if (shared.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED";
    auto m = model::Model::Load(shared + "/models/stories260K.gguf");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *std::move(m);
  }
  std::unique_ptr<Engine> Make(int64_t n_ctx, int64_t n_batch, GgmlType kv = GgmlType::F32) {
    EngineParams p;
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.kv_type = kv;
    auto e = Engine::Create(*model_, p, &backend_);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? *std::move(e) : nullptr;
  }
  static double MaxDiff(const float* a, const float* b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
    return m;
  }
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<Backend> backend_owner_ = CpuBackendForTests(2);
  Backend& backend_ = *backend_owner_;
  const std::vector<int32_t> prompt_ = {1, 403, 407, 261, 378, 432, 383, 286};
};

TEST_F(EngineTest, BatchEqualsTokenByTokenAndChunking) {
  auto whole = Make(64, 512);
  Batch b;
  for (size_t i = 0; i < prompt_.size(); ++i) b.Add(prompt_[i], static_cast<int32_t>(i), 0, true);
  ASSERT_TRUE(whole->Decode(b).ok());
  auto chunked = Make(64, 3);
  ASSERT_TRUE(chunked->Decode(b).ok());
  auto single = Make(64, 512);
  const int64_t nv = whole->n_vocab();
  for (size_t i = 0; i < prompt_.size(); ++i) {
    Batch one;
    one.Add(prompt_[i], static_cast<int32_t>(i), 0, true);
    ASSERT_TRUE(single->Decode(one).ok());
    EXPECT_LT(MaxDiff(whole->Logits(static_cast<int64_t>(i)), single->Logits(0), nv), 1e-4) << i;
    EXPECT_LT(MaxDiff(whole->Logits(static_cast<int64_t>(i)), chunked->Logits(static_cast<int64_t>(i)), nv), 1e-5) << i;
  }
}

TEST_F(EngineTest, SequencesInOneBatchEqualEachAlone) {
  auto e = Make(128, 512);
  const std::vector<int32_t> other = {1, 500, 42, 7};
  Batch b;
  for (size_t i = 0; i < prompt_.size(); ++i) b.Add(prompt_[i], static_cast<int32_t>(i), 0, i + 1 == prompt_.size());
  for (size_t i = 0; i < other.size(); ++i) b.Add(other[i], static_cast<int32_t>(i), 1, i + 1 == other.size());
  ASSERT_TRUE(e->Decode(b).ok());
  ASSERT_EQ(e->n_outputs(), 2);
  std::vector<float> l0(e->Logits(0), e->Logits(0) + e->n_vocab()), l1(e->Logits(1), e->Logits(1) + e->n_vocab());
  EXPECT_EQ(e->kv().used(), static_cast<int64_t>(prompt_.size() + other.size()));
  EXPECT_EQ(e->kv().SeqPosMax(1), 3);

  auto solo = Make(128, 512);
  Batch s;
  for (size_t i = 0; i < other.size(); ++i) s.Add(other[i], static_cast<int32_t>(i), 0, i + 1 == other.size());
  ASSERT_TRUE(solo->Decode(s).ok());
  EXPECT_LT(MaxDiff(l1.data(), solo->Logits(0), e->n_vocab()), 1e-5);

  // Removing sequence 1 frees exactly its cells; sequence 0 continues unaffected.
  e->kv().SeqRemove(1, 0, -1);
  EXPECT_EQ(e->kv().used(), static_cast<int64_t>(prompt_.size()));
  EXPECT_EQ(e->kv().SeqPosMax(1), -1);
}

TEST_F(EngineTest, BadBatchesAreRejectedAndLeaveTheCacheAlone) {
  auto e = Make(8, 512);
  Batch bad;
  bad.Add(512, 0, 0, true);  // n_vocab is 512
  absl::Status s = e->Decode(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("512"), std::string::npos);
  Batch neg;
  neg.Add(1, -1, 0, true);
  EXPECT_EQ(e->Decode(neg).code(), absl::StatusCode::kInvalidArgument);
  Batch full;
  for (int i = 0; i < 9; ++i) full.Add(1, i, 0, false);
  EXPECT_EQ(e->Decode(full).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(e->kv().used(), 0);
}

TEST_F(EngineTest, MaskFollowsSequencesAndPositions) {
  auto e = Make(8, 512);
  Batch b;
  b.Add(1, 0, 0, false);
  b.Add(1, 0, 1, false);
  b.Add(2, 1, 0, true);
  ASSERT_TRUE(e->Decode(b).ok());
  std::vector<float> mask(3 * 2);
  e->kv().FillMask({0, 1}, {1, 0}, 3, mask.data());
  const float ninf = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(mask[0], 0.0f);  // seq 0 pos 1 sees cell 0 (seq 0, pos 0)
  EXPECT_EQ(mask[1], ninf);  // not cell 1 (seq 1)
  EXPECT_EQ(mask[2], 0.0f);  // and itself at cell 2
  EXPECT_EQ(mask[3], ninf);
  EXPECT_EQ(mask[4], 0.0f);  // seq 1 pos 0 sees only cell 1
  EXPECT_EQ(mask[5], ninf);
  // Several tokens of one sequence (a prompt chunk), interleaved with another's: each sees
  // its sequence's cells up to its own position; with ALiBi, minus the distance.
  std::vector<float> chunk(3 * 3);
  e->kv().FillMask({0, 1, 0}, {0, 0, 1}, 3, chunk.data(), /*alibi=*/true);
  EXPECT_EQ(chunk, (std::vector<float>{-0.0f, ninf, ninf, ninf, -0.0f, ninf, -1.0f, ninf, -0.0f}));
}

// SetSeqRange: a sequence's cells come from its own region, lowest first, in batch
// order; a full region is RESOURCE_EXHAUSTED with nothing changed; unrestricted
// sequences keep taking the lowest free cells of the whole cache.
TEST_F(EngineTest, SequenceCellRanges) {
  auto e = Make(16, 512);
  KvCache& kv = e->kv();
  kv.SetSeqRange(0, 0, 4);
  kv.SetSeqRange(1, 8, 12);
  auto a = kv.Allocate({1, 0, 1, 0}, {0, 0, 1, 1});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (std::vector<int32_t>{8, 0, 9, 1}));
  // Rejected tail cells of sequence 0 go back to it, in position order.
  kv.SeqRemove(0, 1, -1);
  auto b = kv.Allocate({0, 0, 0}, {1, 2, 3});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, (std::vector<int32_t>{1, 2, 3}));
  const int64_t used = kv.used();
  auto full = kv.Allocate({1, 0}, {2, 4});  // sequence 0's region (cells 0..3) is full
  EXPECT_TRUE(absl::IsResourceExhausted(full.status())) << full.status();
  EXPECT_EQ(kv.used(), used);
  auto c = kv.Allocate({1}, {2});  // nothing was kept from the failed call
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, std::vector<int32_t>{10});
  auto d = kv.Allocate({2}, {0});  // unrestricted: the lowest free cell of the cache
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, std::vector<int32_t>{4});
  kv.SetSeqRange(0, 0, 0);  // lifted
  auto f = kv.Allocate({0}, {4});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, std::vector<int32_t>{5});
  kv.Clear();
  auto g = kv.Allocate({1}, {0});  // ranges survive Clear()
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(*g, std::vector<int32_t>{8});
}

// The pool: a sequence's new cells come after its last one (so its cells ascend with
// its positions) while there is room, else the lowest free cell; SeqCopy shares cells
// (stored once, counted once) and CellsOnlyInSeqsFrom counts cells no lower id holds.
TEST_F(EngineTest, PoolKeepsEachSequenceInPositionOrderAndSharesPrefixes) {
  auto e = Make(8, 512);
  KvCache& kv = e->kv();
  auto a = kv.Allocate({0, 0, 1, 1}, {0, 1, 0, 1});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (std::vector<int32_t>{0, 1, 2, 3}));
  kv.SeqRemove(0, 1, -1);  // a rejected draft token: cell 1 is free again
  auto b = kv.Allocate({0}, {1});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, std::vector<int32_t>{1});          // the lowest free cell after its last one (0)
  EXPECT_TRUE(kv.SeqCopyKeepsOrder(1, 5, 0, 1));   // sequence 5 has no cells yet
  EXPECT_FALSE(kv.SeqCopyKeepsOrder(0, 1, 0, 1));  // sequence 0's cell 0 is before 1's cell 3
  EXPECT_TRUE(kv.SeqCopyKeepsOrder(1, 0, 0, 2));   // cells 2, 3 after sequence 0's last (1)
  kv.SeqCopy(1, 5, 0, 1);                          // sequence 5 shares sequence 1's position 0 (cell 2)
  EXPECT_EQ(kv.SeqCells(5), 1);
  EXPECT_EQ(kv.used(), 4);
  EXPECT_EQ(kv.CellsOnlyInSeqsFrom(5), 0);  // cell 2 is also sequence 1's
  kv.SeqRemove(1, 0, -1);
  EXPECT_EQ(kv.used(), 3);  // cell 2 stays: sequence 5 holds it
  EXPECT_EQ(kv.CellsOnlyInSeqsFrom(5), 1);
  auto c = kv.Allocate({5, 5}, {1, 2});  // after its last cell (2), lowest free first
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (std::vector<int32_t>{3, 4}));
  std::vector<float> mask(8);
  kv.FillMask({5}, {2}, 8, mask.data());
  const float ninf = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(mask, (std::vector<float>{ninf, ninf, 0, 0, 0, ninf, ninf, ninf}));
  kv.SeqRemove(0, 0, 1);  // frees cell 0
  // Cells 5, 6, 7 after sequence 5's last one, then the lowest free anywhere (0).
  auto d = kv.Allocate({5, 5, 5, 5}, {3, 4, 5, 6});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<int32_t>{5, 6, 7, 0}));
  EXPECT_TRUE(absl::IsResourceExhausted(kv.Allocate({0}, {9}).status()));
}

// Embeddings: pooled vectors equal the pooling of DecodeEmbeddings rows, any n_batch
// (one pass, chunks, one token at a time) gives the same vector, and the temporary
// sequence leaves the KV cache -- and a sequence running beside it -- untouched.
TEST_F(EngineTest, EmbedPoolsHiddenStatesAnyBatchSize) {
  auto whole = Make(64, 512);
  Batch b;
  for (size_t i = 0; i < prompt_.size(); ++i) b.Add(prompt_[i], static_cast<int32_t>(i), 0, true);
  ASSERT_TRUE(whole->DecodeEmbeddings(b).ok());
  const int64_t ne = whole->n_embd(), n = static_cast<int64_t>(prompt_.size());
  ASSERT_EQ(whole->n_embd_outputs(), n);
  EXPECT_EQ(whole->n_outputs(), 0);  // logits untouched
  std::vector<float> rows;
  for (int64_t t = 0; t < n; ++t) rows.insert(rows.end(), whole->Embedding(t), whole->Embedding(t) + ne);
  whole->kv().Clear();
  for (Pooling p : {Pooling::kMean, Pooling::kCls, Pooling::kLast}) {
    auto want = PoolHiddenStates(rows.data(), ne, n, p);
    ASSERT_TRUE(want.ok());
    for (int64_t n_batch : {512, 3, 1}) {
      auto e = Make(64, n_batch);
      auto got = e->Embed(prompt_, p, 0);
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_EQ(static_cast<int64_t>(got->size()), ne);
      EXPECT_LT(MaxDiff(got->data(), want->data(), ne), 1e-4) << PoolingName(p) << " n_batch " << n_batch;
      EXPECT_EQ(e->kv().used(), 0);
    }
  }
  // cls = row 0, last = row n-1 exactly.
  auto cls = whole->Embed(prompt_, Pooling::kCls, 0);
  ASSERT_TRUE(cls.ok());
  EXPECT_LT(MaxDiff(cls->data(), rows.data(), ne), 1e-5);
}

TEST_F(EngineTest, EmbedBesideARunningSequenceChangesNothing) {
  auto e = Make(64, 512);
  auto solo = Make(64, 512);
  Batch b;
  for (size_t i = 0; i < prompt_.size(); ++i) b.Add(prompt_[i], static_cast<int32_t>(i), 0, i + 1 == prompt_.size());
  ASSERT_TRUE(e->Decode(b).ok());
  ASSERT_TRUE(solo->Decode(b).ok());
  const int64_t used = e->kv().used();
  auto emb = e->Embed({1, 500, 42, 7, 9}, Pooling::kMean, 5);
  ASSERT_TRUE(emb.ok()) << emb.status();
  EXPECT_EQ(e->kv().used(), used);
  EXPECT_EQ(e->kv().SeqPosMax(5), -1);
  EXPECT_EQ(e->kv().SeqPosMax(0), static_cast<int32_t>(prompt_.size()) - 1);
  Batch next;
  next.Add(300, static_cast<int32_t>(prompt_.size()), 0, true);
  ASSERT_TRUE(e->Decode(next).ok());
  ASSERT_TRUE(solo->Decode(next).ok());
  EXPECT_LT(MaxDiff(e->Logits(0), solo->Logits(0), e->n_vocab()), 1e-5);
  // Embedding as seq 0 while seq 0 holds cells is refused, nothing changed.
  EXPECT_EQ(e->Embed({1, 2}, Pooling::kLast, 0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(e->kv().used(), used + 1);
}

TEST_F(EngineTest, EmbedErrors) {
  auto e = Make(8, 4);
  EXPECT_EQ(e->Embed({}, Pooling::kMean, 0).status().code(), absl::StatusCode::kInvalidArgument);
  auto too_long = e->Embed(std::vector<int32_t>(9, 1), Pooling::kMean, 0);
  EXPECT_EQ(too_long.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_long.status().message().find("exceed the context of 8"), std::string::npos) << too_long.status();
  EXPECT_EQ(e->Embed({1, 512}, Pooling::kMean, 0).status().code(), absl::StatusCode::kInvalidArgument);
  // Room: 6 of 8 cells taken by seq 0 -> a 3-token embedding does not fit; cache untouched.
  Batch b;
  for (int i = 0; i < 6; ++i) b.Add(1, i, 0, false);
  ASSERT_TRUE(e->Decode(b).ok());
  EXPECT_EQ(e->Embed({1, 2, 3}, Pooling::kMean, 1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(e->kv().used(), 6);
  EXPECT_TRUE(e->Embed({1, 2}, Pooling::kMean, 1).ok());
  EXPECT_EQ(e->kv().used(), 6);
}

TEST(Embedding, NormalizeLikeCommonEmbdNormalize) {
  std::vector<float> v = {3, -4};
  ASSERT_TRUE(NormalizeEmbedding(&v, 2).ok());
  EXPECT_FLOAT_EQ(v[0], 0.6f);
  EXPECT_FLOAT_EQ(v[1], -0.8f);
  v = {3, -4};
  ASSERT_TRUE(NormalizeEmbedding(&v, -1).ok());
  EXPECT_EQ(v, (std::vector<float>{3, -4}));
  ASSERT_TRUE(NormalizeEmbedding(&v, 1).ok());
  EXPECT_FLOAT_EQ(v[0], 3.0f / 7);
  v = {3, -4};
  ASSERT_TRUE(NormalizeEmbedding(&v, 0).ok());
  EXPECT_FLOAT_EQ(v[1], -32760.0f);
  EXPECT_FLOAT_EQ(v[0], 3 * 32760.0f / 4);
  v = {3, -4};
  ASSERT_TRUE(NormalizeEmbedding(&v, 3).ok());
  EXPECT_NEAR(std::fabs(v[0] * v[0] * v[0]) + std::fabs(v[1] * v[1] * v[1]), 1.0, 1e-6);
  v = {0, 0};
  ASSERT_TRUE(NormalizeEmbedding(&v, 2).ok());
  EXPECT_EQ(v, (std::vector<float>{0, 0}));
  EXPECT_EQ(NormalizeEmbedding(&v, -2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParsePooling("cls").ok());
  EXPECT_EQ(ParsePooling("none").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace herd::engine
