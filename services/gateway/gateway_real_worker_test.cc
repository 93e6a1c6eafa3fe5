// The gateway over a real in-process worker (WorkerServiceImpl on the CPU backend) and
// a real loader (LoaderServiceImpl over ../shared/models): greedy output equals
// llama.cpp's reference, stop strings and cancellation on real text.
#include <chrono>
#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "httplib.h"
#include "gtest/gtest.h"
#include "libs/backend/cpu_backend.h"
#include "libs/engine/engine.h"
#include "libs/engine/scheduler.h"
#include "libs/model/model.h"
#include "libs/serving/metrics.h"
#include "libs/serving/server.h"
#include "libs/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "services/gateway/gateway.h"
#include "services/gateway/http_server.h"
#include "services/loader/loader_service.h"
#include "services/worker/worker_service.h"
#include "tests/shared_data.h"
#include "tools/herd/commands.h"

namespace herd::gateway {
namespace {

class RealWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    // Loader over the shared model directory.
    loader::LoaderOptions lo;
    lo.models_dir = shared_ + "/models";
    lo.registry = &registry_;
    auto l = loader::LoaderServiceImpl::Create(lo);
    ASSERT_TRUE(l.ok()) << l.status();
    loader_ = std::move(*l);
    serving::GrpcServerOptions so;
    so.address = "127.0.0.1:0";
    int loader_port = 0;
    auto ls = serving::StartGrpcServer(so, {loader_.get()}, &loader_port);
    ASSERT_TRUE(ls.ok()) << ls.status();
    loader_server_ = std::move(*ls);

    // Worker: stories260K on the CPU backend.
    auto m = model::Model::Load(shared_ + "/models/stories260K.gguf");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(*m);
    auto v = tokenizer::Vocab::FromGguf(model_->file());
    ASSERT_TRUE(v.ok()) << v.status();
    vocab_ = std::move(*v);
    engine::EngineParams ep;
    ep.n_ctx = 1024;
    ep.n_batch = 64;
    auto e = engine::Engine::Create(*model_, ep, &backend_);
    ASSERT_TRUE(e.ok()) << e.status();
    engine_ = std::move(*e);
    engine::SchedulerConfig sc;
    sc.max_sequences = 4;
    sc.n_ctx_seq = 512;
    auto s = engine::Scheduler::Create(engine_.get(), vocab_.get(), sc);
    ASSERT_TRUE(s.ok()) << s.status();
    scheduler_ = std::move(*s);
    worker::WorkerServiceOptions wo;
    wo.model_name = "stories260K";
    wo.architecture = model_->hparams().arch;
    worker_ = std::make_unique<worker::WorkerServiceImpl>(scheduler_.get(), wo, &registry_);
    int worker_port = 0;
    auto ws = serving::StartGrpcServer(so, {worker_.get()}, &worker_port);
    ASSERT_TRUE(ws.ok()) << ws.status();
    worker_server_ = std::move(*ws);

    // Gateway.
    GatewayOptions go;
    go.loader_address = absl::StrCat("127.0.0.1:", loader_port);
    go.pool.addresses = {absl::StrCat("127.0.0.1:", worker_port)};
    go.pool.poll_interval = absl::Milliseconds(100);
    gw_ = std::make_unique<Gateway>(go, &registry_);
    ASSERT_TRUE(gw_->Start().ok());
    svc_ = std::make_unique<GatewayServiceImpl>(gw_.get());
    int gw_port = 0;
    auto gs = serving::StartGrpcServer(so, {svc_.get()}, &gw_port);
    ASSERT_TRUE(gs.ok()) << gs.status();
    gw_server_ = std::move(*gs);
    stub_ = v1::Gateway::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", gw_port), grpc::InsecureChannelCredentials()));
    // Ready when the gateway sees the worker (its first Info may time out on a busy machine).
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (gw_->pool().live_count() < 1 && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_EQ(gw_->pool().live_count(), 1);
    worker_stub_ = v1::Worker::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", worker_port), grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    const auto soon = std::chrono::system_clock::now() + std::chrono::seconds(2);
    if (gw_) gw_->CancelAll();
    if (gw_server_) gw_server_->Shutdown(soon);
    if (gw_) gw_->Stop();
    if (worker_server_) worker_server_->Shutdown(soon);
    if (loader_server_) loader_server_->Shutdown(soon);
    worker_server_.reset();
    worker_.reset();
    scheduler_.reset();
    engine_.reset();
  }

