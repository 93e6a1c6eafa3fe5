// Kernel throughput: dequantize, vec_dot and MulMatTile for every weight type and ISA.
//   dequantize: one 4096 x 64 block of rows to F32 -> GB/s of quantized bytes read
//   vec_dot: one row of 4096 (L1-resident) -> GB/s of weight bytes
//   decode: 1 token  x 4096 x 4096 (weight-bandwidth bound) -> GB/s of weights
//   prompt: 128 tokens x 4096 x 4096 (compute bound)        -> GFLOP/s
// Decode cycles through enough weight copies (>= 256 MiB) that weights come
// from DRAM, as in a real model (DecodeHot: 256 x 4096, L2-resident: pure kernel speed).
// "/threads:2" splits the weight rows over 2 threads.
// PromptShapePacked / DecodePacked: the same over weights packed at load (MulMatPacked).
// DecodeModel[Packed]: the mat-vecs of one decode step of llama-110m / tinyllama-1.1b (every
// weight matrix its own buffer, output tensor Q6_K for Q4_0 as llama-quantize writes it),
// split over a ThreadPool like the CPU backend does -> GB/s and mat-vec-only tokens/s.
// BatchModelPacked/<model>/<type>/n<N>: the same step over N activation rows (a batched
// decode of N sequences, a speculative verification of N - 1 draft tokens); tok/s counts N.
// MemReadAvx2 / FmaPeak: the machine's DRAM read bandwidth and one core's F32 FMA peak.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "libs/backend/cpu_backend.h"
#include "libs/base/cpu_features.h"
#include "libs/base/thread_pool.h"
#include "libs/kernels/cpu/kernels.h"
#include "libs/tensor/quants.h"
#include "libs/tensor/tensor.h"

