// A layer split across two backends (llama.cpp's --tensor-split): Scheduler([fake, cpu])
// with the input layer and the first half of the layers on the CPU and the second half
// plus the output layer on a fake device that computes every op in memory the host cannot
// address (standing in for a remote host). Weights and KV cache of each layer live in its
// backend's memory, and greedy decoding gives the ids of the CPU alone.
#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/backend/sched.h"
#include "libs/backend/testing/fake_device.h"
#include "libs/engine/engine.h"
#include "tests/cpu_backend_for_tests.h"
#include "tests/shared_data.h"

namespace herd::engine {
namespace {

std::set<Op> AllOps() {
  std::set<Op> ops;
  for (int o = 0; o < static_cast<int>(Op::kCount); ++o) ops.insert(static_cast<Op>(o));
  return ops;
}

// Greedy decode of `n` tokens after `prompt` (one batch), logits of every step appended.
std::vector<int32_t> Greedy(Engine& e, const std::vector<int32_t>& prompt, int n, std::vector<float>* all) {
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
  std::vector<int32_t> out;
  int32_t pos = static_cast<int32_t>(prompt.size());
  for (int step = 0; step < n; ++step) {
    absl::Status s = e.Decode(b);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return out;
    const float* last = e.Logits(e.n_outputs() - 1);
    all->insert(all->end(), last, last + e.n_vocab());
    int32_t best = 0;
    for (int32_t t = 1; t < e.n_vocab(); ++t) best = last[t] > last[best] ? t : best;
    out.push_back(best);
    b.Clear();
    b.Add(best, pos++, 0, true);
  }
  return out;
}

struct SplitRun {
  std::vector<int32_t> ids;
  std::vector<float> logits;
  SchedStats stats;
};

// Runs `path` on the CPU alone and through the split; checks where weights and KV cache
// went. Returns the split run; *want the CPU's.
SplitRun RunBoth(const std::string& path, const std::vector<int32_t>& prompt, int n, SplitRun* want) {
  SplitRun got;
  auto cpu_model = model::Model::Load(path);
  auto split_model = model::Model::Load(path);
  EXPECT_TRUE(cpu_model.ok() && split_model.ok()) << path;
  if (!cpu_model.ok() || !split_model.ok()) return got;
  const int64_t n_layer = (*cpu_model)->hparams().n_layer;

  std::unique_ptr<Backend> cpu = CpuBackendForTests(2);
  EXPECT_TRUE((*cpu_model)->PlaceWeights(cpu.get()).ok());
  EngineParams ep;
  ep.n_ctx = 128;
  ep.n_batch = 64;
  auto ref = Engine::Create(**cpu_model, ep, cpu.get());
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) return got;
  want->ids = Greedy(**ref, prompt, n, &want->logits);

  std::vector<std::unique_ptr<Backend>> chain;
  chain.push_back(std::make_unique<testing::FakeDevice>(AllOps(), 2));
  chain.push_back(CpuBackendForTests(2));
  auto sched = Scheduler::Create(std::move(chain), /*memory_backend=*/1);  // inputs stay on the CPU
  EXPECT_TRUE(sched.ok()) << sched.status();
  if (!sched.ok()) return got;
  Scheduler& s = **sched;
  auto* fake = static_cast<testing::FakeDevice*>(s.backend(0));
  BufferType* host_mem = s.backend(1)->default_buffer_type();
  BufferType* fake_mem = fake->default_buffer_type();
  // --tensor-split 1,1 over [cpu, fake]: input + first half on the CPU, second half +
  // output on the fake device.
  const std::vector<size_t> placement = LayerPlacementFromSplit(n_layer, {1, 1}, {1, 0});
  EXPECT_TRUE(s.SetLayerPlacement(placement).ok());
  const int64_t half = (n_layer + 1) / 2;  // layers [0, half) on the CPU
  for (int64_t il = -1; il <= n_layer; ++il) {
    EXPECT_EQ(s.layer_buffer_type(il, n_layer), il < half ? host_mem : fake_mem) << "layer " << il;
  }

  model::Model& m = **split_model;
  EXPECT_TRUE(m.PlaceWeights(&s).ok());
  EXPECT_EQ(m.weights_buffer_types(), (std::vector<const BufferType*>{host_mem, fake_mem}));
  EXPECT_EQ(m.weights_buffer_type(), host_mem);
  EXPECT_EQ(m.weights().tok_embd->buffer->type(), host_mem);
  EXPECT_EQ(m.weights().output_norm->buffer->type(), fake_mem);
  for (int64_t il = 0; il < n_layer; ++il) {
    const Tensor* w = m.weights().layers[static_cast<size_t>(il)].ffn_down;
    EXPECT_EQ(w->buffer->type(), il < half ? host_mem : fake_mem) << w->name;
  }
  size_t fake_weights = 0;
  for (int64_t il = half; il < n_layer; ++il) {
    const model::Layer& L = m.weights().layers[static_cast<size_t>(il)];
    for (const Tensor* t : {L.attn_norm, L.wqkv, L.wq, L.wk, L.wv, L.wo, L.ffn_norm, L.ffn_up, L.ffn_down}) {
      if (t != nullptr) fake_weights += t->nbytes();
    }
  }
  EXPECT_GE(fake->bytes_allocated(), fake_weights);
  EXPECT_LT(fake->bytes_allocated(), m.weight_bytes());  // the first half stayed in the mapping

