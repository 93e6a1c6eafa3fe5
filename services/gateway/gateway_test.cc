// The gateway's own behaviour over in-process fake workers and a fake loader (the
// vocabulary of ../shared/models/stories260K.gguf): routing, streaming, stop strings,
// UTF-8, cancellation, worker death, validation, HTTP, metrics and the CLI.
#include "services/gateway/gateway.h"

#include <cmath>
#include <csignal>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

#include "libs/base/log.h"
#include "libs/gguf/gguf.h"
#include "libs/serving/metrics.h"
#include "libs/serving/server.h"
#include "libs/tokenizer/tokenizer.h"
#include "services/gateway/fakes.h"
#include "services/gateway/http_server.h"
#include "services/gateway/text_stream.h"
#include "tests/shared_data.h"
#include "tests/shared_vocab.h"
#include "tools/herd/commands.h"

namespace herd::gateway {
namespace {

// Debian's cpp-httplib client writes without MSG_NOSIGNAL: when the gateway answers an
// oversized body (413) and closes while the client is still sending it, the write raises
// SIGPIPE, which would kill the whole test binary (exit 141). The client sees the broken
// connection as an error instead.
const bool kSigpipeIgnored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

using testing::FakeLoader;
using testing::FakeWorker;
using testing::FakeWorkerConfig;
using testing::WaitFor;
using json = nlohmann::json;

struct Collected {
  grpc::Status status;
  std::vector<v1::GenerateResponse> msgs;
  std::vector<int32_t> ids;
  std::string text;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
};

// A gateway (gRPC + HTTP) in this process.
struct TestGateway {
  serving::Registry registry;
  std::unique_ptr<Gateway> gw;
  std::unique_ptr<GatewayServiceImpl> svc;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<HttpFrontEnd> http;
  int port = 0, http_port = 0;
  std::unique_ptr<v1::Gateway::Stub> stub;

  ~TestGateway() {
    if (gw) gw->CancelAll();
    if (server) server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (http) http->Stop();
    if (gw) gw->Stop();
  }
};

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    const std::string path = shared_ + "/models/stories260K.gguf";
    auto v = LoadSharedVocab(shared_);
    ASSERT_TRUE(v.ok()) << v.status();
    vocab_ = std::move(*v);
    ASSERT_TRUE(loader_.AddModelFromFile("stories260K", path).ok());
    ASSERT_TRUE(loader_.AddModelFromFile("other", path).ok());
    ASSERT_TRUE(loader_.Start().ok());
  }

  // A fake worker serving `model`; `tweak` edits its configuration.
  FakeWorker* AddWorker(const std::string& model = "stories260K",
                        const std::function<void(FakeWorkerConfig&)>& tweak = nullptr, int port = 0) {
    FakeWorkerConfig c;
    c.model = model;
    if (tweak) tweak(c);
    workers_.push_back(std::make_unique<FakeWorker>(c));
    EXPECT_TRUE(workers_.back()->Start(port).ok());
    return workers_.back().get();
  }

  std::unique_ptr<TestGateway> StartGateway(const std::vector<FakeWorker*>& workers,
                                            const std::function<void(GatewayOptions&)>& tweak = nullptr) {
    auto t = std::make_unique<TestGateway>();
    GatewayOptions o;
    o.loader_address = loader_.address();
    for (FakeWorker* w : workers) o.pool.addresses.push_back(w->address());
    o.pool.poll_interval = absl::Milliseconds(50);
    o.pool.info_timeout = absl::Milliseconds(2000);
    if (tweak) tweak(o);
    t->gw = std::make_unique<Gateway>(o, &t->registry);
    EXPECT_TRUE(t->gw->Start().ok());
    // Every worker live before the test starts (a first Info can time out on a busy
    // machine; poll again until they answer).
    Gateway* gw = t->gw.get();
    if (!workers.empty()) {
      EXPECT_TRUE(WaitFor(
          [&] {
            if (gw->pool().live_count() == static_cast<int>(workers.size())) return true;
            gw->pool().PollNow();
            return gw->pool().live_count() == static_cast<int>(workers.size());
          },
          20000));
    }
    t->svc = std::make_unique<GatewayServiceImpl>(t->gw.get());
    serving::GrpcServerOptions so;
    so.address = "127.0.0.1:0";
    auto server = serving::StartGrpcServer(so, {t->svc.get()}, &t->port);
    EXPECT_TRUE(server.ok()) << server.status();
    t->server = std::move(*server);
    t->http = std::make_unique<HttpFrontEnd>(t->gw.get());
    auto hp = t->http->Start("127.0.0.1", 0);
    EXPECT_TRUE(hp.ok());
    t->http_port = *hp;
    t->stub = v1::Gateway::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", t->port), grpc::InsecureChannelCredentials()));
    return t;
  }

  static Collected Run(TestGateway* t, const v1::GenerateRequest& req, int timeout_ms = 10000) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    auto reader = t->stub->Generate(&ctx, req);
    Collected c;
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
      c.msgs.push_back(r);
      c.ids.insert(c.ids.end(), r.token_ids().begin(), r.token_ids().end());
      c.text += r.text();
      if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        c.finish = r.finish_reason();
        c.usage = r.usage();
      }
    }
    c.status = reader->Finish();
    return c;
  }

  static v1::GenerateRequest Req(const std::string& model = "stories260K",
                                 const std::string& prompt = "Once upon a time", int n = 8) {
    v1::GenerateRequest r;
    r.set_model(model);
    r.set_text(prompt);
    r.set_n_predict(n);
    r.mutable_sampling()->set_temperature(0);
    return r;
  }

  // A fake worker whose script is the tokens of "there was a little girl" (returned in
  // *story), repeated without EOS.
  FakeWorker* AddStoryWorker(std::vector<int32_t>* story) {
    *story = vocab_->Tokenize("there was a little girl", false, false);
    return AddWorker("stories260K", [&](FakeWorkerConfig& c) {
      c.script = *story;
      c.eos_after_script = false;
    });
  }

  // An HTTP client of t's front end (10 s read timeout).
  static httplib::Client HttpClient(const TestGateway& t) {
    httplib::Client cli("127.0.0.1", t.http_port);
    cli.set_read_timeout(10, 0);
    return cli;
  }

  // The text of the first n tokens of `ids`.
  std::string Pieces(const std::vector<int32_t>& ids, size_t n) const {
    std::string text;
    for (size_t i = 0; i < n && i < ids.size(); ++i) text += vocab_->TokenToPiece(ids[i], false);
    return text;
  }

  int32_t Byte(int b) const { return vocab_->TextToToken(absl::StrFormat("<0x%02X>", b)); }

  std::string shared_;
  std::unique_ptr<tokenizer::Vocab> vocab_;
  FakeLoader loader_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

TEST_F(GatewayTest, StreamsTokensTextAndUsage) {
  const std::vector<int32_t> story = vocab_->Tokenize("there was a little girl", false, false);
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) { c.script = story; });
  auto t = StartGateway({w});
  v1::GenerateRequest req = Req("stories260K", "Once upon a time", 64);
  req.mutable_sampling()->set_top_k(7);
  Collected c = Run(t.get(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  std::vector<int32_t> want = story;
  want.push_back(2);  // the fake's EOS
  EXPECT_EQ(c.ids, want);
  EXPECT_EQ(c.text, " there was a little girl");
  EXPECT_EQ(c.finish, v1::FINISH_REASON_EOS);
  EXPECT_EQ(c.usage.prompt_tokens(), 5);
  EXPECT_EQ(c.usage.completion_tokens(), static_cast<int>(want.size()));
  EXPECT_DOUBLE_EQ(c.usage.prompt_ms(), 1.5);
  EXPECT_DOUBLE_EQ(c.usage.generation_ms(), 0.5 * want.size());
  EXPECT_DOUBLE_EQ(c.usage.queue_ms(), 0.25);
  EXPECT_GT(c.usage.total_ms(), 0);
  // Only the last message carries the finish reason and usage.
  for (size_t i = 0; i + 1 < c.msgs.size(); ++i) {
    EXPECT_EQ(c.msgs[i].finish_reason(), v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_FALSE(c.msgs[i].has_usage());
  }
  // What the worker was asked: the tokenized prompt (BOS per the vocabulary), the
  // request's sampling, and one Step for all of n_predict.
  const v1::SessionStart start = w->last_start();
  EXPECT_EQ(std::vector<int32_t>(start.prompt().begin(), start.prompt().end()),
            (std::vector<int32_t>{1, 403, 407, 261, 378}));
  EXPECT_EQ(start.sampling().top_k(), 7);
  EXPECT_EQ(start.sampling().temperature(), 0);
  EXPECT_EQ(w->step_requests(), std::vector<int32_t>{64});
  EXPECT_TRUE(WaitFor([&] { return w->sessions_active() == 0; }));
}

TEST_F(GatewayTest, IgnoreEosAsksAgainAfterAnEosResult) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) { c.script = {300, 301}; });
  auto t = StartGateway({w});
  v1::GenerateRequest req = Req("stories260K", "Once upon a time", 6);
  req.set_ignore_eos(true);
  Collected c = Run(t.get(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, (std::vector<int32_t>{300, 301, 2, 2, 2, 2}));
  EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(w->step_requests(), (std::vector<int32_t>{6, 3, 2, 1}));
  EXPECT_TRUE(w->last_start().ignore_eos());
}

TEST_F(GatewayTest, LengthFinishAndTokenPrompt) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.script = {300, 301};
    c.eos_after_script = false;
  });
  auto t = StartGateway({w});
  v1::GenerateRequest req = Req("stories260K", "", 5);
  req.mutable_tokens()->add_ids(1);
  req.mutable_tokens()->add_ids(403);
  Collected c = Run(t.get(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, (std::vector<int32_t>{300, 301, 300, 301, 300}));
  EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(c.usage.prompt_tokens(), 2);
  EXPECT_EQ(c.usage.completion_tokens(), 5);
  EXPECT_EQ(w->last_start().prompt_size(), 2);
  // An empty text prompt is refused (protocol.md; llama.cpp's server would generate from
  // BOS alone): INVALID_ARGUMENT, and no session is started.
  const int sessions = w->sessions_started();
  Collected e = Run(t.get(), Req("stories260K", "", 2));
  EXPECT_EQ(e.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << e.status.error_message();
  EXPECT_TRUE(absl::StartsWith(e.status.error_message(), "prompt.text: empty")) << e.status.error_message();
  EXPECT_EQ(w->sessions_started(), sessions);
  // n_predict unset: until the context is full (llama.cpp's -1), prompt + completion =
  // n_ctx_seq = 256.
  v1::GenerateRequest d = Req();
  d.clear_n_predict();
  Collected dc = Run(t.get(), d);
  ASSERT_TRUE(dc.status.ok());
  EXPECT_EQ(dc.ids.size() + static_cast<size_t>(dc.usage.prompt_tokens()), 256u);
  EXPECT_EQ(dc.finish, v1::FINISH_REASON_LENGTH);
}

TEST_F(GatewayTest, NPredictBeyondTheSequenceContextEndsWithLength) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.n_ctx = 1024;
    c.n_ctx_seq = 20;
    c.eos_after_script = false;
  });
  auto t = StartGateway({w});
  Collected c = Run(t.get(), Req("stories260K", "Once upon a time", 1000));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(c.ids.size(), 15u);
}

