// The draft service in process over 127.0.0.1:0: sessions built from only the new
// tokens, lost-call recovery, EndSession, eviction bounds, errors naming fields,
// metrics, and the draft-model type on stories260K.
#include "services/draft/draft_service.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

#include "libs/serving/server.h"
#include "tests/shared_data.h"

namespace herd::draft {
namespace {

using Tokens = std::vector<int32_t>;

class DraftServiceTest : public ::testing::Test {
 protected:
  void Start(DraftServiceOptions opts) {
    opts.registry = &registry_;
    service_ = std::make_unique<DraftServiceImpl>(opts);
    serving::GrpcServerOptions g;
    g.address = "127.0.0.1:0";
    int port = 0;
    auto server = serving::StartGrpcServer(g, {service_.get()}, &port);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = herd::v1::Draft::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
  // stories260K as a draft model (n_ctx 512) attached to its own vocabulary; null (the test
  // failed) when it cannot be loaded.
  static std::unique_ptr<engine::spec::DraftModel> StoriesDraftModel(const std::string& shared) {
    engine::spec::DraftModelParams dp;
    dp.n_ctx = 512;
    auto dm = engine::spec::DraftModel::Load(shared + "/models/stories260K.gguf", dp);
    EXPECT_TRUE(dm.ok()) << dm.status();
    if (!dm.ok()) return nullptr;
    const absl::Status st = (*dm)->AttachTarget((*dm)->vocab());
    EXPECT_TRUE(st.ok()) << st;
    return st.ok() ? *std::move(dm) : nullptr;
  }
  // Greedy drafting (draft_p_min 0) with `dm` for a target of dm's vocabulary, no reaper.
  static DraftServiceOptions DraftModelOptions(engine::spec::DraftModel* dm) {
    DraftServiceOptions o;
    o.defaults.type = engine::spec::SpecType::kDraftModel;
    o.defaults.draft_p_min = 0.0f;
    o.resources.draft_model = dm;
    o.target_n_vocab = dm->vocab().n_tokens();
    o.reaper = false;
    return o;
  }
  static DraftServiceOptions NgramOptions() {
    DraftServiceOptions o;
    o.defaults.type = engine::spec::SpecType::kNgramSimple;
    o.defaults.ngram_size_n = 2;
    o.defaults.ngram_size_m = 8;
    o.reaper = false;
    return o;
  }
  grpc::Status Propose(const std::string& session, const Tokens& new_tokens, int n_accepted, int64_t start,
                       herd::v1::DraftResponse* resp, const herd::v1::SpeculativeConfig* config = nullptr) {
    herd::v1::DraftRequest req;
    req.set_session_id(session);
    req.mutable_new_tokens()->Assign(new_tokens.begin(), new_tokens.end());
    req.set_n_accepted(n_accepted);
    if (start >= 0) req.set_start(start);
    if (config != nullptr) *req.mutable_config() = *config;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->Propose(&ctx, req, resp);
  }
  static herd::v1::DraftRequest Req(const std::string& session, const Tokens& new_tokens, int n_accepted,
                                    int64_t start) {
    herd::v1::DraftRequest req;
    req.set_session_id(session);
    req.mutable_new_tokens()->Assign(new_tokens.begin(), new_tokens.end());
    req.set_n_accepted(n_accepted);
    if (start >= 0) req.set_start(start);
    return req;
  }
  grpc::Status ProposeBatch(const std::vector<herd::v1::DraftRequest>& reqs, herd::v1::DraftBatchResponse* resp) {
    herd::v1::DraftBatchRequest req;
    for (const auto& r : reqs) *req.add_requests() = r;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->ProposeBatch(&ctx, req, resp);
  }
  static Tokens Toks(const herd::v1::DraftResponse& r) { return Tokens(r.tokens().begin(), r.tokens().end()); }

  serving::Registry registry_;
  std::unique_ptr<DraftServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<herd::v1::Draft::Stub> stub_;
};

const Tokens kPrompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3};

TEST_F(DraftServiceTest, OnlyNewTokensCrossTheWire) {
  Start(NgramOptions());
  herd::v1::DraftResponse r;
  ASSERT_TRUE(Propose("s1", kPrompt, 0, 0, &r).ok());
  EXPECT_EQ(Toks(r), (Tokens{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(r.history_len(), 15);
  EXPECT_EQ(r.stats().type(), "ngram-simple");
  EXPECT_EQ(r.stats().calls(), 1);
  EXPECT_EQ(r.stats().gen_tokens(), 8);
  // The target accepted 4, 5, 6 and sampled 40: only those cross the wire.
  ASSERT_TRUE(Propose("s1", {4, 5, 6, 40}, 3, 15, &r).ok());
  EXPECT_EQ(r.history_len(), 19);
  EXPECT_TRUE(Toks(r).empty());  // (6 40) never seen
  EXPECT_EQ(r.stats().acc_tokens(), 3);
  EXPECT_EQ(r.stats().acc_drafts(), 1);
  ASSERT_TRUE(Propose("s1", {1, 2}, -1, 19, &r).ok());
  // From the latest earlier (1 2), at 12; past the history the draft repeats itself.
  EXPECT_EQ(Toks(r), (Tokens{3, 4, 5, 6, 40, 1, 2, 3}));
  // Another session is independent.
  herd::v1::DraftResponse r2;
  ASSERT_TRUE(Propose("s2", {7, 8, 9, 7, 8}, 0, 0, &r2).ok());
  EXPECT_EQ(Toks(r2), (Tokens{9, 7, 8, 9, 7, 8, 9, 7}));
  EXPECT_EQ(r2.stats().calls(), 1);
  EXPECT_EQ(service_->n_sessions(), 2u);
  // Without `start` new tokens are simply appended.
  ASSERT_TRUE(Propose("s2", {9}, 0, -1, &r2).ok());
  EXPECT_EQ(r2.history_len(), 6);
}

TEST_F(DraftServiceTest, LostCallsResynchronize) {
  Start(NgramOptions());
  herd::v1::DraftResponse r;
  ASSERT_TRUE(Propose("s", kPrompt, 0, 0, &r).ok());
  ASSERT_EQ(r.stats().gen_drafts(), 1);
  // A call whose reply was lost: the worker has the tokens, the caller resends them.
  ASSERT_TRUE(Propose("s", {4, 5}, 2, 15, &r).ok());
  ASSERT_EQ(r.history_len(), 17);
  ASSERT_TRUE(Propose("s", {4, 5, 6, 7}, 0, 15, &r).ok());
  EXPECT_EQ(r.history_len(), 19);        // not appended twice
  EXPECT_EQ(r.stats().acc_tokens(), 2);  // n_accepted of the duplicate ignored
  // A call that never arrived: the worker has fewer tokens and says how many.
  ASSERT_TRUE(Propose("s", {9, 9}, 0, 25, &r).ok());
  EXPECT_TRUE(Toks(r).empty());
  EXPECT_EQ(r.history_len(), 19);
  ASSERT_TRUE(Propose("s", {8, 9, 10, 11, 12, 1, 2, 3}, 0, 19, &r).ok());
  EXPECT_EQ(r.history_len(), 27);
  EXPECT_FALSE(Toks(r).empty());
}

TEST_F(DraftServiceTest, EndSessionForgets) {
  Start(NgramOptions());
  herd::v1::DraftResponse r;
  ASSERT_TRUE(Propose("gone", kPrompt, 0, 0, &r).ok());
  EXPECT_EQ(service_->n_sessions(), 1u);
  herd::v1::EndSessionRequest end;
  end.set_session_id("gone");
  herd::v1::EndSessionResponse er;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->EndSession(&ctx, end, &er).ok());
  EXPECT_EQ(service_->n_sessions(), 0u);
  grpc::ClientContext ctx2;
  EXPECT_TRUE(stub_->EndSession(&ctx2, end, &er).ok());  // unknown: fine
  // The caller's next call finds an empty history and resends everything.
  ASSERT_TRUE(Propose("gone", {4}, 0, 15, &r).ok());
  EXPECT_EQ(r.history_len(), 0);
  EXPECT_TRUE(Toks(r).empty());
}

TEST_F(DraftServiceTest, SessionsAreBoundedLruAndIdle) {
  DraftServiceOptions o = NgramOptions();
  o.max_sessions = 3;
  o.session_idle = std::chrono::milliseconds(200);
  Start(o);
  herd::v1::DraftResponse r;
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Propose("s" + std::to_string(i), kPrompt, 0, 0, &r).ok());
  EXPECT_EQ(service_->n_sessions(), 3u);
  EXPECT_EQ(service_->n_evictions(), 2);
  // s0 and s1 were the least recently used: gone (their next call resynchronizes).
  ASSERT_TRUE(Propose("s0", {4}, 0, 15, &r).ok());
  EXPECT_EQ(r.history_len(), 0);
  ASSERT_TRUE(Propose("s4", {4}, 0, 15, &r).ok());
  EXPECT_EQ(r.history_len(), 16);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_EQ(service_->EvictIdle(), 3u);
  EXPECT_EQ(service_->n_sessions(), 0u);
  const std::string m = registry_.Render();
  EXPECT_NE(m.find("herd_draft_evictions_total{reason=\"lru\"} 3"), std::string::npos) << m;
  EXPECT_NE(m.find("herd_draft_evictions_total{reason=\"idle\"} 3"), std::string::npos) << m;
  EXPECT_NE(m.find("herd_draft_sessions 0"), std::string::npos) << m;
}

TEST_F(DraftServiceTest, TheReaperEvictsIdleSessions) {
  DraftServiceOptions o = NgramOptions();
  o.session_idle = std::chrono::milliseconds(50);
  o.reaper = true;
  Start(o);
  herd::v1::DraftResponse r;
  ASSERT_TRUE(Propose("idle", kPrompt, 0, 0, &r).ok());
  for (int i = 0; i < 100 && service_->n_sessions() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(service_->n_sessions(), 0u);
}

TEST_F(DraftServiceTest, ErrorsNameTheField) {
  DraftServiceOptions o = NgramOptions();
  o.target_n_vocab = 100;
  Start(o);
  herd::v1::DraftResponse r;
  grpc::Status s = Propose("", kPrompt, 0, 0, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("session_id:", 0), 0u) << s.error_message();
  s = Propose("x", {1, 2, 100}, 0, 0, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "new_tokens[2]: token 100 is outside [0, 100)");
  herd::v1::SpeculativeConfig c;
  c.set_type("ngram-map-k");
  c.set_ngram_size_n(0);
  s = Propose("x", kPrompt, 0, 0, &r, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "config.ngram_size_n: 0 is outside 1..1024");
  c.Clear();
  c.set_type("draft-model");
  s = Propose("x", kPrompt, 0, 0, &r, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  c.set_type("bogus");
  s = Propose("x", kPrompt, 0, 0, &r, &c);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message().rfind("config.type:", 0), 0u) << s.error_message();
  EXPECT_EQ(service_->n_sessions(), 0u);  // failed calls leave nothing behind
  EXPECT_NE(registry_.Render().find("herd_draft_errors_total{code=\"INVALID_ARGUMENT\"} 4"), std::string::npos);
}

TEST_F(DraftServiceTest, PerRequestConfigAndMetrics) {
  Start(NgramOptions());
  herd::v1::SpeculativeConfig c;
  c.set_type("ngram-map-k4v");
  c.set_ngram_size_n(1);
  c.set_ngram_size_m(2);
  c.set_draft_max(1);
  herd::v1::DraftResponse r;
  ASSERT_TRUE(Propose("k", {7, 1, 2, 7, 1, 2, 7}, 0, 0, &r, &c).ok());
  EXPECT_EQ(Toks(r), (Tokens{1}));  // cut to draft_max 1
  EXPECT_EQ(r.stats().type(), "ngram-map-k4v");
  // Later calls without a config keep the session's.
  ASSERT_TRUE(Propose("k", {1, 9, 7}, 1, 7, &r).ok());
  EXPECT_EQ(r.stats().type(), "ngram-map-k4v");
  EXPECT_EQ(r.stats().acc_tokens(), 1);
  // A different config rebuilds the drafter; history kept.
  c.set_type("ngram-simple");
  ASSERT_TRUE(Propose("k", {}, 0, 10, &r, &c).ok());
  EXPECT_EQ(r.stats().type(), "ngram-simple");
  EXPECT_EQ(r.history_len(), 10);
  const std::string m = registry_.Render();
  EXPECT_NE(m.find("herd_draft_calls_total{type=\"ngram-map-k4v\"} 2"), std::string::npos) << m;
  EXPECT_NE(m.find("herd_draft_acc_tokens_total{type=\"ngram-map-k4v\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("herd_draft_calls_total{type=\"ngram-simple\"} 1"), std::string::npos) << m;
  EXPECT_NE(m.find("herd_draft_propose_seconds_count{type=\"ngram-map-k4v\"} 2"), std::string::npos) << m;
}

TEST_F(DraftServiceTest, DraftModelType) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  std::unique_ptr<engine::spec::DraftModel> dm = StoriesDraftModel(shared);
  ASSERT_NE(dm, nullptr);
  DraftServiceOptions o = DraftModelOptions(dm.get());
  o.target_model = "stories260K";
  Start(o);
  const Tokens prompt = dm->vocab().Tokenize("Once upon a time", true, false);
  herd::v1::DraftRequest req;
  req.set_session_id("dm");
  req.set_model("stories260K");
  req.mutable_new_tokens()->Assign(prompt.begin(), prompt.end());
  req.set_start(0);
  req.set_n_max(5);
  herd::v1::DraftResponse r;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Propose(&ctx, req, &r).ok());
  }
  EXPECT_EQ(r.tokens_size(), 5);
  EXPECT_EQ(r.probs_size(), 0);  // greedy: deterministic
  EXPECT_EQ(r.stats().type(), "draft-model");
  // A caller's deadline that leaves no time for a draft step: the draft is the one token
  // the history's evaluation gives, the first of the full draft (not an error, not none).
  {
    herd::v1::DraftRequest late = req;
    late.set_session_id("dm-late");
    herd::v1::DraftResponse lr;
    ASSERT_TRUE(service_->DoPropose(late, &lr, std::chrono::system_clock::now()).ok());
    ASSERT_EQ(lr.tokens_size(), 1);
    EXPECT_EQ(lr.tokens(0), r.tokens(0));
  }
  // Sampled drafting returns the distributions.
  req.set_session_id("dm-sampled");
  req.set_temperature(0.7f);
  req.set_seed(3);
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Propose(&ctx, req, &r).ok());
  }
  EXPECT_EQ(r.tokens_size(), 5);
  ASSERT_EQ(r.probs_size(), 5);
  EXPECT_EQ(r.probs(0).ids_size(), r.probs(0).p_size());
  // Another target model is refused.
  req.set_session_id("other");
  req.set_model("llama-2-tiny-random");
  {
    grpc::ClientContext ctx;
    grpc::Status s = stub_->Propose(&ctx, req, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_EQ(s.error_message().rfind("model:", 0), 0u) << s.error_message();
  }
  // Ending the sessions frees the draft model's KV cells.
  for (const char* id : {"dm", "dm-sampled", "dm-late"}) {
    herd::v1::EndSessionRequest end;
    end.set_session_id(id);
    herd::v1::EndSessionResponse er;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->EndSession(&ctx, end, &er).ok());
  }
  EXPECT_EQ(dm->n_cached_seqs(), 0u);
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_.reset();
  service_.reset();  // sessions (drafters) go before the draft model
}