namespace herd::cpu {
namespace {

constexpr int64_t kK = 4096;
constexpr int64_t kM = 4096;

struct Buffer {
  std::unique_ptr<uint8_t[]> mem;
  size_t size = 0;
  explicit Buffer(size_t n) : mem(new uint8_t[n + 64]), size(n) {}
  uint8_t* data() { return mem.get() + (64 - reinterpret_cast<uintptr_t>(mem.get()) % 64) % 64; }
};

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// One quantized weight matrix [m x k], copied `copies` times.
struct Weights {
  size_t row_bytes;
  std::vector<Buffer> copies;
};

Weights MakeWeights(GgmlType t, int64_t m, int64_t k, size_t min_total) {
  Weights w;
  w.row_bytes = GgmlRowSize(t, k);
  const size_t bytes = w.row_bytes * m;
  const std::vector<float> row = Random(k, 1);
  Buffer first(bytes);
  // Quantize one row (the k-quant / IQ4 reference quantizers are slow) and repeat it.
  QuantizeRow(t, row.data(), first.data(), k);
  for (int64_t i = 1; i < m; ++i) std::memcpy(first.data() + i * w.row_bytes, first.data(), w.row_bytes);
  size_t n = (min_total + bytes - 1) / bytes;
  if (n < 1) n = 1;
  for (size_t c = 0; c < n; ++c) {
    Buffer b(bytes);
    std::memcpy(b.data(), first.data(), bytes);
    w.copies.push_back(std::move(b));
  }
  return w;
}

// Activation rows in `at` (VecDotType or PackedActType of the weight type).
Buffer MakeActivations(GgmlType at, int64_t n, int64_t k) {
  const size_t rb = GgmlRowSize(at, k);
  Buffer a(rb * n);
  const std::vector<float> x = Random(n * k, 2);
  for (int64_t j = 0; j < n; ++j) FromFloat(at, x.data() + j * k, a.data() + j * rb, k, Isa::kScalar);
  return a;
}

// packed: w holds PackWeights's copy (MulMatPacked), else the rows (MulMatTile).
void RunTile(GgmlType t, Isa isa, int64_t k, uint8_t* w, size_t ws, uint8_t* a, size_t as, float* dst, int64_t m,
             int64_t n, int threads, bool packed) {
  const auto tile = [=](int64_t i0, int64_t i1) {
    if (packed) {
      MulMatPacked(t, isa, k, w, a, as, dst, m, i0, i1, 0, n);
    } else {
      MulMatTile(t, isa, k, w, ws, a, as, dst, m, i0, i1, 0, n);
    }
  };
  if (threads == 1) {
    tile(0, m);
    return;
  }
  std::vector<std::thread> th;
  for (int t_i = 0; t_i < threads; ++t_i) {
    const int64_t i0 = m * t_i / threads / 16 * 16, i1 = t_i + 1 == threads ? m : m * (t_i + 1) / threads / 16 * 16;
    th.emplace_back([=] { tile(i0, i1); });
  }
  for (auto& x : th) x.join();
}

void BM_MulMat(benchmark::State& state, GgmlType t, Isa isa, int64_t n, int threads, bool hot, int64_t k,
               int64_t m_override, bool packed) {
  if (!IsaSupported(isa) || (packed && !SupportsPacked(t, isa))) {
    state.SkipWithError("ISA not supported");
    return;
  }
  // Scalar prompt: fewer rows to keep it short. Hot: 256 rows (L2-resident) = kernel speed.
  const int64_t m = m_override > 0 ? m_override : hot ? 256 : isa == Isa::kScalar && n > 1 ? 512 : kM;
  Weights w = MakeWeights(t, m, k, n == 1 && !hot ? (256u << 20) : 0);
  if (packed) {  // the copies in the layout the CPU backend packs them to at load
    const int64_t panels = (m + kPackRows - 1) / kPackRows;
    for (Buffer& b : w.copies) {
      Buffer pb(PackedWeightBytes(t, k, m, isa));
      PackWeights(t, k, m, b.data(), w.row_bytes, pb.data(), 0, panels, isa);
      b = std::move(pb);
    }
  }
  const GgmlType at = packed ? PackedActType(t, isa) : VecDotType(t);
  Buffer a = MakeActivations(at, n, k);
  const size_t as = GgmlRowSize(at, k);
  std::vector<float> dst(static_cast<size_t>(m * n));
  size_t c = 0;
  for (auto _ : state) {
    RunTile(t, isa, k, w.copies[c].data(), w.row_bytes, a.data(), as, dst.data(), m, n, threads, packed);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    if (++c == w.copies.size()) c = 0;
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iters * w.row_bytes * m / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] = benchmark::Counter(iters * 2.0 * m * n * k / 1e9, benchmark::Counter::kIsRate);
}

void BM_VecDot(benchmark::State& state, GgmlType t, Isa isa) {
  const VecDotFn f = GetVecDot(t, isa);
  if (f == nullptr) {
    state.SkipWithError("ISA not supported");
    return;
  }
  Weights w = MakeWeights(t, 1, kK, 0);
  Buffer a = MakeActivations(VecDotType(t), 1, kK);
  float s = 0;
  for (auto _ : state) {
    f(kK, &s, w.copies[0].data(), a.data());
    benchmark::DoNotOptimize(s);
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * w.row_bytes / 1e9, benchmark::Counter::kIsRate);
}

// Dequantization (get_rows / conversion) of 64 rows of 4096: GB/s of quantized bytes.
void BM_Dequantize(benchmark::State& state, GgmlType t) {
  const int64_t rows = 64;
  Weights w = MakeWeights(t, rows, kK, 0);
  std::vector<float> out(static_cast<size_t>(kK));
  for (auto _ : state) {
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t, w.copies[0].data() + r * w.row_bytes, out.data(), kK);
      benchmark::DoNotOptimize(out.data());
    }
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * w.row_bytes * rows / 1e9,
                                              benchmark::Counter::kIsRate);
}