TEST_F(GatewayTest, ContextFullEndsWithLength) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.n_ctx_seq = 10;
    c.eos_after_script = false;
  });
  auto t = StartGateway({w});
  Collected c = Run(t.get(), Req("stories260K", "Once upon a time", -1));  // 5 prompt tokens
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(c.ids.size(), 5u);
}

TEST_F(GatewayTest, RoutesByModel) {
  FakeWorker* a = AddWorker("stories260K");
  FakeWorker* b = AddWorker("other", [](FakeWorkerConfig& c) { c.backend = "cuda"; });
  auto t = StartGateway({a, b});
  ASSERT_TRUE(Run(t.get(), Req("other")).status.ok());
  EXPECT_EQ(b->sessions_started(), 1);
  EXPECT_EQ(a->sessions_started(), 0);
  ASSERT_TRUE(Run(t.get(), Req("stories260K")).status.ok());
  EXPECT_EQ(a->sessions_started(), 1);
  EXPECT_EQ(b->sessions_started(), 1);

  grpc::ClientContext ctx;
  v1::ListModelsResponse lm;
  ASSERT_TRUE(t->stub->ListModels(&ctx, v1::ListModelsRequest(), &lm).ok());
  ASSERT_EQ(lm.models_size(), 2);
  EXPECT_EQ(lm.models(0).name(), "other");
  EXPECT_EQ(lm.models(0).workers(), 1);
  EXPECT_EQ(lm.models(0).backends(0), "cuda");
  EXPECT_EQ(lm.models(1).name(), "stories260K");
  EXPECT_EQ(lm.models(1).n_ctx(), 256);
  EXPECT_EQ(lm.models(1).n_vocab(), 512);
  EXPECT_EQ(lm.models(1).architecture(), "llama");
}

TEST_F(GatewayTest, RoutesToTheLeastLoadedWorker) {
  FakeWorker* busy = AddWorker("stories260K", [](FakeWorkerConfig& c) { c.active = 5; });
  // Most of its cells hold cached prefixes: they count, so new prefixes go elsewhere.
  FakeWorker* idle_full_kv = AddWorker("stories260K", [](FakeWorkerConfig& c) {
    c.active = 1;
    c.kv_cells_used = 50;
    c.kv_cells_cached = 850;
  });
  FakeWorker* idle = AddWorker("stories260K", [](FakeWorkerConfig& c) {
    c.active = 1;
    c.kv_cells_used = 100;
  });
  // Polls only when the test says so (PollNow), for a deterministic load picture.
  auto t = StartGateway({busy, idle_full_kv, idle}, [](GatewayOptions& o) { o.pool.poll_interval = absl::Hours(1); });
  ASSERT_TRUE(Run(t.get(), Req()).status.ok());
  EXPECT_EQ(idle->sessions_started(), 1);  // least load, then fewest KV cells held
  EXPECT_EQ(busy->sessions_started(), 0);
  EXPECT_EQ(idle_full_kv->sessions_started(), 0);
  // Load changes: the next Info poll moves traffic.
  idle->Update([](FakeWorkerConfig& c) { c.queued = 10; });
  t->gw->pool().PollNow();
  ASSERT_TRUE(Run(t.get(), Req()).status.ok());
  EXPECT_EQ(idle_full_kv->sessions_started(), 1);
  // Sessions opened since the last poll count as load: three concurrent long streams
  // spread over the two lightest workers instead of piling onto one.
  busy->Update([](FakeWorkerConfig& c) { c.active = 0; });
  idle_full_kv->Update([](FakeWorkerConfig& c) { c.active = 0; });
  idle->Update([](FakeWorkerConfig& c) { c.queued = 100; });
  // (The fakes count their open sessions in Info: let the earlier ones close first.)
  ASSERT_TRUE(WaitFor(
      [&] { return busy->sessions_active() + idle_full_kv->sessions_active() + idle->sessions_active() == 0; }));
  t->gw->pool().PollNow();
  const int busy0 = busy->sessions_started(), full0 = idle_full_kv->sessions_started();
  std::vector<std::thread> threads;
  for (auto* w : {busy, idle_full_kv}) w->Update([](FakeWorkerConfig& c) { c.token_delay_ms = 5; });
  for (int i = 0; i < 4; ++i) threads.emplace_back([&] { EXPECT_TRUE(Run(t.get(), Req()).status.ok()); });
  for (auto& th : threads) th.join();
  EXPECT_EQ(busy->sessions_started() - busy0, 2);
  EXPECT_EQ(idle_full_kv->sessions_started() - full0, 2);
}

// A worker whose Info says it is draining (SIGTERM) gets no new sessions, even when it is
// the least loaded; once it reports serving again (a restarted process) it is used again.
TEST_F(GatewayTest, DrainingWorkersGetNoNewSessions) {
  FakeWorker* draining = AddWorker("stories260K");
  FakeWorker* busy = AddWorker("stories260K", [](FakeWorkerConfig& c) { c.active = 6; });
  auto t = StartGateway({draining, busy}, [](GatewayOptions& o) { o.pool.poll_interval = absl::Hours(1); });
  draining->Update([](FakeWorkerConfig& c) { c.draining = true; });  // SIGTERM'd
  t->gw->pool().PollNow();
  EXPECT_EQ(t->gw->pool().live_count(), 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Run(t.get(), Req()).status.ok());
  EXPECT_EQ(draining->sessions_started(), 0);
  EXPECT_EQ(busy->sessions_started(), 3);
  // Every worker draining: UNAVAILABLE naming the model, nothing sent to them.
  busy->Update([](FakeWorkerConfig& c) { c.draining = true; });
  t->gw->pool().PollNow();
  Collected c = Run(t.get(), Req());
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::UNAVAILABLE) << c.status.error_message();
  EXPECT_EQ(draining->sessions_started() + busy->sessions_started(), 3);
  draining->Update([](FakeWorkerConfig& c2) { c2.draining = false; });
  t->gw->pool().PollNow();
  ASSERT_TRUE(Run(t.get(), Req()).status.ok());
  EXPECT_EQ(draining->sessions_started(), 1);
}

// A live worker whose Info misses the poll deadline (busy: its passes run long) stays in
// rotation for two polls in a row and serves; the third miss takes it out; an answer
// brings it back. A refused Info (UNAVAILABLE) takes it out at once.
TEST_F(GatewayTest, SlowInfoKeepsABusyWorkerLiveForTwoPolls) {
  FakeWorker* w = AddWorker("stories260K");
  auto t = StartGateway({w}, [](GatewayOptions& o) {
    o.pool.poll_interval = absl::Hours(1);
    o.pool.info_timeout = absl::Milliseconds(500);
  });
  EXPECT_EQ(t->gw->pool().live_count(), 1);
  w->Update([](FakeWorkerConfig& c) { c.info_delay_ms = 2000; });
  for (int i = 0; i < 2; ++i) {
    t->gw->pool().PollNow();
    EXPECT_EQ(t->gw->pool().live_count(), 1) << "slow poll " << i + 1;
    EXPECT_TRUE(Run(t.get(), Req()).status.ok());
  }
  t->gw->pool().PollNow();
  EXPECT_EQ(t->gw->pool().live_count(), 0);
  Collected c = Run(t.get(), Req());
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::UNAVAILABLE) << c.status.error_message();
  w->Update([](FakeWorkerConfig& cfg) { cfg.info_delay_ms = 0; });
  t->gw->pool().PollNow();
  EXPECT_EQ(t->gw->pool().live_count(), 1);
  EXPECT_TRUE(Run(t.get(), Req()).status.ok());
  w->Update([](FakeWorkerConfig& cfg) { cfg.info_fails = true; });
  t->gw->pool().PollNow();
  EXPECT_EQ(t->gw->pool().live_count(), 0) << "an Info that fails (not late) counts at once";
}

TEST_F(GatewayTest, StopStringSplitAcrossTokens) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.script = {Byte('x'), Byte('a'), Byte('b'), Byte('y'), Byte('z')};
    c.eos_after_script = false;
    c.token_delay_ms = 2;
    c.n_ctx_seq = 1024;
  });
  auto t = StartGateway({w});
  v1::GenerateRequest req = Req("stories260K", "Once upon a time", 1000);
  req.add_stop("ab");
  Collected c = Run(t.get(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.text, "x");
  EXPECT_EQ(c.finish, v1::FINISH_REASON_STOP);
  EXPECT_EQ(c.ids, (std::vector<int32_t>{Byte('x'), Byte('a'), Byte('b')}));
  // No message ever carried the "a" of the stop string.
  for (const auto& m : c.msgs) EXPECT_EQ(m.text().find('a'), std::string::npos);
  // The worker sequence was cancelled at the match, not run to n_predict.
  EXPECT_TRUE(WaitFor([&] { return w->sessions_active() == 0; }, 1000));
  EXPECT_EQ(w->sessions_cancelled(), 1);
  EXPECT_LT(w->steps_written(), 500);

  // A prefix that does not complete is released.
  w->Update([&](FakeWorkerConfig& c2) {
    c2.script = {Byte('x'), Byte('a'), Byte('c')};
    c2.eos_after_script = true;
  });
  c = Run(t.get(), req);
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(c.text, "xac");
  EXPECT_EQ(c.finish, v1::FINISH_REASON_EOS);
}

TEST_F(GatewayTest, Utf8IsNeverSplit) {
  // "é" = C3 A9 and "😀" = F0 9F 98 80 as byte tokens, then a stray continuation byte.
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.script = {Byte(0xC3), Byte(0xA9), Byte(0xF0), Byte(0x9F), Byte(0x98), Byte(0x80), Byte('!'), Byte(0xF0)};
  });
  auto t = StartGateway({w});
  Collected c = Run(t.get(), Req("stories260K", "Once upon a time", 100));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  ASSERT_EQ(c.msgs.size(), 9u);  // one per token
  for (const auto& m : c.msgs) EXPECT_TRUE(IsValidUtf8(m.text())) << m.text();
  EXPECT_EQ(c.msgs[0].text(), "");
  EXPECT_EQ(c.msgs[1].text(), "\xC3\xA9");
  EXPECT_EQ(c.msgs[2].text(), "");
  EXPECT_EQ(c.msgs[5].text(), "\xF0\x9F\x98\x80");
  // The dangling lead byte at the end becomes U+FFFD when the stream ends.
  EXPECT_EQ(c.text, "\xC3\xA9\xF0\x9F\x98\x80!\xEF\xBF\xBD");
}

