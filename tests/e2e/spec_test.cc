// Speculative decoding end to end: loader + target worker + draft worker + gateway as
// real processes on loopback (LocalCluster, the code behind `herd up --draft-workers`).
//
// For every drafter type (ngram-simple, ngram-map-k, ngram-map-k4v, ngram-cache,
// draft-model -- the model drafting for itself) and (n_min, n_max) pairs chosen per
// request (GenerateRequest.speculative), greedy outputs through the gateway equal the
// non-speculative outputs on stories260K and llama-2-tiny-random, over several prompts
// including one holding a long passage the model repeats, where the n-gram types must
// have drafts accepted (the statistics of the final message). Killing the draft worker
// mid-stream changes no output and ends no stream. The whole matrix (5 types x 5 pairs
// x 3 prompts x 2 models, 150 streams, 4 at a time) takes about 15 s on 2 cores.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

#include "proto/herd/v1/gateway.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

namespace herd {
namespace {

using herd::v1::GenerateRequest;
using herd::v1::GenerateResponse;

const char* const kTypes[] = {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-cache", "draft-model"};
constexpr std::pair<int, int> kMinMax[] = {{1, 2}, {1, 4}, {4, 8}, {4, 12}, {8, 16}};

struct Collected {
  grpc::Status status;
  std::vector<int32_t> ids;
  std::string text;
  int messages = 0;
  herd::v1::FinishReason finish = herd::v1::FINISH_REASON_UNSPECIFIED;
  herd::v1::Usage usage;
  std::vector<herd::v1::SpeculativeStats> spec;
};

Collected RunGenerate(herd::v1::Gateway::Stub* stub, const GenerateRequest& req,
                      const std::function<void(int)>& on_message = nullptr, int timeout_s = 120) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(timeout_s));
  auto reader = stub->Generate(&ctx, req);
  Collected c;
  GenerateResponse r;
  while (reader->Read(&r)) {
    ++c.messages;
    c.ids.insert(c.ids.end(), r.token_ids().begin(), r.token_ids().end());
    c.text += r.text();
    if (r.finish_reason() != herd::v1::FINISH_REASON_UNSPECIFIED) {
      c.finish = r.finish_reason();
      c.usage = r.usage();
      c.spec.assign(r.speculative().begin(), r.speculative().end());
    }
    if (on_message) on_message(c.messages);
  }
  c.status = reader->Finish();
  return c;
}

GenerateRequest Speculative(GenerateRequest req, const std::string& type, int n_min, int n_max) {
  herd::v1::SpeculativeConfig* s = req.mutable_speculative();
  s->set_type(type);
  s->set_draft_min(n_min);
  s->set_draft_max(n_max);
  s->set_ngram_size_n(3);  // the defaults (12/48) find little in outputs of ~100 tokens
  s->set_ngram_size_m(16);
  return req;
}

// The repeat prompt: stories260K's own greedy story, then its first words again, so
// that the continuation repeats a long passage of the context.
std::string RepeatPrompt(const std::string& shared) {
  std::ifstream in(shared + "/models/stories260K.run_c_t0_n256.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string story = ss.str().substr(0, 330);
  return story + "\n" + story.substr(0, 40);
}

// One cluster per target model: its draft worker's draft model is the model itself.
class SpecClusterTest : public ::testing::Test {
 protected:
  static void StartCluster(const std::string& model, cli::LocalCluster** cluster, absl::Status* status) {
    const std::string shared = SharedDir();
    if (shared.empty()) return;
    *cluster = new cli::LocalCluster();
    cli::ClusterOptions o = e2e::TinyClusterOptions(shared, {model});
    o.max_sequences = 8;
    o.n_ctx = 8192;  // 1024 cells per sequence
    o.draft_workers = 1;
    o.model_draft = shared + "/models/" + model + ".gguf";
    o.draft_target_model = model;
    // Generous: the outputs never depend on it, the acceptance checks do.
    o.extra_gateway_flags = {"--draft_timeout_ms=3000"};
    // The workers draft (worker-run speculation): every pass asks for draft_max, so the
    // matrix exercises the longest drafts (adaptive sizing has its own tests).
    o.extra_worker_flags = {"--draft_timeout_ms=3000", "--adaptive_speculation=false"};
    *status = (*cluster)->Start(o, std::chrono::seconds(120));
  }
  static void StopCluster(cli::LocalCluster** cluster) {
    if (*cluster != nullptr) (*cluster)->Stop();
    delete *cluster;
    *cluster = nullptr;
  }
  void Connect(cli::LocalCluster* cluster, const absl::Status& status) {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    ASSERT_TRUE(status.ok()) << status;
    stub_ =
        herd::v1::Gateway::NewStub(grpc::CreateChannel(cluster->gateway_addr(), grpc::InsecureChannelCredentials()));
  }

  // Greedy outputs of every (type, n_min, n_max) in the matrix equal the plain output of
  // each prompt; prompt `repeat` must have n-gram drafts accepted.
  // `draft_model_drafts`: the model is confident enough to draft for itself (not so
  // llama-2-tiny-random, whose random weights never reach p_min: its drafts are empty).
  void CheckMatrix(const std::string& model, const std::vector<std::string>& prompts, int n_predict, size_t repeat,
                   bool draft_model_drafts) {
    struct Job {
      size_t prompt;
      std::string type;
      int n_min, n_max;
      Collected got;
    };
    std::vector<Collected> plain(prompts.size());
    for (size_t p = 0; p < prompts.size(); ++p) {
      GenerateRequest req = e2e::Greedy(model, prompts[p], n_predict);
      req.mutable_speculative()->set_type("none");
      plain[p] = RunGenerate(stub_.get(), req);
      ASSERT_TRUE(plain[p].status.ok()) << plain[p].status.error_message();
      ASSERT_FALSE(plain[p].ids.empty());
      EXPECT_TRUE(plain[p].spec.empty());
    }
    std::vector<Job> jobs;
    for (size_t p = 0; p < prompts.size(); ++p) {
      for (const char* type : kTypes) {
        for (auto [n_min, n_max] : kMinMax) jobs.push_back({p, type, n_min, n_max, {}});
      }
    }
    // A few streams at a time: the target worker batches them.
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (size_t j; (j = next.fetch_add(1)) < jobs.size();) {
          Job& job = jobs[j];
          job.got = RunGenerate(stub_.get(), Speculative(e2e::Greedy(model, prompts[job.prompt], n_predict), job.type,
                                                         job.n_min, job.n_max));
        }
      });
    }
    for (auto& t : threads) t.join();
    for (const Job& job : jobs) {
      SCOPED_TRACE(testing::Message() << model << ", prompt " << job.prompt << ", " << job.type << ", n_min "
                                      << job.n_min << ", n_max " << job.n_max);
      const Collected& c = job.got;
      ASSERT_TRUE(c.status.ok()) << c.status.error_message();
      EXPECT_EQ(c.ids, plain[job.prompt].ids);
      EXPECT_EQ(c.text, plain[job.prompt].text);
      EXPECT_EQ(c.finish, plain[job.prompt].finish);
      ASSERT_EQ(c.spec.size(), 1u);
      const herd::v1::SpeculativeStats& st = c.spec[0];
      EXPECT_EQ(st.type(), job.type);
      EXPECT_GT(st.calls(), 0);
      EXPECT_LE(st.acc_tokens(), st.gen_tokens());
      EXPECT_LE(st.acc_drafts(), st.gen_drafts());
      EXPECT_GE(st.gen_tokens(), st.gen_drafts() * job.n_min);
      EXPECT_LE(st.gen_tokens(), st.gen_drafts() * job.n_max);
      if (job.prompt == repeat && job.type != "draft-model") {
        // The n-gram types find the repeated passage.
        EXPECT_GT(st.acc_tokens(), 0) << st.DebugString();
      }
      if (job.prompt == repeat && job.type == "draft-model" && draft_model_drafts && job.n_min <= 4) {
        // A trained model drafting for itself is confident (p_min 0.75) on its own
        // story and right whenever it drafts.
        EXPECT_GT(st.acc_tokens(), 0) << st.DebugString();
      }
      if (job.prompt == repeat && job.n_min == 1 && job.n_max == 4) {
        std::printf(
            "%s %-14s statistics: #calls = %lld, #gen drafts = %lld, #acc drafts = %lld, #gen tokens = "
            "%lld, #acc tokens = %lld, acceptance rate = %.3f\n",
            model.c_str(), job.type.c_str(), static_cast<long long>(st.calls()),
            static_cast<long long>(st.gen_drafts()), static_cast<long long>(st.acc_drafts()),
            static_cast<long long>(st.gen_tokens()), static_cast<long long>(st.acc_tokens()),
            st.gen_tokens() > 0 ? static_cast<double>(st.acc_tokens()) / st.gen_tokens() : 0.0);
      }
    }
  }

  std::string shared_;
  std::unique_ptr<herd::v1::Gateway::Stub> stub_;
};

