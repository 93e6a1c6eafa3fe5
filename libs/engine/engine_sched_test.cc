// The engine over a device whose memory the host cannot address (the fake device of
// libs/backend/testing) with the CPU as fallback: weights, KV cache and graph inputs
// live in device memory, ops the device lacks run on the CPU, and the logits equal
// those of the CPU backend alone.
#include <cmath>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/registry.h"
#include "libs/backend/sched.h"
#include "libs/backend/testing/fake_device.h"
#include "libs/engine/engine.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"

namespace herd::engine {
namespace {

class EngineSchedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shared = SharedDir();
    if (shared.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED";
    for (auto* m : {&cpu_model_, &dev_model_}) {
      auto loaded = model::Model::Load(shared + "/models/stories260K.gguf");
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      *m = *std::move(loaded);
    }
  }

  // Greedy decode of `n` tokens after `prompt`, logits of every step appended to *all.
  static std::vector<int32_t> Greedy(Engine& e, const std::vector<int32_t>& prompt, int n, std::vector<float>* all) {
    Batch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, true);
    std::vector<int32_t> out;
    int32_t pos = static_cast<int32_t>(prompt.size());
    for (int step = 0; step <= n; ++step) {
      absl::Status s = e.Decode(b);
      EXPECT_TRUE(s.ok()) << s;
      if (!s.ok()) return out;
      for (int64_t j = 0; j < e.n_outputs(); ++j) all->insert(all->end(), e.Logits(j), e.Logits(j) + e.n_vocab());
      const float* last = e.Logits(e.n_outputs() - 1);
      int32_t best = 0;
      for (int32_t t = 1; t < e.n_vocab(); ++t) best = last[t] > last[best] ? t : best;
      out.push_back(best);
      b.Clear();
      b.Add(best, pos++, 0, true);
    }
    return out;
  }

  std::unique_ptr<model::Model> cpu_model_, dev_model_;
};

TEST_F(EngineSchedTest, FakeDeviceWithCpuFallbackEqualsTheCpu) {
  std::unique_ptr<Backend> cpu_owner = CpuBackendForTests(2);
  Backend& cpu = *cpu_owner;
  ASSERT_TRUE(cpu_model_->PlaceWeights(&cpu).ok());
  EngineParams ep;
  ep.n_ctx = 128;
  ep.n_batch = 16;  // the prompt takes two passes
  auto ref = Engine::Create(*cpu_model_, ep, &cpu);
  ASSERT_TRUE(ref.ok()) << ref.status();

  // The device lacks rope, softmax, flash attention and the activations.
  std::vector<std::unique_ptr<Backend>> chain;
  chain.push_back(std::make_unique<testing::FakeDevice>(
      std::set<Op>{Op::kGetRows, Op::kMulMat, Op::kAdd, Op::kMul, Op::kRmsNorm, Op::kSetRows}, 2));
  chain.push_back(CpuBackendForTests(2));
  auto sched = Scheduler::Create(std::move(chain));
  ASSERT_TRUE(sched.ok()) << sched.status();
  Scheduler& s = **sched;
  auto* fake = static_cast<testing::FakeDevice*>(s.backend(0));

  // Unplaced weights (the file mapping) cannot serve a device.
  auto refused = Engine::Create(*dev_model_, ep, &s);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();

  ASSERT_TRUE(dev_model_->PlaceWeights(&s).ok());
  EXPECT_EQ(dev_model_->weights_buffer_type(), fake->default_buffer_type());
  EXPECT_GE(fake->bytes_allocated(), dev_model_->weight_bytes());
  auto dev = Engine::Create(*dev_model_, ep, &s);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_FALSE((*dev)->kv().k(0)->buffer->type()->is_host());

  const std::vector<int32_t> prompt = {1,   403, 407, 261, 378, 432, 273, 411, 260, 413,
                                       357, 447, 259, 296, 378, 4,   354, 306, 311, 414};
  std::vector<float> want, got;
  const std::vector<int32_t> want_ids = Greedy(**ref, prompt, 12, &want);
  const std::vector<int32_t> got_ids = Greedy(**dev, prompt, 12, &got);
  EXPECT_EQ(got_ids, want_ids);
  ASSERT_EQ(got.size(), want.size());
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, std::fabs(double(got[i]) - want[i]));
  EXPECT_LE(max_diff, 1e-5) << "the same kernels compute both";

  const SchedStats& st = s.last_stats();
  EXPECT_GT(st.nodes_per_backend[0], 0);
  EXPECT_GT(st.nodes_per_backend[1], 0);  // rope, flash attention, silu/swiglu fell back
  EXPECT_GT(st.n_splits, 2);
  EXPECT_GT(st.n_copies, 0);
  EXPECT_GT(fake->nodes_computed(), 0);
  std::printf(
      "fake device + CPU: %d splits, %d copies (%zu bytes) per decode step; nodes %d on the device, %d on "
      "the CPU\n",
      st.n_splits, st.n_copies, st.bytes_copied, st.nodes_per_backend[0], st.nodes_per_backend[1]);

  // Placing the same weights in another backend's memory is refused.
  EXPECT_EQ(dev_model_->PlaceWeights(&cpu).code(), absl::StatusCode::kFailedPrecondition);
}

// stories260K through the Vulkan backend (lavapipe here, pinned by the test's
// VK_ICD_FILENAMES) with the CPU fallback: the greedy ids of the CPU, logits close.
TEST_F(EngineSchedTest, VulkanGreedyEqualsTheCpu) {
  BackendOptions o;
  o.n_threads = 2;
  auto vk = CreateBackend("vulkan", o);
  if (!vk.ok()) GTEST_SKIP() << "no Vulkan device here: " << vk.status();
  std::unique_ptr<Backend> cpu_owner = CpuBackendForTests(2);
  Backend& cpu = *cpu_owner;
  ASSERT_TRUE(cpu_model_->PlaceWeights(&cpu).ok());
  ASSERT_TRUE(dev_model_->PlaceWeights(vk->get()).ok());
  EngineParams ep;
  ep.n_ctx = 256;
  ep.n_batch = 64;
  auto ref = Engine::Create(*cpu_model_, ep, &cpu);
  auto dev = Engine::Create(*dev_model_, ep, vk->get());
  ASSERT_TRUE(ref.ok() && dev.ok());
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378, 432, 273, 411};
  std::vector<float> want, got;
  const std::vector<int32_t> want_ids = Greedy(**ref, prompt, 48, &want);
  const std::vector<int32_t> got_ids = Greedy(**dev, prompt, 48, &got);
  EXPECT_EQ(got_ids, want_ids);
  ASSERT_EQ(got.size(), want.size());
  double err = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  EXPECT_LE(err / norm, 1e-5) << "NMSE of every logit";
  const SchedStats& st = static_cast<Scheduler*>(vk->get())->last_stats();
  std::printf("vulkan (%s): %d splits, %d copies per decode step; NMSE of logits %.3g\n",
              (*vk)->device().description.c_str(), st.n_splits, st.n_copies, err / norm);
}

}  // namespace
}  // namespace herd::engine