// Baseline: plain streaming read of 256 MiB (memory bandwidth), 1 or 2 threads.
void BM_MemRead(benchmark::State& state, int threads) {
  const size_t n = (256u << 20) / sizeof(uint64_t);
  std::vector<uint64_t> v(n, 1);
  uint64_t total = 0;
  for (auto _ : state) {
    std::vector<std::thread> th;
    std::vector<uint64_t> part(threads);
    for (int t = 0; t < threads; ++t) {
      th.emplace_back([&, t] {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        const size_t b = n * t / threads, e = n * (t + 1) / threads;
        for (size_t i = b; i + 4 <= e; i += 4) {
          s0 += v[i];
          s1 += v[i + 1];
          s2 += v[i + 2];
          s3 += v[i + 3];
        }
        part[t] = s0 + s1 + s2 + s3;
      });
    }
    for (auto& x : th) x.join();
    for (uint64_t p : part) total += p;
  }
  benchmark::DoNotOptimize(total);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * n * 8 / 1e9, benchmark::Counter::kIsRate);
}

// The machine's ceilings, to read the figures above against: DRAM read bandwidth with
// 256-bit loads (4 streams of 32 B per 128 B step; the hardware prefetcher alone), and one
// core's peak F32 FMA rate (12 independent 8-lane FMA chains: no loads, FMA latency hidden).
// Decode is bound by the first, F16 prompt processing by the second.
__attribute__((target("avx2"))) uint64_t ReadAvx2(const char* b, const char* e) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (const char* q = b; q + 128 <= e; q += 128) {
    a0 = _mm256_add_epi32(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(q)));
    a1 = _mm256_add_epi32(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 32)));
    a2 = _mm256_add_epi32(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 64)));
    a3 = _mm256_add_epi32(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(q + 96)));
  }
  a0 = _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3));
  return static_cast<uint64_t>(_mm256_extract_epi64(a0, 0));
}