// ---- stories260K

class SpecStories260KTest : public SpecClusterTest {
 protected:
  static void SetUpTestSuite() { StartCluster("stories260K", &cluster_, &status_); }
  static void TearDownTestSuite() { StopCluster(&cluster_); }
  void SetUp() override { Connect(cluster_, status_); }
  static cli::LocalCluster* cluster_;
  static absl::Status status_;
};
cli::LocalCluster* SpecStories260KTest::cluster_ = nullptr;
absl::Status SpecStories260KTest::status_;

TEST_F(SpecStories260KTest, GreedyOutputsEqualNonSpeculative) {
  CheckMatrix("stories260K", {"Once upon a time", "One day, Lily met a Shoggoth", RepeatPrompt(shared_)}, 96, 2,
              /*draft_model_drafts=*/true);
  // The gateway's metrics have the statistics per type.
  const std::string m = cluster_->gateway_metrics_addr();
  for (const char* type : kTypes) {
    EXPECT_GT(e2e::MetricSum(m, "herd_gateway_spec_calls_total", absl::StrCat("type=\"", type, "\"")), 0) << type;
    EXPECT_GT(e2e::MetricSum(m, "herd_gateway_spec_acc_tokens_total", absl::StrCat("type=\"", type, "\"")), 0) << type;
  }
}

