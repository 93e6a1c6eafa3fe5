// DraftClient against in-process draft workers: the protocol bookkeeping, a worker
// killed mid-stream (empty drafts, never errors; the session moves to another worker
// and drafts resume), a worker that lost the session, and no workers at all.
#include "libs/clients/draft_client.h"

#include <chrono>
#include <set>
#include <thread>

#include "gtest/gtest.h"

#include "libs/clients/draft_source.h"
#include "libs/engine/spec/draft_model.h"
#include "libs/serving/server.h"
#include "libs/tokenizer/tokenizer.h"
#include "services/draft/draft_service.h"
#include "tests/shared_data.h"

namespace herd::draft {
namespace {

using Tokens = std::vector<int32_t>;

struct Worker {
  std::unique_ptr<DraftServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  void Kill() {
    if (server) server->Shutdown(std::chrono::system_clock::now());
    server.reset();
    service.reset();
  }
};

Worker StartWorker(int max_sessions = 16, engine::spec::DraftModel* draft_model = nullptr) {
  DraftServiceOptions o;
  o.defaults.type = engine::spec::SpecType::kNgramSimple;
  o.defaults.ngram_size_n = 2;
  o.defaults.ngram_size_m = 4;
  o.max_sessions = max_sessions;
  o.reaper = false;
  o.resources.draft_model = draft_model;
  Worker w;
  w.service = std::make_unique<DraftServiceImpl>(o);
  serving::GrpcServerOptions g;
  g.address = "127.0.0.1:0";
  int port = 0;
  auto s = serving::StartGrpcServer(g, {w.service.get()}, &port);
  EXPECT_TRUE(s.ok()) << s.status();
  w.server = *std::move(s);
  w.address = "127.0.0.1:" + std::to_string(port);
  return w;
}

DraftClientOptions Opts(const std::vector<std::string>& addrs) {
  DraftClientOptions o;
  o.addresses = addrs;
  o.deadline = std::chrono::milliseconds(5000);
  o.down_for = std::chrono::milliseconds(60000);
  return o;
}

TEST(DraftClient, ProtocolAndStatistics) {
  Worker a = StartWorker();
  DraftClient client(Opts({a.address}));
  herd::v1::SpeculativeConfig cfg;
  cfg.set_type("ngram-simple");
  auto s = client.NewSession("seq-1", "m", cfg);
  s->Append({1, 2, 3, 4, 5, 6, 1, 2});
  DraftReply d = s->Propose(0);
  EXPECT_EQ(d.tokens, (Tokens{3, 4, 5, 6}));
  EXPECT_TRUE(d.error.empty());
  EXPECT_EQ(s->worker(), a.address);
  // The target accepted 3, 4 and produced 9.
  s->Accepted(2);
  s->Append({3, 4, 9});
  d = s->Propose(2);
  EXPECT_TRUE(d.tokens.empty());
  s->Append({1, 2});
  d = s->Propose(2);
  EXPECT_EQ(d.tokens, (Tokens{3, 4}));
  s->Accepted(0);
  EXPECT_EQ(s->stats().type(), "ngram-simple");
  EXPECT_EQ(s->stats().calls(), 3);
  EXPECT_EQ(s->stats().gen_drafts(), 2);
  EXPECT_EQ(s->stats().gen_tokens(), 6);
  EXPECT_EQ(s->stats().acc_drafts(), 1);
  EXPECT_EQ(s->stats().acc_tokens(), 2);
  EXPECT_EQ(a.service->n_sessions(), 1u);
  s.reset();  // ends the session on the worker in the background
  for (int i = 0; i < 200 && a.service->n_sessions() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(a.service->n_sessions(), 0u);
}

TEST(DraftClient, KilledWorkerMeansEmptyDraftsThenAnotherWorker) {
  Worker a = StartWorker(), b = StartWorker();
  DraftClient client(Opts({a.address, b.address}));
  auto s = client.NewSession("seq-kill", "m", herd::v1::SpeculativeConfig());
  s->Append({1, 2, 3, 4, 5, 6, 1, 2});
  ASSERT_EQ(s->Propose(0).tokens, (Tokens{3, 4, 5, 6}));
  s->Accepted(4);
  s->Append({3, 4, 5, 6, 7});
  Worker& serving = s->worker() == a.address ? a : b;
  Worker& other = s->worker() == a.address ? b : a;
  serving.Kill();
  DraftReply d = s->Propose(0);  // the worker is gone: an empty draft, no error
  EXPECT_TRUE(d.tokens.empty());
  EXPECT_FALSE(d.error.empty());
  EXPECT_EQ(s->worker(), other.address);
  s->Append({1, 2});
  d = s->Propose(0);  // the other worker gets the whole history and drafts
  EXPECT_TRUE(d.error.empty()) << d.error;
  EXPECT_EQ(d.tokens, (Tokens{3, 4, 5, 6}));
  EXPECT_EQ(s->history_size(), 15);
  // With every worker gone, drafts stay empty.
  other.Kill();
  for (int i = 0; i < 3; ++i) {
    s->Append({8});
    EXPECT_TRUE(s->Propose(0).tokens.empty());
  }
}

TEST(DraftClient, WorkerThatLostTheSessionIsResentEverything) {
  Worker a = StartWorker(/*max_sessions=*/1);
  DraftClient client(Opts({a.address}));
  auto s1 = client.NewSession("one", "m", herd::v1::SpeculativeConfig());
  auto s2 = client.NewSession("two", "m", herd::v1::SpeculativeConfig());
  s1->Append({1, 2, 3, 4, 5, 6, 1, 2});
  ASSERT_EQ(s1->Propose(0).tokens.size(), 4u);
  s2->Append({7, 8, 9, 7, 8});
  ASSERT_FALSE(s2->Propose(0).tokens.empty());  // evicts "one"
  s1->Accepted(1);
  s1->Append({3, 9});
  s1->Append({1, 2});
  // "one" was evicted: the worker asks for everything and the client resends it at once.
  DraftReply d = s1->Propose(0);
  EXPECT_TRUE(d.error.empty()) << d.error;
  EXPECT_EQ(d.tokens, (Tokens{3, 9, 1, 2}));
}

TEST(DraftClient, NoWorkers) {
  DraftClient client(Opts({}));
  auto s = client.NewSession("x", "m", herd::v1::SpeculativeConfig());
  s->Append({1, 2, 1});
  DraftReply d = s->Propose(0);
  EXPECT_TRUE(d.tokens.empty());
  EXPECT_EQ(d.error, "no draft worker");
}

TEST(DraftClient, BadConfigIsAnEmptyDraft) {
  Worker a = StartWorker();
  DraftClient client(Opts({a.address}));
  herd::v1::SpeculativeConfig cfg;
  cfg.set_ngram_size_n(0);
  auto s = client.NewSession("bad", "m", cfg);
  s->Append({1, 2, 1});
  DraftReply d = s->Propose(0);
  EXPECT_TRUE(d.tokens.empty());
  EXPECT_NE(d.error.find("config.ngram_size_n"), std::string::npos) << d.error;
  EXPECT_EQ(s->worker(), a.address);  // the worker is fine
}

// Draft workers found through DNS ("localhost:PORT"): a name that also resolves to an
// address nobody listens on (::1) costs at most one empty draft.
TEST(DraftClient, WorkersFromDns) {
  Worker a = StartWorker();
  DraftClientOptions o = Opts({});
  o.dns = "localhost:" + a.address.substr(a.address.rfind(':') + 1);
  DraftClient client(o);
  ASSERT_GE(client.n_workers(), 1u);
  auto s = client.NewSession("dns-seq", "m", herd::v1::SpeculativeConfig());
  s->Append({1, 2, 3, 4, 5, 6, 1, 2});
  DraftReply d;
  for (int i = 0; i < 3 && d.tokens.empty(); ++i) d = s->Propose(0);
  EXPECT_EQ(d.tokens, (Tokens{3, 4, 5, 6})) << d.error;
  EXPECT_EQ(s->worker(), a.address);
}

// A worker that cannot run the configuration (FAILED_PRECONDITION: draft-model without
// a draft model) is skipped by that session, which moves to a worker that can.
TEST(DraftClient, WorkerThatRefusesTheConfigurationIsSkipped) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  engine::spec::DraftModelParams dp;
  dp.n_ctx = 256;
  auto dm = engine::spec::DraftModel::Load(shared + "/models/stories260K.gguf", dp);
  ASSERT_TRUE(dm.ok()) << dm.status();
  ASSERT_TRUE((*dm)->AttachTarget((*dm)->vocab()).ok());
  Worker plain = StartWorker(), with_model = StartWorker(16, dm->get());
  herd::v1::SpeculativeConfig cfg;
  cfg.set_type("draft-model");
  cfg.set_draft_p_min(0.0f);
  cfg.set_draft_max(4);
  const std::vector<int32_t> prompt = (*dm)->vocab().Tokenize("Once upon a time", true, false);
  for (const char* id : {"r1", "r2", "r3", "r4"}) {
    DraftClient client(Opts({plain.address, with_model.address}));
    auto s = client.NewSession(id, "m", cfg);
    s->Append(prompt);
    DraftReply d = s->Propose(0);
    if (d.tokens.empty()) {
      EXPECT_NE(d.error, "") << id;
      d = s->Propose(0);  // moved to the worker with the draft model
    }
    EXPECT_EQ(d.tokens.size(), 4u) << id << ": " << d.error;
    EXPECT_EQ(s->worker(), with_model.address) << id;
  }
  // Only refusing workers: the session stops asking (no error, empty drafts).
  DraftClient client(Opts({plain.address}));
  auto s = client.NewSession("r5", "m", cfg);
  s->Append(prompt);
  for (int i = 0; i < 3; ++i) {
    DraftReply d = s->Propose(0);
    EXPECT_TRUE(d.tokens.empty());
    EXPECT_FALSE(d.error.empty());
  }
}

// Sessions spread over two workers; `n` ngram sessions with different histories.
std::vector<std::unique_ptr<DraftSession>> NgramSessions(DraftClient* client, const std::string& prefix, int n) {
  std::vector<std::unique_ptr<DraftSession>> out;
  for (int k = 0; k < n; ++k) {
    out.push_back(client->NewSession(prefix + std::to_string(k), "m", herd::v1::SpeculativeConfig()));
    // 1 2 3 4 5 6 1 2 drafts 3 4 5 6; the tokens differ per session (offset 10 * k).
    Tokens h;
    for (int32_t t : {1, 2, 3, 4, 5, 6, 1, 2}) h.push_back(t + 10 * k);
    out.back()->Append(h);
  }
  return out;
}

std::vector<DraftSession*> Raw(const std::vector<std::unique_ptr<DraftSession>>& v) {
  std::vector<DraftSession*> out;
  for (const auto& s : v) out.push_back(s.get());
  return out;
}

TEST(DraftClient, ProposeBatchAcrossWorkersEqualsPerSessionPropose) {
  Worker a = StartWorker(), b = StartWorker();
  DraftClient client(Opts({a.address, b.address}));
  constexpr int kN = 8;
  auto batched = NgramSessions(&client, "batch-", kN), solo = NgramSessions(&client, "solo-", kN);
  std::vector<int32_t> n_max;
  for (int k = 0; k < kN; ++k) n_max.push_back(k % 3 == 0 ? 2 : 0);
  for (int round = 0; round < 3; ++round) {
    const std::vector<DraftReply> got = client.ProposeBatch(Raw(batched), n_max);
    ASSERT_EQ(got.size(), static_cast<size_t>(kN));
    for (int k = 0; k < kN; ++k) {
      const DraftReply want = solo[static_cast<size_t>(k)]->Propose(n_max[static_cast<size_t>(k)]);
      EXPECT_TRUE(got[static_cast<size_t>(k)].error.empty()) << got[static_cast<size_t>(k)].error;
      EXPECT_EQ(got[static_cast<size_t>(k)].tokens, want.tokens) << "round " << round << " session " << k;
      if (round == 0) {
        EXPECT_EQ(got[static_cast<size_t>(k)].tokens.size(), k % 3 == 0 ? 2u : 4u) << k;
      }
      // The target accepts one token and produces 7 + 10k, then 1 2 again.
      const int32_t n_acc = got[static_cast<size_t>(k)].tokens.empty() ? 0 : 1;
      for (auto* s : {batched[static_cast<size_t>(k)].get(), solo[static_cast<size_t>(k)].get()}) {
        s->Accepted(n_acc);
        Tokens next(got[static_cast<size_t>(k)].tokens.begin(), got[static_cast<size_t>(k)].tokens.begin() + n_acc);
        next.push_back(7 + 10 * k);
        next.push_back(1 + 10 * k);
        next.push_back(2 + 10 * k);
        s->Append(next);
      }
    }
  }
  std::set<std::string> used;
  for (int k = 0; k < kN; ++k) {
    const DraftSession& s = *batched[static_cast<size_t>(k)];
    const DraftSession& o = *solo[static_cast<size_t>(k)];
    used.insert(s.worker());
    EXPECT_EQ(s.stats().calls(), 3);
    EXPECT_EQ(s.stats().calls(), o.stats().calls());
    EXPECT_EQ(s.stats().gen_drafts(), o.stats().gen_drafts());
    EXPECT_EQ(s.stats().gen_tokens(), o.stats().gen_tokens());
    EXPECT_EQ(s.stats().acc_tokens(), o.stats().acc_tokens());
    EXPECT_EQ(s.history_size(), o.history_size());
  }
  EXPECT_EQ(used.size(), 2u) << "the batch should span both workers";
  // A session listed twice: the second entry is an empty draft without effects.
  const std::vector<DraftReply> dup = client.ProposeBatch({batched[0].get(), batched[0].get()}, {0, 0});
  ASSERT_EQ(dup.size(), 2u);
  EXPECT_TRUE(dup[0].error.empty()) << dup[0].error;
  EXPECT_FALSE(dup[0].tokens.empty());
  EXPECT_EQ(dup[1].error, "session listed twice in one batch");
  EXPECT_EQ(batched[0]->stats().calls(), 4);
  EXPECT_TRUE(client.ProposeBatch({}, {}).empty());
}

// The draft after "1 2 3 4 5 6 1 2" + "9 1 2" (offset 10 * k): from the latest earlier
// (1 2), followed by 9 1 2, repeated.
Tokens After(int k) { return Tokens{9, 1 + 10 * k, 2 + 10 * k, 9}; }

TEST(DraftClient, ProposeBatchWithAWorkerStoppedMidTest) {
  Worker a = StartWorker(), b = StartWorker();
  DraftClient client(Opts({a.address, b.address}));
  constexpr int kN = 8;
  auto sessions = NgramSessions(&client, "kill-", kN);
  std::vector<DraftReply> got = client.ProposeBatch(Raw(sessions), std::vector<int32_t>(kN, 0));
  std::vector<std::string> where;
  for (int k = 0; k < kN; ++k) {
    EXPECT_EQ(got[static_cast<size_t>(k)].tokens.size(), 4u) << got[static_cast<size_t>(k)].error;
    where.push_back(sessions[static_cast<size_t>(k)]->worker());
    sessions[static_cast<size_t>(k)]->Accepted(0);
    sessions[static_cast<size_t>(k)]->Append({9, 1 + 10 * k, 2 + 10 * k});
  }
  const std::string killed = a.address, alive = b.address;
  ASSERT_NE(std::count(where.begin(), where.end(), killed), 0) << "some sessions on each worker";
  ASSERT_NE(std::count(where.begin(), where.end(), alive), 0) << "some sessions on each worker";
  a.Kill();
  got = client.ProposeBatch(Raw(sessions), std::vector<int32_t>(kN, 0));
  for (int k = 0; k < kN; ++k) {
    const DraftReply& d = got[static_cast<size_t>(k)];
    if (where[static_cast<size_t>(k)] == killed) {
      EXPECT_TRUE(d.tokens.empty()) << k;
      EXPECT_FALSE(d.error.empty()) << k;
      EXPECT_EQ(sessions[static_cast<size_t>(k)]->worker(), alive) << k;  // moved
    } else {
      EXPECT_TRUE(d.error.empty()) << k << ": " << d.error;
      EXPECT_EQ(d.tokens, After(k)) << k;
    }
  }
  // Next round: the moved sessions send their whole history to the live worker.
  for (int k = 0; k < kN; ++k) {
    sessions[static_cast<size_t>(k)]->Accepted(0);
    sessions[static_cast<size_t>(k)]->Append({3 + 10 * k});  // ... 9 1 2 3: (2 3) was followed by 4 5 6 1
  }
  got = client.ProposeBatch(Raw(sessions), std::vector<int32_t>(kN, 0));
  for (int k = 0; k < kN; ++k) {
    EXPECT_TRUE(got[static_cast<size_t>(k)].error.empty()) << k << ": " << got[static_cast<size_t>(k)].error;
    EXPECT_EQ(got[static_cast<size_t>(k)].tokens, (Tokens{4 + 10 * k, 5 + 10 * k, 6 + 10 * k, 1 + 10 * k})) << k;
    EXPECT_EQ(sessions[static_cast<size_t>(k)]->worker(), alive);
  }
  EXPECT_EQ(b.service->n_sessions(), static_cast<size_t>(kN));
}

// An older draft worker: Propose only (ProposeBatch answers UNIMPLEMENTED).
class ProposeOnlyService final : public herd::v1::Draft::Service {
 public:
  explicit ProposeOnlyService(DraftServiceImpl* impl) : impl_(impl) {}
  grpc::Status Propose(grpc::ServerContext* ctx, const herd::v1::DraftRequest* req,
                       herd::v1::DraftResponse* resp) override {
    return impl_->Propose(ctx, req, resp);
  }

