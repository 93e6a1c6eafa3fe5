// The gateway's speculative-decoding loop over in-process fakes: a fake target worker
// that verifies drafts against its script, real draft workers (DraftServiceImpl), a
// draft worker that is too slow or absent (empty drafts, never errors), and scripted
// drafters (distributions for sampled drafts, malformed drafts). Checks the streamed
// tokens equal the non-speculative ones, the statistics in the last message and the
// metrics, the n_predict budget, and the request's overrides and their validation.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/serving/metrics.h"
#include "libs/serving/server.h"
#include "proto/herd/v1/draft.grpc.pb.h"
#include "services/draft/draft_service.h"
#include "services/gateway/fakes.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_server.h"
#include "tests/shared_data.h"

namespace herd::gateway {
namespace {

using testing::FakeLoader;
using testing::FakeWorker;
using testing::FakeWorkerConfig;
using testing::WaitFor;

struct Collected {
  absl::Status status;
  std::vector<v1::GenerateResponse> msgs;
  std::vector<int32_t> ids;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
  std::vector<v1::SpeculativeStats> spec;
};

class CollectingSink : public GenerateSink {
 public:
  explicit CollectingSink(Collected* c) : c_(c) {}
  bool Write(const v1::GenerateResponse& msg) override {
    c_->msgs.push_back(msg);
    c_->ids.insert(c_->ids.end(), msg.token_ids().begin(), msg.token_ids().end());
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      c_->finish = msg.finish_reason();
      c_->usage = msg.usage();
      c_->spec.assign(msg.speculative().begin(), msg.speculative().end());
    }
    return true;
  }

 private:
  Collected* c_;
};

// A draft worker in this process.
struct DraftWorker {
  std::unique_ptr<draft::DraftServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  ~DraftWorker() {
    if (server) server->Shutdown(std::chrono::system_clock::now());
  }
};

std::unique_ptr<DraftWorker> StartDraftWorker() {
  auto w = std::make_unique<DraftWorker>();
  draft::DraftServiceOptions o;
  o.defaults.type = engine::spec::SpecType::kNgramSimple;
  o.reaper = false;
  w->service = std::make_unique<draft::DraftServiceImpl>(o);
  serving::GrpcServerOptions g;
  g.address = "127.0.0.1:0";
  int port = 0;
  auto s = serving::StartGrpcServer(g, {w->service.get()}, &port);
  EXPECT_TRUE(s.ok()) << s.status();
  if (s.ok()) w->server = *std::move(s);
  w->address = absl::StrCat("127.0.0.1:", port);
  return w;
}

// A draft worker that answers after `delay` (later than the gateway's deadline).
class SlowDraft final : public v1::Draft::Service {
 public:
  explicit SlowDraft(std::chrono::milliseconds delay) : delay_(delay) {}
  grpc::Status Propose(grpc::ServerContext*, const v1::DraftRequest* req, v1::DraftResponse* resp) override {
    ++calls;
    std::this_thread::sleep_for(delay_);
    resp->add_tokens(300);
    resp->set_history_len(req->start() + req->new_tokens_size());
    return grpc::Status::OK;
  }
  grpc::Status EndSession(grpc::ServerContext*, const v1::EndSessionRequest*, v1::EndSessionResponse*) override {
    return grpc::Status::OK;
  }
  std::atomic<int> calls{0};

 private:
  std::chrono::milliseconds delay_;
};

// A drafter that proposes `script` continuations (as the fake worker's script), with
// distributions, plus a token outside the vocabulary every third call.
class ScriptedDrafter : public engine::spec::DraftSource {
 public:
  struct Log {
    std::vector<std::vector<int32_t>> new_tokens;  // appended since the previous Propose
    std::vector<int> n_max;
    std::vector<int> accepted;
    std::vector<DrafterParams> params;
  };
  ScriptedDrafter(std::vector<int32_t> script, size_t prompt_len, Log* log)
      : script_(std::move(script)), prompt_len_(prompt_len), log_(log) {}
  void Append(const std::vector<int32_t>& tokens) override {
    unsent_.insert(unsent_.end(), tokens.begin(), tokens.end());
  }
  absl::StatusOr<engine::spec::DraftResult> Propose(int32_t n_max) override {
    log_->new_tokens.push_back(unsent_);
    log_->n_max.push_back(n_max);
    seen_ += unsent_.size();
    unsent_.clear();
    ++calls_;
    ++stats_.calls;
    const size_t produced = seen_ - prompt_len_;
    engine::spec::DraftResult d;
    for (int i = 0; i < n_max + 2; ++i) {  // a little more than asked: the gateway cuts it
      d.tokens.push_back(script_[(produced + static_cast<size_t>(i)) % script_.size()]);
      d.probs.push_back({{d.tokens.back(), 0.75f}, {7, 0.25f}});
    }
    if (calls_ % 3 == 0 && d.tokens.size() > 1) d.tokens[1] = 99999;  // outside the vocabulary
    ++stats_.gen_drafts;
    return d;
  }
  void Accept(int32_t n) override {
    log_->accepted.push_back(n);
    stats_.acc_tokens += n;
  }
  engine::spec::SpecStats Stats() const override {
    engine::spec::SpecStats s = stats_;
    s.type = engine::spec::SpecType::kDraftModel;
    return s;
  }

