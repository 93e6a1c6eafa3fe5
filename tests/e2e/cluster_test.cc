// End-to-end tests over real processes on loopback: loader + workers + gateway
// started by LocalCluster (the code behind `herd up`), driven through the public
// gRPC API and the OpenAI-compatible HTTP endpoint.
#include "tools/herd/cluster.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

#include "libs/engine/generate.h"
#include "libs/model/model.h"
#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/gateway.grpc.pb.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/e2e/e2e_util.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

using herd::v1::GenerateRequest;
using herd::v1::GenerateResponse;

struct Collected {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::string text;
  herd::v1::FinishReason finish = herd::v1::FINISH_REASON_UNSPECIFIED;
  herd::v1::Usage usage;
};

Collected RunGenerate(herd::v1::Gateway::Stub* stub, const GenerateRequest& req, int timeout_s = 60) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s));
  auto reader = stub->Generate(&ctx, req);
  Collected c;
  GenerateResponse r;
  while (reader->Read(&r)) {
    c.ids.insert(c.ids.end(), r.token_ids().begin(), r.token_ids().end());
    c.text += r.text();
    if (r.finish_reason() != herd::v1::FINISH_REASON_UNSPECIFIED) {
      c.finish = r.finish_reason();
      c.usage = r.usage();
    }
  }
  c.status = reader->Finish();
  return c;
}

class ClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = SharedDir();
    if (shared_.empty()) return;
    cluster_ = new cli::LocalCluster();
    cli::ClusterOptions o = e2e::TinyClusterOptions(shared_);
    o.max_sequences = 16;
    o.n_ctx = 8192;  // one pool: any sequence may use all of it
    start_status_ = cluster_->Start(o, std::chrono::seconds(120));
  }
  static void TearDownTestSuite() {
    if (cluster_ != nullptr) cluster_->Stop();
    delete cluster_;
    cluster_ = nullptr;
  }
  void SetUp() override {
    if (shared_.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED to run the end-to-end tests";
    ASSERT_TRUE(start_status_.ok()) << start_status_;
    channel_ = grpc::CreateChannel(cluster_->gateway_addr(), grpc::InsecureChannelCredentials());
    stub_ = herd::v1::Gateway::NewStub(channel_);
  }
  // Greedy output of one prompt computed in-process (the "solo" reference).
  static std::vector<int32_t> Solo(const std::string& prompt, int n) {
    static std::unique_ptr<model::Model> m;
    static std::unique_ptr<tokenizer::Vocab> v;
    static std::unique_ptr<Backend> backend_owner = CpuBackendForTests(1);
    Backend& backend = *backend_owner;
    if (!m) {
      m = *model::Model::Load(shared_ + "/models/stories260K.gguf");
      v = *tokenizer::Vocab::FromGguf(m->file());
    }
    engine::EngineParams ep;
    ep.n_ctx = 512;
    auto e = engine::Engine::Create(*m, ep, &backend);
    engine::GenerateParams gp;
    gp.prompt = prompt;
    gp.n_predict = n;
    gp.sampling.temp = 0;
    auto r = engine::Generate(**e, *v, gp);
    return r.ok() ? r->output_ids : std::vector<int32_t>{};
  }

  static std::string shared_;
  static cli::LocalCluster* cluster_;
  static absl::Status start_status_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<herd::v1::Gateway::Stub> stub_;
};

std::string ClusterTest::shared_;
cli::LocalCluster* ClusterTest::cluster_ = nullptr;
absl::Status ClusterTest::start_status_;