 private:
  DraftServiceImpl* impl_;
};

TEST(DraftClient, ProposeBatchFallsBackToProposeOnOlderWorkers) {
  Worker impl = StartWorker();  // its own server is not used
  ProposeOnlyService old(impl.service.get());
  serving::GrpcServerOptions g;
  g.address = "127.0.0.1:0";
  int port = 0;
  auto server = serving::StartGrpcServer(g, {&old}, &port);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  DraftClient client(Opts({address}));
  constexpr int kN = 3;
  auto sessions = NgramSessions(&client, "old-", kN);
  for (int round = 0; round < 2; ++round) {
    const std::vector<DraftReply> got = client.ProposeBatch(Raw(sessions), std::vector<int32_t>(kN, 0));
    for (int k = 0; k < kN; ++k) {
      const DraftReply& d = got[static_cast<size_t>(k)];
      EXPECT_TRUE(d.error.empty()) << round << " " << k << ": " << d.error;
      const Tokens want = round == 0 ? Tokens{3 + 10 * k, 4 + 10 * k, 5 + 10 * k, 6 + 10 * k} : After(k);
      EXPECT_EQ(d.tokens, want) << round << " " << k;
      EXPECT_EQ(sessions[static_cast<size_t>(k)]->worker(), address);  // not marked down
      sessions[static_cast<size_t>(k)]->Accepted(0);
      sessions[static_cast<size_t>(k)]->Append({9, 1 + 10 * k, 2 + 10 * k});
    }
  }
  EXPECT_EQ(impl.service->n_sessions(), static_cast<size_t>(kN));
  sessions.clear();
  (*server)->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
}

// A slow draft worker: ProposeBatch answers after `delay`.
class SlowService final : public herd::v1::Draft::Service {
 public:
  SlowService(DraftServiceImpl* impl, std::chrono::milliseconds delay) : impl_(impl), delay_(delay) {}
  grpc::Status ProposeBatch(grpc::ServerContext* ctx, const herd::v1::DraftBatchRequest* req,
                            herd::v1::DraftBatchResponse* resp) override {
    std::this_thread::sleep_for(delay_);
    return impl_->ProposeBatch(ctx, req, resp);
  }

