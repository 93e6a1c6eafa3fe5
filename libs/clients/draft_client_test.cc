// DraftClient against in-process draft workers: the protocol bookkeeping, a worker
// killed mid-stream (empty drafts, never errors; the session moves to another worker
// and drafts resume), a worker that lost the session, and no workers at all.
#include "libs/clients/draft_client.h"

#include <chrono>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace herd::draft