 private:
  std::vector<int32_t> script_;
  size_t prompt_len_;
  Log* log_;
  std::vector<int32_t> unsent_;
  size_t seen_ = 0;
  int calls_ = 0;
  engine::spec::SpecStats stats_;
};

const std::vector<int32_t> kCycle = {300, 301, 302, 303, 304};

class GatewaySpecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    ASSERT_TRUE(loader_.AddModelFromFile("stories260K", shared_ + "/models/stories260K.gguf").ok());
    ASSERT_TRUE(loader_.Start().ok());
  }

  FakeWorker* AddWorker(const std::function<void(FakeWorkerConfig&)>& tweak) {
    FakeWorkerConfig c;
    tweak(c);
    workers_.push_back(std::make_unique<FakeWorker>(c));
    EXPECT_TRUE(workers_.back()->Start().ok());
    return workers_.back().get();
  }

  // A fake worker that repeats kCycle without EOS.
  FakeWorker* AddCycleWorker() {
    return AddWorker([](FakeWorkerConfig& c) {
      c.script = kCycle;
      c.eos_after_script = false;
    });
  }

  std::unique_ptr<Gateway> StartGateway(FakeWorker* w, const std::function<void(GatewayOptions&)>& tweak) {
    GatewayOptions o;
    o.loader_address = loader_.address();
    o.pool.addresses = {w->address()};
    o.pool.poll_interval = absl::Milliseconds(50);
    o.pool.info_timeout = absl::Milliseconds(2000);
    tweak(o);
    auto gw = std::make_unique<Gateway>(o, &registry_);
    EXPECT_TRUE(gw->Start().ok());
    Gateway* g = gw.get();
    EXPECT_TRUE(WaitFor(
        [&] {
          if (g->pool().live_count() == 1) return true;
          g->pool().PollNow();
          return g->pool().live_count() == 1;
        },
        20000));
    return gw;
  }

  static Collected Generate(Gateway* gw, const v1::GenerateRequest& req) {
    Collected c;
    CollectingSink sink(&c);
    c.status = gw->Generate(req, absl::Now() + absl::Seconds(20), &sink);
    return c;
  }

  static v1::GenerateRequest Req(int n, float temperature = 0.0f) {
    v1::GenerateRequest r;
    r.set_model("stories260K");
    r.set_text("Once upon a time");
    r.set_n_predict(n);
    r.mutable_sampling()->set_temperature(temperature);
    return r;
  }

  std::string shared_;
  FakeLoader loader_;
  serving::Registry registry_;
  std::vector<std::unique_ptr<FakeWorker>> workers_;
};

std::vector<int32_t> CycleOf(size_t n) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(kCycle[i % kCycle.size()]);
  return out;
}