TEST_F(GatewayTest, LogprobsCarryTokenTexts) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) { c.script = {Byte('h'), Byte('i')}; });
  auto t = StartGateway({w});
  v1::GenerateRequest req = Req();
  req.set_logprobs(2);
  Collected c = Run(t.get(), req);
  ASSERT_TRUE(c.status.ok());
  EXPECT_EQ(w->last_start().logprobs(), 2);
  ASSERT_EQ(c.msgs[0].logprobs_size(), 1);
  EXPECT_EQ(c.msgs[0].logprobs(0).token_id(), Byte('h'));
  ASSERT_EQ(c.msgs[0].logprobs(0).top_size(), 2);
  EXPECT_EQ(c.msgs[0].logprobs(0).top(0).text(), "h");
}

TEST_F(GatewayTest, ClientCancelPropagatesToTheWorker) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.eos_after_script = false;
    c.token_delay_ms = 10;
  });
  auto t = StartGateway({w});
  grpc::ClientContext ctx;
  auto reader = t->stub->Generate(&ctx, Req("stories260K", "Once upon a time", 200));
  v1::GenerateResponse r;
  int msgs = 0;
  while (msgs < 3 && reader->Read(&r)) ++msgs;
  ASSERT_EQ(msgs, 3);
  EXPECT_EQ(w->sessions_active(), 1);
  ctx.TryCancel();
  EXPECT_TRUE(WaitFor([&] { return w->sessions_active() == 0; }, 1000)) << "worker session still open";
  EXPECT_EQ(w->sessions_cancelled(), 1);
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return t->gw->inflight() == 0; }));
  EXPECT_LT(w->steps_written(), 100);
}

TEST_F(GatewayTest, DeadlinesCancelTheWorkerSession) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.eos_after_script = false;
    c.token_delay_ms = 10;
  });
  {
    // The client's deadline.
    auto t = StartGateway({w});
    Collected c = Run(t.get(), Req("stories260K", "Once upon a time", 200), 150);
    // The client's own deadline: DEADLINE_EXCEEDED (no last message is attempted).
    EXPECT_EQ(c.status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << c.status.error_code() << " " << c.finish;
    EXPECT_TRUE(WaitFor([&] { return w->sessions_active() == 0; }, 1000));
  }
  {
    // The gateway's --request_timeout_ms: the stream ends with FINISH_REASON_CANCELLED.
    auto t = StartGateway({w}, [](GatewayOptions& o) { o.request_timeout = absl::Milliseconds(300); });
    Collected c = Run(t.get(), Req("stories260K", "Once upon a time", 200));
    ASSERT_TRUE(c.status.ok()) << c.status.error_message();
    EXPECT_EQ(c.finish, v1::FINISH_REASON_CANCELLED);
    EXPECT_GT(c.usage.completion_tokens(), 0);
    EXPECT_LT(c.usage.completion_tokens(), 200);
    EXPECT_TRUE(WaitFor([&] { return w->sessions_active() == 0; }, 1000));
  }
}

TEST_F(GatewayTest, WorkerDeathEndsTheStreamWithUnavailableAndTheGatewayRecovers) {
  FakeWorker* a = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.eos_after_script = false;
    c.token_delay_ms = 10;
  });
  FakeWorker* b = AddWorker("stories260K", [&](FakeWorkerConfig& c) { c.active = 3; });
  const int a_port = a->port();
  const std::string a_addr = a->address();
  auto t = StartGateway({a, b});
  grpc::ClientContext ctx;
  auto reader = t->stub->Generate(&ctx, Req("stories260K", "Once upon a time", 250));
  v1::GenerateResponse r;
  int msgs = 0;
  while (msgs < 3 && reader->Read(&r)) ++msgs;
  ASSERT_EQ(msgs, 3);
  a->Kill();
  while (reader->Read(&r)) {
  }
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_TRUE(absl::StrContains(st.error_message(), a_addr)) << st.error_message();
  // The gateway is up and routes to the live worker.
  Collected c = Run(t.get(), Req());
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(b->sessions_started(), 1);
  EXPECT_TRUE(WaitFor([&] { return t->gw->pool().live_count() == 1; }));
  // The worker comes back on the same port: it is live again and takes traffic.
  workers_.push_back(std::make_unique<FakeWorker>(FakeWorkerConfig{}));
  FakeWorker* a2 = workers_.back().get();
  ASSERT_TRUE(a2->Start(a_port).ok());
  EXPECT_TRUE(WaitFor([&] { return t->gw->pool().live_count() == 2; }, 5000));
  ASSERT_TRUE(Run(t.get(), Req()).status.ok());
  EXPECT_EQ(a2->sessions_started(), 1);
  // Every worker of the model dead: UNAVAILABLE (the model is known), not NOT_FOUND.
  a2->Kill();
  b->Kill();
  EXPECT_TRUE(WaitFor([&] { return t->gw->pool().live_count() == 0; }));
  c = Run(t.get(), Req());
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::UNAVAILABLE) << c.status.error_message();
  grpc::ClientContext lctx;
  v1::ListModelsResponse lm;
  ASSERT_TRUE(t->stub->ListModels(&lctx, v1::ListModelsRequest(), &lm).ok());
  EXPECT_EQ(lm.models_size(), 0);
}

TEST_F(GatewayTest, RefusedOrFailingWorkerBeforeTheFirstTokenIsSkipped) {
  FakeWorker* full =
      AddWorker("stories260K", [](FakeWorkerConfig& c) { c.refuse = grpc::StatusCode::RESOURCE_EXHAUSTED; });
  FakeWorker* ok = AddWorker("stories260K", [](FakeWorkerConfig& c) { c.active = 4; });
  auto t = StartGateway({full, ok});
  Collected c = Run(t.get(), Req());
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(full->sessions_started(), 1);
  EXPECT_EQ(ok->sessions_started(), 1);
  // All full: RESOURCE_EXHAUSTED.
  ok->Update([](FakeWorkerConfig& c2) { c2.refuse = grpc::StatusCode::RESOURCE_EXHAUSTED; });
  c = Run(t.get(), Req());
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << c.status.error_message();
  // A worker's INVALID_ARGUMENT is passed through, not retried.
  ok->Update([](FakeWorkerConfig& c2) { c2.refuse = grpc::StatusCode::INVALID_ARGUMENT; });
  full->Update([](FakeWorkerConfig& c2) { c2.refuse = grpc::StatusCode::INVALID_ARGUMENT; });
  c = Run(t.get(), Req());
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.status.error_message();
}

TEST_F(GatewayTest, MalformedRequestsGetInvalidArgumentNamingTheField) {
  FakeWorker* w = AddWorker("stories260K");
  auto t = StartGateway({w});
  struct Case {
    std::string what, field;
    v1::GenerateRequest req;
  };
  std::vector<Case> cases;
  auto add = [&](const std::string& what, const std::string& field,
                 const std::function<void(v1::GenerateRequest&)>& f) {
    v1::GenerateRequest r = Req();
    f(r);
    cases.push_back({what, field, r});
  };
  add("negative n_predict", "n_predict", [](auto& r) { r.set_n_predict(-5); });
  add("zero n_predict", "n_predict", [](auto& r) { r.set_n_predict(0); });
  add("huge n_predict", "n_predict", [](auto& r) { r.set_n_predict(1 << 30); });
  add("n_predict > n_ctx", "n_predict", [](auto& r) { r.set_n_predict(1025); });
  add("NaN temperature", "sampling.temperature", [](auto& r) { r.mutable_sampling()->set_temperature(std::nanf("")); });
  add("inf temperature", "sampling.temperature", [](auto& r) { r.mutable_sampling()->set_temperature(INFINITY); });
  add("negative temperature", "sampling.temperature", [](auto& r) { r.mutable_sampling()->set_temperature(-1); });
  add("top_p > 1", "sampling.top_p", [](auto& r) { r.mutable_sampling()->set_top_p(1.5f); });
  add("NaN top_p", "sampling.top_p", [](auto& r) { r.mutable_sampling()->set_top_p(std::nanf("")); });
  add("min_p < 0", "sampling.min_p", [](auto& r) { r.mutable_sampling()->set_min_p(-0.1f); });
  add("repeat_penalty 0", "sampling.repeat_penalty", [](auto& r) { r.mutable_sampling()->set_repeat_penalty(0); });
  add("repeat_last_n -2", "sampling.repeat_last_n", [](auto& r) { r.mutable_sampling()->set_repeat_last_n(-2); });
  add("NaN presence_penalty", "sampling.presence_penalty",
      [](auto& r) { r.mutable_sampling()->set_presence_penalty(std::nanf("")); });
  add("token id outside the vocabulary", "prompt.tokens", [](auto& r) {
    r.mutable_tokens()->add_ids(1);
    r.mutable_tokens()->add_ids(99999);
  });
  add("token id n_vocab", "prompt.tokens", [](auto& r) { r.mutable_tokens()->add_ids(512); });
  add("negative token id", "prompt.tokens", [](auto& r) { r.mutable_tokens()->add_ids(-1); });
  add("empty token list", "prompt.tokens", [](auto& r) { r.mutable_tokens(); });
  add("no prompt", "prompt", [](auto& r) { r.clear_prompt(); });
  add("empty text prompt", "prompt.text", [](auto& r) { r.set_text(""); });
  add("empty model", "model", [](auto& r) { r.set_model(""); });
  add("10 MB prompt", "prompt.text", [](auto& r) { r.set_text(std::string(10 << 20, 'a')); });
  add("invalid UTF-8", "prompt.text", [](auto& r) { r.set_text("bad \xff\xfe utf8"); });
  add("invalid UTF-8 stop string", "stop[1]", [](auto& r) {
    r.add_stop("ok");
    r.add_stop("\xC3");
  });
  add("invalid UTF-8 model name", "model", [](auto& r) { r.set_model("m\xFF"); });
  add("prompt longer than n_ctx", "prompt", [](auto& r) {
    for (int i = 0; i < 300; ++i) r.mutable_tokens()->add_ids(300);
  });
  add("text prompt longer than n_ctx", "prompt", [](auto& r) {
    std::string s;
    for (int i = 0; i < 400; ++i) s += "once upon a time ";
    r.set_text(s);
  });
  add("17 stop strings", "stop", [](auto& r) {
    for (int i = 0; i < 17; ++i) r.add_stop("x");
  });
  add("empty stop string", "stop[0]", [](auto& r) { r.add_stop(""); });
  add("257-byte stop string", "stop[1]", [](auto& r) {
    r.add_stop("ok");
    r.add_stop(std::string(257, 's'));
  });
  add("logprobs 21", "logprobs", [](auto& r) { r.set_logprobs(21); });
  add("negative logprobs", "logprobs", [](auto& r) { r.set_logprobs(-1); });
  add("unknown speculative type", "speculative.type", [](auto& r) { r.mutable_speculative()->set_type("magic"); });
  add("draft_min > draft_max", "speculative.draft_min", [](auto& r) {
    r.mutable_speculative()->set_type("ngram-simple");
    r.mutable_speculative()->set_draft_max(2);
    r.mutable_speculative()->set_draft_min(3);
  });
  for (const Case& c : cases) {
    Collected got = Run(t.get(), c.req);
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.what << ": " << got.status.error_message();
    EXPECT_TRUE(absl::StartsWith(got.status.error_message(), c.field))
        << c.what << ": message '" << got.status.error_message() << "' does not start with '" << c.field << "'";
    EXPECT_TRUE(got.msgs.empty()) << c.what;
  }
  EXPECT_EQ(w->sessions_started(), 0);
  {
    Collected got = Run(t.get(), Req("no-such-model"));
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::NOT_FOUND) << got.status.error_message();
  }
  // Still up and serving.
  Collected ok = Run(t.get(), Req());
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.finish, v1::FINISH_REASON_EOS);
}