TEST_F(DraftServiceTest, ProposeBatchAnswersEachRequestInOrder) {
  DraftServiceOptions o = NgramOptions();
  o.target_n_vocab = 100;
  Start(o);
  herd::v1::DraftBatchResponse b;
  ASSERT_TRUE(ProposeBatch({Req("s1", kPrompt, 0, 0), Req("bad", {1, 2, 100}, 0, 0), Req("s2", {7, 8, 9, 7, 8}, 0, 0),
                            Req("s1", {4}, 0, 15), Req("", {1}, 0, 0)},
                           &b)
                  .ok());
  ASSERT_EQ(b.items_size(), 5);
  EXPECT_EQ(b.items(0).code(), 0) << b.items(0).error();
  EXPECT_EQ(Toks(b.items(0).response()), (Tokens{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(b.items(0).response().history_len(), 15);
  EXPECT_EQ(b.items(1).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(b.items(1).error(), "requests[1].new_tokens[2]: token 100 is outside [0, 100)");
  EXPECT_FALSE(b.items(1).has_response());
  EXPECT_EQ(b.items(2).code(), 0) << b.items(2).error();
  EXPECT_EQ(Toks(b.items(2).response()), (Tokens{9, 7, 8, 9, 7, 8, 9, 7}));
  EXPECT_EQ(b.items(3).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(b.items(3).error(), "requests[3].session_id: \"s1\" is already requests[0]");
  EXPECT_EQ(b.items(4).code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(b.items(4).error(), "requests[4].session_id: must not be empty");
  EXPECT_EQ(service_->n_sessions(), 2u);
  // The next batch carries only new tokens, n_accepted and lost-call recovery per item.
  ASSERT_TRUE(ProposeBatch({Req("s1", {4, 5, 6, 40}, 3, 15), Req("s2", {9}, 0, 9)}, &b).ok());
  ASSERT_EQ(b.items_size(), 2);
  EXPECT_EQ(b.items(0).code(), 0);
  EXPECT_EQ(b.items(0).response().history_len(), 19);
  EXPECT_EQ(b.items(0).response().stats().acc_tokens(), 3);
  EXPECT_EQ(b.items(0).response().stats().calls(), 2);
  EXPECT_EQ(b.items(1).code(), 0);
  EXPECT_EQ(b.items(1).response().history_len(), 5);  // it has 5, not 9: resend from there
  EXPECT_TRUE(Toks(b.items(1).response()).empty());
  // Same metrics as Propose, per item.
  const std::string m = registry_.Render();
  EXPECT_NE(m.find("herd_draft_calls_total{type=\"ngram-simple\"} 3"), std::string::npos) << m;
  EXPECT_NE(m.find("herd_draft_errors_total{code=\"INVALID_ARGUMENT\"} 3"), std::string::npos) << m;
  EXPECT_NE(m.find("herd_draft_propose_seconds_count{type=\"ngram-simple\"} 4"), std::string::npos) << m;
  EXPECT_NE(m.find("herd_draft_resyncs_total 1"), std::string::npos) << m;
}

TEST_F(DraftServiceTest, ProposeBatchIsBounded) {
  Start(NgramOptions());
  herd::v1::DraftBatchResponse b;
  ASSERT_TRUE(ProposeBatch({}, &b).ok());
  EXPECT_EQ(b.items_size(), 0);
  std::vector<herd::v1::DraftRequest> many;
  for (int i = 0; i <= kMaxBatchRequests; ++i) many.push_back(Req("s" + std::to_string(i), kPrompt, 0, 0));
  grpc::Status s = ProposeBatch(many, &b);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(), "requests: 257 requests, more than 256");
  EXPECT_EQ(service_->n_sessions(), 0u);
  many.pop_back();
  ASSERT_TRUE(ProposeBatch(many, &b).ok());
  EXPECT_EQ(b.items_size(), kMaxBatchRequests);
  EXPECT_EQ(Toks(b.items(255).response()), (Tokens{4, 5, 6, 7, 8, 9, 10, 11}));
}

// Draft-model items of one ProposeBatch are drafted in one DraftModel batch and equal
// what Propose gives each session; an n-gram item in the same call runs its drafter.
TEST_F(DraftServiceTest, ProposeBatchDraftsDraftModelItemsInOneBatch) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  std::unique_ptr<engine::spec::DraftModel> dm = StoriesDraftModel(shared);
  ASSERT_NE(dm, nullptr);
  DraftServiceOptions o = DraftModelOptions(dm.get());
  Start(o);
  const std::vector<std::string> texts = {"Once upon a time", "The little dog", "Lily and Tom went to the park",
                                          "One day"};
  std::vector<herd::v1::DraftRequest> reqs;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Tokens p = dm->vocab().Tokenize(texts[i], true, false);
    reqs.push_back(Req("b" + std::to_string(i), p, 0, 0));
    reqs.back().set_n_max(static_cast<int>(3 + i));
  }
  herd::v1::DraftRequest ngram = Req("ngram", kPrompt, 0, 0);
  ngram.mutable_config()->set_type("ngram-simple");
  ngram.mutable_config()->set_ngram_size_n(2);
  ngram.mutable_config()->set_ngram_size_m(8);
  std::vector<herd::v1::DraftRequest> all = reqs;
  all.push_back(ngram);
  const int64_t batches = dm->n_batches();
  herd::v1::DraftBatchResponse b;
  ASSERT_TRUE(ProposeBatch(all, &b).ok());
  EXPECT_EQ(dm->n_batches(), batches + 1);  // one batch for the four sessions
  ASSERT_EQ(b.items_size(), 5);
  for (size_t i = 0; i < reqs.size(); ++i) {
    const herd::v1::DraftBatchItem& it = b.items(static_cast<int>(i));
    ASSERT_EQ(it.code(), 0) << it.error();
    EXPECT_EQ(it.response().tokens_size(), static_cast<int>(3 + i));
    EXPECT_EQ(it.response().stats().type(), "draft-model");
    // The same request alone, on a fresh session: the same draft.
    herd::v1::DraftRequest solo = reqs[i];
    solo.set_session_id("solo" + std::to_string(i));
    herd::v1::DraftResponse r;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->Propose(&ctx, solo, &r).ok());
    EXPECT_EQ(Toks(r), Toks(it.response())) << texts[i];
  }
  EXPECT_EQ(b.items(4).code(), 0) << b.items(4).error();
  EXPECT_EQ(Toks(b.items(4).response()), (Tokens{4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(b.items(4).response().stats().type(), "ngram-simple");
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server_.reset();
  service_.reset();  // sessions (drafters) go before the draft model
}

// Concurrent calls whose batches share sessions, in different orders, neither deadlock
// nor interleave inside a session: every call's tokens land, one call at a time.
TEST_F(DraftServiceTest, ConcurrentBatchesSharingSessions) {
  Start(NgramOptions());
  constexpr int kThreads = 4, kCalls = 20, kSessions = 6;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        std::vector<herd::v1::DraftRequest> reqs;
        for (int k = 0; k < kSessions; ++k) {
          const int id = (t % 2 == 0) ? k : kSessions - 1 - k;  // opposite orders
          reqs.push_back(Req("c" + std::to_string(id), {1, 2, 3}, -1, -1));
        }
        herd::v1::DraftBatchResponse b;
        if (c % 5 == 4) {  // a plain Propose now and then
          herd::v1::DraftResponse r;
          if (!Propose(reqs[0].session_id(), {1, 2, 3}, -1, -1, &r).ok()) ++failures;
          reqs.erase(reqs.begin());
        }
        if (!ProposeBatch(reqs, &b).ok() || b.items_size() != static_cast<int>(reqs.size())) {
          ++failures;
          continue;
        }
        for (const auto& item : b.items()) failures += item.code() == 0 ? 0 : 1;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  herd::v1::DraftBatchResponse b;
  std::vector<herd::v1::DraftRequest> reqs;
  for (int k = 0; k < kSessions; ++k) reqs.push_back(Req("c" + std::to_string(k), {}, -1, -1));
  ASSERT_TRUE(ProposeBatch(reqs, &b).ok());
  for (int k = 0; k < kSessions; ++k) {
    EXPECT_EQ(b.items(k).response().history_len(), 3 * kThreads * kCalls) << k;
    EXPECT_EQ(b.items(k).response().stats().calls(), kThreads * kCalls + 1) << k;
  }
}

}  // namespace
}  // namespace herd::draft