// n-gram drafts from a real draft worker on a repeating stream: the tokens equal the
// non-speculative ones, drafts are accepted, no draft reaches past n_predict, and the
// last message, the metrics and the request log carry the statistics.
TEST_F(GatewaySpecTest, NgramDraftsFromADraftWorker) {
  FakeWorker* w = AddCycleWorker();
  auto dw = StartDraftWorker();
  auto gw = StartGateway(w, [&](GatewayOptions& o) {
    o.drafts.addresses = {dw->address};
    o.drafts.deadline = std::chrono::milliseconds(5000);
  });
  ASSERT_NE(gw->draft_client(), nullptr);
  const int n = 41;
  Collected plain = Generate(gw.get(), Req(n));
  ASSERT_TRUE(plain.status.ok()) << plain.status;
  EXPECT_EQ(plain.ids, CycleOf(n));
  EXPECT_TRUE(plain.spec.empty());  // the gateway's default type is none

  v1::GenerateRequest req = Req(n);
  v1::SpeculativeConfig* sc = req.mutable_speculative();
  sc->set_type("ngram-simple");
  sc->set_ngram_size_n(2);
  sc->set_ngram_size_m(8);
  sc->set_draft_max(6);
  const size_t steps_before = w->drafts().size();
  Collected c = Generate(gw.get(), req);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.ids, CycleOf(n));
  EXPECT_EQ(c.finish, v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(c.usage.completion_tokens(), n);
  ASSERT_EQ(c.spec.size(), 1u);
  const v1::SpeculativeStats& st = c.spec[0];
  EXPECT_EQ(st.type(), "ngram-simple");
  EXPECT_GT(st.calls(), 0);
  EXPECT_GT(st.gen_drafts(), 0);
  EXPECT_GT(st.acc_tokens(), 0);
  EXPECT_LE(st.acc_tokens(), st.gen_tokens());
  EXPECT_LE(st.acc_drafts(), st.gen_drafts());
  // Fewer passes than tokens; every draft within draft_max and the remaining budget.
  const std::vector<std::vector<int32_t>> drafts = w->drafts();
  const size_t passes = drafts.size() - steps_before;
  EXPECT_LT(passes, static_cast<size_t>(n));
  int64_t produced = 0;
  for (size_t i = steps_before; i < drafts.size(); ++i) {
    const auto& d = drafts[i];
    EXPECT_LE(d.size(), 6u);
    EXPECT_LE(static_cast<int64_t>(d.size()), n - produced - 1) << "draft past n_predict at pass " << i;
    size_t acc = 0;
    while (acc < d.size() &&
           d[acc] == kCycle[static_cast<size_t>(produced + static_cast<int64_t>(acc)) % kCycle.size()])
      ++acc;
    produced += static_cast<int64_t>(acc) + 1;
  }
  EXPECT_EQ(produced, n);
  // Greedy: no distributions are sent.
  for (int k : w->draft_probs_counts()) EXPECT_EQ(k, 0);
  const std::string m = registry_.Render();
  EXPECT_TRUE(absl::StrContains(
      m, "herd_gateway_spec_acc_tokens_total{type=\"ngram-simple\"} " + std::to_string(st.acc_tokens())))
      << m;
  EXPECT_TRUE(
      absl::StrContains(m, "herd_gateway_spec_calls_total{type=\"ngram-simple\"} " + std::to_string(st.calls())))
      << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_spec_gen_drafts_total{type=\"ngram-simple\"}")) << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_spec_acc_drafts_total{type=\"ngram-simple\"}")) << m;
  EXPECT_TRUE(absl::StrContains(m, "herd_gateway_spec_gen_tokens_total{type=\"ngram-simple\"}")) << m;
  // The draft worker's session is ended once the sequence is.
  EXPECT_TRUE(WaitFor([&] { return dw->service->n_sessions() == 0; }));
}

// The gateway's defaults (--spec_type etc.) apply to requests that name no type; a
// request's "none" turns speculation off.
TEST_F(GatewaySpecTest, GatewayDefaultsAndRequestOverrides) {
  FakeWorker* w = AddCycleWorker();
  auto dw = StartDraftWorker();
  auto gw = StartGateway(w, [&](GatewayOptions& o) {
    o.drafts.addresses = {dw->address};
    o.drafts.deadline = std::chrono::milliseconds(5000);
    o.spec_defaults.type = engine::spec::SpecType::kNgramMapK;
    o.spec_defaults.ngram_size_n = 2;
    o.spec_defaults.ngram_size_m = 4;
  });
  Collected c = Generate(gw.get(), Req(30));
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.ids, CycleOf(30));
  ASSERT_EQ(c.spec.size(), 1u);
  EXPECT_EQ(c.spec[0].type(), "ngram-map-k");
  EXPECT_GT(c.spec[0].acc_tokens(), 0);
  // Only draft_max from the request: the default type, drafts of at most 2.
  v1::GenerateRequest r = Req(30);
  r.mutable_speculative()->set_draft_max(2);
  const size_t before = w->drafts().size();
  c = Generate(gw.get(), r);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.ids, CycleOf(30));
  const auto drafts = w->drafts();
  for (size_t i = before; i < drafts.size(); ++i) EXPECT_LE(drafts[i].size(), 2u);
  // "none": no drafts at all.
  r.mutable_speculative()->set_type("none");
  c = Generate(gw.get(), r);
  ASSERT_TRUE(c.status.ok()) << c.status;
  EXPECT_EQ(c.ids, CycleOf(30));
  EXPECT_TRUE(c.spec.empty());
  // Overrides are validated and named.
  for (const auto& [field, set] : std::vector<std::pair<std::string, std::function<void(v1::SpeculativeConfig*)>>>{
           {"speculative.ngram_size_n", [](v1::SpeculativeConfig* s) { s->set_ngram_size_n(0); }},
           {"speculative.ngram_size_m", [](v1::SpeculativeConfig* s) { s->set_ngram_size_m(2000); }},
           {"speculative.ngram_check_rate", [](v1::SpeculativeConfig* s) { s->set_ngram_check_rate(0); }},
           {"speculative.ngram_min_hits", [](v1::SpeculativeConfig* s) { s->set_ngram_min_hits(-1); }},
           {"speculative.draft_max", [](v1::SpeculativeConfig* s) { s->set_draft_max(1025); }},
           {"speculative.draft_min", [](v1::SpeculativeConfig* s) { s->set_draft_min(17); }},
           {"speculative.draft_p_min", [](v1::SpeculativeConfig* s) { s->set_draft_p_min(1.5f); }},
           {"speculative.type", [](v1::SpeculativeConfig* s) { s->set_type("magic"); }}}) {
    v1::GenerateRequest bad = Req(4);
    set(bad.mutable_speculative());
    Collected b = Generate(gw.get(), bad);
    EXPECT_TRUE(absl::IsInvalidArgument(b.status)) << field << ": " << b.status;
    EXPECT_TRUE(absl::StartsWith(b.status.message(), field)) << field << ": " << b.status;
    EXPECT_TRUE(b.msgs.empty());
  }
}