// Bytes that are not a protobuf message get INVALID_ARGUMENT saying so (gRPC's own
// parsing would answer INTERNAL with an empty message), on every method.
TEST_F(GatewayTest, GarbageRequestBytesGetInvalidArgument) {
  FakeWorker* w = AddWorker("stories260K");
  auto t = StartGateway({w});
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", t->port), grpc::InsecureChannelCredentials());
  // Field 1 (model), length 100, but only 3 bytes follow.
  const std::string garbage =
      "\x0a\x64"
      "abc";
  auto bytes = [&] {
    grpc::Slice slice(garbage);
    return grpc::ByteBuffer(&slice, 1);
  };
  for (const char* method : {"Tokenize", "Detokenize", "ListModels", "Embed"}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::ByteBuffer resp;
    grpc::Status st = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel.get(),
        grpc::internal::RpcMethod(absl::StrCat("/herd.v1.Gateway/", method).c_str(),
                                  grpc::internal::RpcMethod::NORMAL_RPC),
        &ctx, bytes(), &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << st.error_message();
    EXPECT_TRUE(absl::StartsWith(st.error_message(), "request: 5 bytes are not a valid herd.v1."))
        << method << ": " << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto reader = std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            channel.get(),
            grpc::internal::RpcMethod("/herd.v1.Gateway/Generate", grpc::internal::RpcMethod::SERVER_STREAMING), &ctx,
            bytes()));
    grpc::ByteBuffer msg;
    EXPECT_FALSE(reader->Read(&msg));
    grpc::Status st = reader->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("herd.v1.GenerateRequest"), std::string::npos) << st.error_message();
  }
  EXPECT_EQ(w->sessions_started(), 0);
  // Still serving; the refusals are counted.
  Collected ok = Run(t.get(), Req());
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_NE(t->registry.Render().find("herd_gateway_requests_total{method=\"Generate\",code=\"INVALID_ARGUMENT\"} 1"),
            std::string::npos)
      << t->registry.Render();
}

// A 10 KB model name is never echoed whole: errors (gRPC and HTTP) show its first 64
// bytes and "…".
TEST_F(GatewayTest, HugeModelNamesAreCutInErrors) {
  FakeWorker* w = AddWorker("stories260K");
  auto t = StartGateway({w});
  const std::string huge(10 << 10, 'm');
  const std::string shown = std::string(64, 'm') + "\xE2\x80\xA6";
  {
    Collected got = Run(t.get(), Req(huge));
    EXPECT_EQ(got.status.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(got.status.error_message().find("'" + shown + "'"), std::string::npos) << got.status.error_message();
    EXPECT_LT(got.status.error_message().size(), 300u) << got.status.error_message();
  }
  {
    grpc::ClientContext ctx;
    v1::TokenizeRequest req;
    req.set_model(huge);
    req.set_text("hi");
    v1::TokenizeResponse resp;
    grpc::Status st = t->stub->Tokenize(&ctx, req, &resp);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.error_message().find(shown), std::string::npos) << st.error_message();
    EXPECT_EQ(st.error_message().find(std::string(65, 'm')), std::string::npos) << st.error_message().size();
    EXPECT_LT(st.error_message().size(), 1000u);
  }
  {
    httplib::Client cli("127.0.0.1", t->http_port);
    json body = {{"model", huge}, {"prompt", "x"}};
    auto res = cli.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404) << res->body.substr(0, 300);
    EXPECT_EQ(res->body.find(std::string(65, 'm')), std::string::npos) << res->body.size();
  }
  // The cut never splits a UTF-8 character: 63 ASCII bytes, then 2-byte characters.
  EXPECT_EQ(ShortName(std::string(63, 'a') + "\xC3\xA9\xC3\xA9"), std::string(63, 'a') + "\xE2\x80\xA6");
  EXPECT_EQ(ShortName("short"), "short");
  EXPECT_EQ(ShortName(std::string(64, 'x')), std::string(64, 'x'));
}

TEST_F(GatewayTest, TokenizeDetokenizeAndTheVocabularyCache) {
  FakeWorker* w = AddWorker("stories260K");
  auto t = StartGateway({w});
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext ctx;
    v1::TokenizeRequest req;
    req.set_model("stories260K");
    req.set_text("Once upon a time");
    req.set_add_special(true);
    v1::TokenizeResponse resp;
    ASSERT_TRUE(t->stub->Tokenize(&ctx, req, &resp).ok());
    EXPECT_EQ(std::vector<int32_t>(resp.ids().begin(), resp.ids().end()),
              (std::vector<int32_t>{1, 403, 407, 261, 378}));
  }
  EXPECT_EQ(loader_.get_model_info_calls(), 1);  // fetched once, then cached
  {
    grpc::ClientContext ctx;
    v1::DetokenizeRequest req;
    req.set_model("stories260K");
    for (int32_t id : {403, 407, 261, 378}) req.add_ids(id);
    v1::DetokenizeResponse resp;
    ASSERT_TRUE(t->stub->Detokenize(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.text(), "Once upon a time");
  }
  {
    grpc::ClientContext ctx;
    v1::DetokenizeRequest req;
    req.set_model("stories260K");
    req.add_ids(403);
    req.add_ids(512);
    v1::DetokenizeResponse resp;
    grpc::Status st = t->stub->Detokenize(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_TRUE(absl::StartsWith(st.error_message(), "ids")) << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    v1::TokenizeRequest req;
    req.set_model("stories260K");
    req.set_text("\xC3\x28");
    v1::TokenizeResponse resp;
    EXPECT_EQ(t->stub->Tokenize(&ctx, req, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext ctx;
    v1::TokenizeRequest req;
    req.set_model("nope");
    req.set_text("x");
    v1::TokenizeResponse resp;
    EXPECT_EQ(t->stub->Tokenize(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
}

TEST_F(GatewayTest, NoLoaderMeansFailedPrecondition) {
  FakeWorker* w = AddWorker("stories260K");
  auto t = StartGateway({w}, [](GatewayOptions& o) { o.loader_address = ""; });
  Collected c = Run(t.get(), Req());
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << c.status.error_message();
  // A dead loader: UNAVAILABLE naming it.
  loader_.Kill();
  auto t2 = StartGateway({w});
  c = Run(t2.get(), Req());
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::UNAVAILABLE) << c.status.error_message();
  EXPECT_TRUE(absl::StrContains(c.status.error_message(), "loader")) << c.status.error_message();
}

TEST_F(GatewayTest, DiscoversWorkersThroughDns) {
  FakeWorker* w = AddWorker("stories260K");
  auto t = StartGateway({}, [&](GatewayOptions& o) { o.pool.dns = absl::StrCat("localhost:", w->port()); });
  EXPECT_TRUE(WaitFor([&] { return t->gw->pool().live_count() >= 1; }));
  bool found = false;
  for (const WorkerSnapshot& s : t->gw->pool().Snapshot()) found |= s.address == w->address() && s.live;
  EXPECT_TRUE(found);
  ASSERT_TRUE(Run(t.get(), Req()).status.ok());
  EXPECT_EQ(w->sessions_started(), 1);
  auto r = ResolveDns("localhost:80");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(std::find(r->begin(), r->end(), "127.0.0.1:80"), r->end());
  EXPECT_EQ(ResolveDns("localhost").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveDns("no-such-host.invalid:80").status().code(), absl::StatusCode::kUnavailable);
  auto list = ParseWorkerList(" a:1, b:2,,a:1 ");
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(*list, (std::vector<std::string>{"a:1", "b:2"}));
  EXPECT_FALSE(ParseWorkerList("a").ok());
}

TEST_F(GatewayTest, MetricsCountRequestsTokensAndWorkers) {
  FakeWorker* w = AddWorker("stories260K", [](FakeWorkerConfig& c) { c.script = {300, 301}; });
  auto t = StartGateway({w});
  ASSERT_TRUE(Run(t.get(), Req()).status.ok());
  Run(t.get(), Req("stories260K", "x", -7));
  const std::string m = t->registry.Render();
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_requests_total{method=\"Generate\",code=\"OK\"} 1")) << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_requests_total{method=\"Generate\",code=\"INVALID_ARGUMENT\"} 1"))
      << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_tokens_generated_total{model=\"stories260K\"} 3")) << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_live_workers 1")) << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_inflight_requests 0")) << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_request_seconds_count{method=\"Generate\"} 2")) << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_time_to_first_token_seconds_count{model=\"stories260K\"} 1")) << m;
}

TEST_F(GatewayTest, ShutdownCancelsInFlightStreamsWithALastMessage) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.eos_after_script = false;
    c.token_delay_ms = 10;
  });
  auto t = StartGateway({w});
  Collected c;
  std::thread th([&] { c = Run(t.get(), Req("stories260K", "Once upon a time", 200)); });
  ASSERT_TRUE(WaitFor([&] { return w->steps_written() >= 2; }));
  t->gw->BeginDrain();
  EXPECT_EQ(Run(t.get(), Req()).status.error_code(), grpc::StatusCode::UNAVAILABLE);
  t->gw->CancelAll();
  th.join();
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.finish, v1::FINISH_REASON_CANCELLED);
  EXPECT_TRUE(WaitFor([&] { return w->sessions_active() == 0; }, 1000));
}

// ---- HTTP ----