 private:
  DraftServiceImpl* impl_;
  std::chrono::milliseconds delay_;
};

// The calls to different workers are in flight at once, under one deadline.
TEST(DraftClient, ProposeBatchCallsWorkersConcurrentlyUnderOneDeadline) {
  constexpr auto kDelay = std::chrono::milliseconds(400);
  Worker impl_a = StartWorker(), impl_b = StartWorker();
  SlowService slow_a(impl_a.service.get(), kDelay), slow_b(impl_b.service.get(), kDelay);
  std::vector<std::unique_ptr<grpc::Server>> servers;
  std::vector<std::string> addresses;
  for (SlowService* svc : {&slow_a, &slow_b}) {
    serving::GrpcServerOptions g;
    g.address = "127.0.0.1:0";
    int port = 0;
    auto server = serving::StartGrpcServer(g, {svc}, &port);
    ASSERT_TRUE(server.ok()) << server.status();
    servers.push_back(*std::move(server));
    addresses.push_back("127.0.0.1:" + std::to_string(port));
  }
  constexpr int kN = 8;
  {
    DraftClient client(Opts(addresses));  // deadline 5 s
    auto sessions = NgramSessions(&client, "slow-", kN);
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<DraftReply> got = client.ProposeBatch(Raw(sessions), std::vector<int32_t>(kN, 0));
    const auto took = std::chrono::steady_clock::now() - t0;
    std::set<std::string> used;
    for (int k = 0; k < kN; ++k) {
      EXPECT_EQ(got[static_cast<size_t>(k)].tokens.size(), 4u) << got[static_cast<size_t>(k)].error;
      used.insert(sessions[static_cast<size_t>(k)]->worker());
    }
    ASSERT_EQ(used.size(), 2u);
    EXPECT_LT(took, 2 * kDelay) << "the two workers' calls should overlap";
  }
  {
    DraftClientOptions o = Opts(addresses);
    o.deadline = std::chrono::milliseconds(100);
    DraftClient client(o);
    auto sessions = NgramSessions(&client, "late-", kN);
    const std::vector<DraftReply> got = client.ProposeBatch(Raw(sessions), std::vector<int32_t>(kN, 0));
    for (int k = 0; k < kN; ++k) {
      EXPECT_TRUE(got[static_cast<size_t>(k)].tokens.empty()) << k;
      EXPECT_EQ(got[static_cast<size_t>(k)].error, "deadline") << k;
      EXPECT_NE(sessions[static_cast<size_t>(k)]->worker(), "") << "a slow worker is kept";
    }
  }
  for (auto& server : servers) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

// With a draft model per worker, one ProposeBatch is one draft-model batch per worker
// (one RPC each), and its drafts equal per-session Propose.
TEST(DraftClient, ProposeBatchIsOneDraftModelBatchPerWorker) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  engine::spec::DraftModelParams dp;
  dp.n_ctx = 512;
  std::vector<std::unique_ptr<engine::spec::DraftModel>> dms;
  for (int i = 0; i < 2; ++i) {
    auto dm = engine::spec::DraftModel::Load(shared + "/models/stories260K.gguf", dp);
    ASSERT_TRUE(dm.ok()) << dm.status();
    ASSERT_TRUE((*dm)->AttachTarget((*dm)->vocab()).ok());
    dms.push_back(*std::move(dm));
  }
  Worker a = StartWorker(64, dms[0].get()), b = StartWorker(64, dms[1].get());
  DraftClient client(Opts({a.address, b.address}));
  herd::v1::SpeculativeConfig cfg;
  cfg.set_type("draft-model");
  cfg.set_draft_p_min(0.0f);
  cfg.set_draft_max(4);
  const std::vector<std::string> texts = {"Once upon a time", "The cat",     "Lily went",
                                          "One day, a boy",   "The sun was", "Tom had a"};
  std::vector<std::unique_ptr<DraftSession>> batched, solo;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Tokens p = dms[0]->vocab().Tokenize(texts[i], true, false);
    batched.push_back(client.NewSession("db" + std::to_string(i), "m", cfg));
    solo.push_back(client.NewSession("ds" + std::to_string(i), "m", cfg));
    batched.back()->Append(p);
    solo.back()->Append(p);
  }
  const int64_t a0 = dms[0]->n_batches(), b0 = dms[1]->n_batches();
  const std::vector<DraftReply> got = client.ProposeBatch(Raw(batched), std::vector<int32_t>(texts.size(), 0));
  int on_a = 0;
  for (const auto& s : batched) on_a += s->worker() == a.address ? 1 : 0;
  EXPECT_EQ(dms[0]->n_batches() - a0, on_a > 0 ? 1 : 0);
  EXPECT_EQ(dms[1]->n_batches() - b0, on_a < static_cast<int>(texts.size()) ? 1 : 0);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_TRUE(got[i].error.empty()) << got[i].error;
    EXPECT_EQ(got[i].tokens.size(), 4u) << texts[i];
    EXPECT_EQ(got[i].tokens, solo[i]->Propose(0).tokens) << texts[i];
  }
  batched.clear();
  solo.clear();
  a.Kill();
  b.Kill();
}