// A draft worker slower than --draft_timeout_ms, or none listening: empty drafts, the
// same tokens, no error; the failures are counted.
TEST_F(GatewaySpecTest, LateOrAbsentDraftWorkerMeansEmptyDrafts) {
  FakeWorker* w = AddWorker([](FakeWorkerConfig& c) { c.script = {300, 301, 302, 303}; });
  SlowDraft slow(std::chrono::milliseconds(300));
  serving::GrpcServerOptions g;
  g.address = "127.0.0.1:0";
  int port = 0;
  auto server = serving::StartGrpcServer(g, {&slow}, &port);
  ASSERT_TRUE(server.ok()) << server.status();
  for (const std::string& addr : {absl::StrCat("127.0.0.1:", port), std::string("127.0.0.1:1")}) {
    SCOPED_TRACE(addr);
    auto gw = StartGateway(w, [&](GatewayOptions& o) {
      o.drafts.addresses = {addr};
      o.drafts.deadline = std::chrono::milliseconds(30);
    });
    v1::GenerateRequest req = Req(8);
    req.mutable_speculative()->set_type("ngram-simple");
    const auto t0 = std::chrono::steady_clock::now();
    Collected c = Generate(gw.get(), req);
    ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(c.ids, (std::vector<int32_t>{300, 301, 302, 303, 2}));  // the EOS token included
    EXPECT_EQ(c.finish, v1::FINISH_REASON_EOS);
    ASSERT_EQ(c.spec.size(), 1u);
    EXPECT_GT(c.spec[0].calls(), 0);
    EXPECT_EQ(c.spec[0].gen_drafts(), 0);
    EXPECT_EQ(c.spec[0].acc_tokens(), 0);
    // Each missed deadline costs about 30 ms, never the worker's 300.
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250 * 5));
    EXPECT_TRUE(absl::StrContains(registry_.Render(), "herd_gateway_spec_draft_failures_total{type=\"ngram-simple\"}"));
    gw->Stop();
  }
  EXPECT_GT(slow.calls.load(), 0);
  (*server)->Shutdown(std::chrono::system_clock::now());
}