// Sampled drafts of the draft model (temperature > 0) go to the target worker with
// their distributions and are verified by rejection sampling: the model drafting for
// itself has most of them accepted; a fixed seed repeats the output.
TEST_F(SpecStories260KTest, SampledDraftModelDrafts) {
  GenerateRequest req = e2e::Greedy("stories260K", "Once upon a time", 64);
  req.mutable_sampling()->set_temperature(0.8f);
  req.mutable_sampling()->set_seed(42);
  req.mutable_speculative()->set_type("draft-model");
  req.mutable_speculative()->set_draft_max(6);
  req.mutable_speculative()->set_draft_p_min(0.0f);
  Collected a = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_GT(a.ids.size(), 8u);
  ASSERT_EQ(a.spec.size(), 1u);
  EXPECT_GT(a.spec[0].gen_tokens(), 0);
  EXPECT_GT(static_cast<double>(a.spec[0].acc_tokens()), 0.5 * static_cast<double>(a.spec[0].gen_tokens()))
      << a.spec[0].DebugString();
  Collected b = RunGenerate(stub_.get(), req);
  ASSERT_TRUE(b.status.ok());
  EXPECT_EQ(a.ids, b.ids);
}

TEST_F(SpecStories260KTest, HttpCompletionsWithSpeculation) {
  const std::string a = cluster_->gateway_http_addr();
  httplib::Client cli(a.substr(0, a.rfind(':')), std::stoi(a.substr(a.rfind(':') + 1)));
  cli.set_read_timeout(60, 0);
  nlohmann::json body = {
      {"model", "stories260K"}, {"prompt", RepeatPrompt(shared_)}, {"max_tokens", 48}, {"temperature", 0}};
  auto plain = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(plain);
  ASSERT_EQ(plain->status, 200) << plain->body;
  body["speculative"] = {{"type", "ngram-map-k"}, {"ngram_size_n", 3}, {"ngram_size_m", 16}, {"draft_max", 8}};
  auto spec = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(spec);
  ASSERT_EQ(spec->status, 200) << spec->body;
  nlohmann::json p = nlohmann::json::parse(plain->body), s = nlohmann::json::parse(spec->body);
  EXPECT_EQ(s["choices"][0]["text"], p["choices"][0]["text"]);
  ASSERT_TRUE(s.contains("speculative")) << spec->body;
  EXPECT_EQ(s["speculative"][0]["type"], "ngram-map-k");
  EXPECT_GT(s["speculative"][0]["acc_tokens"].get<int64_t>(), 0) << spec->body;
  body["speculative"] = {{"ngram_size_n", 0}};
  auto bad = cli.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("speculative.ngram_size_n"), std::string::npos) << bad->body;
}