TEST_F(GatewayTest, HttpCompletionsAndModels) {
  std::vector<int32_t> story;
  FakeWorker* w = AddStoryWorker(&story);
  auto t = StartGateway({w});
  httplib::Client cli = HttpClient(*t);

  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  json mj = json::parse(models->body);
  EXPECT_EQ(mj["object"], "list");
  ASSERT_EQ(mj["data"].size(), 1u);
  EXPECT_EQ(mj["data"][0]["id"], "stories260K");
  EXPECT_EQ(mj["data"][0]["object"], "model");

  json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 3}, {"temperature", 0}};
  auto res = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories260K");
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(text, Pieces(story, 3));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], 8);

  // Streaming: SSE chunks that join to the same text, then [DONE].
  body["stream"] = true;
  auto sse = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(sse);
  ASSERT_EQ(sse->status, 200);
  EXPECT_TRUE(absl::StartsWith(sse->get_header_value("Content-Type"), "text/event-stream"));
  EXPECT_TRUE(absl::EndsWith(sse->body, "data: [DONE]\n\n")) << sse->body;
  std::string joined;
  std::string finish;
  int chunks = 0;
  for (absl::string_view ev : absl::StrSplit(sse->body, "\n\n", absl::SkipEmpty())) {
    ASSERT_TRUE(absl::StartsWith(ev, "data: ")) << ev;
    if (ev == "data: [DONE]") continue;
    json c = json::parse(ev.substr(6));
    EXPECT_EQ(c["object"], "text_completion");
    joined += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) {
      finish = c["choices"][0]["finish_reason"];
      EXPECT_EQ(c["usage"]["completion_tokens"], 3);
    }
    ++chunks;
  }
  EXPECT_EQ(joined, text);
  EXPECT_EQ(finish, "length");
  EXPECT_GE(chunks, 3);

  // Stop strings, token-id prompts, logprobs.
  json stop_body = {{"model", "stories260K"},
                    {"prompt", json::array({1, 403})},
                    {"max_tokens", 20},
                    {"stop", json::array({"little"})},
                    {"logprobs", 1}};
  res = cli.Post("/v1/completions", stop_body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  j = json::parse(res->body);
  EXPECT_EQ(j["choices"][0]["text"], " there was a ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_FALSE(j["choices"][0]["logprobs"]["tokens"].empty()) << j.dump();
  EXPECT_EQ(w->last_start().logprobs(), 1);
}

TEST_F(GatewayTest, HttpErrorsAreOpenAiStyle) {
  FakeWorker* w = AddWorker("stories260K");
  FakeWorker* dead = AddWorker("other");
  auto t = StartGateway({w, dead});
  dead->Kill();
  ASSERT_TRUE(WaitFor([&] { return t->gw->pool().live_count() == 1; }));
  httplib::Client cli("127.0.0.1", t->http_port);
  struct Case {
    std::string body;
    int status;
    std::string type, message_start;
    std::string code = "invalid_value";  // OpenAI's string code; param = the message's field
  };
  const std::vector<Case> cases = {
      {"{not json", 400, "invalid_request_error", "request body"},
      {R"({"prompt":"x"})", 400, "invalid_request_error", "model", "missing_required_parameter"},
      {R"({"model":"stories260K"})", 400, "invalid_request_error", "prompt", "missing_required_parameter"},
      {R"({"model":"stories260K","prompt":""})", 400, "invalid_request_error", "prompt"},
      {R"({"model":"stories260K","prompt":"x","temperature":-1})", 400, "invalid_request_error", "temperature"},
      {R"({"model":"stories260K","prompt":"x","temperature":"hot"})", 400, "invalid_request_error", "temperature"},
      {R"({"model":"stories260K","prompt":"x","max_tokens":0})", 400, "invalid_request_error", "max_tokens"},
      {R"({"model":"stories260K","prompt":"x","n_predict":100000})", 400, "invalid_request_error", "n_predict",
       "context_length_exceeded"},
      {R"({"model":"stories260K","prompt":"x","max_tokens":100000})", 400, "invalid_request_error", "max_tokens",
       "context_length_exceeded"},
      {R"({"model":"stories260K","prompt":"x","top_p":2})", 400, "invalid_request_error", "top_p"},
      {R"({"model":"stories260K","prompt":[1,99999]})", 400, "invalid_request_error", "prompt[1]"},
      {R"({"model":"stories260K","prompt":"x","n":17})", 400, "invalid_request_error", "n"},
      {R"({"model":"stories260K","prompt":"x","mirostat":2})", 400, "invalid_request_error", "mirostat",
       "unknown_parameter"},
      {R"({"model":"stories260K","prompt":"x","grammar":"root ::= nowhere"})", 400, "invalid_request_error", "grammar"},
      {R"({"model":"nope","prompt":"x"})", 404, "not_found_error", "model", "model_not_found"},
      {R"({"model":"other","prompt":"x"})", 503, "unavailable_error", "model", "service_unavailable"},
  };
  for (const Case& c : cases) {
    auto res = cli.Post("/v1/completions", c.body, "application/json");
    ASSERT_TRUE(res) << c.body;
    EXPECT_EQ(res->status, c.status) << c.body << " -> " << res->body;
    json j = json::parse(res->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << res->body;
    EXPECT_EQ(j["error"]["type"], c.type) << res->body;
    EXPECT_EQ(j["error"]["code"], c.code) << res->body;
    const std::string param = c.status == 400 && c.message_start != "request body" ? c.message_start : "";
    if (!param.empty()) {
      EXPECT_EQ(j["error"]["param"], param) << res->body;
    }
    EXPECT_TRUE(j["error"].contains("param")) << res->body;
    EXPECT_TRUE(absl::StartsWith(j["error"]["message"].get<std::string>(), c.message_start)) << res->body;
  }
  EXPECT_EQ(w->sessions_started(), 0);
  // Unknown endpoint and an oversized body: JSON errors as well.
  auto nf = cli.Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  EXPECT_EQ(json::parse(nf->body)["error"]["type"], "not_found_error");
  json big = {{"model", "stories260K"}, {"prompt", std::string(17 << 20, 'a')}};
  auto large = cli.Post("/v1/completions", big.dump(), "application/json");
  ASSERT_TRUE(large);
  EXPECT_EQ(large->status, 413);
  EXPECT_EQ(json::parse(large->body)["error"]["code"], "request_too_large");
  // 2 MB of text fits in the body limit but not in --max_prompt_bytes.
  json two = {{"model", "stories260K"}, {"prompt", std::string(2 << 20, 'a')}};
  auto r2 = cli.Post("/v1/completions", two.dump(), "application/json");
  ASSERT_TRUE(r2);
  EXPECT_EQ(r2->status, 400);
  EXPECT_TRUE(absl::StartsWith(json::parse(r2->body)["error"]["message"].get<std::string>(), "prompt: ")) << r2->body;
  // Invalid UTF-8 in the JSON body.
  auto res =
      cli.Post("/v1/completions", std::string("{\"model\":\"stories260K\",\"prompt\":\"\xff\"}"), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
}

// The ChatML text the fallback template renders (stories260K has no chat template).
std::string ChatMl(const std::vector<std::pair<std::string, std::string>>& msgs) {
  std::string out;
  for (const auto& [role, content] : msgs) out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
  return out + "<|im_start|>assistant\n";
}

TEST_F(GatewayTest, HttpChatCompletions) {
  std::vector<int32_t> story;
  FakeWorker* w = AddStoryWorker(&story);
  auto t = StartGateway({w});
  httplib::Client cli = HttpClient(*t);
  json body = {{"model", "stories260K"},
               {"messages", json::array({json{{"role", "system"}, {"content", "Be brief."}},
                                         json{{"role", "user"}, {"content", "Tell a story"}}})},
               {"max_tokens", 3},
               {"temperature", 0}};
  auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(absl::StartsWith(j["id"].get<std::string>(), "chatcmpl-"));
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string text = Pieces(story, 3);
  EXPECT_EQ(j["choices"][0]["message"]["content"], text);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  // The worker got the ChatML render, tokenized with BOS and special tokens parsed.
  const std::vector<int32_t> want =
      vocab_->Tokenize(ChatMl({{"system", "Be brief."}, {"user", "Tell a story"}}), true, true);
  const v1::SessionStart start = w->last_start();
  const auto& got = start.prompt();
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()), want);
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(want.size()));

  // Streaming: role first, deltas joining to the text, a finish chunk, usage, [DONE].
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  body["messages"][1]["content"] =
      json::array({json{{"type", "text"}, {"text", "Tell"}}, json{{"type", "text"}, {"text", "a story"}}});
  auto sse = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(sse);
  ASSERT_EQ(sse->status, 200) << sse->body;
  EXPECT_TRUE(absl::EndsWith(sse->body, "data: [DONE]\n\n")) << sse->body;
  std::string joined, finish;
  bool role_first = false, usage_seen = false;
  int n = 0;
  for (absl::string_view ev : absl::StrSplit(sse->body, "\n\n", absl::SkipEmpty())) {
    if (ev == "data: [DONE]") continue;
    json c = json::parse(ev.substr(6));
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) {
      usage_seen = true;
      EXPECT_EQ(c["usage"]["completion_tokens"], 3);
      continue;
    }
    const json& ch = c["choices"][0];
    if (n++ == 0) role_first = ch["delta"].value("role", "") == "assistant";
    if (ch["delta"].contains("content")) joined += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
  }
  EXPECT_TRUE(role_first);
  EXPECT_TRUE(usage_seen);
  EXPECT_EQ(joined, text);
  EXPECT_EQ(finish, "length");
  const v1::SessionStart start2 = w->last_start();
  const auto& got2 = start2.prompt();
  EXPECT_EQ(std::vector<int32_t>(got2.begin(), got2.end()),
            vocab_->Tokenize(ChatMl({{"system", "Be brief."}, {"user", "Tell\na story"}}), true, true));

  // n = 3 independent choices; logprobs in the chat shape.
  json nb = {{"model", "stories260K"}, {"messages", json::array({json{{"role", "user"}, {"content", "hi"}}})},
             {"max_tokens", 2},        {"n", 3},
             {"logprobs", true},       {"top_logprobs", 2}};
  res = cli.Post("/v1/chat/completions", nb.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  j = json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    const json& lp = j["choices"][i]["logprobs"]["content"];
    ASSERT_EQ(lp.size(), 2u) << j.dump();
    EXPECT_TRUE(lp[0].contains("bytes"));
    EXPECT_LE(lp[0]["top_logprobs"].size(), 2u);
  }
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);

  // Refused, never ignored: unknown fields, unsupported tool_choice, image parts, bad roles.
  for (const auto& [bad, field] : std::vector<std::pair<json, std::string>>{
           {{{"model", "stories260K"}}, "messages"},
           {{{"model", "stories260K"}, {"messages", json::array()}}, "messages"},
           {{{"model", "stories260K"}, {"messages", json::array({json{{"content", "x"}}})}}, "messages[0].role"},
           {{{"model", "stories260K"},
             {"messages",
              json::array({json{{"role", "user"}, {"content", json::array({json{{"type", "image_url"}}})}}})}},
            "messages[0].content[0].type"},
           {{{"model", "stories260K"},
             {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
             {"tool_choice", "required"}},
            "tool_choice"},
           {{{"model", "stories260K"},
             {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
             {"tool_choice", "sometimes"}},
            "tool_choice"},
           {{{"model", "stories260K"},
             {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
             {"tool_choice", json{{"type", "function"}}}},
            "tool_choice.function"},
           {{{"model", "stories260K"},
             {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
             {"reasoning_format", "verbose"}},
            "reasoning_format"},
           {{{"model", "stories260K"},
             {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
             {"reasoning_effort", "extreme"}},
            "reasoning_effort"},
           {{{"model", "stories260K"},
             {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
             {"frobnicate", 1}},
            "frobnicate"},
           {{{"model", "stories260K"},
             {"messages", json::array({json{{"role", "user"}, {"content", "x"}}})},
             {"top_logprobs", 3}},
            "top_logprobs"}}) {
    auto r = cli.Post("/v1/chat/completions", bad.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad.dump() << " -> " << r->body;
    EXPECT_TRUE(absl::StartsWith(json::parse(r->body)["error"]["message"].get<std::string>(), field)) << r->body;
  }
  // The model card says which template chat requests use.
  auto m = cli.Get("/v1/models/stories260K");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  EXPECT_EQ(json::parse(m->body)["id"], "stories260K");
  v1::ListModelsRequest lr;
  v1::ListModelsResponse lm;
  grpc::ClientContext lctx;
  ASSERT_TRUE(t->stub->ListModels(&lctx, lr, &lm).ok());
  ASSERT_EQ(lm.models_size(), 1);
  EXPECT_EQ(lm.models(0).chat_template(), "chatml");
  auto missing = cli.Get("/v1/models/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
}

TEST_F(GatewayTest, GrpcChatPromptUsesTheTemplate) {
  FakeWorker* w = AddWorker();
  auto t = StartGateway({w});
  v1::GenerateRequest req;
  req.set_model("stories260K");
  v1::ChatMessage* m = req.mutable_chat()->add_messages();
  m->set_role("user");
  m->set_content("Hello");
  req.set_n_predict(2);
  Collected c = Run(t.get(), req);
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  const v1::SessionStart start = w->last_start();
  const auto& got = start.prompt();
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.end()), vocab_->Tokenize(ChatMl({{"user", "Hello"}}), true, true));
  req.mutable_chat()->set_tools_json("{not json");
  c = Run(t.get(), req);
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(c.status.error_message(), "chat.tools_json")) << c.status.error_message();
  req.mutable_chat()->clear_messages();
  c = Run(t.get(), req);
  EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// A template in the Hermes family that knows <think> (and prints tool calls and results).
constexpr char kHermesTemplate[] =
    "{# Hermes-style: calls as <tool_call>{json}</tool_call>; reasoning in <think> #}"
    "{%- if tools %}<tools>{{ tools | tojson }}</tools>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{%- for c in m.tool_calls %}<tool_call>{{ c.id }} {{ c.function.name }} {{ c.function.arguments }}</tool_call>"
    "{%- endfor %}{% if m.tool_call_id %} ({{ m.tool_call_id }}){% endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// Tool calls and reasoning in chat output, with a template in the Hermes family that
// knows <think>: parsed into reasoning_content / content / tool_calls, the same streamed
// and whole; tool_choice "required" / a named function reach the worker as a grammar;
// "none" hides the tools and parses nothing; reasoning_format "none" keeps <think> in
// the content.
TEST_F(GatewayTest, ChatToolCallsAndReasoning) {
  const std::string out =
      "<think>Need the weather.</think>Let me look.<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const std::vector<int32_t> ids = vocab_->Tokenize(out, false, false);
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.script = ids;
    c.n_ctx = c.n_ctx_seq = 2048;
  });
  auto t = StartGateway({w}, [](GatewayOptions& o) { o.chat_template = kHermesTemplate; });
  httplib::Client cli = HttpClient(*t);
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  json body = {{"model", "stories260K"},
               {"messages", json::array({json{{"role", "user"}, {"content", "Weather in Paris?"}}})},
               {"tools", tools},
               {"max_tokens", 400}};
  auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  const json& msg = j["choices"][0]["message"];
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << res->body;
  EXPECT_EQ(msg["reasoning_content"], "Need the weather.") << res->body;
  EXPECT_EQ(msg["content"], "Let me look.") << res->body;
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << res->body;
  EXPECT_EQ(msg["tool_calls"][0]["type"], "function");
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  const int prompt_with_tools = j["usage"]["prompt_tokens"];

  // Streamed: the deltas add up to the same message.
  body["stream"] = true;
  res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::string reasoning, content, finish;
  json calls = json::array();
  for (const std::string& line : std::vector<std::string>(absl::StrSplit(res->body, '\n'))) {
    if (!absl::StartsWith(line, "data: {")) continue;
    const json c = json::parse(line.substr(6));
    const json& d = c["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls")) {
      for (const json& tc : d["tool_calls"]) {
        EXPECT_EQ(tc["index"], calls.size());
        calls.push_back(tc["function"]);
      }
    }
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(reasoning, "Need the weather.");
  EXPECT_EQ(content, "Let me look.");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], msg["tool_calls"][0]["function"]);
  EXPECT_EQ(finish, "tool_calls");

  // reasoning_format none: the <think> text stays in the content.
  body["stream"] = false;
  body["reasoning_format"] = "none";
  res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  j = json::parse(res->body);
  EXPECT_EQ(absl::StripLeadingAsciiWhitespace(j["choices"][0]["message"]["content"].get<std::string>()),
            "<think>Need the weather.</think>Let me look.")
      << res->body;
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"].size(), 1u);
  body.erase("reasoning_format");

  // tool_choice none: the tools are not shown and nothing is parsed as a call.
  body["tool_choice"] = "none";
  res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  j = json::parse(res->body);
  EXPECT_FALSE(j["choices"][0]["message"].contains("tool_calls")) << res->body;
  EXPECT_TRUE(absl::StrContains(j["choices"][0]["message"]["content"].get<std::string>(), "<tool_call>"));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(w->last_start().sampling().has_grammar());
  EXPECT_LT(j["usage"]["prompt_tokens"].get<int>() + 20, prompt_with_tools) << "the tools are not in the prompt";

  // required / a named function: the worker gets the grammar forcing the call syntax.
  for (const json& choice : {json("required"), json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}) {
    body["tool_choice"] = choice;
    res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const std::string grammar = w->last_start().sampling().grammar();
    EXPECT_TRUE(absl::StrContains(grammar, "<tool_call>") && absl::StrContains(grammar, "get_weather")) << grammar;
  }
  // A forced choice cannot be combined with another constraint, nor name an unknown tool.
  body["tool_choice"] = "required";
  body["grammar"] = "root ::= \"x\"";
  res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  body.erase("grammar");
  body["tool_choice"] = json{{"type", "function"}, {"function", {{"name", "nope"}}}};
  res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_TRUE(absl::StrContains(res->body, "'nope' is not one of the tools")) << res->body;
}

// One server-sent event of a Responses stream: its `event:` name and its data.
struct SseEvent {
  std::string event;
  json data;
};

// The events of a Responses stream; checks that each names its data's type and that
// sequence numbers count up from 0.
std::vector<SseEvent> ResponsesEvents(const std::string& body) {
  std::vector<SseEvent> out;
  for (absl::string_view block : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    SseEvent e;
    for (absl::string_view line : absl::StrSplit(block, '\n')) {
      if (absl::ConsumePrefix(&line, "event: ")) e.event = std::string(line);
      if (absl::ConsumePrefix(&line, "data: ")) e.data = json::parse(line);
    }
    EXPECT_EQ(e.data.value("type", ""), e.event) << block;
    EXPECT_EQ(e.data.value("sequence_number", -1), static_cast<int>(out.size())) << block;
    out.push_back(std::move(e));
  }
  return out;
}

// The text of a response's message items.
std::string OutputText(const json& response) {
  std::string out;
  for (const json& item : response["output"]) {
    if (item["type"] != "message") continue;
    for (const json& part : item["content"]) out += part["text"].get<std::string>();
  }
  return out;
}

// A response's output items without their ids (random per response).
json WithoutIds(json output) {
  for (json& item : output) item.erase("id");
  return output;
}

// POST /v1/responses: string and item inputs become the chat prompt (instructions
// first), the output is a message item, max_output_tokens ends it as incomplete, and
// the stream's events add up to the whole response.
TEST_F(GatewayTest, HttpResponses) {
  std::vector<int32_t> story;
  FakeWorker* w = AddStoryWorker(&story);
  auto t = StartGateway({w});
  httplib::Client cli = HttpClient(*t);
  json body = {{"model", "stories260K"},
               {"input", "Tell a story"},
               {"max_output_tokens", 3},
               {"temperature", 0},
               {"store", true},
               {"metadata", {{"k", "v"}}},
               {"user", "u1"}};
  auto res = cli.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json j = json::parse(res->body);
  EXPECT_EQ(j["object"], "response");
  EXPECT_TRUE(absl::StartsWith(j["id"].get<std::string>(), "resp_")) << j["id"];
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["status"], "incomplete");
  EXPECT_EQ(j["incomplete_details"], json({{"reason", "max_output_tokens"}}));
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["max_output_tokens"], 3);
  EXPECT_EQ(j["temperature"], 0);
  EXPECT_EQ(j["store"], false);  // nothing is stored
  EXPECT_EQ(j["metadata"], json({{"k", "v"}}));
  EXPECT_EQ(j["tool_choice"], "auto");
  EXPECT_EQ(j["tools"], json::array());
  EXPECT_EQ(j["text"], json({{"format", {{"type", "text"}}}}));
  const std::string text = Pieces(story, 3);
  ASSERT_EQ(j["output"].size(), 1u) << res->body;
  const json& item = j["output"][0];
  EXPECT_EQ(item["type"], "message");
  EXPECT_EQ(item["role"], "assistant");
  EXPECT_EQ(item["status"], "incomplete");
  EXPECT_TRUE(absl::StartsWith(item["id"].get<std::string>(), "msg_"));
  EXPECT_EQ(item["content"],
            json::array({json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}}));
  std::vector<int32_t> want = vocab_->Tokenize(ChatMl({{"user", "Tell a story"}}), true, true);
  v1::SessionStart start = w->last_start();
  EXPECT_EQ(std::vector<int32_t>(start.prompt().begin(), start.prompt().end()), want);
  EXPECT_EQ(j["usage"]["input_tokens"], static_cast<int>(want.size()));
  EXPECT_EQ(j["usage"]["output_tokens"], 3);
  EXPECT_EQ(j["usage"]["total_tokens"], static_cast<int>(want.size()) + 3);

  // Items: instructions first, developer = system, text parts joined with "\n", an
  // assistant turn given back as its output message; /responses is the same route.
  body["instructions"] = "Be brief.";
  body["input"] = json::parse(R"([
      {"type": "message", "role": "developer", "content": "Dev."},
      {"role": "user", "content": "Hi"},
      {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
       "content": [{"type": "output_text", "text": "Hello", "annotations": []}]},
      {"role": "user", "content": [{"type": "input_text", "text": "Tell"}, {"type": "input_text", "text": "a story"}]}
    ])");
  res = cli.Post("/responses", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  j = json::parse(res->body);
  EXPECT_EQ(j["instructions"], "Be brief.");
  EXPECT_EQ(OutputText(j), text);
  want = vocab_->Tokenize(ChatMl({{"system", "Be brief."},
                                  {"system", "Dev."},
                                  {"user", "Hi"},
                                  {"assistant", "Hello"},
                                  {"user", "Tell\na story"}}),
                          true, true);
  start = w->last_start();
  EXPECT_EQ(std::vector<int32_t>(start.prompt().begin(), start.prompt().end()), want);

  // Streamed: created, in_progress, the message's events, incomplete with the whole
  // response; the deltas add up to the non-streamed text.
  body["stream"] = true;
  res = cli.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<SseEvent> events = ResponsesEvents(res->body);
  std::vector<std::string> names;
  std::string deltas;
  for (const SseEvent& e : events) {
    if (names.empty() || names.back() != e.event) names.push_back(e.event);
    if (e.event == "response.output_text.delta") {
      EXPECT_EQ(e.data["output_index"], 0);
      EXPECT_EQ(e.data["content_index"], 0);
      deltas += e.data["delta"].get<std::string>();
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                             "response.content_part.added", "response.output_text.delta",
                                             "response.output_text.done", "response.content_part.done",
                                             "response.output_item.done", "response.incomplete"}))
      << res->body;
  EXPECT_EQ(deltas, text);
  ASSERT_GE(events.size(), 2u);
  const json& created = events[0].data["response"];
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_EQ(created["output"], json::array());
  const json& last = events.back().data["response"];
  EXPECT_EQ(last["status"], "incomplete");
  EXPECT_EQ(last["id"], created["id"]);
  EXPECT_EQ(WithoutIds(last["output"]), WithoutIds(j["output"]));
  EXPECT_EQ(last["usage"], j["usage"]);
  const std::string item_id = last["output"][0]["id"];
  for (const SseEvent& e : events) {
    if (e.data.contains("item_id")) {
      EXPECT_EQ(e.data["item_id"], item_id) << e.event;
    }
  }
}

