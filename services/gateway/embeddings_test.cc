// Gateway embeddings over in-process fake workers and a fake loader (the vocabulary of
// ../shared/models/stories260K.gguf): gRPC Gateway.Embed and POST /v1/embeddings give
// the same vectors, text is tokenized with BOS as llama.cpp's server does, vectors are
// normalized (common_embd_normalize), the worker gets the request's pooling, a refusing
// worker is skipped, and bad input is INVALID_ARGUMENT / 400 naming the field.
#include "services/gateway/embeddings.h"

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

#include "libs/gguf/gguf.h"
#include "libs/serving/metrics.h"
#include "libs/serving/server.h"
#include "libs/tokenizer/tokenizer.h"
#include "services/gateway/fakes.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_server.h"
#include "tests/shared_data.h"
#include "tests/shared_vocab.h"

namespace herd::gateway {
namespace {

using testing::FakeLoader;
using testing::FakeWorker;
using testing::FakeWorkerConfig;
using json = nlohmann::json;

class EmbeddingsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shared = SharedDir();
    if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
    auto v = LoadSharedVocab(shared);
    ASSERT_TRUE(v.ok()) << v.status();
    vocab_ = std::move(*v);
    ASSERT_TRUE(loader_.AddModelFromFile("stories260K", shared + "/models/stories260K.gguf").ok());
    ASSERT_TRUE(loader_.Start().ok());
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (http_) http_->Stop();
    if (gw_) gw_->Stop();
  }

  FakeWorker* AddWorker(grpc::StatusCode refuse = grpc::StatusCode::OK, bool matryoshka = false) {
    FakeWorkerConfig c;
    c.embed_refuse = refuse;
    c.matryoshka = matryoshka;
    workers_.push_back(std::make_unique<FakeWorker>(c));
    EXPECT_TRUE(workers_.back()->Start().ok());
    return workers_.back().get();
  }

  void StartGateway() {
    GatewayOptions o;
    o.loader_address = loader_.address();
    for (auto& w : workers_) o.pool.addresses.push_back(w->address());
    o.pool.poll_interval = absl::Milliseconds(50);
    o.pool.info_timeout = absl::Milliseconds(2000);
    gw_ = std::make_unique<Gateway>(o, &registry_);
    ASSERT_TRUE(gw_->Start().ok());
    for (int i = 0; i < 400 && gw_->pool().live_count() < static_cast<int>(workers_.size()); ++i) {
      gw_->pool().PollNow();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(gw_->pool().live_count(), static_cast<int>(workers_.size()));
    svc_ = std::make_unique<GatewayServiceImpl>(gw_.get());
    serving::GrpcServerOptions so;
    so.address = "127.0.0.1:0";
    int port = 0;
    auto server = serving::StartGrpcServer(so, {svc_.get()}, &port);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    http_ = std::make_unique<HttpFrontEnd>(gw_.get());
    auto hp = http_->Start("127.0.0.1", 0);
    ASSERT_TRUE(hp.ok());
    http_port_ = *hp;
    stub_ =
        v1::Gateway::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }

  grpc::Status GrpcEmbed(const v1::EmbedRequest& req, v1::EmbedResponse* resp) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return stub_->Embed(&ctx, req, resp);
  }
  httplib::Result Post(const std::string& path, const std::string& body) {
    httplib::Client c("127.0.0.1", http_port_);
    c.set_read_timeout(10, 0);
    return c.Post(path.c_str(), body, "application/json");
  }
  httplib::Result Get(const std::string& path) {
    httplib::Client c("127.0.0.1", http_port_);
    c.set_read_timeout(10, 0);
    return c.Get(path.c_str());
  }
  // The fake's vector for `toks` (pooling p), L2-normalized.
  static std::vector<float> Expected(const std::vector<int32_t>& toks, v1::Pooling p) {
    std::vector<double> v = {static_cast<double>(toks.size()), static_cast<double>(toks.front()),
                             static_cast<double>(toks.back()), static_cast<double>(p)};
    double n = 0;
    for (double x : v) n += x * x;
    std::vector<float> out;
    for (double x : v) out.push_back(static_cast<float>(x / std::sqrt(n)));
    return out;
  }