  struct Out {
    grpc::Status status;
    std::vector<int32_t> ids;
    std::string text;
    v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
    v1::Usage usage;
  };
  Out Generate(const v1::GenerateRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto r = stub_->Generate(&ctx, req);
    Out o;
    v1::GenerateResponse m;
    while (r->Read(&m)) {
      o.ids.insert(o.ids.end(), m.token_ids().begin(), m.token_ids().end());
      o.text += m.text();
      if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        o.finish = m.finish_reason();
        o.usage = m.usage();
      }
    }
    o.status = r->Finish();
    return o;
  }
  int64_t KvCellsUsed() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::WorkerInfo info;
    EXPECT_TRUE(worker_stub_->Info(&ctx, v1::WorkerInfoRequest(), &info).ok());
    return info.kv_cells_used();
  }

  std::string shared_;
  serving::Registry registry_;
  std::unique_ptr<loader::LoaderServiceImpl> loader_;
  std::unique_ptr<grpc::Server> loader_server_;
  CpuBackend backend_{2};
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Vocab> vocab_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> scheduler_;
  std::unique_ptr<worker::WorkerServiceImpl> worker_;
  std::unique_ptr<grpc::Server> worker_server_;
  std::unique_ptr<Gateway> gw_;
  std::unique_ptr<GatewayServiceImpl> svc_;
  std::unique_ptr<grpc::Server> gw_server_;
  std::unique_ptr<v1::Gateway::Stub> stub_;
  std::unique_ptr<v1::Worker::Stub> worker_stub_;
};

