// A model split across hosts (issue: the remote backend): `--backend cpu,remote://ADDR`
// with layers half and half (CreateSplitBackend, as the worker builds it) over a real
// compute server on loopback (gRPC, the wire checks, the server's CPU) gives the same
// greedy ids as one CPU: stories260K and every architecture in ../shared/reference/arch.
// It also prints what crosses the wire per decoded token (round trips, bytes).
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/registry.h"
#include "libs/backend/remote/remote_backend.h"
#include "libs/backend/remote/testing/loopback.h"
#include "libs/backend/sched.h"
#include "libs/engine/engine.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

using remote::RemoteBackend;
using remote::testing::LoopbackServer;

// Greedy decode of n tokens after `prompt`; returns the ids.
std::vector<int32_t> Greedy(engine::Engine& e, const std::vector<int32_t>& prompt, int n,
                            const std::function<void(int step)>& after_step = nullptr) {
  engine::Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
  std::vector<int32_t> out;
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int step = 0; step < n; ++step) {
    absl::Status s = e.Decode(b);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return out;
    const float* last = e.Logits(e.n_outputs() - 1);
    int32_t best = 0;
    for (int32_t t = 1; t < e.n_vocab(); ++t) best = last[t] > last[best] ? t : best;
    out.push_back(best);
    if (after_step) after_step(step);
    b.Clear();
    b.Add(best, pos++, 0, true);
  }
  return out;
}

struct Wire {
  double round_trips_per_token = 0;
  double bytes_per_token = 0;
};

// The CPU's ids and the split's; *wire what a decode step costs on the wire.
void RunBoth(const std::string& path, const std::vector<int32_t>& prompt, int n, std::vector<int32_t>* want,
             std::vector<int32_t>* got, Wire* wire) {
  auto cpu_model = model::Model::Load(path);
  auto split_model = model::Model::Load(path);
  ASSERT_TRUE(cpu_model.ok() && split_model.ok()) << path;
  engine::EngineParams ep;
  ep.n_ctx = 128;
  ep.n_batch = 64;
  std::unique_ptr<Backend> cpu = CpuBackendForTests(1);
  ASSERT_TRUE((*cpu_model)->PlaceWeights(cpu.get()).ok());
  auto ref = engine::Engine::Create(**cpu_model, ep, cpu.get());
  ASSERT_TRUE(ref.ok()) << ref.status();
  *want = Greedy(**ref, prompt, n);

  auto server = LoopbackServer::Start(1);
  ASSERT_TRUE(server.ok()) << server.status();
  BackendOptions bo;
  bo.n_threads = 1;
  SplitOptions so;
  so.n_layer = (*split_model)->hparams().n_layer;
  so.tensor_split = {1, 1};
  RemoteBackend* remote = nullptr;
  so.connect_remote = [&](const std::string& address) -> absl::StatusOr<std::unique_ptr<Backend>> {
    EXPECT_EQ(address, (*server)->address());
    absl::StatusOr<std::unique_ptr<RemoteBackend>> b = (*server)->Connect();
    if (!b.ok()) return b.status();
    remote = b->get();
    return std::unique_ptr<Backend>(*std::move(b));
  };
  auto split = CreateSplitBackend("cpu,remote://" + (*server)->address(), bo, so);
  ASSERT_TRUE(split.ok()) << split.status();
  ASSERT_NE(remote, nullptr);
  ASSERT_TRUE((*split_model)->PlaceWeights(split->get()).ok());
  EXPECT_GT((*server)->server()->bytes_allocated(), 0u);  // the second half's weights
  EXPECT_LT((*server)->server()->bytes_allocated(), (*split_model)->weight_bytes() + (1u << 20));
  auto eng = engine::Engine::Create(**split_model, ep, split->get());
  ASSERT_TRUE(eng.ok()) << eng.status();
  remote::RemoteStats at_second;
  *got = Greedy(**eng, prompt, n, [&](int step) {
    if (step == 0) at_second = remote->stats();  // after the prompt
  });
  const remote::RemoteStats end = remote->stats();
  const double steps = n - 1;
  wire->round_trips_per_token = static_cast<double>(end.round_trips - at_second.round_trips) / steps;
  wire->bytes_per_token =
      static_cast<double>(end.bytes_sent + end.bytes_received - at_second.bytes_sent - at_second.bytes_received) /
      steps;
}

TEST(RemoteSplitTest, Stories260KHalfOnAComputeServerEqualsOneCpu) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED";
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 273, 411, 260, 413, 357, 447};
  std::vector<int32_t> want, got;
  Wire wire;
  RunBoth(shared + "/models/stories260K.gguf", prompt, 48, &want, &got, &wire);
  ASSERT_EQ(want.size(), 48u);
  EXPECT_EQ(got, want);
  // A decode step: the CPU's layers, then one Execute carrying the hidden state and the
  // inputs the remote layers read, their compute and the read of the logits.
  EXPECT_EQ(wire.round_trips_per_token, 1.0);
  std::printf("stories260K split cpu | remote (loopback): %.2f round trips and %.0f bytes per decoded token\n",
              wire.round_trips_per_token, wire.bytes_per_token);
}

TEST(RemoteSplitTest, EveryArchitectureThroughTheSplitEqualsOneCpu) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED";
  const std::vector<int32_t> prompt = {1, 20, 300, 45, 700, 12, 999, 5};
  for (const char* name :
       {"synth-baichuan", "synth-bloom", "synth-gemma", "synth-gpt2", "synth-gptneox", "synth-mpt-clamp8",
        "synth-mpt-noclamp", "synth-phi2", "synth-phi3", "synth-refact", "synth-stablelm", "synth-starcoder"}) {
    SCOPED_TRACE(name);
    std::vector<int32_t> want, got;
    Wire wire;
    RunBoth(shared + "/reference/arch/" + name + ".gguf", prompt, 16, &want, &got, &wire);
    ASSERT_EQ(want.size(), 16u);
    EXPECT_EQ(got, want);
    EXPECT_EQ(wire.round_trips_per_token, 1.0);
    std::printf("%s: %zu ids equal; %.2f round trips, %.0f bytes per token\n", name, got.size(),
                wire.round_trips_per_token, wire.bytes_per_token);
  }
}

}  // namespace
}  // namespace herd
