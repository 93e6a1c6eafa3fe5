// WorkerServiceImpl in-process on 127.0.0.1:0 over a real gRPC channel, on
// stories260K: session round trips equal solo greedy generation (also with drafts and
// concurrent sessions), invalid requests end their stream with the right code while
// the service stays up, closing/cancelling a stream frees its KV cells, admission
// control, and the metrics.
#include "services/worker/worker_service.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

#include "libs/engine/generate.h"
#include "libs/serving/server.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"
#include "tests/stories_model_test.h"

namespace herd::worker {
namespace {

namespace v1 = herd::v1;
using Stream = grpc::ClientReaderWriter<v1::SessionRequest, v1::SessionResponse>;

class WorkerServiceTest : public StoriesModelTest {
 protected:
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    server_.reset();
    service_.reset();
    scheduler_.reset();
    engine_.reset();
  }

  void StartServer(engine::SchedulerConfig cfg, int64_t n_ctx = 512, int64_t n_batch = 64) {
    engine::EngineParams ep;
    ep.n_ctx = n_ctx;
    ep.n_batch = n_batch;
    auto e = engine::Engine::Create(*model_, ep, &backend_);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = *std::move(e);
    auto s = engine::Scheduler::Create(engine_.get(), vocab_.get(), cfg);
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = *std::move(s);
    WorkerServiceOptions o;
    o.model_name = "stories260K";
    o.architecture = model_->hparams().arch;
    service_ = std::make_unique<WorkerServiceImpl>(scheduler_.get(), o, &registry_);
    serving::GrpcServerOptions go;
    go.address = "127.0.0.1:0";
    int port = 0;
    auto srv = serving::StartGrpcServer(go, {service_.get()}, &port);
    ASSERT_TRUE(srv.ok()) << srv.status();
    server_ = *std::move(srv);
    stub_ = v1::Worker::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  }

  v1::WorkerInfo Info() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::WorkerInfo info;
    grpc::Status s = stub_->Info(&ctx, v1::WorkerInfoRequest(), &info);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return info;
  }

  // Polls Info until kv_cells_used and active_sequences are 0; returns the ms it took.
  double WaitKvFree(int timeout_ms = 1000) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      v1::WorkerInfo i = Info();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i.kv_cells_used() == 0 && i.active_sequences() == 0) return ms;
      if (ms > timeout_ms) {
        ADD_FAILURE() << "KV cells still used after " << timeout_ms << " ms: " << i.kv_cells_used();
        return ms;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  std::vector<int32_t> Solo(const std::vector<int32_t>& prompt, int32_t n) {
    engine::EngineParams ep;
    ep.n_ctx = 512;
    auto e = engine::Engine::Create(*model_, ep, &reference_backend_);
    EXPECT_TRUE(e.ok());
    engine::GenerateParams gp;
    gp.prompt_ids = prompt;
    gp.n_predict = n;
    gp.sampling.temp = 0;
    gp.ignore_eos = true;
    auto r = engine::Generate(**e, *vocab_, gp);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->output_ids : std::vector<int32_t>();
  }

  static v1::SessionRequest StartReq(const std::vector<int32_t>& prompt) {
    v1::SessionRequest r;
    v1::SessionStart* s = r.mutable_start();
    s->mutable_prompt()->Add(prompt.begin(), prompt.end());
    s->mutable_sampling()->set_temperature(0);
    s->set_ignore_eos(true);
    return r;
  }
  static v1::SessionRequest StepReq(int32_t n, const std::vector<int32_t>& draft = {}) {
    v1::SessionRequest r;
    r.mutable_step()->set_n_steps(n);
    r.mutable_step()->mutable_draft()->Add(draft.begin(), draft.end());
    return r;
  }
  static v1::SessionRequest CancelReq() {
    v1::SessionRequest r;
    r.mutable_cancel();
    return r;
  }

  // Sends `reqs` on a fresh stream, reads until the end, returns the final status.
  grpc::Status RunToEnd(const std::vector<v1::SessionRequest>& reqs, std::vector<v1::SessionResponse>* out = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    std::unique_ptr<Stream> st = stub_->Session(&ctx);
    for (const auto& r : reqs) st->Write(r);
    st->WritesDone();
    v1::SessionResponse resp;
    while (st->Read(&resp)) {
      if (out) out->push_back(resp);
    }
    return st->Finish();
  }

  std::unique_ptr<Backend> backend_owner_ =
      CpuBackendForTests(2);  // the server's (its scheduler thread computes on it)
  Backend& backend_ = *backend_owner_;
  // Expected outputs, computed on the test's thread while the server runs: a backend is
  // used by one thread at a time.
  std::unique_ptr<Backend> reference_backend_owner_ = CpuBackendForTests(2);
  Backend& reference_backend_ = *reference_backend_owner_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> scheduler_;
  serving::Registry registry_;
  std::unique_ptr<WorkerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> stub_;
  const std::vector<int32_t> prompt_ = {1, 403, 407, 261, 378, 432, 383, 286};
};