// A drafter's sampled drafts carry distributions to the worker only when the request
// samples (temperature > 0); malformed draft tokens are cut, never sent; the drafter
// sees the prompt first, then only the new tokens, and the caps.
TEST_F(GatewaySpecTest, ScriptedDrafterProbabilitiesAndCaps) {
  FakeWorker* w = AddCycleWorker();
  ScriptedDrafter::Log log;
  size_t prompt_len = 0;
  auto gw = StartGateway(w, [&](GatewayOptions& o) {
    o.drafter_factory = [&](const DrafterParams& p) -> std::unique_ptr<engine::spec::DraftSource> {
      log.params.push_back(p);
      return std::make_unique<ScriptedDrafter>(kCycle, prompt_len, &log);
    };
  });
  auto vocab = gw->vocabs().Get("stories260K", absl::Now() + absl::Seconds(10));
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  const std::vector<int32_t> prompt = (*vocab)->Tokenize("Once upon a time", true, true);
  prompt_len = prompt.size();
  for (float temp : {0.0f, 0.7f}) {
    SCOPED_TRACE(::testing::Message() << "temperature " << temp);
    log = ScriptedDrafter::Log();
    v1::GenerateRequest req = Req(23, temp);
    req.mutable_speculative()->set_type("draft-model");
    req.mutable_speculative()->set_draft_max(4);
    req.mutable_sampling()->set_seed(77);
    const size_t before = w->drafts().size();
    Collected c = Generate(gw.get(), req);
    ASSERT_TRUE(c.status.ok()) << c.status;
    EXPECT_EQ(c.ids, CycleOf(23));
    ASSERT_EQ(c.spec.size(), 1u);
    EXPECT_EQ(c.spec[0].type(), "draft-model");  // the drafter's statistics
    ASSERT_EQ(log.params.size(), 1u);
    EXPECT_EQ(log.params[0].model, "stories260K");
    EXPECT_EQ(log.params[0].config.type(), "draft-model");
    EXPECT_EQ(log.params[0].config.draft_max(), 4);
    EXPECT_EQ(log.params[0].config.ngram_size_n(), 12);  // the gateway's default
    EXPECT_FLOAT_EQ(log.params[0].temperature, temp);
    EXPECT_EQ(log.params[0].seed, 77u);
    // The prompt first, then accepted + 1 tokens per pass.
    ASSERT_FALSE(log.new_tokens.empty());
    EXPECT_EQ(log.new_tokens[0], prompt);
    for (size_t i = 0; i < log.n_max.size(); ++i) EXPECT_LE(log.n_max[i], 4);
    const auto drafts = w->drafts();
    const auto probs = w->draft_probs_counts();
    for (size_t i = before; i < drafts.size(); ++i) {
      for (int32_t t : drafts[i]) EXPECT_LT(t, 512) << "a token outside the vocabulary reached the worker";
      EXPECT_LE(drafts[i].size(), 4u);
      EXPECT_EQ(probs[i], temp > 0 ? static_cast<int>(drafts[i].size()) : 0);
    }
    EXPECT_EQ(log.accepted.size(), drafts.size() - before -
                                       std::count_if(drafts.begin() + static_cast<long>(before), drafts.end(),
                                                     [](const auto& d) { return d.empty(); }));
  }
}

TEST(HttpSpeculative, ParsesTheSpeculativeObject) {
  nlohmann::json body = {{"model", "m"},
                         {"prompt", "p"},
                         {"speculative",
                          {{"type", "ngram-map-k"},
                           {"draft_max", 8},
                           {"draft_min", 2},
                           {"draft_p_min", 0.5},
                           {"ngram_size_n", 3},
                           {"ngram_size_m", 16},
                           {"ngram_check_rate", 2},
                           {"ngram_min_hits", 1}}}};
  auto r = ParseCompletionRequest(body);
  ASSERT_TRUE(r.ok()) << r.status();
  const v1::SpeculativeConfig& s = r->req.speculative();
  EXPECT_EQ(s.type(), "ngram-map-k");
  EXPECT_EQ(s.draft_max(), 8);
  EXPECT_EQ(s.draft_min(), 2);
  EXPECT_FLOAT_EQ(s.draft_p_min(), 0.5f);
  EXPECT_EQ(s.ngram_size_n(), 3);
  EXPECT_EQ(s.ngram_size_m(), 16);
  EXPECT_EQ(s.ngram_check_rate(), 2);
  EXPECT_EQ(s.ngram_min_hits(), 1);
  EXPECT_TRUE(s.has_ngram_min_hits());
  body["speculative"] = {{"draft_max", 4}};
  r = ParseCompletionRequest(body);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->req.speculative().type().empty());
  EXPECT_FALSE(r->req.speculative().has_draft_min());
  for (const auto& [bad, field] :
       std::vector<std::pair<nlohmann::json, std::string>>{{"ngram-simple", "speculative"},
                                                           {{{"type", 3}}, "speculative.type"},
                                                           {{{"draft_max", "x"}}, "speculative.draft_max"},
                                                           {{{"draft_p_min", "x"}}, "speculative.draft_p_min"},
                                                           {{{"n_max", 4}}, "speculative.n_max"}}) {
    body["speculative"] = bad;
    r = ParseCompletionRequest(body);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << field;
    EXPECT_TRUE(absl::StartsWith(r.status().message(), field)) << r.status();
  }
}

}  // namespace
}  // namespace herd::gateway