// Decode attention over a KV cache much larger than L3 (as a serving worker's pool): 16
// query tokens, each seeing 64 scattered cells (its own sequence's), 12 heads of 64 (one
// F16 K and V run of 1.5 KiB per cell), cpu::FlashAttnF16Heads per token. "fused" is what
// the CPU backend runs (flash_attn_token.inc for this CPU's best ISA); "generic" the
// reference loop (a dot that is not the ISA's own selects it). GB/s counts the K and V
// bytes the tokens read.
void BM_AttnDecodeF16(benchmark::State& state, bool fused) {
  if (!IsaSupported(Isa::kAvx2)) {
    state.SkipWithError("ISA not supported");
    return;
  }
  constexpr int64_t kHd = 64, kHeads = 12, kCells = 32768, kTokens = 16, kVisible = 64;
  const size_t stride = static_cast<size_t>(kHd * kHeads) * 2;
  Buffer k(stride * kCells), v(stride * kCells);
  std::mt19937 g(3);
  std::uniform_int_distribution<int> bits(0x3000, 0x3c00);
  for (size_t i = 0; i < stride * kCells / 2; ++i) {
    reinterpret_cast<uint16_t*>(k.data())[i] = static_cast<uint16_t>(bits(g));
    reinterpret_cast<uint16_t*>(v.data())[i] = static_cast<uint16_t>(bits(g));
  }
  std::vector<std::vector<int32_t>> idx(kTokens);
  std::uniform_int_distribution<int32_t> cell(0, kCells - 1);
  for (auto& ix : idx) {
    for (int64_t i = 0; i < kVisible; ++i) ix.push_back(cell(g));
    std::sort(ix.begin(), ix.end());
  }
  std::vector<uint16_t> q(kHd * kHeads, 0x3800);
  std::vector<size_t> head_off(kHeads);
  for (int64_t j = 0; j < kHeads; ++j) head_off[j] = static_cast<size_t>(j * kHd) * 2;
  std::vector<float> slope(kHeads, 1.0f), scores(kHeads * kVisible), out(kHeads * kHd);
  std::vector<uint16_t> vkq(kHeads * kHd);
  static const VecDotFn isa_dot = GetVecDot(GgmlType::F16, BestIsa());
  const VecDotFn dot =
      fused ? isa_dot : +[](int64_t n, float* s, const void* x, const void* y) { isa_dot(n, s, x, y); };
  for (auto _ : state) {
    for (int64_t t = 0; t < kTokens; ++t) {
      FlashAttnF16Token a;
      a.hd = kHd;
      a.nh = kHeads;
      a.q = q.data();
      a.k = static_cast<const uint8_t*>(k.data());
      a.v = static_cast<const uint8_t*>(v.data());
      a.k_stride = a.v_stride = stride;
      a.head_off = head_off.data();
      a.idx = idx[t].data();
      a.n = kVisible;
      a.mask = nullptr;
      a.slope = slope.data();
      a.scale = 0.125f;
      a.out = out.data();
      a.out_stride = kHd;
      a.scores = scores.data();
      a.vkq16 = vkq.data();
      FlashAttnF16Heads(a, dot);
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kTokens * kVisible * stride * 2 / 1e9, benchmark::Counter::kIsRate);
}

// One decode step's attention in all 12 layers of llama-110m (12 heads of 64, F16 K/V) for
// 16 streams whose prompts share a 430-cell header (a 300-word system prompt), each with
// 62 cells of its own, through CpuBackend::GraphCompute with 2 threads: "shared" is the
// shared-prefix path (the header's K/V read once per layer), "per_token" each stream's
// own pass over all its cells. The layers' K/V (26 MiB each of K and V) do not fit the
// caches, as in a real step where the weights stream between layers.
void BM_AttnSharedPrefix(benchmark::State& state, bool shared, int64_t n_tok, int64_t kPrefix, int64_t n_new) {
  constexpr int64_t kHd = 64, kHeads = 12, kLayers = 12, kOwn = 62;
  const int64_t n_seq = n_tok / n_new;  // streams, each with n_new query tokens (a prompt chunk when > 1)
  const int64_t n_kv = kPrefix + n_seq * kOwn;
  CpuBackend backend(2);
  backend.set_shared_prefix_attention(shared);
  std::mt19937 g(5);
  std::uniform_int_distribution<int> bits(0x3000, 0x3c00);
  const size_t kv_elems = static_cast<size_t>(kHd * kHeads * n_kv);
  std::vector<std::vector<uint16_t>> k(kLayers, std::vector<uint16_t>(kv_elems)), v = k;
  for (int64_t l = 0; l < kLayers; ++l) {
    for (size_t i = 0; i < kv_elems; ++i) {
      k[l][i] = static_cast<uint16_t>(bits(g));
      v[l][i] = static_cast<uint16_t>(bits(g));
    }
  }
  std::vector<float> q = Random(kHd * kHeads * n_tok, 6);
  std::vector<float> mask(static_cast<size_t>(n_kv * n_tok), -INFINITY);
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t c = 0; c < n_kv; ++c) {
      // the header, then the stream's own cells up to its token (causal; the last n_new
      // of its kOwn cells are this step's)
      const int64_t seq = t / n_new, own_end = kOwn - n_new + t % n_new + 1;
      if (c < kPrefix || ((c - kPrefix) / kOwn == seq && (c - kPrefix) % kOwn < own_end)) {
        mask[static_cast<size_t>(t * n_kv + c)] = 0.0f;
      }
    }
  }
  Graph gr;
  Tensor* tm = gr.NewTensor(GgmlType::F32, {n_kv, n_tok});
  tm->data = mask.data();
  for (int64_t l = 0; l < kLayers; ++l) {
    Tensor* tq = gr.NewTensor(GgmlType::F32, {kHd, kHeads, n_tok});
    tq->data = q.data();
    Tensor* tk = gr.NewTensor(GgmlType::F16, {kHd, kHeads, n_kv});
    tk->data = k[l].data();
    Tensor* tv = gr.NewTensor(GgmlType::F16, {kHd, kHeads, n_kv});
    tv->data = v[l].data();
    gr.SetOutput(gr.FlashAttnExt(tq, tk, tv, tm, 0.125f, 0.0f));
  }
  for (auto _ : state) {
    if (!backend.GraphCompute(gr).ok()) {
      state.SkipWithError("GraphCompute failed");
      return;
    }
  }
  if (shared && backend.shared_prefix_attention_runs() == 0) state.SkipWithError("shared path not taken");
  state.counters["steps/s"] = benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_MemReadAvx2(benchmark::State& state, int threads) {
  if (!IsaSupported(Isa::kAvx2)) {
    state.SkipWithError("ISA not supported");
    return;
  }
  const size_t bytes = size_t{1} << 30;
  Buffer buf(bytes);
  std::memset(buf.data(), 1, bytes);
  const char* p = reinterpret_cast<const char*>(buf.data());
  uint64_t total = 0;
  for (auto _ : state) {
    std::vector<std::thread> th;
    std::vector<uint64_t> part(threads);
    for (int t = 0; t < threads; ++t) {
      th.emplace_back([&, t] { part[t] = ReadAvx2(p + bytes / threads * t, p + bytes / threads * (t + 1)); });
    }
    for (auto& x : th) x.join();
    for (uint64_t v : part) total += v;
  }
  benchmark::DoNotOptimize(total);
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * bytes / 1e9, benchmark::Counter::kIsRate);
}