// Last: kills the draft worker while a speculative stream runs. The stream goes on
// with empty drafts and its output is unchanged; the supervisor restarts the worker.
TEST_F(SpecStories260KTest, ZZ_KillingTheDraftWorkerMidStreamChangesNothing) {
  const std::string prompt = RepeatPrompt(shared_);
  GenerateRequest plain_req = e2e::Greedy("stories260K", prompt, 800);
  plain_req.set_ignore_eos(true);
  Collected plain = RunGenerate(stub_.get(), plain_req);
  ASSERT_TRUE(plain.status.ok()) << plain.status.error_message();
  // The target worker asks the draft worker for draft-model drafts; its failures are
  // counted there.
  const std::string m = cluster_->workers()[0]->metrics_addr;
  const double failures_before = e2e::MetricSum(m, "herd_worker_spec_draft_errors_total");
  std::atomic<bool> killed{false};
  Collected c = RunGenerate(stub_.get(), Speculative(plain_req, "draft-model", 1, 4), [&](int messages) {
    if (messages == 2 && !killed.exchange(true)) {
      EXPECT_TRUE(cluster_->KillDraftWorker(0).ok());
    }
  });
  ASSERT_TRUE(killed.load());
  ASSERT_TRUE(c.status.ok()) << c.status.error_message();
  EXPECT_EQ(c.ids, plain.ids);
  EXPECT_EQ(c.text, plain.text);
  EXPECT_EQ(c.finish, herd::v1::FINISH_REASON_LENGTH);
  // The stream outlived the draft worker: drafts failed after the kill.
  EXPECT_GT(e2e::MetricSum(m, "herd_worker_spec_draft_errors_total"), failures_before);
  ASSERT_EQ(c.spec.size(), 1u);
  // Later streams work too (with or without the restarted worker).
  Collected again = RunGenerate(stub_.get(), Speculative(plain_req, "ngram-map-k4v", 1, 4));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.ids, plain.ids);
}

// ---- llama-2-tiny-random

class SpecLlama2TinyRandomTest : public SpecClusterTest {
 protected:
  static void SetUpTestSuite() { StartCluster("llama-2-tiny-random", &cluster_, &status_); }
  static void TearDownTestSuite() { StopCluster(&cluster_); }
  void SetUp() override { Connect(cluster_, status_); }
  static cli::LocalCluster* cluster_;
  static absl::Status status_;
};
cli::LocalCluster* SpecLlama2TinyRandomTest::cluster_ = nullptr;
absl::Status SpecLlama2TinyRandomTest::status_;

TEST_F(SpecLlama2TinyRandomTest, GreedyOutputsEqualNonSpeculative) {
  CheckMatrix("llama-2-tiny-random", {"Once upon a time", "The quick brown fox", RepeatPrompt(shared_)}, 64, 2,
              /*draft_model_drafts=*/false);
}

}  // namespace
}  // namespace herd
