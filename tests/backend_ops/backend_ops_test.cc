// backend_ops (the role of llama.cpp's test-backend-ops): every graph op the model
// families use, over the types and shapes they use (odd sizes, broadcasts, strided
// views, batch 1 and batches up to 512), computed on every backend present and compared
// with the CPU backend's scalar kernels (Isa::kScalar: the reference) by normalized
// mean squared error, NMSE = sum((a - b)^2) / sum(b^2), against a per-op threshold
// written below. Backends compiled in but without a device here are skipped by name.
// Prints a table op x backend: cases passed / run and the worst NMSE.
//
// backend_ops_test has the kinds of the generic binaries (cpu, vulkan, cuda);
// backend_ops_hip_test is this file linked with the hip kind (//libs/backend/hip:register)
// and compiled with HERD_BACKEND_OPS_HIP_ONLY: it tests hip alone (the others are
// backend_ops_test's) and skips, naming it, without an AMD GPU. The environment variable
// HERD_BACKEND_OPS_BACKENDS=kind,kind,... (or "all") overrides the selection.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/registry.h"
#include "libs/base/fp16.h"
#include "libs/tensor/quants.h"

namespace herd {
namespace {

// Maximum NMSE per kind of computation (test-backend-ops uses 1e-7 by default and 5e-4
// for matrix products; quantized and F16 products round activations on the CPU (to
// Q8_0/Q8_K/F16, as ggml does) while a device may not, hence the larger bound).
constexpr double kExact = 1e-9;      // element-wise F32 arithmetic, copies, get_rows
constexpr double kF32Math = 1e-7;    // exp/erf/tanh/sqrt/pow: library vs shader versions
constexpr double kMatMulF32 = 1e-6;  // F32 sums in a different order
constexpr double kMatMulQ = 5e-4;    // F16/quantized weights
constexpr double kAttention = 5e-4;  // flash attention (F16 K/V, online softmax)

// One case: builds its graph (leaves then ops), returns the node to compare.
struct Case {
  std::string op, types, shape;
  double max_nmse;
  std::function<Tensor*(Graph&)> build;
};

std::string Shape(std::vector<int64_t> ne) {
  std::string s;
  for (size_t i = 0; i < ne.size(); ++i) absl::StrAppend(&s, i ? "x" : "", ne[i]);
  return s;
}

// Deterministic contents for a leaf by name and type: I32 leaves named "ids*" hold row
// indices below i_params[0] of the tensor (stored by the builder in the name suffix),
// "pos*" positions; everything else uniform [-1, 1) (masks: 0 or -inf by pattern).
void Fill(Tensor* t, std::vector<uint8_t>* bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n = t->nelements();
  bytes->assign(t->nbytes(), 0);
  if (t->type == GgmlType::I32) {
    int32_t* p = reinterpret_cast<int32_t*>(bytes->data());
    const int64_t range = t->i_params[7] > 0 ? t->i_params[7] : 1;
    for (int64_t i = 0; i < n; ++i) {
      p[i] = t->name.rfind("pos", 0) == 0 ? static_cast<int32_t>((i * 7 + 3) % 1024)
                                          : static_cast<int32_t>((i * 5 + seed) % static_cast<uint32_t>(range));
    }
    if (t->name.rfind("rows", 0) == 0) {  // distinct rows (set_rows targets)
      for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int32_t>((i * 3 + 1) % range);
    }
    return;
  }
  std::vector<float> f(static_cast<size_t>(n));
  for (float& x : f) x = u(rng);
  if (t->name == "mask_shared") {
    // A decode step of ne1 streams: cells [0, 64) shared by all (a system prompt), four
    // tenant prefixes of 40 cells (rows r % 4), and a few own cells per row from 224 on.
    const int64_t n_kv = t->ne[0];
    for (int64_t r = 0; r < t->ne[1]; ++r) {
      for (int64_t c = 0; c < n_kv; ++c) {
        const bool visible =
            c < 64 || (c < 224 && (c - 64) / 40 == r % 4) || (c >= 224 + r * 8 && c < 224 + r * 8 + 3 + r % 5);
        f[static_cast<size_t>(r * n_kv + c)] = visible ? 0.0f : -INFINITY;
      }
    }
  } else if (t->name.rfind("mask", 0) == 0) {
    const int64_t n_kv = t->ne[0];
    for (int64_t r = 0; r < t->ne[1]; ++r) {
      for (int64_t c = 0; c < n_kv; ++c) {
        // causal-like: row r sees cells up to n_kv - ne1 + r (ALiBi masks: -|distance|)
        const bool visible = c <= n_kv - t->ne[1] + r;
        const bool alibi = t->name == "mask_alibi";
        f[static_cast<size_t>(r * n_kv + c)] =
            visible ? (alibi ? -static_cast<float>(n_kv - t->ne[1] + r - c) : 0.0f) : -INFINITY;
      }
    }
  }
  if (t->name.rfind("freq", 0) == 0) {
    for (float& x : f) x = 1.0f + std::fabs(x) * 3.0f;
  }
  const int64_t row = t->ne[0];
  for (int64_t r = 0; r < n / row; ++r) {
    QuantizeRow(t->type, f.data() + r * row, bytes->data() + r * t->row_size(), row);
  }
}

Tensor* Leaf(Graph& g, GgmlType type, std::vector<int64_t> ne, const std::string& name, int32_t index_range = 0) {
  Tensor* t = g.NewTensor(type, std::move(ne), name);
  t->i_params[7] = index_range;  // leaves carry no op params: used by Fill
  return t;
}

// Computes the case on `be`; returns the F32 values of its result (empty on error).
std::vector<float> RunCase(const Case& c, Backend* be, std::string* error) {
  Graph g;
  Tensor* out = c.build(g);
  g.SetOutput(out);
  BufferType* buft = be->default_buffer_type();
  size_t total = 0;
  const size_t align = buft->alignment();
  for (Tensor* t : g.leaves()) total += (t->nbytes() + align - 1) / align * align;
  auto buf = buft->Allocate(total);
  if (!buf.ok()) {
    *error = buf.status().ToString();
    return {};
  }
  size_t off = 0;
  uint32_t seed = 1;
  std::vector<uint8_t> bytes;
  for (Tensor* t : g.leaves()) {
    absl::Status s = PlaceTensor(t, buf->get(), off);
    Fill(t, &bytes, seed++);
    if (s.ok()) s = be->SetTensor(t, bytes.data(), 0, bytes.size());
    if (!s.ok()) {
      *error = s.ToString();
      return {};
    }
    off += (t->nbytes() + align - 1) / align * align;
  }
  for (Tensor* n : g.nodes()) {
    if (!be->SupportsOp(*n)) {
      *error = absl::StrCat("unsupported: ", OpName(n->op));
      return {};
    }
  }
  absl::Status s = be->GraphCompute(g);
  if (s.ok()) s = be->Synchronize();
  if (!s.ok()) {
    *error = s.ToString();
    return {};
  }
  // The result: F32 rows (set_rows: the whole destination in its type, as floats).
  std::vector<uint8_t> raw(out->nbytes());
  s = be->GetTensor(out, raw.data(), 0, raw.size());
  if (!s.ok()) {
    *error = s.ToString();
    return {};
  }
  std::vector<float> v(static_cast<size_t>(out->nelements()));
  for (int64_t i3 = 0, k = 0; i3 < out->ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < out->ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < out->ne[1]; ++i1, ++k) {
        const uint8_t* row = raw.data() + i1 * out->nb[1] + i2 * out->nb[2] + i3 * out->nb[3];
        DequantizeRow(out->type, row, v.data() + k * out->ne[0], out->ne[0]);
      }
    }
  }
  return v;
}

double Nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = std::isinf(want[i]) ? 0 : want[i], a = std::isinf(got[i]) ? 0 : got[i];
    if (std::isnan(got[i]) != std::isnan(want[i]) || std::isinf(got[i]) != std::isinf(want[i])) return INFINITY;
    if (std::isnan(want[i])) continue;
    err += (a - w) * (a - w);
    norm += w * w;
  }
  return norm == 0 ? err : err / norm;
}

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::Q4_0,
                                 GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K};

bool IsKQuant(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q6_K; }

std::vector<Case> Cases() {
  std::vector<Case> cs;
  // get_rows: token embeddings of every weight type.
  for (GgmlType t : kWeightTypes) {
    const int64_t k = IsKQuant(t) ? 256 : 96;
    for (int64_t n : {1, 7}) {
      cs.push_back({"get_rows", GgmlTypeName(t), Shape({k, 50, n}), kExact, [=](Graph& g) {
                      return g.GetRows(Leaf(g, t, {k, 50}, "w"), Leaf(g, GgmlType::I32, {n}, "ids", 50));
                    }});
    }
  }
  // mul_mat: decode (n = 1) and batches, odd row counts.
  for (GgmlType t : kWeightTypes) {
    const int64_t k = IsKQuant(t) ? 256 : 96;
    for (int64_t m : {1, 67}) {
      for (int64_t n : {1, 2, 7, 33, 512}) {
        if (m == 1 && n > 7) continue;
        cs.push_back({"mul_mat", absl::StrCat(GgmlTypeName(t), " x F32"), Shape({k, m, n}),
                      t == GgmlType::F32 ? kMatMulF32 : kMatMulQ, [=](Graph& g) {
                        return g.MulMat(Leaf(g, t, {k, m}, "w"), Leaf(g, GgmlType::F32, {k, n}, "x"));
                      }});
      }
    }
  }
  // mul_mat over heads (3-D activations, a 2-D weight).
  cs.push_back({"mul_mat", "F16 x F32", "64x33x5x3", kMatMulQ, [](Graph& g) {
                  return g.MulMat(Leaf(g, GgmlType::F16, {64, 33}, "w"), Leaf(g, GgmlType::F32, {64, 5, 3}, "x"));
                }});
  // Element-wise binary ops: same shape, a row broadcast, a strided view as input.
  for (Op op : {Op::kAdd, Op::kMul}) {
    const char* name = op == Op::kAdd ? "add" : "mul";
    auto bin = [op](Graph& g, Tensor* a, Tensor* b) { return op == Op::kAdd ? g.Add(a, b) : g.Mul(a, b); };
    cs.push_back({name, "F32", "67x5", kExact, [=](Graph& g) {
                    return bin(g, Leaf(g, GgmlType::F32, {67, 5}, "a"), Leaf(g, GgmlType::F32, {67, 5}, "b"));
                  }});
    cs.push_back({name, "F32 (row broadcast)", "67x5x3", kExact, [=](Graph& g) {
                    return bin(g, Leaf(g, GgmlType::F32, {67, 5, 3}, "a"), Leaf(g, GgmlType::F32, {67}, "b"));
                  }});
    cs.push_back({name, "F32 (strided view)", "32x5", kExact, [=](Graph& g) {
                    Tensor* a = Leaf(g, GgmlType::F32, {96, 5}, "a");
                    Tensor* v = g.View(a, {32, 5}, {a->nb[1]}, 32 * sizeof(float));
                    return bin(g, v, Leaf(g, GgmlType::F32, {32, 5}, "b"));
                  }});
  }
  // Unary and row ops.
  struct Unary {
    const char* name;
    double tol;
    std::function<Tensor*(Graph&, Tensor*)> f;
  };
  const Unary unary[] = {
      {"scale", kExact, [](Graph& g, Tensor* a) { return g.Scale(a, 0.37f); }},
      {"rms_norm", kF32Math, [](Graph& g, Tensor* a) { return g.RmsNorm(a, 1e-5f); }},
      {"norm", kF32Math, [](Graph& g, Tensor* a) { return g.Norm(a, 1e-5f); }},
      {"silu", kF32Math, [](Graph& g, Tensor* a) { return g.Silu(a); }},
      {"gelu", kF32Math, [](Graph& g, Tensor* a) { return g.Gelu(a); }},
      {"gelu_erf", kF32Math, [](Graph& g, Tensor* a) { return g.GeluErf(a); }},
      {"clamp", kExact, [](Graph& g, Tensor* a) { return g.Clamp(a, -0.5f, 0.25f); }},
      {"soft_max", kF32Math, [](Graph& g, Tensor* a) { return g.SoftMax(a, nullptr, 0.7f, 0.0f); }},
  };
  for (const Unary& un : unary) {
    for (std::vector<int64_t> ne : {std::vector<int64_t>{67, 1}, std::vector<int64_t>{256, 33}}) {
      cs.push_back(
          {un.name, "F32", Shape(ne), un.tol, [=](Graph& g) { return un.f(g, Leaf(g, GgmlType::F32, ne, "a")); }});
    }
  }
  cs.push_back({"swiglu", "F32", "67x7", kF32Math, [](Graph& g) {
                  return g.Swiglu(Leaf(g, GgmlType::F32, {67, 7}, "a"), Leaf(g, GgmlType::F32, {67, 7}, "b"));
                }});
  cs.push_back({"cont", "F32 (strided view)", "8x3x5", kExact, [](Graph& g) {
                  Tensor* a = Leaf(g, GgmlType::F32, {48, 5}, "a");  // rows of 3 heads of 16, as a fused QKV
                  return g.Cont(g.View(a, {8, 3, 5}, {16 * sizeof(float), a->nb[1]}, 8 * sizeof(float)));
                }});
  // soft_max with a mask, and with ALiBi (heads on dimension 2).
  cs.push_back({"soft_max", "F32 + mask", "32x7x4", kF32Math, [](Graph& g) {
                  return g.SoftMax(Leaf(g, GgmlType::F32, {32, 7, 4}, "a"), Leaf(g, GgmlType::F32, {32, 7}, "mask"),
                                   0.125f, 0.0f);
                }});
  cs.push_back({"soft_max", "F32 + mask + ALiBi", "32x7x12", kF32Math, [](Graph& g) {
                  return g.SoftMax(Leaf(g, GgmlType::F32, {32, 7, 12}, "a"),
                                   Leaf(g, GgmlType::F32, {32, 7}, "mask_alibi"), 0.125f, 8.0f);
                }});
  // RoPE: normal and NeoX, partial rotation, frequency factors, YaRN-style scaling.
  for (int mode : {0, 2}) {
    for (int64_t n : {1, 7}) {
      cs.push_back({"rope", mode == 0 ? "F32 normal" : "F32 neox", Shape({64, 4, n}), kF32Math, [=](Graph& g) {
                      return g.Rope(Leaf(g, GgmlType::F32, {64, 4, n}, "a"), Leaf(g, GgmlType::I32, {n}, "pos"),
                                    nullptr, 64, mode, 2048, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
                    }});
    }
    cs.push_back({"rope", mode == 0 ? "F32 normal, n_dims 32, freq factors, yarn" : "F32 neox, n_dims 32, freq factors",
                  "64x4x5", kF32Math, [=](Graph& g) {
                    return g.Rope(Leaf(g, GgmlType::F32, {64, 4, 5}, "a"), Leaf(g, GgmlType::I32, {5}, "pos"),
                                  Leaf(g, GgmlType::F32, {16}, "freq"), 32, mode, 4096, 500000.0f, 0.25f,
                                  mode == 0 ? 1.0f : 0.0f, 1.0f, 32.0f, 1.0f);
                  }});
  }
  // set_rows into a KV-cache-like destination (F32 and F16).
  for (GgmlType t : {GgmlType::F32, GgmlType::F16}) {
    cs.push_back({"set_rows", GgmlTypeName(t), "64x5 -> 64x40", t == GgmlType::F32 ? kExact : kF32Math, [=](Graph& g) {
                    return g.SetRows(Leaf(g, t, {64, 40}, "cache"), Leaf(g, GgmlType::F32, {64, 5}, "src"),
                                     Leaf(g, GgmlType::I32, {5}, "rows", 40));
                  }});
  }
  // flash attention over strided views of a cache: F16/F32 K/V, GQA, mask, ALiBi.
  struct Fa {
    GgmlType kv;
    int64_t hd, n_head, n_head_kv, n_kv, n_tokens;
    float max_bias;
    const char* mask = nullptr;  // leaf name; nullptr: "mask", or "mask_alibi" with max_bias
  };
  const Fa fas[] = {{GgmlType::F16, 64, 4, 4, 40, 1, 0},
                    {GgmlType::F16, 64, 8, 2, 40, 7, 0},
                    {GgmlType::F32, 32, 4, 4, 33, 5, 0},
                    {GgmlType::F16, 48, 6, 6, 25, 3, 8.0f},
                    {GgmlType::F16, 64, 4, 1, 256, 33, 0},
                    // 16 decode streams sharing prefixes (the CPU's shared-prefix path).
                    {GgmlType::F16, 64, 8, 2, 224 + 16 * 8, 16, 0, "mask_shared"}};
  for (const Fa& f : fas) {
    cs.push_back(
        {"flash_attn_ext",
         absl::StrCat(GgmlTypeName(f.kv), " K/V", f.n_head != f.n_head_kv ? ", GQA" : "",
                      f.max_bias > 0 ? ", ALiBi" : "", f.mask != nullptr ? ", shared prefixes" : ""),
         absl::StrFormat("hd %d, heads %d/%d, n_kv %d, tokens %d", f.hd, f.n_head, f.n_head_kv, f.n_kv, f.n_tokens),
         kAttention, [=](Graph& g) {
           const int64_t row = f.hd * f.n_head_kv;
           Tensor* kc = Leaf(g, f.kv, {row, f.n_kv + 3}, "k_cache");
           Tensor* vc = Leaf(g, f.kv, {row, f.n_kv + 3}, "v_cache");
           const size_t es = GgmlRowSize(f.kv, 1);
           Tensor* k = g.View(kc, {f.hd, f.n_head_kv, f.n_kv}, {es * f.hd, kc->nb[1]}, 0);
           Tensor* v = g.View(vc, {f.hd, f.n_head_kv, f.n_kv}, {es * f.hd, vc->nb[1]}, 0);
           Tensor* q = Leaf(g, GgmlType::F32, {f.hd, f.n_head, f.n_tokens}, "q");
           Tensor* mask = Leaf(g, GgmlType::F32, {f.n_kv, f.n_tokens},
                               f.mask != nullptr ? f.mask
                               : f.max_bias > 0  ? "mask_alibi"
                                                 : "mask");
           return g.FlashAttnExt(q, k, v, mask, 1.0f / std::sqrt(static_cast<float>(f.hd)), f.max_bias);
         }});
  }
  return cs;
}

// The kinds selected (empty: all): HERD_BACKEND_OPS_BACKENDS, else the build's default.
std::vector<std::string> SelectedKinds() {
  const char* env = std::getenv("HERD_BACKEND_OPS_BACKENDS");
#ifdef HERD_BACKEND_OPS_HIP_ONLY
  std::string want = "hip";
#else
  std::string want = "all";
#endif
  if (env != nullptr && *env != '\0') want = env;
  if (want == "all") return {};
  return absl::StrSplit(want, ',', absl::SkipEmpty());
}

// The backends under test: every present device of every selected kind, uncombined (no
// scheduler: a device must compute the ops itself); "cpu" is the best ISA here.
std::vector<std::pair<std::string, std::unique_ptr<Backend>>> PresentBackends(std::vector<std::string>* skipped) {
  std::vector<std::pair<std::string, std::unique_ptr<Backend>>> out;
  const std::vector<std::string> selected = SelectedKinds();
  for (const BackendKind& k : BackendKinds()) {
    if (!selected.empty() && std::find(selected.begin(), selected.end(), k.name) == selected.end()) continue;
    const std::vector<DeviceInfo> devs = k.devices();
    if (devs.empty()) {
      const std::string why = k.why_none ? k.why_none() : "";
      skipped->push_back(absl::StrCat(k.name, ": no device here", why.empty() ? "" : absl::StrCat(" (", why, ")")));
      continue;
    }
    for (const DeviceInfo& d : devs) {
      BackendOptions o;
      o.n_threads = 2;
      o.device = d.index;
      auto b = k.create(o);
      if (!b.ok()) {
        ADD_FAILURE() << k.name << " device " << d.index << " is listed but cannot be created: " << b.status();
        continue;
      }
      out.emplace_back(absl::StrCat(k.name, d.index > 0 ? absl::StrCat(d.index) : "", " (", d.description, ")"),
                       *std::move(b));
    }
  }
  return out;
}

TEST(BackendOpsTest, EveryOpOnEveryBackendMatchesTheCpuReference) {
  CpuBackend reference(1, Isa::kScalar);
  std::vector<std::string> skipped;
  auto backends = PresentBackends(&skipped);
  for (const std::string& s : skipped) std::printf("backend %s, skipped\n", s.c_str());
  if (backends.empty() && !SelectedKinds().empty()) {
    GTEST_SKIP() << "no device for the selected backend(s) " << absl::StrJoin(SelectedKinds(), ",")
                 << " here; skipped: " << absl::StrJoin(skipped, "; ");
  }
  ASSERT_FALSE(backends.empty());
  const std::vector<Case> cases = Cases();
  struct Row {
    int run = 0, passed = 0, unsupported = 0;
    double worst = 0;
  };
  std::map<std::pair<std::string, std::string>, Row> table;  // (op, backend)
  for (const Case& c : cases) {
    std::string err;
    const std::vector<float> want = RunCase(c, &reference, &err);
    ASSERT_TRUE(err.empty()) << c.op << " " << c.types << " " << c.shape << " on the reference: " << err;
    for (auto& [name, be] : backends) {
      Row& r = table[{c.op, name}];
      err.clear();
      const std::vector<float> got = RunCase(c, be.get(), &err);
      if (err.rfind("unsupported", 0) == 0) {
        ++r.unsupported;
        continue;
      }
      ++r.run;
      if (!err.empty()) {
        ADD_FAILURE() << c.op << " [" << c.types << "] " << c.shape << " on " << name << ": " << err;
        continue;
      }
      const double e = Nmse(got, want);
      r.worst = std::max(r.worst, e);
      if (e <= c.max_nmse) {
        ++r.passed;
      } else {
        ADD_FAILURE() << c.op << " [" << c.types << "] " << c.shape << " on " << name << ": NMSE " << e << " > "
                      << c.max_nmse;
      }
    }
  }
  std::printf("\n%-16s %-40s %8s %12s %s\n", "op", "backend", "passed", "worst NMSE", "not supported");
  int total = 0;
  for (const auto& [key, r] : table) {
    std::printf("%-16s %-40s %4d/%-3d %12.3g %d\n", key.first.c_str(), key.second.substr(0, 40).c_str(), r.passed,
                r.run, r.worst, r.unsupported);
    total += r.run;
  }
  std::printf("%zu cases x %zu backend(s): %d comparisons\n", cases.size(), backends.size(), total);
  // Every backend present must support every op of the llama and mpt graphs.
  for (const auto& [key, r] : table) EXPECT_EQ(r.unsupported, 0) << key.first << " on " << key.second;
}

}  // namespace
}  // namespace herd