TEST_F(ClusterTest, GreedyStoryEqualsLlamaCppAndRunC) {
  std::ifstream in(shared_ + "/reference/A-stories260K-once_upon_a_time.json");
  nlohmann::json ref = nlohmann::json::parse(in);
  Collected c = RunGenerate(stub_.get(), e2e::Greedy("stories260K", "Once upon a time", 256));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, ref["output_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(c.finish, herd::v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(c.usage.prompt_tokens(), 5);
  EXPECT_EQ(c.usage.completion_tokens(), 256);
  std::ifstream tin(shared_ + "/models/stories260K.run_c_t0_n256.txt");
  std::string runc((std::istreambuf_iterator<char>(tin)), std::istreambuf_iterator<char>());
  runc.pop_back();  // run.c's own final newline
  const std::string ours = "Once upon a time" + c.text;
  ASSERT_GE(ours.size(), runc.size());
  EXPECT_EQ(ours.substr(0, runc.size()), runc);
}

TEST_F(ClusterTest, SixteenConcurrentStreamsEqualTheirSoloOutputs) {
  const std::vector<std::string> starts = {"Once upon a time",
                                           "Tom and Sue went to the beach. They",
                                           "One day, Lily met a Shoggoth",
                                           "The cat",
                                           "A big dog",
                                           "Ben had a red ball",
                                           "The sun was",
                                           "Mom said",
                                           "There was a tree",
                                           "The bird sang",
                                           "Lily and Max",
                                           "In the park",
                                           "Sam wanted to",
                                           "The little boat",
                                           "Anna found a box",
                                           "It was a rainy day"};
  const double batches_before =
      e2e::MetricSum(cluster_->workers()[0]->metrics_addr, "herd_worker_batch_sequences_count");
  std::vector<Collected> got(16);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    // A generous deadline: under ThreadSanitizer (tools/test.sh's tsan step, beside other
    // tests) the 16 streams take minutes, not seconds.
    threads.emplace_back(
        [&, i] { got[i] = RunGenerate(stub_.get(), e2e::Greedy("stories260K", starts[i], 24 + 7 * i), 300); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].ids, Solo(starts[i], 24 + 7 * i)) << "stream " << i << " (" << starts[i] << ")";
  }
  // Some iterations carried more than one sequence: fewer batches with <= 1 sequence
  // than batches in total since the test started.
  const std::string waddr = cluster_->workers()[0]->metrics_addr;
  const double total = e2e::MetricSum(waddr, "herd_worker_batch_sequences_count") - batches_before;
  std::string host = waddr.substr(0, waddr.rfind(':'));
  int port = std::stoi(waddr.substr(waddr.rfind(':') + 1));
  httplib::Client cli(host, port);
  auto res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  double le1 = -1;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (absl::StartsWith(line, "herd_worker_batch_sequences_bucket{le=\"1\"}")) {
      absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &le1);
    }
  }
  const double all = e2e::MetricSum(waddr, "herd_worker_batch_sequences_count");
  EXPECT_GT(total, 0);
  EXPECT_LT(le1, all) << "no iteration batched more than one sequence:\n" << res->body;
}