TEST_F(RealWorkerTest, GreedyStoryEqualsTheLlamaCppReference) {
  std::ifstream in(shared_ + "/reference/A-stories260K-once_upon_a_time.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json ref = nlohmann::json::parse(in);
  v1::GenerateRequest req;
  req.set_model("stories260K");
  req.set_text(ref["prompt"].get<std::string>());
  req.set_n_predict(ref["n_predict"].get<int>());
  req.mutable_sampling()->set_temperature(0);
  Out o = Generate(req);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.ids, ref["output_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(o.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(o.usage.prompt_tokens(), static_cast<int>(ref["prompt_ids"].size()));
  EXPECT_EQ(o.usage.completion_tokens(), ref["n_predict"].get<int>());
  EXPECT_GT(o.usage.generation_ms(), 0);
}

TEST_F(RealWorkerTest, StopStringAndCancellationFreeTheSequence) {
  v1::GenerateRequest req;
  req.set_model("stories260K");
  req.set_text("Once upon a time");
  req.set_n_predict(64);
  req.mutable_sampling()->set_temperature(0);
  req.add_stop(" girl");
  Out o = Generate(req);
  ASSERT_TRUE(o.status.ok()) << o.status.error_message();
  EXPECT_EQ(o.text, ", there was a little");
  EXPECT_EQ(o.finish, v1::FINISH_REASON_STOP);

  // Cancel mid-stream: the worker's KV cells are freed within a second.
  req.clear_stop();
  req.set_n_predict(400);
  req.set_ignore_eos(true);
  grpc::ClientContext ctx;
  auto r = stub_->Generate(&ctx, req);
  v1::GenerateResponse m;
  int n = 0;
  while (n < 3 && r->Read(&m)) ++n;
  ASSERT_EQ(n, 3);
  ctx.TryCancel();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t used = -1;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1)) {
    used = KvCellsUsed();
    if (used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(used, 0);
  while (r->Read(&m)) {
  }
  EXPECT_EQ(r->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// Embeddings end to end: Gateway.Embed, POST /v1/embeddings and `herd embed` on the CLI
// give the same vectors for the same text (mean and the default, last), with unit norm,
// and the worker's KV cache is left empty.
TEST_F(RealWorkerTest, EmbeddingsEqualTheCliAndHttp) {
  HttpFrontEnd http(gw_.get());
  auto hp = http.Start("127.0.0.1", 0);
  ASSERT_TRUE(hp.ok()) << hp.status();
  const std::string text = "Once upon a time, there was a little girl";
  for (const std::string pooling : {"mean", "last"}) {
    SCOPED_TRACE(pooling);
    // CLI (in process; the vector goes to stdout).
    std::vector<std::string> argv_s = {"herd", "embed", "-m", shared_ + "/models/stories260K.gguf", "-p", text};
    if (pooling == "mean") argv_s.insert(argv_s.end(), {"--pooling", "mean"});
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    ::testing::internal::CaptureStdout();
    const int rc = cli::CmdEmbed(static_cast<int>(argv.size()), argv.data());
    const std::string out = ::testing::internal::GetCapturedStdout();
    ASSERT_EQ(rc, 0) << out;
    ASSERT_EQ(out.rfind("embedding 0: ", 0), 0u) << out;
    std::vector<float> cli_vec;
    for (absl::string_view tok : absl::StrSplit(out.substr(13), ' ', absl::SkipWhitespace())) {
      float f = 0;
      ASSERT_TRUE(absl::SimpleAtof(tok, &f)) << tok;
      cli_vec.push_back(f);
    }
    ASSERT_EQ(static_cast<int64_t>(cli_vec.size()), model_->hparams().n_embd);

    // gRPC.
    v1::EmbedRequest req;
    req.set_model("stories260K");
    req.add_inputs()->set_text(text);
    if (pooling == "mean") req.set_pooling(v1::POOLING_MEAN);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::EmbedResponse resp;
    grpc::Status s = stub_->Embed(&ctx, req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(resp.data_size(), 1);
    EXPECT_EQ(resp.pooling(), pooling == "mean" ? v1::POOLING_MEAN : v1::POOLING_LAST);
    EXPECT_EQ(resp.usage().prompt_tokens(), static_cast<int>(vocab_->Tokenize(text, true, true).size()));

    // HTTP.
    httplib::Client c("127.0.0.1", *hp);
    c.set_read_timeout(30, 0);
    nlohmann::json body = {{"model", "stories260K"}, {"input", text}};
    if (pooling == "mean") body["pooling"] = "mean";
    auto r = c.Post("/v1/embeddings", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const nlohmann::json j = nlohmann::json::parse(r->body);
    const nlohmann::json& hv = j["data"][0]["embedding"];
    ASSERT_EQ(static_cast<int64_t>(hv.size()), model_->hparams().n_embd);

    double norm = 0, d_cli = 0, d_http = 0;
    for (int i = 0; i < resp.data(0).values_size(); ++i) {
      const double g = resp.data(0).values(i);
      norm += g * g;
      d_cli = std::max(d_cli, std::fabs(g - cli_vec[static_cast<size_t>(i)]));
      d_http = std::max(d_http, std::fabs(g - hv[static_cast<size_t>(i)].get<double>()));
    }
    EXPECT_NEAR(std::sqrt(norm), 1.0, 1e-5);
    EXPECT_LE(d_cli, 2e-6);  // the CLI prints 6 decimals
    EXPECT_EQ(d_http, 0.0);
  }
  EXPECT_EQ(KvCellsUsed(), 0);
  http.Stop();
}

}  // namespace
}  // namespace herd::gateway