// Function tools in the flat Responses shape, a Hermes tool call and <think> reasoning:
// reasoning, message and function_call items, the same streamed and whole; the prompt
// is the one the equivalent chat request renders, function_call / function_call_output
// items included; tool_choice and text.format constrain as in chat.
TEST_F(GatewayTest, HttpResponsesToolCallsAndReasoning) {
  const std::string out =
      "<think>Need the weather.</think>Let me look.<tool_call>\n"
      "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.script = vocab_->Tokenize(out, false, false);
    c.n_ctx = c.n_ctx_seq = 2048;
  });
  auto t = StartGateway({w}, [](GatewayOptions& o) { o.chat_template = kHermesTemplate; });
  httplib::Client cli = HttpClient(*t);
  const json params =
      json::parse(R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})");
  json body = {{"model", "stories260K"},
               {"input", "Weather in Paris?"},
               {"tools", json::array({json{{"type", "function"},
                                           {"name", "get_weather"},
                                           {"description", "Weather of a city"},
                                           {"parameters", params}}})},
               {"max_output_tokens", 400}};
  auto res = cli.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  EXPECT_EQ(j["status"], "completed") << res->body;
  EXPECT_TRUE(j["incomplete_details"].is_null());
  EXPECT_EQ(j["tools"], body["tools"]);
  const json& output = j["output"];
  ASSERT_EQ(output.size(), 3u) << res->body;
  EXPECT_EQ(output[0]["type"], "reasoning");
  EXPECT_TRUE(absl::StartsWith(output[0]["id"].get<std::string>(), "rs_"));
  EXPECT_EQ(output[0]["summary"], json::array());
  EXPECT_EQ(output[0]["content"], json::array({json{{"type", "reasoning_text"}, {"text", "Need the weather."}}}));
  EXPECT_EQ(output[1]["type"], "message");
  EXPECT_EQ(output[1]["status"], "completed");
  EXPECT_EQ(output[1]["content"][0]["text"], "Let me look.");
  const json& call = output[2];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_TRUE(absl::StartsWith(call["id"].get<std::string>(), "fc_"));
  EXPECT_TRUE(absl::StartsWith(call["call_id"].get<std::string>(), "call_"));
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json({{"city", "Paris"}}));
  const v1::SessionStart responses_start = w->last_start();

  // The equivalent chat request renders the same prompt (its tools in the order the
  // Responses tools become chat tools: type, then function with the client's keys).
  using ojson = nlohmann::ordered_json;
  ojson chat = ojson::parse(R"({"model": "stories260K", "messages": [{"role": "user", "content": "Weather in Paris?"}],
      "tools": [{"type": "function", "function": {"description": "Weather of a city", "name": "get_weather",
      "parameters": )" + params.dump() +
                            R"(}}], "max_tokens": 400})");
  res = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const v1::SessionStart chat_start = w->last_start();
  EXPECT_EQ(std::vector<int32_t>(responses_start.prompt().begin(), responses_start.prompt().end()),
            std::vector<int32_t>(chat_start.prompt().begin(), chat_start.prompt().end()));

  // Streamed: the events build the same items.
  body["stream"] = true;
  res = cli.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const std::vector<SseEvent> events = ResponsesEvents(res->body);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().event, "response.completed");
  std::string reasoning, content, args;
  json done_items = json::array(), done_args = json::array();
  for (const SseEvent& e : events) {
    if (e.event == "response.reasoning_text.delta") reasoning += e.data["delta"].get<std::string>();
    if (e.event == "response.output_text.delta") content += e.data["delta"].get<std::string>();
    if (e.event == "response.function_call_arguments.delta") {
      EXPECT_EQ(e.data["output_index"], 2);
      args += e.data["delta"].get<std::string>();
    }
    if (e.event == "response.function_call_arguments.done") done_args.push_back(e.data["arguments"]);
    if (e.event == "response.output_item.done") {
      EXPECT_EQ(e.data["output_index"], done_items.size());
      done_items.push_back(e.data["item"]);
    }
  }
  EXPECT_EQ(reasoning, "Need the weather.");
  EXPECT_EQ(content, "Let me look.");
  EXPECT_EQ(json::parse(args), json({{"city", "Paris"}}));
  EXPECT_EQ(done_args, json::array({args}));
  const json streamed = events.back().data["response"]["output"];
  EXPECT_EQ(done_items, streamed);
  // (call ids are random per response)
  json a = WithoutIds(streamed), b = WithoutIds(output);
  a[2].erase("call_id");
  b[2].erase("call_id");
  EXPECT_EQ(a, b);

  // The next turn: the call and its output as items render as chat's tool_calls and
  // tool message; a reasoning item given back is dropped.
  body["stream"] = false;
  body["input"] = json::array({json{{"role", "user"}, {"content", "Weather in Paris?"}}, output[0],
                               json{{"type", "function_call"},
                                    {"call_id", "call_1"},
                                    {"name", "get_weather"},
                                    {"arguments", "{\"city\":\"Paris\"}"}},
                               json{{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "sunny"}}});
  res = cli.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const v1::SessionStart turn2 = w->last_start();
  chat["messages"].push_back(ojson::parse(R"({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1",
      "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]})"));
  chat["messages"].push_back(ojson{{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}});
  res = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const v1::SessionStart chat2 = w->last_start();
  const std::vector<int32_t> turn2_prompt(turn2.prompt().begin(), turn2.prompt().end());
  EXPECT_EQ(turn2_prompt, std::vector<int32_t>(chat2.prompt().begin(), chat2.prompt().end()));
  EXPECT_TRUE(absl::StrContains(vocab_->Detokenize(turn2_prompt, false),
                                "<tool_call>call_1 get_weather {\"city\":\"Paris\"}</tool_call>"))
      << vocab_->Detokenize(turn2_prompt, false);

  // A named function forces the call with chat's grammar; text.format json_schema
  // constrains as chat's response_format.
  body["input"] = "Weather in Paris?";
  body["tool_choice"] = json{{"type", "function"}, {"name", "get_weather"}};
  res = cli.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["tool_choice"], body["tool_choice"]);
  const std::string grammar = w->last_start().sampling().grammar();
  EXPECT_TRUE(absl::StrContains(grammar, "<tool_call>") && absl::StrContains(grammar, "get_weather")) << grammar;
  body.erase("tool_choice");
  body.erase("tools");
  body["text"] = {{"format", {{"type", "json_schema"}, {"name", "w"}, {"schema", params}, {"strict", true}}}};
  res = cli.Post("/v1/responses", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["text"], body["text"]);
  const std::string schema_grammar = w->last_start().sampling().grammar();
  chat.erase("tools");
  chat["messages"] = ojson::array({ojson{{"role", "user"}, {"content", "Weather in Paris?"}}});
  chat["response_format"] = ojson::parse(
      absl::StrCat(R"({"type": "json_schema", "json_schema": {"name": "w", "schema": )", params.dump(), "}}"));
  res = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(schema_grammar.empty());
  EXPECT_EQ(schema_grammar, w->last_start().sampling().grammar());
}