TEST_F(WorkerServiceTest, SessionRoundTripEqualsSoloGreedy) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 4;
  cfg.n_ctx_seq = 128;
  StartServer(cfg);
  const std::vector<int32_t> solo = Solo(prompt_, 40);

  v1::WorkerInfo info = Info();
  EXPECT_EQ(info.model(), "stories260K");
  EXPECT_EQ(info.architecture(), "llama");
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_EQ(info.n_ctx(), 512);
  EXPECT_EQ(info.n_ctx_seq(), 128);
  EXPECT_EQ(info.n_vocab(), 512);
  EXPECT_EQ(info.max_sequences(), 4);
  EXPECT_EQ(info.kv_cells_used(), 0);

  grpc::ClientContext ctx;
  std::unique_ptr<Stream> st = stub_->Session(&ctx);
  v1::SessionRequest start = StartReq(prompt_);
  start.mutable_start()->set_logprobs(3);
  ASSERT_TRUE(st->Write(start));
  v1::SessionResponse resp;
  ASSERT_TRUE(st->Read(&resp));
  ASSERT_TRUE(resp.has_started());
  EXPECT_EQ(resp.started().n_prompt(), 8);
  EXPECT_GE(resp.started().queue_ms(), 0.0);

  std::vector<int32_t> out;
  // 20 plain steps in one request.
  ASSERT_TRUE(st->Write(StepReq(20)));
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(st->Read(&resp));
    ASSERT_TRUE(resp.has_step());
    ASSERT_EQ(resp.step().tokens_size(), 1);
    EXPECT_EQ(resp.step().n_accepted(), 0);
    ASSERT_EQ(resp.step().logprobs_size(), 1);
    EXPECT_EQ(resp.step().logprobs(0).token_id(), resp.step().tokens(0));
    EXPECT_EQ(resp.step().logprobs(0).top_size(), 3);
    EXPECT_GT(resp.step().prompt_ms(), 0.0);
    out.push_back(resp.step().tokens(0));
  }
  // A correct draft of 10: all accepted plus one.
  ASSERT_TRUE(st->Write(StepReq(1, std::vector<int32_t>(solo.begin() + 20, solo.begin() + 30))));
  ASSERT_TRUE(st->Read(&resp));
  EXPECT_EQ(resp.step().n_accepted(), 10);
  EXPECT_EQ(resp.step().tokens_size(), 11);
  EXPECT_EQ(resp.step().logprobs_size(), 11);
  out.insert(out.end(), resp.step().tokens().begin(), resp.step().tokens().end());
  // A draft wrong at its second token.
  ASSERT_TRUE(st->Write(StepReq(0, {solo[31], (solo[32] + 1) % 512, solo[33]})));
  ASSERT_TRUE(st->Read(&resp));
  EXPECT_EQ(resp.step().n_accepted(), 1);
  out.insert(out.end(), resp.step().tokens().begin(), resp.step().tokens().end());
  ASSERT_TRUE(st->Write(StepReq(static_cast<int32_t>(40 - out.size()))));
  while (out.size() < 40) {
    ASSERT_TRUE(st->Read(&resp));
    out.insert(out.end(), resp.step().tokens().begin(), resp.step().tokens().end());
  }
  EXPECT_EQ(out, solo);
  EXPECT_GT(resp.step().generation_ms(), 0.0);

  info = Info();
  EXPECT_EQ(info.active_sequences(), 1);
  EXPECT_EQ(info.kv_cells_used(), static_cast<int64_t>(prompt_.size() + out.size() - 1));
  ASSERT_TRUE(st->Write(CancelReq()));
  st->WritesDone();
  while (st->Read(&resp)) {
  }
  grpc::Status fs = st->Finish();
  EXPECT_TRUE(fs.ok()) << fs.error_code() << " " << fs.error_message();
  WaitKvFree();
  // The gauges follow right after the scheduler's iteration.
  for (int i = 0; i < 200 && registry_.Render().find("herd_worker_kv_cells_used 0") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const std::string metrics = registry_.Render();
  EXPECT_NE(metrics.find("herd_worker_tokens_generated_total 40"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_prompt_tokens_total 8"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_requests_total{code=\"OK\"}"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_kv_cells_used 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_kv_cells_capacity 512"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_kv_cache_usage_perc 0"), std::string::npos) << metrics;
  // n_ctx 512 in blocks of the digest's 16 tokens.
  EXPECT_NE(metrics.find("herd_worker_cache_config_info{block_size=\"16\",num_gpu_blocks=\"32\","
                         "enable_prefix_caching=\"true\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("herd_worker_active_sequences 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_queued_sequences 0"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_batch_tokens_count"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_batch_sequences_bucket"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_step_seconds_count"), std::string::npos) << metrics;
  // The cancelled sequence's cells stay as a cached prefix: the prompt and the 40
  // generated tokens but the last (pending) one.
  EXPECT_NE(metrics.find("herd_worker_kv_cells_cached " + std::to_string(prompt_.size() + 39)), std::string::npos)
      << metrics;
  EXPECT_EQ(Info().kv_cells_cached(), static_cast<int64_t>(prompt_.size() + 39));
  EXPECT_NE(metrics.find("herd_worker_prefix_cache_lookups_total 1"), std::string::npos) << metrics;

  // The same prompt again reuses all of it but its last token.
  grpc::ClientContext ctx2;
  std::unique_ptr<Stream> st2 = stub_->Session(&ctx2);
  ASSERT_TRUE(st2->Write(StartReq(prompt_)));
  ASSERT_TRUE(st2->Read(&resp));
  ASSERT_TRUE(st2->Write(StepReq(5)));
  std::vector<int32_t> again;
  while (again.size() < 5 && st2->Read(&resp))
    again.insert(again.end(), resp.step().tokens().begin(), resp.step().tokens().end());
  EXPECT_EQ(again, std::vector<int32_t>(solo.begin(), solo.begin() + 5));
  st2->WritesDone();
  while (st2->Read(&resp)) {
  }
  EXPECT_TRUE(st2->Finish().ok());
  std::string m2;
  for (int i = 0; i < 200; ++i) {
    m2 = registry_.Render();
    if (m2.find("herd_worker_prefix_cache_hits_total 1") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_NE(m2.find("herd_worker_prefix_cache_hits_total 1"), std::string::npos) << m2;
  EXPECT_NE(m2.find("herd_worker_prefix_cache_tokens_total " + std::to_string(prompt_.size() - 1)), std::string::npos)
      << m2;
  EXPECT_NE(m2.find("# TYPE herd_worker_preemptions_total counter"), std::string::npos) << m2;
}

// Drafts with their distributions (SessionStep.draft_probs): a sampling sequence
// verifies them by rejection sampling (the result is an accepted prefix of the draft
// plus one token); a greedy one accepts exactly the greedy prefix.
TEST_F(WorkerServiceTest, DraftsWithProbabilities) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 4;
  StartServer(cfg);
  const std::vector<int32_t> solo = Solo(prompt_, 12);
  auto step_with_probs = [](const std::vector<int32_t>& draft) {
    v1::SessionRequest r = StepReq(1, draft);
    for (int32_t t : draft) {
      v1::DraftTokenProbs* q = r.mutable_step()->add_draft_probs();
      q->add_ids(t);
      q->add_p(0.7f);
      q->add_ids((t + 1) % 512);
      q->add_p(0.3f);
    }
    return r;
  };
  for (float temp : {0.0f, 0.8f}) {
    SCOPED_TRACE(testing::Message() << "temperature " << temp);
    grpc::ClientContext ctx;
    std::unique_ptr<Stream> st = stub_->Session(&ctx);
    v1::SessionRequest start = StartReq(prompt_);
    start.mutable_start()->mutable_sampling()->set_temperature(temp);
    start.mutable_start()->mutable_sampling()->set_seed(5);
    ASSERT_TRUE(st->Write(start));
    const std::vector<int32_t> draft(solo.begin(), solo.begin() + 6);
    ASSERT_TRUE(st->Write(step_with_probs(draft)));
    v1::SessionResponse resp;
    ASSERT_TRUE(st->Read(&resp));
    ASSERT_TRUE(resp.has_started());
    ASSERT_TRUE(st->Read(&resp));
    ASSERT_TRUE(resp.has_step());
    const v1::StepResult& r = resp.step();
    ASSERT_EQ(r.tokens_size(), r.n_accepted() + 1);
    for (int i = 0; i < r.n_accepted(); ++i) EXPECT_EQ(r.tokens(i), draft[static_cast<size_t>(i)]);
    if (temp == 0.0f) {
      EXPECT_EQ(r.n_accepted(), 6);
      EXPECT_EQ(std::vector<int32_t>(r.tokens().begin(), r.tokens().end()),
                std::vector<int32_t>(solo.begin(), solo.begin() + 7));
    }
    // Plain steps go on from there.
    ASSERT_TRUE(st->Write(StepReq(2)));
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(st->Read(&resp));
      EXPECT_TRUE(resp.has_step());
    }
    ASSERT_TRUE(st->Write(CancelReq()));
    st->WritesDone();
    while (st->Read(&resp)) {
    }
    EXPECT_TRUE(st->Finish().ok());
  }
}