TEST_F(ClusterTest, CancelMidStreamFreesKvCellsWithinOneSecond) {
  const std::string waddr = cluster_->workers()[0]->metrics_addr;
  grpc::ClientContext ctx;
  GenerateRequest req = e2e::Greedy("stories260K", "Once upon a time", 2000);
  req.set_ignore_eos(true);
  auto reader = stub_->Generate(&ctx, req);
  GenerateResponse r;
  int msgs = 0;
  while (msgs < 5 && reader->Read(&r)) ++msgs;
  ASSERT_EQ(msgs, 5);
  EXPECT_GT(e2e::MetricSum(waddr, "herd_worker_kv_cells_used"), 0);
  const auto t0 = std::chrono::steady_clock::now();
  ctx.TryCancel();
  double used = -1;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1)) {
    used = e2e::MetricSum(waddr, "herd_worker_kv_cells_used");
    if (used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(used, 0) << "KV cells still in use 1 s after the cancel";
  while (reader->Read(&r)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(ClusterTest, MalformedRequestsGetInvalidArgumentAndEverythingStaysUp) {
  std::vector<std::pair<std::string, GenerateRequest>> bad;
  auto base = [] { return e2e::Greedy("stories260K", "Once upon a time", 8); };
  {
    auto r = base();
    r.set_n_predict(-5);
    bad.emplace_back("negative n_predict", r);
  }
  {
    auto r = base();
    r.set_n_predict(1 << 30);
    bad.emplace_back("huge n_predict", r);
  }
  {
    auto r = base();
    r.mutable_sampling()->set_temperature(std::nanf(""));
    bad.emplace_back("NaN temperature", r);
  }
  {
    auto r = base();
    r.mutable_sampling()->set_temperature(-1);
    bad.emplace_back("negative temperature", r);
  }
  {
    auto r = base();
    r.mutable_sampling()->set_top_p(1.5f);
    bad.emplace_back("top_p > 1", r);
  }
  {
    auto r = base();
    r.mutable_tokens()->add_ids(1);
    r.mutable_tokens()->add_ids(99999);
    bad.emplace_back("token id outside vocab", r);
  }
  {
    auto r = base();
    r.set_model("");
    bad.emplace_back("empty model", r);
  }
  {
    auto r = base();
    r.set_text(std::string(10 << 20, 'a'));
    bad.emplace_back("10 MB prompt", r);
  }
  {
    auto r = base();
    r.set_text("bad \xff\xfe utf8");
    bad.emplace_back("invalid UTF-8", r);
  }
  {
    auto r = base();
    for (int i = 0; i < 9000; ++i) r.mutable_tokens()->add_ids(300);  // n_ctx is 8192
    bad.emplace_back("prompt longer than n_ctx", r);
  }
  for (const auto& [what, req] : bad) {
    Collected c = RunGenerate(stub_.get(), req, 30);
    EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what << ": " << c.status.error_message();
    EXPECT_TRUE(c.ids.empty()) << what;
  }
  {
    auto r = base();
    r.set_model("no-such-model");
    Collected c = RunGenerate(stub_.get(), r, 30);
    EXPECT_EQ(c.status.error_code(), grpc::StatusCode::NOT_FOUND) << c.status.error_message();
  }
  // Every service is still up and serving.
  Collected ok = RunGenerate(stub_.get(), base());
  ASSERT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.ids.size(), 8u);
}

TEST_F(ClusterTest, OpenAiCompletionsOverHttp) {
  const std::string a = cluster_->gateway_http_addr();
  httplib::Client cli(a.substr(0, a.rfind(':')), std::stoi(a.substr(a.rfind(':') + 1)));
  cli.set_read_timeout(60, 0);
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_NE(models->body.find("stories260K"), std::string::npos);
  nlohmann::json body = {
      {"model", "stories260K"}, {"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}};
  auto res = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  nlohmann::json j = nlohmann::json::parse(res->body);
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(text.rfind(", there was a little girl named Lily", 0), 0u) << text;
  EXPECT_EQ(j["usage"]["completion_tokens"], 16);
  body["stream"] = true;
  auto sse = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(sse);
  EXPECT_EQ(sse->status, 200);
  EXPECT_NE(sse->body.find("data: [DONE]"), std::string::npos);
  std::string joined;
  for (absl::string_view line : absl::StrSplit(sse->body, '\n')) {
    if (!absl::StartsWith(line, "data: {")) continue;
    nlohmann::json ev = nlohmann::json::parse(line.substr(6));
    joined += ev["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(joined, text);
}

// Last: kills the worker. The supervisor of LocalCluster restarts it on the same port.
TEST_F(ClusterTest, ZZ_WorkerDeathEndsStreamsWithUnavailableAndServiceRecovers) {
  grpc::ClientContext ctx;
  GenerateRequest req = e2e::Greedy("stories260K", "Once upon a time", 2000);
  req.set_ignore_eos(true);
  auto reader = stub_->Generate(&ctx, req);
  GenerateResponse r;
  int msgs = 0;
  while (msgs < 3 && reader->Read(&r)) ++msgs;
  ASSERT_EQ(msgs, 3);
  ASSERT_TRUE(cluster_->KillWorker(0).ok());
  while (reader->Read(&r)) {
  }
  grpc::Status st = reader->Finish();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  // The gateway is still up.
  {
    grpc::ClientContext lctx;
    herd::v1::ListModelsResponse lm;
    EXPECT_TRUE(stub_->ListModels(&lctx, herd::v1::ListModelsRequest(), &lm).ok());
  }
  // Once the worker is back, requests succeed again.
  const auto t0 = std::chrono::steady_clock::now();
  Collected c;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    c = RunGenerate(stub_.get(), e2e::Greedy("stories260K", "Once upon a time", 8), 10);
  } while (!c.status.ok() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60));
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, Solo("Once upon a time", 8));
}

}  // namespace
}  // namespace herd