__attribute__((target("avx2,fma"), noinline)) float FmaChains(int64_t iters, float mul, float add) {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(mul), c = _mm256_set1_ps(add);
  for (int64_t i = 0; i < iters; ++i) {
    a[0] = _mm256_fmadd_ps(a[0], m, c);
    a[1] = _mm256_fmadd_ps(a[1], m, c);
    a[2] = _mm256_fmadd_ps(a[2], m, c);
    a[3] = _mm256_fmadd_ps(a[3], m, c);
    a[4] = _mm256_fmadd_ps(a[4], m, c);
    a[5] = _mm256_fmadd_ps(a[5], m, c);
    a[6] = _mm256_fmadd_ps(a[6], m, c);
    a[7] = _mm256_fmadd_ps(a[7], m, c);
    a[8] = _mm256_fmadd_ps(a[8], m, c);
    a[9] = _mm256_fmadd_ps(a[9], m, c);
    a[10] = _mm256_fmadd_ps(a[10], m, c);
    a[11] = _mm256_fmadd_ps(a[11], m, c);
  }
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
  return _mm256_cvtss_f32(s);
}

void BM_FmaPeak(benchmark::State& state) {
  if (!IsaSupported(Isa::kAvx2)) {
    state.SkipWithError("ISA not supported");
    return;
  }
  constexpr int64_t kIters = 1 << 20;
  float sink = 0;
  volatile float mul = 0.999999f, add = 1e-6f;
  for (auto _ : state) sink += FmaChains(kIters, mul, add);
  benchmark::DoNotOptimize(sink);
  state.counters["GFLOP/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kIters * 12 * 16 / 1e9, benchmark::Counter::kIsRate);
}

struct ModelMat {
  GgmlType type;
  int64_t k, m;
};

std::vector<ModelMat> ModelMats(GgmlType t, bool tiny) {
  const int64_t d = tiny ? 2048 : 768, ff = tiny ? 5632 : 2048, kv = tiny ? 256 : 768, layers = tiny ? 22 : 12;
  std::vector<ModelMat> v;
  for (int64_t l = 0; l < layers; ++l) {
    v.push_back({t, d, d});
    v.push_back({t, d, kv});
    v.push_back({t, d, kv});
    v.push_back({t, d, d});
    v.push_back({t, d, ff});
    v.push_back({t, d, ff});
    v.push_back({t, ff, d});
  }
  v.push_back({t == GgmlType::Q4_0 ? GgmlType::Q6_K : t, d, 32000});
  return v;
}

// DecodeModel[Packed]: one decode step's matmuls of a model (every layer's weights, the
// output matrix) over `n` activation rows (1: decode; 2-16: a batched decode or a
// speculative verification of n - 1 draft tokens); tok/s counts n per step.
void BM_DecodeModel(benchmark::State& state, GgmlType t, bool tiny, int threads, bool packed, int n) {
  const std::vector<ModelMat> mats = ModelMats(t, tiny);
  const Isa isa = BestIsa();
  std::vector<Buffer> ws;
  std::vector<Buffer> as;
  std::vector<bool> is_packed;
  size_t total = 0;
  int64_t max_m = 0;
  for (const ModelMat& mm : mats) {
    Weights w = MakeWeights(mm.type, mm.m, mm.k, 0);
    total += w.row_bytes * mm.m;
    // As the CPU backend does: the packed layout where the type has one (the output
    // matrix too; the engine leaves a tied token_embd unpacked).
    const bool p = packed && SupportsPacked(mm.type, isa);
    is_packed.push_back(p);
    if (p) {
      Buffer b(PackedWeightBytes(mm.type, mm.k, mm.m, isa));
      PackWeights(mm.type, mm.k, mm.m, w.copies[0].data(), w.row_bytes, b.data(), 0, (mm.m + kPackRows - 1) / kPackRows,
                  isa);
      ws.push_back(std::move(b));
      as.push_back(MakeActivations(PackedActType(mm.type, isa), n, mm.k));
    } else {
      ws.push_back(std::move(w.copies[0]));
      as.push_back(MakeActivations(VecDotType(mm.type), n, mm.k));
    }
    max_m = std::max(max_m, mm.m);
  }
  std::vector<float> dst(static_cast<size_t>(max_m) * static_cast<size_t>(n));
  ThreadPool pool(threads);
  for (auto _ : state) {
    for (size_t i = 0; i < mats.size(); ++i) {
      const ModelMat& mm = mats[i];
      const size_t wrow = GgmlRowSize(mm.type, mm.k);
      const GgmlType at = is_packed[i] ? PackedActType(mm.type, isa) : VecDotType(mm.type);
      const size_t arow = GgmlRowSize(at, mm.k);
      pool.Run([&](int ith, int nth) {
        const int64_t per = ((mm.m + nth - 1) / nth + 15) / 16 * 16;
        const int64_t r0 = std::min<int64_t>(mm.m, per * ith), r1 = std::min<int64_t>(mm.m, r0 + per);
        if (r0 >= r1) return;
        if (is_packed[i]) {
          MulMatPacked(mm.type, isa, mm.k, ws[i].data(), as[i].data(), arow, dst.data(), mm.m, r0, r1, 0, n);
        } else {
          MulMatTile(mm.type, isa, mm.k, ws[i].data(), wrow, as[i].data(), arow, dst.data(), mm.m, r0, r1, 0, n);
        }
      });
    }
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iters * total / 1e9, benchmark::Counter::kIsRate);
  state.counters["tok/s"] = benchmark::Counter(iters * n, benchmark::Counter::kIsRate);
}

// DecodeK[Packed]: one mat-vec of k-element rows, ~32 MiB of weights per call (cycling through
// >= 256 MiB), over the rows as they are or packed (MulMatPacked). On the Zen 5 VM of
// 2026-12-03 some (type, k) cells read at 1-9 GB/s, steadily within a run, where their
// neighbours read 20-35 (not explained: giving every page distinct bytes did not change it);
// DecodeModel[Packed] and llama_bench are the figures to trust there.
void BM_DecodeK(benchmark::State& state, GgmlType t, int64_t k, int threads, bool packed) {
  const Isa isa = BestIsa();
  if (packed && !SupportsPacked(t, isa)) {
    state.SkipWithError("no packed kernel");
    return;
  }
  const size_t row = GgmlRowSize(t, k);
  const int64_t m = static_cast<int64_t>((32u << 20) / row) / 16 * 16;
  Weights w = MakeWeights(t, m, k, 256u << 20);
  if (packed) {
    for (Buffer& b : w.copies) {
      Buffer pb(PackedWeightBytes(t, k, m, isa));
      PackWeights(t, k, m, b.data(), row, pb.data(), 0, (m + kPackRows - 1) / kPackRows, isa);
      b = std::move(pb);
    }
  }
  const GgmlType at = packed ? PackedActType(t, isa) : VecDotType(t);
  Buffer a = MakeActivations(at, 1, k);
  const size_t as = GgmlRowSize(at, k);
  std::vector<float> dst(static_cast<size_t>(m));
  ThreadPool pool(threads);
  size_t c = 0;
  for (auto _ : state) {
    pool.Run([&](int ith, int nth) {
      const int64_t per = ((m + nth - 1) / nth + 15) / 16 * 16;
      const int64_t r0 = std::min<int64_t>(m, per * ith), r1 = std::min<int64_t>(m, r0 + per);
      if (r0 >= r1) return;
      if (packed) {
        MulMatPacked(t, isa, k, w.copies[c].data(), a.data(), as, dst.data(), m, r0, r1, 0, 1);
      } else {
        MulMatTile(t, isa, k, w.copies[c].data(), row, a.data(), as, dst.data(), m, r0, r1, 0, 1);
      }
    });
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    if (++c == w.copies.size()) c = 0;
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * row * m / 1e9, benchmark::Counter::kIsRate);
}

int Register() {
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q6_K}) {
    for (int64_t k : {768, 2048, 5632}) {
      for (int threads : {1, 2}) {
        if (t == GgmlType::Q6_K && k % 256 != 0) continue;
        for (bool packed : {false, true}) {
          benchmark::RegisterBenchmark((std::string(packed ? "DecodeKPacked/" : "DecodeK/") + GgmlTypeName(t) + "/" +
                                        std::to_string(k) + "/threads:" + std::to_string(threads))
                                           .c_str(),
                                       BM_DecodeK, t, k, threads, packed)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
  for (bool tiny : {false, true}) {
    for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K}) {
      for (int threads : {1, 2}) {
        for (bool packed : {false, true}) {
          benchmark::RegisterBenchmark(("DecodeModel" + std::string(packed ? "Packed/" : "/") +
                                        std::string(tiny ? "tinyllama-1.1b/" : "llama-110m/") + GgmlTypeName(t) +
                                        "/threads:" + std::to_string(threads))
                                           .c_str(),
                                       BM_DecodeModel, t, tiny, threads, packed, 1)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
        // Small batches over the packed weights: batched decode, speculative verification.
        for (int n : {2, 3, 4, 6, 8, 12, 16, 24, 32}) {
          benchmark::RegisterBenchmark(
              ("BatchModelPacked/" + std::string(tiny ? "tinyllama-1.1b/" : "llama-110m/") + GgmlTypeName(t) + "/n" +
               std::to_string(n) + "/threads:" + std::to_string(threads))
                  .c_str(),
              BM_DecodeModel, t, tiny, threads, true, n)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
  const GgmlType types[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,   GgmlType::Q4_0,
                            GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::IQ4_NL, GgmlType::Q2_K,
                            GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K,   GgmlType::IQ4_XS};
  const Isa isas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
  benchmark::RegisterBenchmark("MemRead/threads:1", BM_MemRead, 1)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("MemRead/threads:2", BM_MemRead, 2)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("MemReadAvx2/threads:1", BM_MemReadAvx2, 1)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("MemReadAvx2/threads:2", BM_MemReadAvx2, 2)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("FmaPeak/avx2", BM_FmaPeak)->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("AttnDecodeF16/fused", BM_AttnDecodeF16, true)->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark("AttnDecodeF16/generic", BM_AttnDecodeF16, false)->Unit(benchmark::kMicrosecond);
  // 16 and 48 decoding streams; 16 streams starting at once (prompt chunks of 31 tokens).
  for (const auto& [n_tok, n_new] : {std::pair<int64_t, int64_t>{16, 1}, {48, 1}, {496, 31}}) {
    const std::string shape = "/tokens:" + std::to_string(n_tok) + (n_new > 1 ? "/prefill" : "");
    for (bool shared : {true, false}) {
      benchmark::RegisterBenchmark(("AttnSharedPrefix/" + std::string(shared ? "shared" : "per_token") + shape).c_str(),
                                   BM_AttnSharedPrefix, shared, n_tok, int64_t{430}, n_new)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
    // The same streams without the header: what the header costs on top.
    benchmark::RegisterBenchmark(("AttnSharedPrefix/no_header" + shape).c_str(), BM_AttnSharedPrefix, false, n_tok,
                                 int64_t{0}, n_new)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  for (GgmlType t : types) {
    benchmark::RegisterBenchmark(("Dequantize/" + GgmlTypeName(t)).c_str(), BM_Dequantize, t);
  }
  for (GgmlType t : types) {
    for (Isa isa : isas) {
      const std::string name = GgmlTypeName(t) + "/" + IsaName(isa);
      benchmark::RegisterBenchmark(("VecDot/" + name).c_str(), BM_VecDot, t, isa);
      for (int threads : {1, 2}) {
        benchmark::RegisterBenchmark(("Decode/" + name + "/threads:" + std::to_string(threads)).c_str(), BM_MulMat, t,
                                     isa, int64_t{1}, threads, false, kK, int64_t{0}, false)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
      {  // weights in L2: kernel speed without DRAM
        benchmark::RegisterBenchmark(("DecodeHot/" + name).c_str(), BM_MulMat, t, isa, int64_t{1}, 1, true, kK,
                                     int64_t{0}, false)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
      benchmark::RegisterBenchmark(("Prompt128/" + name).c_str(), BM_MulMat, t, isa, int64_t{128}, 1, false, kK,
                                   int64_t{0}, false)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      // llama-110m's shapes (k x m): ffn_up/gate 768 x 2048, ffn_down 2048 x 768; tinyllama's
      // ffn_up/gate 2048 x 5632 and ffn_down 5632 x 2048 (rows longer than L1 holds).
      for (int64_t n : {8, 32, 128, 512}) {
        for (const auto& km : {std::pair<int64_t, int64_t>{768, 2048}, {2048, 768}, {2048, 5632}, {5632, 2048}}) {
          benchmark::RegisterBenchmark(("PromptShape/" + name + "/k" + std::to_string(km.first) + "m" +
                                        std::to_string(km.second) + "n" + std::to_string(n))
                                           .c_str(),
                                       BM_MulMat, t, isa, n, 1, false, km.first, km.second, false)
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
          if (SupportsPacked(t, Isa::kAvx2) && isa != Isa::kScalar) {  // weights packed at load
            benchmark::RegisterBenchmark(("PromptShapePacked/" + name + "/k" + std::to_string(km.first) + "m" +
                                          std::to_string(km.second) + "n" + std::to_string(n))
                                             .c_str(),
                                         BM_MulMat, t, isa, n, 1, false, km.first, km.second, true)
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
          }
        }
      }
      if (SupportsPacked(t, Isa::kAvx2) && isa != Isa::kScalar) {
        for (int threads : {1, 2}) {
          benchmark::RegisterBenchmark(("DecodePacked/" + name + "/threads:" + std::to_string(threads)).c_str(),
                                       BM_MulMat, t, isa, int64_t{1}, threads, false, kK, int64_t{0}, true)
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
        // weights in L2: the packed kernel's own speed
        benchmark::RegisterBenchmark(("DecodePackedHot/" + name).c_str(), BM_MulMat, t, isa, int64_t{1}, 1, true, kK,
                                     int64_t{0}, true)
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return 0;
}
const int kRegistered = Register();

}  // namespace
}  // namespace herd::cpu