TEST_F(WorkerServiceTest, ConcurrentSessionsEqualSolo) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 8;
  StartServer(cfg, 1024, 32);
  constexpr int kN = 8;
  std::vector<std::vector<int32_t>> prompts, solo(kN), got(kN);
  for (int i = 0; i < kN; ++i) {
    std::vector<int32_t> p = {1};
    for (int j = 0; j < 3 + 4 * i; ++j) p.push_back(3 + (37 * i + 11 * j) % 500);
    prompts.push_back(p);
    solo[i] = Solo(p, 25);
  }
  std::vector<std::thread> threads;
  for (int i = 0; i < kN; ++i) {
    threads.emplace_back([&, i] {
      std::vector<v1::SessionResponse> out;
      grpc::Status s = RunToEnd({StartReq(prompts[i]), StepReq(25)}, &out);
      // The client half-closed right after its requests: the worker frees the sequence
      // and ends with OK, possibly before every result was sent.
      EXPECT_TRUE(s.ok()) << s.error_message();
      (void)out;
    });
    threads.emplace_back([&, i] {
      grpc::ClientContext ctx;
      std::unique_ptr<Stream> st = stub_->Session(&ctx);
      st->Write(StartReq(prompts[i]));
      st->Write(StepReq(25));
      v1::SessionResponse resp;
      while (got[i].size() < 25 && st->Read(&resp)) {
        if (resp.has_step()) got[i].insert(got[i].end(), resp.step().tokens().begin(), resp.step().tokens().end());
      }
      st->WritesDone();
      while (st->Read(&resp)) {
      }
      EXPECT_TRUE(st->Finish().ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kN; ++i) EXPECT_EQ(got[i], solo[i]) << "session " << i;
  EXPECT_GT(scheduler_->Stats().multi_sequence_iterations, 0u);
  WaitKvFree();
}

TEST_F(WorkerServiceTest, InvalidRequestsGetTheirCodeAndTheServiceStaysUp) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 4;
  cfg.n_ctx_seq = 128;
  cfg.max_draft = 16;
  StartServer(cfg);
  struct Case {
    std::string name;
    std::vector<v1::SessionRequest> reqs;
    grpc::StatusCode code;
    std::string field;
  };
  std::vector<Case> cases;
  cases.push_back({"step before start", {StepReq(1)}, grpc::StatusCode::FAILED_PRECONDITION, "Start"});
  cases.push_back({"empty request", {v1::SessionRequest()}, grpc::StatusCode::INVALID_ARGUMENT, "request"});
  cases.push_back({"empty prompt", {StartReq({})}, grpc::StatusCode::INVALID_ARGUMENT, "start.prompt"});
  cases.push_back(
      {"token outside vocab", {StartReq({1, 2, 512})}, grpc::StatusCode::INVALID_ARGUMENT, "start.prompt[2]"});
  cases.push_back({"negative token", {StartReq({-1})}, grpc::StatusCode::INVALID_ARGUMENT, "start.prompt[0]"});
  cases.push_back(
      {"prompt too long", {StartReq(std::vector<int32_t>(129, 5))}, grpc::StatusCode::INVALID_ARGUMENT, "n_ctx_seq"});
  auto with_sampling = [&](const std::function<void(v1::SamplingParams*)>& f) {
    v1::SessionRequest r = StartReq(prompt_);
    f(r.mutable_start()->mutable_sampling());
    return r;
  };
  cases.push_back({"temperature",
                   {with_sampling([](v1::SamplingParams* s) { s->set_temperature(-1); })},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "start.sampling.temperature"});
  cases.push_back({"top_p",
                   {with_sampling([](v1::SamplingParams* s) { s->set_top_p(1.5f); })},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "start.sampling.top_p"});
  cases.push_back({"min_p",
                   {with_sampling([](v1::SamplingParams* s) { s->set_min_p(-0.1f); })},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "start.sampling.min_p"});
  cases.push_back({"repeat_penalty",
                   {with_sampling([](v1::SamplingParams* s) { s->set_repeat_penalty(0); })},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "start.sampling.repeat_penalty"});
  cases.push_back({"repeat_last_n",
                   {with_sampling([](v1::SamplingParams* s) { s->set_repeat_last_n(-5); })},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "start.sampling.repeat_last_n"});
  cases.push_back({"presence_penalty",
                   {with_sampling([](v1::SamplingParams* s) { s->set_presence_penalty(NAN); })},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "start.sampling.presence_penalty"});
  cases.push_back({"grammar",
                   {with_sampling([](v1::SamplingParams* s) { s->set_grammar("root ::= x"); })},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "start.sampling.grammar: undefined rule 'x'"});
  cases.push_back({"logit_bias id",
                   {with_sampling([](v1::SamplingParams* s) { s->add_logit_bias()->set_token_id(512); })},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "start.sampling.logit_bias[0].token_id: 512 is outside the vocabulary [0, 512)"});
  v1::SessionRequest lp = StartReq(prompt_);
  lp.mutable_start()->set_logprobs(21);
  cases.push_back({"logprobs", {lp}, grpc::StatusCode::INVALID_ARGUMENT, "start.logprobs"});
  cases.push_back(
      {"draft token", {StartReq(prompt_), StepReq(1, {5, 9999})}, grpc::StatusCode::INVALID_ARGUMENT, "step.draft[1]"});
  cases.push_back({"draft too long",
                   {StartReq(prompt_), StepReq(1, std::vector<int32_t>(17, 5))},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "step.draft"});
  auto with_probs = [](std::vector<int32_t> draft, std::vector<std::vector<std::pair<int32_t, float>>> probs) {
    v1::SessionRequest r = StepReq(1, draft);
    for (const auto& d : probs) {
      v1::DraftTokenProbs* q = r.mutable_step()->add_draft_probs();
      for (auto [id, p] : d) {
        q->add_ids(id);
        q->add_p(p);
      }
    }
    return r;
  };
  cases.push_back({"draft_probs count",
                   {StartReq(prompt_), with_probs({5, 6}, {{{5, 1.0f}}})},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "step.draft_probs"});
  {
    v1::SessionRequest r = with_probs({5}, {{{5, 1.0f}}});
    r.mutable_step()->mutable_draft_probs(0)->add_ids(7);
    cases.push_back(
        {"draft_probs ids vs p", {StartReq(prompt_), r}, grpc::StatusCode::INVALID_ARGUMENT, "step.draft_probs[0]"});
  }
  cases.push_back({"draft token improbable",
                   {StartReq(prompt_), with_probs({5, 6}, {{{5, 1.0f}}, {{7, 1.0f}}})},
                   grpc::StatusCode::INVALID_ARGUMENT,
                   "step.draft_probs[1]"});
  cases.push_back(
      {"negative n_steps", {StartReq(prompt_), StepReq(-1)}, grpc::StatusCode::INVALID_ARGUMENT, "step.n_steps"});
  cases.push_back(
      {"n_steps with draft", {StartReq(prompt_), StepReq(3, {5})}, grpc::StatusCode::INVALID_ARGUMENT, "step.n_steps"});
  cases.push_back(
      {"second start", {StartReq(prompt_), StartReq(prompt_)}, grpc::StatusCode::FAILED_PRECONDITION, "start"});
  for (const Case& c : cases) {
    grpc::Status s = RunToEnd(c.reqs);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.field), std::string::npos) << c.name << ": " << s.error_message();
  }
  // Still serving, nothing leaked.
  WaitKvFree();
  std::vector<v1::SessionResponse> out;
  grpc::ClientContext ctx;
  std::unique_ptr<Stream> st = stub_->Session(&ctx);
  st->Write(StartReq(prompt_));
  st->Write(StepReq(5));
  v1::SessionResponse resp;
  int steps = 0;
  while (steps < 5 && st->Read(&resp)) steps += resp.has_step() ? 1 : 0;
  EXPECT_EQ(steps, 5);
  st->Write(CancelReq());
  while (st->Read(&resp)) {
  }
  EXPECT_TRUE(st->Finish().ok());
  // OnDone runs on the server shortly after the status went out.
  for (int i = 0; i < 200 && service_->open_sessions() != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(service_->open_sessions(), 0);
  const std::string metrics = registry_.Render();
  EXPECT_NE(metrics.find("herd_worker_requests_total{code=\"INVALID_ARGUMENT\"} 21"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("herd_worker_requests_total{code=\"FAILED_PRECONDITION\"} 2"), std::string::npos) << metrics;
}

// A backend reported unavailable (a remote compute server down): Info and new sessions
// answer UNAVAILABLE naming it; once it is back both work again.
TEST_F(WorkerServiceTest, UnavailableBackendRefusesInfoAndSessionsUntilBack) {
  StartServer(engine::SchedulerConfig());
  service_->SetBackendStatus(absl::UnavailableError("remote backend 10.0.0.7:50061: unreachable"));
  {
    grpc::ClientContext ctx;
    v1::WorkerInfo info;
    grpc::Status s = stub_->Info(&ctx, v1::WorkerInfoRequest(), &info);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(s.error_message().find("10.0.0.7:50061"), std::string::npos) << s.error_message();
  }
  {
    grpc::ClientContext ctx;
    std::unique_ptr<Stream> st = stub_->Session(&ctx);
    st->Write(StartReq(prompt_));
    v1::SessionResponse resp;
    while (st->Read(&resp)) {
    }
    grpc::Status s = st->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_NE(s.error_message().find("backend unavailable"), std::string::npos) << s.error_message();
  }
  service_->SetBackendStatus(absl::OkStatus());
  grpc::ClientContext ctx;
  v1::WorkerInfo info;
  EXPECT_TRUE(stub_->Info(&ctx, v1::WorkerInfoRequest(), &info).ok());
  std::vector<v1::SessionResponse> out;
  grpc::ClientContext sctx;
  std::unique_ptr<Stream> st = stub_->Session(&sctx);
  st->Write(StartReq(prompt_));
  st->Write(StepReq(3));
  v1::SessionResponse resp;
  int tokens = 0;
  while (tokens < 3 && st->Read(&resp)) {
    if (resp.has_step()) tokens += resp.step().tokens_size();
  }
  EXPECT_EQ(tokens, 3);
  st->WritesDone();
  while (st->Read(&resp)) {
  }
  st->Finish();
  WaitKvFree();
}

TEST_F(WorkerServiceTest, ContextFullThenStepIsFailedPrecondition) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 32;
  cfg.n_ctx_seq = 16;
  StartServer(cfg);
  std::vector<v1::SessionResponse> out;
  grpc::ClientContext ctx;
  std::unique_ptr<Stream> st = stub_->Session(&ctx);
  st->Write(StartReq(prompt_));
  st->Write(StepReq(100));
  v1::SessionResponse resp;
  int tokens = 0;
  while (st->Read(&resp)) {
    if (!resp.has_step()) continue;
    tokens += resp.step().tokens_size();
    if (resp.step().context_full()) break;
  }
  EXPECT_EQ(tokens, 16 - 8);  // prompt + completion = n_ctx_seq (llama.cpp)
  st->Write(StepReq(1));
  while (st->Read(&resp)) {
  }
  grpc::Status s = st->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  WaitKvFree();
}