  FakeLoader loader_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
  serving::Registry registry_;
  std::unique_ptr<Gateway> gw_;
  std::unique_ptr<GatewayServiceImpl> svc_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpFrontEnd> http_;
  int http_port_ = 0;
  std::unique_ptr<v1::Gateway::Stub> stub_;
  std::unique_ptr<tokenizer::Vocab> vocab_;
};

TEST_F(EmbeddingsTest, GrpcAndHttpGiveTheSameNormalizedVectors) {
  FakeWorker* w = AddWorker();
  StartGateway();
  const std::vector<int32_t> hello = vocab_->Tokenize("Hello world", true, true);
  ASSERT_EQ(hello.front(), 1);  // BOS added, as llama.cpp's server does
  v1::EmbedRequest req;
  req.set_model("stories260K");
  req.add_inputs()->set_text("Hello world");
  req.add_inputs()->mutable_tokens()->add_ids(7);
  req.mutable_inputs(1)->mutable_tokens()->add_ids(9);
  req.set_pooling(v1::POOLING_MEAN);
  v1::EmbedResponse resp;
  grpc::Status s = GrpcEmbed(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.data_size(), 2);
  EXPECT_EQ(resp.model(), "stories260K");
  EXPECT_EQ(resp.pooling(), v1::POOLING_MEAN);
  EXPECT_EQ(resp.usage().prompt_tokens(), static_cast<int>(hello.size()) + 2);
  EXPECT_EQ(w->last_embed().pooling(), v1::POOLING_MEAN);
  const std::vector<float> want0 = Expected(hello, v1::POOLING_MEAN), want1 = Expected({7, 9}, v1::POOLING_MEAN);
  for (int i = 0; i < 4; ++i) {
    EXPECT_FLOAT_EQ(resp.data(0).values(i), want0[i]);
    EXPECT_FLOAT_EQ(resp.data(1).values(i), want1[i]);
  }
  EXPECT_EQ(resp.data(0).n_tokens(), static_cast<int>(hello.size()));

  // HTTP, OpenAI shape: the same numbers.
  auto r = Post("/v1/embeddings",
                R"({"model":"stories260K","input":["Hello world",[7,9]],"pooling":"mean","encoding_format":"float"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json j = json::parse(r->body);
  EXPECT_EQ(j["object"], "list");
  EXPECT_EQ(j["model"], "stories260K");
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(hello.size()) + 2);
  EXPECT_EQ(j["usage"]["total_tokens"], j["usage"]["prompt_tokens"]);
  ASSERT_EQ(j["data"].size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(j["data"][k]["object"], "embedding");
    EXPECT_EQ(j["data"][k]["index"], k);
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(j["data"][k]["embedding"][i].get<float>(), resp.data(k).values(i));
  }
  // base64: little-endian float32 bytes.
  r = Post("/v1/embeddings",
           R"({"model":"stories260K","input":"Hello world","pooling":"mean","encoding_format":"base64"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape(json::parse(r->body)["data"][0]["embedding"].get<std::string>(), &bytes));
  ASSERT_EQ(bytes.size(), 16u);
  float f[4];
  std::memcpy(f, bytes.data(), 16);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(f[i], want0[i]);
  // llama.cpp's /embedding: [{"index", "embedding": [[...]]}], "content" accepted.
  r = Post("/embedding", R"({"model":"stories260K","content":"Hello world","pooling":"mean"})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json lj = json::parse(r->body);
  ASSERT_TRUE(lj.is_array());
  EXPECT_EQ(lj[0]["index"], 0);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(lj[0]["embedding"][0][i].get<float>(), want0[i]);
}

TEST_F(EmbeddingsTest, NormalizeAndDefaultPooling) {
  FakeWorker* w = AddWorker();
  StartGateway();
  v1::EmbedRequest req;
  req.set_model("stories260K");
  req.add_inputs()->mutable_tokens()->add_ids(5);
  req.set_normalize(-1);
  v1::EmbedResponse resp;
  ASSERT_TRUE(GrpcEmbed(req, &resp).ok());
  EXPECT_EQ(w->last_embed().pooling(), v1::POOLING_UNSPECIFIED);  // the worker decides
  EXPECT_EQ(resp.pooling(), v1::POOLING_LAST);
  ASSERT_EQ(resp.data(0).values_size(), 4);
  EXPECT_EQ(resp.data(0).values(0), 1.0f);  // not normalized
  EXPECT_EQ(resp.data(0).values(1), 5.0f);
  req.set_normalize(0);  // max-abs to int16 range
  ASSERT_TRUE(GrpcEmbed(req, &resp).ok());
  EXPECT_FLOAT_EQ(resp.data(0).values(1), 32760.0f);
  auto r = Post("/v1/embeddings", R"({"model":"stories260K","input":[5],"embd_normalize":-1,"dimensions":4})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["data"][0]["embedding"][1].get<float>(), 5.0f);
}

// OpenAI `dimensions`: n_embd always; fewer only when the worker says the model is
// Matryoshka-trained: then the prefix, normalized; the model card says so.
TEST_F(EmbeddingsTest, DimensionsTruncateOnlyMatryoshkaModels) {
  AddWorker();
  StartGateway();
  auto r = Post("/v1/embeddings", R"({"model":"stories260K","input":[5],"dimensions":2})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "dimensions") << r->body;
  EXPECT_TRUE(absl::StrContains(r->body, "does not support truncation")) << r->body;
  r = Post("/v1/embeddings", R"({"model":"stories260K","input":[5],"dimensions":5})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_TRUE(absl::StrContains(r->body, "exceeds the model's 4 values")) << r->body;
  auto m = Get("/v1/models/stories260K");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["matryoshka"], false) << m->body;
  EXPECT_EQ(json::parse(m->body)["pooling"], "mean") << m->body;
}

TEST_F(EmbeddingsTest, DimensionsOfAMatryoshkaModel) {
  AddWorker(grpc::StatusCode::OK, /*matryoshka=*/true);
  StartGateway();
  // The fake's vector for input [5] is {1, 5, 5, pooling}: the first two values, L2-normalized.
  auto r = Post("/v1/embeddings", R"({"model":"stories260K","input":[5],"dimensions":2})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json v = json::parse(r->body)["data"][0]["embedding"];
  ASSERT_EQ(v.size(), 2u) << r->body;
  EXPECT_NEAR(v[0].get<float>(), 1 / std::sqrt(26.0f), 1e-6);
  EXPECT_NEAR(v[1].get<float>(), 5 / std::sqrt(26.0f), 1e-6);
  auto m = Get("/v1/models/stories260K");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["matryoshka"], true) << m->body;
}

TEST_F(EmbeddingsTest, RefusingWorkerIsSkipped) {
  AddWorker(grpc::StatusCode::UNAVAILABLE);
  AddWorker(grpc::StatusCode::RESOURCE_EXHAUSTED);
  FakeWorker* good = AddWorker();
  StartGateway();
  v1::EmbedRequest req;
  req.set_model("stories260K");
  req.add_inputs()->set_text("Once upon a time");
  v1::EmbedResponse resp;
  grpc::Status s = GrpcEmbed(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(good->embed_calls(), 1);
  EXPECT_EQ(resp.data_size(), 1);
}

TEST_F(EmbeddingsTest, ManyInputsRunConcurrentlyAndKeepTheirOrder) {
  FakeWorker* a = AddWorker();
  FakeWorker* b = AddWorker();
  StartGateway();
  v1::EmbedRequest req;
  req.set_model("stories260K");
  req.set_pooling(v1::POOLING_CLS);
  constexpr int kN = 40;
  for (int i = 0; i < kN; ++i) {
    auto* t = req.add_inputs()->mutable_tokens();
    for (int j = 0; j <= i % 5; ++j) t->add_ids(10 + i + j);
  }
  v1::EmbedResponse resp;
  grpc::Status s = GrpcEmbed(req, &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(resp.data_size(), kN);
  for (int i = 0; i < kN; ++i) {
    const auto& ids = req.inputs(i).tokens().ids();
    const std::vector<float> want = Expected(std::vector<int32_t>(ids.begin(), ids.end()), v1::POOLING_CLS);
    for (int k = 0; k < 4; ++k) EXPECT_FLOAT_EQ(resp.data(i).values(k), want[k]) << "input " << i;
  }
  EXPECT_EQ(a->embed_calls() + b->embed_calls(), kN);
}

TEST_F(EmbeddingsTest, BadInputNamesTheField) {
  AddWorker();
  StartGateway();
  auto grpc_err = [&](const std::function<void(v1::EmbedRequest&)>& edit) {
    v1::EmbedRequest req;
    req.set_model("stories260K");
    req.add_inputs()->set_text("hi");
    edit(req);
    v1::EmbedResponse resp;
    return GrpcEmbed(req, &resp);
  };
  grpc::Status s = grpc_err([](v1::EmbedRequest& r) { r.clear_model(); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("model"), std::string::npos);
  s = grpc_err([](v1::EmbedRequest& r) { r.set_model("nope"); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  s = grpc_err([](v1::EmbedRequest& r) { r.clear_inputs(); });
  EXPECT_NE(s.error_message().find("inputs"), std::string::npos) << s.error_message();
  s = grpc_err([](v1::EmbedRequest& r) { r.add_inputs()->mutable_tokens()->add_ids(512); });
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("inputs[1].tokens.ids[0]"), std::string::npos) << s.error_message();
  s = grpc_err([](v1::EmbedRequest& r) { r.add_inputs(); });
  EXPECT_NE(s.error_message().find("inputs[1]: empty"), std::string::npos) << s.error_message();
  s = grpc_err([](v1::EmbedRequest& r) {
    auto* t = r.add_inputs()->mutable_tokens();
    for (int i = 0; i < 257; ++i) t->add_ids(1);  // the fake's n_ctx_seq is 256
  });
  EXPECT_NE(s.error_message().find("inputs[1]: 257 tokens exceed the context"), std::string::npos) << s.error_message();
  s = grpc_err([](v1::EmbedRequest& r) { r.set_normalize(-2); });
  EXPECT_NE(s.error_message().find("normalize"), std::string::npos) << s.error_message();
  s = grpc_err([](v1::EmbedRequest& r) { r.set_pooling(static_cast<v1::Pooling>(7)); });
  EXPECT_NE(s.error_message().find("pooling"), std::string::npos) << s.error_message();

  for (auto [body, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"input":"hi"})", "model"},
           {R"({"model":"stories260K"})", "input"},
           {R"({"model":"stories260K","input":5})", "input"},
           {R"({"model":"stories260K","input":["a",{}]})", "input[1]"},
           {R"({"model":"stories260K","input":[[1,"x"]]})", "input[0][1]"},
           {R"({"model":"stories260K","input":"hi","encoding_format":"int8"})", "encoding_format"},
           {R"({"model":"stories260K","input":"hi","pooling":"none"})", "pooling"},
           {R"({"model":"stories260K","input":"hi","embd_normalize":-3})", "embd_normalize"},
           {R"({"model":"stories260K","input":[""]})", "inputs[0].text"},
           {R"({"model":"stories260K","input":"hi","dimensions":3})", "dimensions"},
           {R"({"model":"stories260K","input":"hi","dimensions":"x"})", "dimensions"},
           {R"(not json)", "invalid JSON"}}) {
    auto r = Post("/v1/embeddings", body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body << " -> " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(field), std::string::npos) << body << " -> " << r->body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  }
  auto r = Post("/v1/embeddings", R"({"model":"nope","input":"hi"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
}

}  // namespace
}  // namespace herd::gateway