// DraftWorkerSources sharing a DraftClientBatcher are proposed together by
// spec::ProposeAll (the target scheduler's per-pass call): the same drafts as each
// source's own Propose, one ProposeBatch over both workers; a worker that stops gives
// its sources errors (empty drafts) while the others still draft.
TEST(DraftClient, DraftWorkerSourcesAreProposedTogether) {
  Worker a = StartWorker(), b = StartWorker();
  DraftClient client(Opts({a.address, b.address}));
  DraftClientBatcher batcher(&client);
  constexpr int kN = 8;  // "batch-0".."batch-7" hash onto both workers (see above)
  auto batched_sessions = NgramSessions(&client, "batch-", kN), solo = NgramSessions(&client, "solo-", kN);
  std::vector<std::unique_ptr<DraftWorkerSource>> sources;
  for (auto& s : batched_sessions) sources.push_back(std::make_unique<DraftWorkerSource>(std::move(s), &batcher));
  std::vector<engine::spec::DraftJob> jobs(kN);
  for (int k = 0; k < kN; ++k) {
    jobs[static_cast<size_t>(k)].source = sources[static_cast<size_t>(k)].get();
    jobs[static_cast<size_t>(k)].n_max = 3;
    EXPECT_EQ(sources[static_cast<size_t>(k)]->batcher(), &batcher);
  }
  engine::spec::ProposeAll(&jobs);
  std::set<std::string> used;
  for (int k = 0; k < kN; ++k) {
    const auto& r = jobs[static_cast<size_t>(k)].result;
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->tokens, solo[static_cast<size_t>(k)]->Propose(3).tokens) << k;
    EXPECT_EQ(r->tokens.size(), 3u);
    used.insert(sources[static_cast<size_t>(k)]->session()->worker());
    EXPECT_EQ(sources[static_cast<size_t>(k)]->Stats().calls, 1);
  }
  EXPECT_EQ(used.size(), 2u) << "the sources should span both workers";
  // One worker stops: its sources get errors (empty drafts), the others draft.
  const std::string gone = a.address;
  a.Kill();
  for (auto& j : jobs) j.result = engine::spec::DraftResult{};
  engine::spec::ProposeAll(&jobs);
  int failed = 0, ok = 0;
  for (int k = 0; k < kN; ++k) {
    const auto& r = jobs[static_cast<size_t>(k)].result;
    if (r.ok()) {
      ++ok;
    } else {
      ++failed;
      EXPECT_TRUE(absl::IsUnavailable(r.status()) || absl::IsDeadlineExceeded(r.status())) << r.status();
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(ok, 0);
  // Ended sources answer FAILED_PRECONDITION without a call.
  sources[0]->End();
  jobs.resize(1);
  engine::spec::ProposeAll(&jobs);
  EXPECT_TRUE(absl::IsFailedPrecondition(jobs[0].result.status())) << jobs[0].result.status();
}

}  // namespace
}  // namespace herd::draft