  const size_t before = fake->bytes_allocated();
  auto dev = Engine::Create(m, ep, &s);
  EXPECT_TRUE(dev.ok()) << dev.status();
  if (!dev.ok()) return got;
  KvCache& kv = (*dev)->kv();
  const size_t align = fake_mem->alignment();
  size_t fake_kv = 0;
  for (int64_t il = 0; il < n_layer; ++il) {
    EXPECT_EQ(kv.k(il)->buffer->type(), il < half ? host_mem : fake_mem) << "layer " << il;
    EXPECT_EQ(kv.v(il)->buffer->type(), il < half ? host_mem : fake_mem) << "layer " << il;
    if (il >= half) {
      for (const Tensor* t : {kv.k(il), kv.v(il)}) fake_kv += (t->nbytes() + align - 1) / align * align;
    }
  }
  EXPECT_GT(fake_kv, 0u);
  EXPECT_EQ(fake->bytes_allocated() - before, fake_kv);  // the second half's K/V, nothing else

  got.ids = Greedy(**dev, prompt, n, &got.logits);
  got.stats = s.last_stats();
  EXPECT_GT(fake->nodes_computed(), 0);
  return got;
}

void ExpectSame(const SplitRun& got, const SplitRun& want, const std::string& what) {
  EXPECT_EQ(got.ids, want.ids) << what;
  ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
  double max_diff = 0;
  for (size_t i = 0; i < got.logits.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double(got.logits[i]) - want.logits[i]));
  }
  EXPECT_LE(max_diff, 1e-4) << what << ": the same kernels compute both";
  const SchedStats& st = got.stats;
  EXPECT_GT(st.nodes_per_backend[0], 0) << what;
  EXPECT_GT(st.nodes_per_backend[1], 0) << what;
  EXPECT_GT(st.n_copies, 0) << what;
  std::printf(
      "%s: %zu ids equal; last decode step: %d splits, %d copies (%zu bytes), nodes %d fake / %d cpu; "
      "max |logit diff| %.3g\n",
      what.c_str(), got.ids.size(), st.n_splits, st.n_copies, st.bytes_copied, st.nodes_per_backend[0],
      st.nodes_per_backend[1], max_diff);
}

TEST(EngineSplitTest, Stories260KHalfOnTheCpuHalfOnTheDeviceEqualsTheCpu) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED";
  const std::vector<int32_t> prompt = {1,   403, 407, 261, 378, 432, 273, 411, 260, 413,
                                       357, 447, 259, 296, 378, 4,   354, 306, 311, 414};
  SplitRun want;
  const SplitRun got = RunBoth(shared + "/models/stories260K.gguf", prompt, 40, &want);
  ASSERT_EQ(want.ids.size(), 40u);
  ExpectSame(got, want, "stories260K");
  // One decode step: the CPU's layers, then the device's (inputs the device's layers read
  // and the hidden state cross once).
  EXPECT_EQ(got.stats.n_splits, 2);
  // Crossing into the device: the hidden state (and its normed copy: the device's first
  // rms_norm reads no weight and stays with the CPU's last layer) and the inputs its layers
  // read (positions, KV rows, mask, output ids); nothing comes back but the logits.
  EXPECT_LE(got.stats.n_copies, 6);
}

TEST(EngineSplitTest, ArchModelsThroughTheSplitEqualTheCpu) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << "../shared not found: set HERD_SHARED";
  // gpt2: learned positions and a tied output (the logits' matmul reads token_embd, on the
  // CPU); gptneox: parallel residual, partial NeoX RoPE, a separate output.
  for (const std::string name : {"synth-gpt2", "synth-gptneox"}) {
    const std::vector<int32_t> prompt = {1, 20, 300, 45, 700, 12, 999, 5};
    SplitRun want;
    const SplitRun got = RunBoth(shared + "/reference/arch/" + name + ".gguf", prompt, 32, &want);
    ASSERT_EQ(want.ids.size(), 32u) << name;
    ExpectSame(got, want, name);
  }
}

}  // namespace
}  // namespace herd::engine