TEST_F(WorkerServiceTest, ClosingOrCancellingTheStreamFreesKvCells) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 4;
  StartServer(cfg);
  v1::SessionResponse resp;
  // 1. Client-side cancellation in the middle of a long request.
  {
    grpc::ClientContext ctx;
    std::unique_ptr<Stream> st = stub_->Session(&ctx);
    st->Write(StartReq(prompt_));
    st->Write(StepReq(100));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(st->Read(&resp));
    EXPECT_GT(Info().kv_cells_used(), 0);
    ctx.TryCancel();
    while (st->Read(&resp)) {
    }
    EXPECT_EQ(st->Finish().error_code(), grpc::StatusCode::CANCELLED);
    const double ms = WaitKvFree();
    std::printf("cancelled stream: KV cells free after %.1f ms\n", ms);
  }
  // 2. Half-close without Cancel: freed, call ends OK.
  {
    grpc::ClientContext ctx;
    std::unique_ptr<Stream> st = stub_->Session(&ctx);
    st->Write(StartReq(prompt_));
    st->Write(StepReq(3));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(st->Read(&resp));
    EXPECT_EQ(Info().kv_cells_used(), 10);
    st->WritesDone();
    while (st->Read(&resp)) {
    }
    EXPECT_TRUE(st->Finish().ok());
    WaitKvFree();
  }
  // 3. The client object goes away with the stream open (and a queued sequence too).
  {
    engine::SchedulerConfig one;
    one.max_sequences = 1;
    TearDown();
    StartServer(one);
    auto ctx1 = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<Stream> st1 = stub_->Session(ctx1.get());
    st1->Write(StartReq(prompt_));
    ASSERT_TRUE(st1->Read(&resp));
    auto ctx2 = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<Stream> st2 = stub_->Session(ctx2.get());
    st2->Write(StartReq(prompt_));
    for (int i = 0; i < 100 && Info().queued_sequences() != 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(Info().queued_sequences(), 1);
    ctx2->TryCancel();
    st2->Finish();
    st2.reset();
    ctx2.reset();
    ctx1->TryCancel();
    st1->Finish();
    st1.reset();
    ctx1.reset();
    WaitKvFree();
    for (int i = 0; i < 200 && Info().queued_sequences() != 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    EXPECT_EQ(Info().queued_sequences(), 0);
  }
}

TEST_F(WorkerServiceTest, AdmissionRejectOrQueue) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 1;
  cfg.queue_policy = engine::QueuePolicy::kReject;
  StartServer(cfg);
  v1::SessionResponse resp;
  grpc::ClientContext ctx1;
  std::unique_ptr<Stream> a = stub_->Session(&ctx1);
  a->Write(StartReq(prompt_));
  ASSERT_TRUE(a->Read(&resp));
  ASSERT_TRUE(resp.has_started());
  grpc::Status s = RunToEnd({StartReq(prompt_)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  a->Write(CancelReq());
  while (a->Read(&resp)) {
  }
  EXPECT_TRUE(a->Finish().ok());

  // Wait policy: the second session gets Started once the first one closes.
  TearDown();
  cfg.queue_policy = engine::QueuePolicy::kWait;
  StartServer(cfg);
  grpc::ClientContext c1, c2;
  std::unique_ptr<Stream> x = stub_->Session(&c1);
  x->Write(StartReq(prompt_));
  ASSERT_TRUE(x->Read(&resp));
  std::unique_ptr<Stream> y = stub_->Session(&c2);
  y->Write(StartReq(prompt_));
  y->Write(StepReq(2));
  for (int i = 0; i < 100 && Info().queued_sequences() != 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(Info().queued_sequences(), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  x->WritesDone();
  while (x->Read(&resp)) {
  }
  EXPECT_TRUE(x->Finish().ok());
  ASSERT_TRUE(y->Read(&resp));
  ASSERT_TRUE(resp.has_started());
  EXPECT_GE(resp.started().queue_ms(), 50.0);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(y->Read(&resp));
    EXPECT_TRUE(resp.has_step());
  }
  y->WritesDone();
  while (y->Read(&resp)) {
  }
  EXPECT_TRUE(y->Finish().ok());

  // Draining: Info says so, new sessions are refused with UNAVAILABLE.
  EXPECT_FALSE(service_->MakeInfo().draining());
  service_->StopAdmitting();
  EXPECT_TRUE(service_->MakeInfo().draining());
  s = RunToEnd({StartReq(prompt_)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

// Worker-run speculation: a SessionStart with a speculative type the worker lists in
// spec_types gets drafts from the worker's own scheduler: StepResults may carry several
// tokens, the output equals the plain one, and each result reports the statistics. A type
// the worker does not draft (draft-model without draft workers) is FAILED_PRECONDITION.
TEST_F(WorkerServiceTest, WorkerRunSpeculationEqualsPlainAndReportsStats) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 4;
  cfg.adaptive_speculation = false;  // every pass drafts (the adaptation has its own tests)
  StartServer(cfg);
  const v1::WorkerInfo info = Info();
  const std::vector<std::string> types(info.spec_types().begin(), info.spec_types().end());
  EXPECT_EQ(types, (std::vector<std::string>{"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache"}));

  // A prompt that repeats a passage, so that n-gram drafts find it.
  std::vector<int32_t> prompt = prompt_;
  const std::vector<int32_t> solo0 = Solo(prompt_, 24);
  prompt.insert(prompt.end(), solo0.begin(), solo0.end());
  prompt.insert(prompt.end(), prompt_.begin() + 1, prompt_.end());
  const int32_t n = 40;
  const std::vector<int32_t> solo = Solo(prompt, n);

  v1::SessionRequest start = StartReq(prompt);
  v1::SpeculativeConfig* sc = start.mutable_start()->mutable_speculative();
  sc->set_type("ngram-simple");
  sc->set_draft_max(8);
  sc->set_draft_min(1);
  sc->set_ngram_size_n(3);
  sc->set_ngram_size_m(8);
  sc->set_ngram_check_rate(1);
  sc->set_ngram_min_hits(1);
  start.mutable_start()->set_n_predict(n);
  std::vector<v1::SessionResponse> out;
  // n steps: with drafts accepted, fewer passes than tokens reach n tokens; the worker
  // stops at n_predict.
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  std::unique_ptr<Stream> st = stub_->Session(&ctx);
  ASSERT_TRUE(st->Write(start));
  ASSERT_TRUE(st->Write(StepReq(n)));
  std::vector<int32_t> got;
  int results = 0;
  v1::SpeculativeStats last;
  v1::SessionResponse resp;
  while (static_cast<int32_t>(got.size()) < n && st->Read(&resp)) {
    if (!resp.has_step()) continue;
    ++results;
    EXPECT_EQ(resp.step().tokens_size(), resp.step().n_accepted() + 1);
    got.insert(got.end(), resp.step().tokens().begin(), resp.step().tokens().end());
    ASSERT_TRUE(resp.step().has_spec_stats());
    last = resp.step().spec_stats();
  }
  ASSERT_TRUE(st->Write(CancelReq()));
  st->WritesDone();
  while (st->Read(&resp)) {
  }
  EXPECT_TRUE(st->Finish().ok());
  EXPECT_EQ(got, solo);
  EXPECT_EQ(last.type(), "ngram-simple");
  EXPECT_GT(last.calls(), 0);
  EXPECT_GT(last.acc_tokens(), 0) << last.DebugString();
  EXPECT_LT(results, n) << "accepted drafts should need fewer passes than tokens";
  EXPECT_NE(registry_.Render().find("herd_worker_spec_accepted_tokens_total"), std::string::npos);

  // draft-model: no draft workers here.
  v1::SessionRequest dm = StartReq(prompt_);
  dm.mutable_start()->mutable_speculative()->set_type("draft-model");
  grpc::Status s = RunToEnd({dm, StepReq(4)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("start.speculative.type"), std::string::npos) << s.error_message();
  // A bad field is named.
  v1::SessionRequest bad = start;
  bad.mutable_start()->mutable_speculative()->set_ngram_size_n(0);
  s = RunToEnd({bad, StepReq(4)});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("ngram_size_n"), std::string::npos) << s.error_message();
}

TEST(WorkerServiceConversion, SamplingDefaultsAndNames) {
  v1::SessionStart start;
  start.add_prompt(1);
  auto p = ToSequenceParams(start);
  ASSERT_TRUE(p.ok());
  EXPECT_FLOAT_EQ(p->sampling.temp, 0.8f);
  EXPECT_EQ(p->sampling.top_k, 40);
  EXPECT_EQ(p->sampling.seed, engine::kRandomSeed);
  start.mutable_sampling()->set_seed(0);
  start.mutable_sampling()->set_temperature(0);
  start.mutable_sampling()->set_repeat_last_n(-1);
  p = ToSequenceParams(start);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->sampling.seed, 0u);
  EXPECT_EQ(p->sampling.temp, 0.0f);
  EXPECT_EQ(p->sampling.penalty_last_n, -1);
  start.mutable_sampling()->set_frequency_penalty(INFINITY);
  p = ToSequenceParams(start);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("start.sampling.frequency_penalty"), std::string::npos) << p.status();
}

// Embed: the vector equals Engine::Embed on a fresh engine (the default pooling is
// LAST for stories260K: its GGUF has no pooling_type), concurrent sessions keep their
// solo output, the KV cache ends empty, and bad requests name their field.
TEST_F(WorkerServiceTest, EmbedEqualsEngineAndLeavesSessionsAlone) {
  engine::SchedulerConfig cfg;
  cfg.max_sequences = 2;
  cfg.n_ctx_seq = 256;
  StartServer(cfg, 512, 64);
  const std::vector<int32_t> text = {1, 403, 407, 261, 378, 432};
  auto embed = [&](const std::vector<int32_t>& toks, v1::Pooling p, v1::WorkerEmbedResponse* out) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::WorkerEmbedRequest req;
    req.mutable_tokens()->Add(toks.begin(), toks.end());
    req.set_pooling(p);
    return stub_->Embed(&ctx, req, out);
  };
  engine::EngineParams ep;
  ep.n_ctx = 64;
  auto fresh = engine::Engine::Create(*model_, ep, &reference_backend_);
  ASSERT_TRUE(fresh.ok());
  for (auto [pp, ep_pool] :
       {std::pair{v1::POOLING_UNSPECIFIED, engine::Pooling::kMean}, std::pair{v1::POOLING_MEAN, engine::Pooling::kMean},
        std::pair{v1::POOLING_CLS, engine::Pooling::kCls}}) {
    v1::WorkerEmbedResponse resp;
    grpc::Status s = embed(text, pp, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    auto want = (*fresh)->Embed(text, ep_pool, 0);
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(resp.embedding_size(), static_cast<int>(want->size()));
    EXPECT_EQ(resp.n_prompt_tokens(), static_cast<int>(text.size()));
    EXPECT_EQ(resp.pooling(), ToProtoPooling(ep_pool));
    for (size_t i = 0; i < want->size(); ++i) EXPECT_NEAR(resp.embedding(static_cast<int>(i)), (*want)[i], 1e-5);
  }
  // While two sessions generate.
  const std::vector<int32_t> p1 = {1, 403, 407}, p2 = {1, 346, 306, 414};
  const std::vector<int32_t> solo1 = Solo(p1, 20), solo2 = Solo(p2, 20);
  std::vector<int32_t> got1, got2;
  auto session = [&](const std::vector<int32_t>& p, std::vector<int32_t>* got) {
    grpc::ClientContext ctx;
    std::unique_ptr<Stream> st = stub_->Session(&ctx);
    st->Write(StartReq(p));
    v1::SessionResponse resp;
    while (got->size() < 20) {
      st->Write(StepReq(1));
      bool step = false;
      while (!step && st->Read(&resp)) step = resp.has_step();
      if (!step) break;
      got->insert(got->end(), resp.step().tokens().begin(), resp.step().tokens().end());
    }
    st->WritesDone();
    while (st->Read(&resp)) {
    }
    EXPECT_TRUE(st->Finish().ok());
  };
  std::atomic<bool> done{false};
  int n_embedded = 0;
  std::thread t1([&] { session(p1, &got1); });
  std::thread t2([&] { session(p2, &got2); });
  std::thread te([&] {
    while (!done.load()) {
      v1::WorkerEmbedResponse resp;
      grpc::Status s = embed(text, v1::POOLING_MEAN, &resp);
      EXPECT_TRUE(s.ok()) << s.error_message();
      if (!s.ok()) break;
      ++n_embedded;
    }
  });
  t1.join();
  t2.join();
  done = true;
  te.join();
  EXPECT_EQ(got1, solo1);
  EXPECT_EQ(got2, solo2);
  EXPECT_GT(n_embedded, 0);
  WaitKvFree();

  v1::WorkerEmbedResponse resp;
  grpc::Status s = embed({}, v1::POOLING_MEAN, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("tokens"), std::string::npos) << s.error_message();
  s = embed(std::vector<int32_t>(257, 1), v1::POOLING_MEAN, &resp);  // n_ctx_seq = 256
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("n_ctx_seq = 256"), std::string::npos) << s.error_message();
  s = embed({1, 100000}, v1::POOLING_MEAN, &resp);
  EXPECT_NE(s.error_message().find("tokens[1]"), std::string::npos) << s.error_message();
  s = embed({1}, static_cast<v1::Pooling>(9), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("pooling"), std::string::npos) << s.error_message();
}

}  // namespace
}  // namespace herd::worker