// Refused, never ignored: errors name the Responses field (param) they are about.
TEST_F(GatewayTest, HttpResponsesErrors) {
  FakeWorker* w = AddWorker();
  auto t = StartGateway({w});
  httplib::Client cli = HttpClient(*t);
  const json ok = {{"model", "stories260K"}, {"input", "x"}};
  auto with = [&](const json& patch) {
    json b = ok;
    b.merge_patch(patch);
    return b;
  };
  struct Case {
    json body;
    std::string param;
    std::string message;  // a part of the message ("" = any)
  };
  for (const Case& c : std::vector<Case>{
           {with({{"frobnicate", 1}}), "frobnicate", "unknown or unsupported field"},
           {with({{"previous_response_id", "resp_1"}}), "previous_response_id",
            "previous_response_id: not supported (herd stores no responses; send the whole input)"},
           {with({{"tools", json::array({json{{"type", "function"}, {"name", "f"}}, json{{"type", "web_search"}}})}}),
            "tools[1].type", "'web_search' is not supported"},
           {with({{"tools", json::array({json{{"type", "function"}}})}}), "tools[0].name", "required"},
           {with({{"input", nullptr}}), "input", "required"},
           {with({{"input", 3}}), "input", ""},
           {with({{"max_output_tokens", 0}}), "max_output_tokens", "at least 1"},
           {with({{"max_output_tokens", "many"}}), "max_output_tokens", "integer"},
           {with({{"temperature", "hot"}}), "temperature", "number"},
           {with({{"input", json::parse(R"([{"role": "user", "content": [{"type": "input_image"}]}])")}}),
            "input[0].content[0].type", "'input_image' is not supported"},
           {with({{"input", json::parse(R"([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}])")}}),
            "input[1].role", "not one of"},
           {with({{"input",
                   json::parse(R"([{"role": "user", "content": "a"}, {"type": "item_reference", "id": "x"}])")}}),
            "input[1].type", "stores no responses"},
           {with({{"input", json::parse(R"([{"type": "function_call", "name": "f", "arguments": "{}"}])")}}),
            "input[0].call_id", "required"},
           {with({{"input", json::parse(R"([{"role": "user", "content": "a", "extra": 1}])")}}), "input[0].extra",
            "unknown"},
           {with({{"tool_choice", "required"}}), "tool_choice", "needs a non-empty tools array"},
           {with({{"tool_choice", json{{"type", "file_search"}}}}), "tool_choice.type", "not supported"},
           {with({{"tool_choice", json{{"type", "function"}}}}), "tool_choice.name", "required"},
           {with({{"tools", json::array({json{{"type", "function"}, {"name", "f"}}})},
                  {"tool_choice", json{{"type", "function"}, {"name", "nope"}}}}),
            "tool_choice.name", "'nope' is not one of the tools"},
           {with({{"tools", json::array({json{{"type", "function"},
                                              {"name", "f"},
                                              {"parameters",
                                               {{"type", "object"},
                                                {"properties", {{"a", {{"type", "integer"}, {"multipleOf", 2}}}}}}}}})},
                  {"tool_choice", "required"}}),
            "tools[0].parameters", "multipleOf: keyword not supported"},
           {with({{"reasoning", {{"effort", "extreme"}}}}), "reasoning.effort", "not one of"},
           {with({{"text", {{"format", {{"type", "json_schema"}, {"name", "x"}}}}}}), "text.format.schema", "required"},
           {with({{"text", {{"format", {{"type", "xml"}}}}}}), "text.format.type", "not one of"},
           {with({{"text",
                   {{"format", {{"type", "json_schema"}, {"schema", {{"type", "object"}, {"pattern", "x"}}}}}}}}),
            "", "text.format.schema/pattern: keyword not supported"},  // (a JSON pointer: no param)
           {with({{"truncation", "auto"}}), "truncation", "not supported"},
           {with({{"include", json::array({"reasoning.encrypted_content"})}}), "include[0]", "not supported"},
           {with({{"stream", "yes"}}), "stream", "boolean"},
           {json{{"input", "x"}}, "model", "required"},
       }) {
    auto r = cli.Post("/v1/responses", c.body.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << c.body.dump() << " -> " << r->body;
    const json e = json::parse(r->body)["error"];
    EXPECT_EQ(e["param"], c.param.empty() ? json(nullptr) : json(c.param)) << c.body.dump() << " -> " << r->body;
    EXPECT_TRUE(absl::StrContains(e["message"].get<std::string>(), c.message)) << r->body;
    EXPECT_EQ(e["type"], "invalid_request_error");
  }
  auto r = cli.Post("/v1/responses", with({{"frobnicate", 1}}).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "unknown_parameter");
  r = cli.Post("/v1/responses", with({{"model", "nope"}}).dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  r = cli.Post("/v1/responses", "{not json", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
}

// A worker dying mid-stream ends a Responses stream with an error event.
TEST_F(GatewayTest, HttpResponsesStreamError) {
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) {
    c.eos_after_script = false;
    c.token_delay_ms = 10;
  });
  const std::string addr = w->address();
  auto t = StartGateway({w});
  httplib::Client cli = HttpClient(*t);
  const json body = {{"model", "stories260K"}, {"input", "x"}, {"max_output_tokens", 200}, {"stream", true}};
  int status = 0;
  std::string sse;
  std::thread client([&] {
    auto r = cli.Post("/v1/responses", body.dump(), "application/json");
    if (r) status = r->status, sse = r->body;
  });
  EXPECT_TRUE(WaitFor([&] { return w->sessions_started() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  w->Kill();
  client.join();
  ASSERT_EQ(status, 200) << sse;
  const std::vector<SseEvent> events = ResponsesEvents(sse);
  ASSERT_GE(events.size(), 3u) << sse;
  EXPECT_EQ(events[0].event, "response.created");
  const SseEvent& last = events.back();
  EXPECT_EQ(last.event, "error") << sse;
  EXPECT_EQ(last.data["code"], "service_unavailable") << sse;
  EXPECT_TRUE(absl::StrContains(last.data["message"].get<std::string>(), addr)) << sse;
  EXPECT_TRUE(last.data.contains("param"));
}

TEST_F(GatewayTest, ContextSemanticsAsLlamaCpp) {
  // n_ctx_seq 16: prompt + completion fill exactly 16 tokens when max_tokens is absent.
  FakeWorker* w = AddWorker("stories260K", [](FakeWorkerConfig& c) {
    c.n_ctx = 64;
    c.n_ctx_seq = 16;
    c.eos_after_script = false;
  });
  auto t = StartGateway({w});
  httplib::Client cli = HttpClient(*t);
  json body = {{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"temperature", 0}};  // 5 tokens
  for (const json& max_tokens : {json(nullptr), json(-1)}) {
    if (!max_tokens.is_null()) body["max_tokens"] = max_tokens;
    auto res = cli.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    json j = json::parse(res->body);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
    EXPECT_EQ(j["usage"]["completion_tokens"], 11) << "prompt + completion must be n_ctx = 16";
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  }
  // A prompt of n_ctx tokens or more is refused; n_ctx - 1 gives one token.
  std::vector<int32_t> ids(16, 300);
  ids[0] = 1;
  auto res = cli.Post("/v1/completions", json{{"model", "stories260K"}, {"prompt", ids}}.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_TRUE(absl::StartsWith(json::parse(res->body)["error"]["message"].get<std::string>(), "prompt")) << res->body;
  ids.pop_back();
  res = cli.Post("/v1/completions", json{{"model", "stories260K"}, {"prompt", ids}}.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["usage"]["completion_tokens"], 1);
  // top_k -1 means disabled, as in llama.cpp.
  res = cli.Post("/v1/completions",
                 json{{"model", "stories260K"}, {"prompt", "x"}, {"max_tokens", 1}, {"top_k", -1}}.dump(),
                 "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST_F(GatewayTest, HttpTokenizeDetokenizeHealth) {
  FakeWorker* w = AddWorker();
  auto t = StartGateway({w});
  httplib::Client cli("127.0.0.1", t->http_port);
  auto h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  // llama-server's /tokenize: no BOS by default, model optional with one model served.
  auto r = cli.Post("/tokenize", json{{"content", "Once upon a time"}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["tokens"], json::array({403, 407, 261, 378}));
  r = cli.Post("/tokenize", json{{"content", "Once"}, {"add_special", true}, {"with_pieces", true}}.dump(),
               "application/json");
  ASSERT_TRUE(r);
  json tp = json::parse(r->body)["tokens"];
  ASSERT_EQ(tp.size(), 2u) << r->body;
  EXPECT_EQ(tp[1]["id"], 403);
  EXPECT_EQ(tp[1]["piece"], vocab_->TokenToPiece(403, true));
  // /detokenize keeps the SPM piece's leading space, as llama-server does.
  r = cli.Post("/detokenize", json{{"tokens", json::array({403, 407})}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["content"], vocab_->TokenToPiece(403, true) + vocab_->TokenToPiece(407, true));
  EXPECT_EQ(json::parse(r->body)["content"].get<std::string>()[0], ' ');
  r = cli.Post("/detokenize", json{{"tokens", json::array({1, 99999})}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  // No live worker: /health is 503.
  w->Kill();
  ASSERT_TRUE(WaitFor([&] { return t->gw->pool().live_count() == 0; }, 10000));
  h = cli.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
}

// ---- herd generate ----

int RunCli(const std::vector<std::string>& args, std::string* out, std::string* err) {
  std::vector<std::string> a = {"herd", "generate"};
  a.insert(a.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : a) argv.push_back(s.data());
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int rc = cli::CmdGenerate(static_cast<int>(argv.size()), argv.data());
  *out = ::testing::internal::GetCapturedStdout();
  *err = ::testing::internal::GetCapturedStderr();
  return rc;
}

TEST_F(GatewayTest, HerdGenerateStreamsTextAndReportsUsage) {
  const std::vector<int32_t> story = vocab_->Tokenize("there was a little girl", false, false);
  FakeWorker* w = AddWorker("stories260K", [&](FakeWorkerConfig& c) { c.script = story; });
  auto t = StartGateway({w});
  const std::string addr = absl::StrCat("127.0.0.1:", t->port);
  // The gateway runs in this process: keep its request logs out of the captured stderr.
  SetMinLogLevel(LogLevel::kError);
  struct Restore {
    ~Restore() { SetMinLogLevel(LogLevel::kInfo); }
  } restore;
  std::string out, err;
  int rc = RunCli({"--gateway", addr, "-m", "stories260K", "-p", "Once upon a time", "-n", "32", "--temp", "0",
                   "--top-k", "5", "--seed", "42", "--stop", "little", "--stop=zzz", "--timeout-ms", "5000"},
                  &out, &err);
  EXPECT_EQ(rc, 0) << err;
  EXPECT_EQ(out, " there was a \n");
  EXPECT_TRUE(absl::StrContains(err, "finish: stop")) << err;
  EXPECT_TRUE(absl::StrContains(err, "prompt 5 tokens")) << err;
  EXPECT_TRUE(absl::StrContains(err, "tokens/s")) << err;
  EXPECT_EQ(w->last_start().sampling().top_k(), 5);
  EXPECT_EQ(w->last_start().sampling().seed(), 42u);

  rc = RunCli({"--gateway", addr, "-m", "nope", "-p", "x"}, &out, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(absl::StartsWith(err, "herd: error: generate: NOT_FOUND: ")) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  rc = RunCli({"--gateway", addr, "-m", "stories260K", "-p", "x", "--temp", "-1"}, &out, &err);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(absl::StrContains(err, "INVALID_ARGUMENT: sampling.temperature")) << err;
  rc = RunCli({"-m", "stories260K"}, &out, &err);
  EXPECT_EQ(rc, 2);
}

}  // namespace
}  // namespace herd::gateway
