// backend_ops (the role of llama.cpp's test-backend-ops): the one place op results are
// checked against the CPU. Every graph op the model families use, over the types and
// shapes they use (odd sizes, broadcasts, strided and permuted views, batch 1 and batches
// up to 512, chained graphs), is computed on every backend present and compared with the
// CPU backend's scalar kernels (Isa::kScalar: the reference) by normalized mean squared
// error, NMSE = sum((a - b)^2) / sum(b^2), against a per-op threshold written below.
//
// Each (backend, case) is its own gtest test, BackendOps.<backend>/<OP>/<types>/<shape>
// (e.g. BackendOps.vulkan/MUL_MAT/q4_0xf32/k256_m67_n33), so --gtest_list_tests lists the
// cases and --gtest_filter picks backends, ops and types ('BackendOps.vulkan/MUL_MAT/q4_k*').
// A global environment prints a table op x backend (cases passed / run, worst NMSE) at
// the end. Backends compiled in but without a device here are named and skipped.
//
// Environment (docs/testing.md):
//   HERD_BACKEND_OPS_BACKENDS=kind,kind,... (or "all"): the backend kinds tested.
//   HERD_BACKEND_OPS_PERF=1: perf mode (test-backend-ops perf): each case is timed on its
//     backend (a warm-up, then repeated runs for ~0.25 s) instead of compared, and a table
//     of us per run, GFLOP/s (mul_mat, flash attention) and GB/s is printed.
//   HERD_BACKEND_OPS_REAL_SHAPES=1: adds the shapes of 7B-class models (mul_mat at
//     K = 4096 / 11008, flash attention at head dim 128 / 256 with 32/8 heads); slow on
//     lavapipe and on the scalar reference, so off by default.
//
// backend_ops_remote_test is this file linked with kind "remote" backed by a compute
// server on loopback (//libs/backend/remote:register_loopback) and compiled with
// HERD_BACKEND_OPS_REMOTE_ONLY: every case through the remote backend's wire.
// backend_ops_test has the kinds of the generic binaries (cpu, vulkan, cuda);
// backend_ops_hip_test is this file linked with the hip kind (//libs/backend/hip:register)
// and compiled with HERD_BACKEND_OPS_HIP_ONLY: it tests hip alone (the others are
// backend_ops_test's) and skips, naming it, without an AMD GPU.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/registry.h"
#include "libs/backend/testing/op_graph.h"

namespace herd {
namespace {

using testing::BuildFn;
using testing::CausalMask;
using testing::OpGraph;
using testing::PlacedGraph;

// Maximum NMSE per kind of computation (test-backend-ops uses 1e-7 by default and 5e-4
// for matrix products; quantized and F16 products round activations on the CPU (to
// Q8_0/Q8_K/F16, as ggml does) while a device may not, hence the larger bound).
constexpr double kExact = 1e-9;      // element-wise F32 arithmetic, copies, get_rows
constexpr double kF32Math = 1e-7;    // exp/erf/tanh/sqrt/pow: library vs shader versions
constexpr double kGeluF16 = 1e-6;    // gelu over [-12, 12): ggml-cpu's F16 table vs a formula
constexpr double kMatMulF32 = 1e-6;  // F32 sums in a different order
constexpr double kMatMulQ = 5e-4;    // F16/quantized weights
constexpr double kAttention = 5e-4;  // flash attention (F16 K/V, online softmax)

bool EnvOn(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// One case: its name parts, threshold and graph.
struct Case {
  std::string op;     // ggml's op name (MUL_MAT), or GRAPH for chained ops
  std::string types;  // lower-case type names: q4_0xf32 (weights x activations), f16 (K/V)
  std::string shape;  // extents and variant tags: k256_m67_n33, 67x5x3_view
  double max_nmse;
  BuildFn build;
  bool place_nodes = false;  // compute Graph::Placed (every node in the buffer)
  // A backend may refuse it (SupportsOp false: the test skips, counted as refused) rather
  // than fail: the real shapes, whose operands can exceed a device's limits (Vulkan binds
  // at most maxStorageBufferRange bytes per operand; an F32 4096 x 11008 weight is 180 MB).
  bool may_refuse = false;
  std::string name() const { return absl::StrCat(op, "/", types, "/", shape); }
};

std::string T(GgmlType t) { return absl::AsciiStrToLower(GgmlTypeName(t)); }

std::string Dims(std::vector<int64_t> ne) { return absl::StrJoin(ne, "x"); }

const GgmlType kWeightTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::Q4_0,
                                 GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K};

bool IsKQuant(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q6_K; }
bool IsQ0(GgmlType t) { return t == GgmlType::Q4_0 || t == GgmlType::Q8_0; }
double MatMulTol(GgmlType t) { return t == GgmlType::F32 ? kMatMulF32 : kMatMulQ; }

// A mask of a decode step of `rows` streams: cells [0, 64) shared by all (a system
// prompt), four tenant prefixes of 40 cells (rows r % 4), and a few own cells per row from
// 224 on (the CPU's shared-prefix attention path).
std::vector<float> SharedPrefixMask(int64_t n_kv, int64_t rows) {
  std::vector<float> m(static_cast<size_t>(n_kv * rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < n_kv; ++c) {
      const bool visible =
          c < 64 || (c < 224 && (c - 64) / 40 == r % 4) || (c >= 224 + r * 8 && c < 224 + r * 8 + 3 + r % 5);
      m[static_cast<size_t>(r * n_kv + c)] = visible ? 0.0f : -INFINITY;
    }
  }
  return m;
}

// Flash attention over strided views of [hd * n_head_kv, n_kv + pad] K/V caches.
struct Fa {
  GgmlType kv;
  int64_t hd, n_head, n_head_kv, n_kv, n_tokens;
  enum Mask { kNone, kCausal, kAlibi, kShared } mask = kCausal;
  bool q_view = false;  // q a permuted view of [hd, n_tokens, n_head]
  std::string Shape() const {
    return absl::StrCat("hd", hd, "_h", n_head, "x", n_head_kv, "_kv", n_kv, "_t", n_tokens,
                        mask == kNone     ? "_nomask"
                        : mask == kAlibi  ? "_alibi"
                        : mask == kShared ? "_shared"
                                          : "",
                        q_view ? "_qview" : "");
  }
};

Case FlashAttnCase(const Fa& f) {
  return {"FLASH_ATTN_EXT", T(f.kv), f.Shape(), kAttention, [f](OpGraph& b) {
            Graph& g = b.g();
            const int64_t row = f.hd * f.n_head_kv, n_ctx = f.n_kv + 5;
            Tensor* kc = b.Typed(f.kv, {row, n_ctx}, 91);
            Tensor* vc = b.Typed(f.kv, {row, n_ctx}, 92);
            const size_t es = GgmlRowSize(f.kv, 1);
            Tensor* k = g.View(kc, {f.hd, f.n_head_kv, f.n_kv}, {es * f.hd, kc->nb[1]}, 0);
            Tensor* v = g.View(vc, {f.hd, f.n_head_kv, f.n_kv}, {es * f.hd, vc->nb[1]}, 0);
            Tensor* q;
            if (f.q_view) {
              Tensor* qt = b.F32({f.hd, f.n_tokens, f.n_head}, 93);
              q = g.View(qt, {f.hd, f.n_head, f.n_tokens}, {qt->nb[2], qt->nb[1]}, 0);
            } else {
              q = b.F32({f.hd, f.n_head, f.n_tokens}, 93);
            }
            Tensor* m = nullptr;
            if (f.mask == Fa::kShared) {
              m = b.F32Values({f.n_kv, f.n_tokens}, SharedPrefixMask(f.n_kv, f.n_tokens));
            } else if (f.mask != Fa::kNone) {
              m = b.F32Values({f.n_kv, f.n_tokens}, CausalMask(f.n_kv, f.n_tokens, f.mask == Fa::kAlibi));
            }
            return g.FlashAttnExt(q, k, v, m, 1.0f / std::sqrt(static_cast<float>(f.hd)),
                                  f.mask == Fa::kAlibi ? 8.0f : 0.0f);
          }};
}

Case MulMatCase(GgmlType t, int64_t k, int64_t m, int64_t n) {
  return {"MUL_MAT", T(t) + "xf32", absl::StrCat("k", k, "_m", m, "_n", n), MatMulTol(t), [=](OpGraph& b) {
            return b.g().MulMat(b.Typed(t, {k, m}, 21), b.F32({k, n}, 22));
          }};
}

// A ffn block: several dependent ops in one graph (barriers between dispatches, scratch
// reuse), weights of type w.
BuildFn FfnBlock(GgmlType w, int64_t tokens) {
  return [=](OpGraph& b) {
    Graph& g = b.g();
    Tensor* x = b.F32({256, tokens}, 101);
    Tensor* h = g.Mul(g.RmsNorm(x, 1e-5f), b.F32({256}, 102, 0.5f, 1.5f));
    Tensor* up = g.MulMat(b.Typed(w, {256, 96}, 103), h);
    Tensor* gate = g.MulMat(b.Typed(w, {256, 96}, 104), h);
    Tensor* act = g.Swiglu(gate, up);
    Tensor* down = g.MulMat(b.Typed(w, {96, 256}, 105), act);
    return g.Add(x, down);
  };
}

void AddGetRows(std::vector<Case>* cs) {
  for (GgmlType t : kWeightTypes) {
    // Token embeddings: a table of 50 rows; and 13 rows of a wider (several-block) row.
    const int64_t k = IsKQuant(t) ? 256 : 96;
    for (int64_t n : {1, 7}) {
      std::vector<int32_t> ids(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5 + 3) % 50);
      cs->push_back({"GET_ROWS", T(t), absl::StrCat(k, "x50_ids", n), kExact, [=](OpGraph& b) {
                       return b.g().GetRows(b.Typed(t, {k, 50}, 11), b.I32(ids));
                     }});
    }
    const int64_t k2 = IsKQuant(t) ? 512 : IsQ0(t) ? 160 : 67;
    for (const std::vector<int32_t>& ids : {std::vector<int32_t>{3}, std::vector<int32_t>{0, 12, 3, 3, 7, 1, 11}}) {
      cs->push_back({"GET_ROWS", T(t), absl::StrCat(k2, "x13_ids", ids.size()), kExact, [=](OpGraph& b) {
                       return b.g().GetRows(b.Typed(t, {k2, 13}, 12), b.I32(ids));
                     }});
    }
  }
}

void AddMulMat(std::vector<Case>* cs) {
  for (GgmlType t : kWeightTypes) {
    const double tol = MatMulTol(t);
    // Row lengths: one block, a few blocks, odd (F32/F16).
    const std::vector<int64_t> ks = IsKQuant(t) ? std::vector<int64_t>{256, 768}
                                    : IsQ0(t)   ? std::vector<int64_t>{64, 96, 160}
                                                : std::vector<int64_t>{67, 96, 256};
    for (int64_t k : ks) {
      for (int64_t m : {5, 67}) {
        // 8 / 9: the last mat-vec and first batched column counts; 64: a full tensor-core tile.
        for (int64_t n : {1, 2, 3, 5, 7, 8, 9, 17, 33, 64, 70}) cs->push_back(MulMatCase(t, k, m, n));
      }
    }
    const int64_t k = ks[0];
    for (int64_t n : {1, 2, 7}) cs->push_back(MulMatCase(t, k, 1, n));  // a single weight row
    cs->push_back(MulMatCase(t, k, 67, 512));                           // a prompt
    // A prompt-sized product on every weight type (both GEMM paths of a GPU backend).
    cs->push_back(MulMatCase(t, 512, 300, 512));
    // Batched activations [k, 3, 2] (6 columns), [k, 5, 3] (15) and [k, 1, 2, 2].
    for (const std::vector<int64_t>& nb : std::vector<std::vector<int64_t>>{{3, 2}, {5, 3}, {1, 2, 2}}) {
      cs->push_back({"MUL_MAT", T(t) + "xf32", absl::StrCat("k", k, "_m67_n", Dims(nb)), tol, [=](OpGraph& b) {
                       std::vector<int64_t> ne = {k};
                       ne.insert(ne.end(), nb.begin(), nb.end());
                       return b.g().MulMat(b.Typed(t, {k, 67}, 23), b.F32(ne, 24));
                     }});
    }
    // Strided activations: rows of k floats 8 floats apart beyond k.
    for (int64_t n : {1, 9, 40}) {
      cs->push_back({"MUL_MAT", T(t) + "xf32", absl::StrCat("k", k, "_m67_n", n, "_view"), tol, [=](OpGraph& b) {
                       Tensor* x = b.F32({k + 8, n}, 26);
                       return b.g().MulMat(b.Typed(t, {k, 67}, 27), b.g().View(x, {k, n}, {x->nb[1]}, 8 * 4));
                     }});
    }
    // Non-uniform columns: [k, 20, 2] taken from a [k, 21, 2] tensor.
    cs->push_back({"MUL_MAT", T(t) + "xf32", absl::StrCat("k", k, "_m67_n20x2_view"), tol, [=](OpGraph& b) {
                     Tensor* x = b.F32({k, 21, 2}, 28);
                     return b.g().MulMat(b.Typed(t, {k, 67}, 29), b.g().View(x, {k, 20, 2}, {x->nb[1], x->nb[2]}, 0));
                   }});
  }
  // Over heads (3-D activations, a 2-D F16 weight).
  cs->push_back({"MUL_MAT", "f16xf32", "k64_m33_n5x3_heads", kMatMulQ, [](OpGraph& b) {
                   return b.g().MulMat(b.Typed(GgmlType::F16, {64, 33}, 30), b.F32({64, 5, 3}, 31));
                 }});
}

void AddElementwise(std::vector<Case>* cs) {
  for (Op op : {Op::kAdd, Op::kMul}) {
    const auto f = [op](OpGraph& b, Tensor* x, Tensor* y) {
      return op == Op::kAdd ? b.g().Add(x, y) : b.g().Mul(x, y);
    };
    const std::string name = OpName(op);
    cs->push_back({name, "f32", "67x5", kExact, [=](OpGraph& b) {
                     return f(b, b.F32({67, 5}, 31), b.F32({67, 5}, 32));
                   }});
    // src1 broadcast over rows, over dimension 1, or not at all.
    for (const std::vector<int64_t>& bs : std::vector<std::vector<int64_t>>{{67, 5, 3}, {67}, {67, 5}, {67, 1, 3}}) {
      cs->push_back({name, "f32", "67x5x3_b" + Dims(bs), kExact, [=](OpGraph& b) {
                       return f(b, b.F32({67, 5, 3}, 31), b.F32(bs, 32));
                     }});
    }
    cs->push_back({name, "f32", "32x5_view", kExact, [=](OpGraph& b) {
                     Tensor* a = b.F32({96, 5}, 33);
                     return f(b, b.g().View(a, {32, 5}, {a->nb[1]}, 32 * 4), b.F32({32, 5}, 34));
                   }});
    cs->push_back({name, "f32", "67x5_view_b67", kExact, [=](OpGraph& b) {
                     Tensor* x = b.F32({80, 5}, 33);
                     return f(b, b.g().View(x, {67, 5}, {x->nb[1]}, 4 * 4), b.F32({67}, 34));
                   }});
  }
}

// A [67, 5, 3] F32 input, or a strided view of a [80, 6, 3] tensor of that shape.
Tensor* UnaryInput(OpGraph& b, bool view, uint32_t seed, float lo, float hi) {
  if (!view) return b.F32({67, 5, 3}, seed, lo, hi);
  Tensor* x = b.F32({80, 6, 3}, seed, lo, hi);
  return b.g().View(x, {67, 5, 3}, {x->nb[1], x->nb[2]}, 2 * 4 + x->nb[1]);
}

void AddUnary(std::vector<Case>* cs) {
  struct Unary {
    const char* name;
    double tol;
    float lo, hi;  // input range of the 67x5x3 cases
    std::function<Tensor*(Graph&, Tensor*)> f;
  };
  const Unary unary[] = {
      {"SCALE", kExact, -3, 3, [](Graph& g, Tensor* a) { return g.Scale(a, 0.37f); }},
      {"RMS_NORM", kF32Math, -3, 3, [](Graph& g, Tensor* a) { return g.RmsNorm(a, 1e-5f); }},
      {"NORM", kF32Math, -2, 4, [](Graph& g, Tensor* a) { return g.Norm(a, 1e-5f); }},
      {"SILU", kF32Math, -12, 12, [](Graph& g, Tensor* a) { return g.Silu(a); }},
      {"GELU", kGeluF16, -12, 12, [](Graph& g, Tensor* a) { return g.Gelu(a); }},
      {"GELU_ERF", kF32Math, -6, 6, [](Graph& g, Tensor* a) { return g.GeluErf(a); }},
      {"CLAMP", kExact, -3, 3, [](Graph& g, Tensor* a) { return g.Clamp(a, -0.5f, 0.25f); }},
      {"CONT", kExact, -3, 3, [](Graph& g, Tensor* a) { return g.Cont(a); }},
      {"SOFT_MAX", kF32Math, -4, 4, [](Graph& g, Tensor* a) { return g.SoftMax(a, nullptr, 0.7f, 0.0f); }},
  };
  for (const Unary& un : unary) {
    for (const std::vector<int64_t>& ne : std::vector<std::vector<int64_t>>{{67, 1}, {256, 33}}) {
      cs->push_back({un.name, "f32", Dims(ne), un.tol, [=](OpGraph& b) { return un.f(b.g(), b.F32(ne, 41)); }});
    }
    for (bool view : {false, true}) {
      cs->push_back({un.name, "f32", view ? "67x5x3_view" : "67x5x3", un.tol,
                     [=](OpGraph& b) { return un.f(b.g(), UnaryInput(b, view, 42, un.lo, un.hi)); }});
    }
  }
  // Long rows (several elements per invocation of the row kernels).
  cs->push_back({"RMS_NORM", "f32", "4099x2", kF32Math, [](OpGraph& b) {
                   return b.g().RmsNorm(b.F32({4099, 2}, 43), 1e-5f);
                 }});
  cs->push_back({"NORM", "f32", "4099x2", kF32Math, [](OpGraph& b) {
                   return b.g().Norm(b.F32({4099, 2}, 44), 1e-5f);
                 }});
  // cont of a permuted view: [8, 4, 5] (head, head index, token) read as [8, 5, 4]; of
  // 3 heads of 8 out of rows of 48 (a fused QKV).
  cs->push_back({"CONT", "f32", "8x5x4_permuted", kExact, [](OpGraph& b) {
                   Tensor* x = b.F32({8, 4, 5}, 45);
                   return b.g().Cont(b.g().View(x, {8, 5, 4}, {x->nb[2], x->nb[1]}, 0));
                 }});
  cs->push_back({"CONT", "f32", "8x3x5_qkv_view", kExact, [](OpGraph& b) {
                   Tensor* a = b.F32({48, 5}, 46);
                   return b.g().Cont(b.g().View(a, {8, 3, 5}, {16 * 4, a->nb[1]}, 8 * 4));
                 }});
  cs->push_back({"SWIGLU", "f32", "67x7", kF32Math, [](OpGraph& b) {
                   return b.g().Swiglu(b.F32({67, 7}, 51), b.F32({67, 7}, 52));
                 }});
  cs->push_back({"SWIGLU", "f32", "67x5x3", kF32Math, [](OpGraph& b) {
                   return b.g().Swiglu(b.F32({67, 5, 3}, 51, -8, 8), b.F32({67, 5, 3}, 52));
                 }});
  cs->push_back({"SWIGLU", "f32", "67x5x3_view", kF32Math, [](OpGraph& b) {
                   return b.g().Swiglu(UnaryInput(b, true, 53, -3, 3), b.F32({67, 5, 3}, 54));
                 }});
}

void AddSoftMax(std::vector<Case>* cs) {
  // Heads on dimension 2; a causal mask; ALiBi (max_bias 8).
  for (int64_t heads : {4, 6, 12}) {
    for (bool alibi : {false, true}) {
      for (bool mask : {false, true}) {
        const int64_t n_kv = heads == 12 ? 32 : 33;
        cs->push_back({"SOFT_MAX", "f32", absl::StrCat(n_kv, "x7x", heads, mask ? "_mask" : "", alibi ? "_alibi" : ""),
                       kF32Math, [=](OpGraph& b) {
                         Tensor* m = mask ? b.F32Values({n_kv, 7}, CausalMask(n_kv, 7, alibi)) : nullptr;
                         return b.g().SoftMax(b.F32({n_kv, 7, heads}, 61, -4, 4), m, 0.125f, alibi ? 8.0f : 0.0f);
                       }});
      }
    }
  }
  cs->push_back({"SOFT_MAX", "f32", "1000x3_view", kF32Math, [](OpGraph& b) {
                   Tensor* x = b.F32({1010, 3}, 62, -10, 10);
                   return b.g().SoftMax(b.g().View(x, {1000, 3}, {x->nb[1]}, 40), nullptr, 1.0f, 0.0f);
                 }});
}

void AddRope(std::vector<Case>* cs) {
  struct R {
    const char* label;
    int64_t hd;
    int n_dims, mode;
    bool ff;
    float freq_base, freq_scale, ext_factor;
  };
  const R rs[] = {
      {"normal", 64, 64, 0, false, 10000, 1, 0},
      {"neox", 64, 64, 2, false, 10000, 1, 0},
      {"normal_partial32", 67, 32, 0, false, 10000, 1, 0},
      {"neox_partial48", 80, 48, 2, false, 10000, 1, 0},
      {"neox_ff", 64, 64, 2, true, 10000, 1, 0},
      {"normal_yarn", 64, 64, 0, false, 10000, 0.25f, 1},
      {"neox_yarn_ff", 128, 128, 2, true, 10000, 0.125f, 1},
      {"normal_partial32_ff_yarn", 64, 32, 0, true, 500000, 0.25f, 1},
      {"neox_partial32_ff", 64, 32, 2, true, 500000, 0.25f, 0},
  };
  for (const R& r : rs) {
    for (int64_t n : {1, 5, 7}) {
      for (bool view : {false, true}) {
        if (view && n != 5) continue;
        cs->push_back(
            {"ROPE", "f32", absl::StrCat(r.hd, "x4x", n, "_", r.label, view ? "_view" : ""), kF32Math, [=](OpGraph& b) {
               Tensor* x;
               if (view) {  // the q part of a fused [hd, 4 q + 2 k heads, tokens] tensor
                 Tensor* qk = b.F32({r.hd, 6, n}, 71);
                 x = b.g().View(qk, {r.hd, 4, n}, {qk->nb[1], qk->nb[2]}, 0);
               } else {
                 x = b.F32({r.hd, 4, n}, 72);
               }
               std::vector<int32_t> pos = {0, 1, 7, 100, 3000, 5, 9};
               pos.resize(static_cast<size_t>(n));
               Tensor* ff = r.ff ? b.F32({r.n_dims / 2}, 73, 1.0f, 4.0f) : nullptr;
               return b.g().Rope(x, b.I32(pos), ff, r.n_dims, r.mode, 4096, r.freq_base, r.freq_scale, r.ext_factor,
                                 1.0f, 32.0f, 1.0f);
             }});
      }
    }
  }
}

void AddSetRows(std::vector<Case>* cs) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16}) {
    const double tol = t == GgmlType::F32 ? kExact : kF32Math;
    for (int64_t row : {64, 67}) {
      cs->push_back(
          {"SET_ROWS", T(t), absl::StrCat(row, "x10_rows3"), tol, [=](OpGraph& b) {
             return b.g().SetRows(b.Typed(t, {row, 10}, 81), b.F32({row, 3}, 82, -100, 100), b.I32({7, 0, 4}));
           }});
    }
    cs->push_back({"SET_ROWS", T(t), "64x40_rows5", tol, [=](OpGraph& b) {
                     return b.g().SetRows(b.Typed(t, {64, 40}, 83), b.F32({64, 5}, 84), b.I32({1, 4, 7, 10, 13}));
                   }});
  }
}

void AddFlashAttn(std::vector<Case>* cs) {
  for (GgmlType kv : {GgmlType::F16, GgmlType::F32}) {
    for (const Fa& f : {Fa{kv, 64, 4, 2, 37, 1}, Fa{kv, 64, 4, 2, 37, 7}, Fa{kv, 64, 4, 4, 300, 3, Fa::kNone},
                        Fa{kv, 128, 8, 2, 300, 33}, Fa{kv, 32, 6, 3, 50, 5, Fa::kAlibi, true}, Fa{kv, 64, 4, 4, 40, 1},
                        Fa{kv, 32, 4, 4, 33, 5}}) {
      cs->push_back(FlashAttnCase(f));
    }
  }
  cs->push_back(FlashAttnCase({GgmlType::F16, 64, 8, 2, 40, 7}));
  cs->push_back(FlashAttnCase({GgmlType::F16, 48, 6, 6, 25, 3, Fa::kAlibi}));
  cs->push_back(FlashAttnCase({GgmlType::F16, 64, 4, 1, 256, 33}));
  cs->push_back(FlashAttnCase({GgmlType::F16, 64, 8, 2, 224 + 16 * 8, 16, Fa::kShared}));
  // Decode over long caches: the CUDA backend splits these over the KV (attn_split.h),
  // with wholly masked ranges (the shared-prefix mask hides every cell past 224 + 8 * 4).
  cs->push_back(FlashAttnCase({GgmlType::F16, 128, 4, 1, 1100, 4, Fa::kShared}));
  cs->push_back(FlashAttnCase({GgmlType::F32, 64, 4, 2, 700, 1, Fa::kAlibi}));
  cs->push_back(FlashAttnCase({GgmlType::F16, 256, 8, 2, 2000, 2}));
}

void AddGraphs(std::vector<Case>* cs) {
  for (GgmlType w : {GgmlType::F32, GgmlType::Q8_0}) {
    for (int64_t tokens : {3, 12}) {
      for (bool placed : {false, true}) {
        Case c{"GRAPH", T(w), absl::StrCat("ffn_block_t", tokens, placed ? "_placed" : ""), MatMulTol(w),
               FfnBlock(w, tokens)};
        c.place_nodes = placed;
        cs->push_back(std::move(c));
      }
    }
  }
  // set_rows into the KV caches, then attention over views of the written caches.
  for (GgmlType kv : {GgmlType::F16, GgmlType::F32}) {
    cs->push_back({"GRAPH", T(kv), "set_rows_flash_attn", kAttention, [kv](OpGraph& b) {
                     Graph& g = b.g();
                     const int64_t hd = 32, nh = 4, nkv_h = 2, n_ctx = 40, nt = 3;
                     const size_t es = GgmlRowSize(kv, 1);
                     Tensor* kc = b.Typed(kv, {hd * nkv_h, n_ctx}, 111);
                     Tensor* vc = b.Typed(kv, {hd * nkv_h, n_ctx}, 112);
                     Tensor* idx = b.I32({20, 21, 22});
                     Tensor* ks = g.SetRows(kc, b.F32({hd * nkv_h, nt}, 113), idx);
                     Tensor* vs = g.SetRows(vc, b.F32({hd * nkv_h, nt}, 114), idx);
                     Tensor* k = g.View(ks, {hd, nkv_h, 23}, {hd * es, kc->nb[1]}, 0);
                     Tensor* v = g.View(vs, {hd, nkv_h, 23}, {hd * es, vc->nb[1]}, 0);
                     Tensor* q = b.F32({hd, nh, nt}, 115);
                     Tensor* m = b.F32Values({23, nt}, CausalMask(23, nt, false));
                     return g.FlashAttnExt(q, k, v, m, 0.17f, 0.0f);
                   }});
  }
}

// The shapes of 7B-class models (HERD_BACKEND_OPS_REAL_SHAPES=1): the ffn products
// (K = 4096 -> 11008 and back) at decode, small batches and a prompt; attention at head
// dims 128 and 256 with 32 query / 8 KV heads over a short and a long cache.
void AddRealShapes(std::vector<Case>* cs) {
  for (GgmlType t : kWeightTypes) {
    for (auto [k, m] : std::vector<std::pair<int64_t, int64_t>>{{4096, 11008}, {11008, 4096}}) {
      for (int64_t n : {1, 8, 9, 16, 512}) cs->push_back(MulMatCase(t, k, m, n));
    }
  }
  for (int64_t hd : {128, 256}) {
    for (int64_t n_kv : {129, 4096}) {
      for (int64_t tokens : {1, 512}) cs->push_back(FlashAttnCase({GgmlType::F16, hd, 32, 8, n_kv, tokens}));
    }
  }
  for (Case& c : *cs) c.may_refuse = true;
}

std::vector<Case> Cases(bool real_shapes) {
  std::vector<Case> cs;
  AddGetRows(&cs);
  AddMulMat(&cs);
  AddElementwise(&cs);
  AddUnary(&cs);
  AddSoftMax(&cs);
  AddRope(&cs);
  AddSetRows(&cs);
  AddFlashAttn(&cs);
  AddGraphs(&cs);
  if (real_shapes) AddRealShapes(&cs);
  return cs;
}

// ---------------------------------------------------------------------------
// Backends, results, registration.

// The kinds selected (empty: all): HERD_BACKEND_OPS_BACKENDS, else the build's default.
std::vector<std::string> SelectedKinds() {
  const char* env = std::getenv("HERD_BACKEND_OPS_BACKENDS");
#ifdef HERD_BACKEND_OPS_HIP_ONLY
  std::string want = "hip";
#elif defined(HERD_BACKEND_OPS_REMOTE_ONLY)
  std::string want = "remote";
#else
  std::string want = "all";
#endif
  if (env != nullptr && *env != '\0') want = env;
  if (want == "all") return {};
  return absl::StrSplit(want, ',', absl::SkipEmpty());
}

int Threads() { return std::max(1, std::min(16, static_cast<int>(std::thread::hardware_concurrency()))); }

// One device under test, created on first use (so that a run filtered to one backend
// creates only that one).
struct Slot {
  std::string label;  // kind, plus the device index when > 0: "vulkan", "cuda1"
  std::string description;
  const BackendKind* kind;
  int device;
  std::unique_ptr<Backend> backend;
  std::string error;  // why creating it failed
  Backend* Get() {
    if (backend == nullptr && error.empty()) {
      BackendOptions o;
      o.n_threads = Threads();
      o.device = device;
      absl::StatusOr<std::unique_ptr<Backend>> b = kind->create(o);
      if (b.ok()) {
        backend = *std::move(b);
      } else {
        error =
            absl::StrCat(kind->name, " device ", device, " is listed but cannot be created: ", b.status().ToString());
      }
    }
    return backend.get();
  }
};

struct State {
  bool perf = false;
  std::vector<Case> cases;
  std::vector<Slot> slots;
  std::vector<std::string> skipped;  // kinds without a device, with the reason
  std::unique_ptr<CpuBackend> reference;
  int ref_case = -1;  // the case ref_values hold (tests of one case run one after another)
  std::vector<float> ref_values;
  struct Row {
    int run = 0, passed = 0, refused = 0;
    double worst = 0;
  };
  std::map<std::pair<std::string, std::string>, Row> table;  // (op, backend)
  struct Perf {
    std::string backend, name;
    int runs;
    double us, gflops, gbps;
  };
  std::vector<Perf> perf_rows;
};

State& S() {
  static State* s = new State();
  return *s;
}

// FLOPs of the products and attention in `g` (0 when it has none).
double Flops(Graph& g) {
  double f = 0;
  for (Tensor* n : g.nodes()) {
    if (n->op == Op::kMulMat) f += 2.0 * n->src[0]->ne[0] * static_cast<double>(n->nelements());
    if (n->op == Op::kFlashAttnExt) {
      const Tensor* q = n->src[0];
      f += 4.0 * q->ne[0] * static_cast<double>(n->src[1]->ne[2]) * q->ne[1] * q->ne[2];
    }
  }
  return f;
}

class OpCase : public ::testing::Test {
 public:
  OpCase(int case_index, int slot_index) : ci_(case_index), si_(slot_index) {}

  void TestBody() override {
    State& s = S();
    const Case& c = s.cases[static_cast<size_t>(ci_)];
    Slot& slot = s.slots[static_cast<size_t>(si_)];
    Backend* be = slot.Get();
    ASSERT_NE(be, nullptr) << slot.error;
    absl::StatusOr<std::unique_ptr<PlacedGraph>> pg = PlacedGraph::Create(be, c.build, c.place_nodes);
    ASSERT_TRUE(pg.ok()) << pg.status();
    // Every backend present must compute every op of the model graphs itself.
    for (Tensor* n : (*pg)->graph().nodes()) {
      if (be->SupportsOp(*n)) continue;
      if (c.may_refuse) {
        ++s.table[{c.op, slot.label}].refused;
        GTEST_SKIP() << slot.label << " refuses " << OpName(n->op) << " of this shape (SupportsOp)";
      }
      FAIL() << slot.label << " does not support " << OpName(n->op);
    }
    absl::Status st = (*pg)->Compute();
    ASSERT_TRUE(st.ok()) << st;
    if (s.perf) {
      Time(c, slot, pg->get());
      return;
    }
    State::Row& row = s.table[{c.op, slot.label}];
    ++row.run;
    if (s.ref_case != ci_) {
      s.ref_case = -1;
      if (s.reference == nullptr) s.reference = std::make_unique<CpuBackend>(Threads(), Isa::kScalar);
      absl::StatusOr<std::vector<float>> want = testing::RunOn(s.reference.get(), c.build, c.place_nodes);
      ASSERT_TRUE(want.ok()) << "on the reference: " << want.status();
      s.ref_values = *std::move(want);
      s.ref_case = ci_;
    }
    absl::StatusOr<std::vector<float>> got = (*pg)->Output();
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), s.ref_values.size());
    const double e = testing::Nmse(*got, s.ref_values);
    row.worst = std::max(row.worst, e);
    EXPECT_LE(e, c.max_nmse) << "NMSE of " << c.name() << " on " << slot.label << " (" << slot.description << ")";
    if (e <= c.max_nmse) ++row.passed;
  }

 private:
  // Perf mode: runs the computed graph again for ~0.25 s (at least 3 runs).
  static void Time(const Case& c, const Slot& slot, PlacedGraph* pg) {
    using Clock = std::chrono::steady_clock;
    int runs = 0;
    const Clock::time_point start = Clock::now();
    double seconds = 0;
    while (runs < 3 || (seconds < 0.25 && runs < 10000)) {
      absl::Status st = pg->Compute();
      ASSERT_TRUE(st.ok()) << st;
      ++runs;
      seconds = std::chrono::duration<double>(Clock::now() - start).count();
    }
    const double us = seconds * 1e6 / runs;
    const double bytes = static_cast<double>(pg->input_bytes() + pg->output().nbytes());
    S().perf_rows.push_back({slot.label, c.name(), runs, us, Flops(pg->graph()) / us * 1e-3, bytes / us * 1e-3});
  }

  int ci_, si_;
};

// Prints the op x backend table (and the perf table) after the last test.
class Summary : public ::testing::Environment {
 public:
  void TearDown() override {
    State& s = S();
    for (const std::string& k : s.skipped) std::printf("backend %s, skipped\n", k.c_str());
    if (!s.table.empty()) {
      std::printf("\n%-16s %-10s %9s %12s %s\n", "op", "backend", "passed", "worst NMSE", "refused");
      int total = 0;
      for (const auto& [key, r] : s.table) {
        std::printf("%-16s %-10s %4d/%-4d %12.3g %d\n", key.first.c_str(), key.second.c_str(), r.passed, r.run, r.worst,
                    r.refused);
        total += r.run;
      }
      std::printf("%d comparisons\n", total);
    }
    if (!s.perf_rows.empty()) {
      std::printf("\n%-10s %-52s %7s %12s %10s %9s\n", "backend", "case", "runs", "us/run", "GFLOP/s", "GB/s");
      for (const State::Perf& p : s.perf_rows) {
        const std::string gflops = p.gflops > 0 ? absl::StrFormat("%10.1f", p.gflops) : absl::StrFormat("%10s", "");
        std::printf("%-10s %-52s %7d %12.1f %s %9.2f\n", p.backend.c_str(), p.name.c_str(), p.runs, p.us,
                    gflops.c_str(), p.gbps);
      }
    }
    for (const Slot& slot : s.slots) {
      if (slot.backend != nullptr) std::printf("%s: %s\n", slot.label.c_str(), slot.description.c_str());
    }
  }
};

// Whether `name` uses only characters that gtest filters and shells take as they are.
bool ValidName(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char ch) {
    return absl::ascii_isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '/';
  });
}

TEST(BackendOpsCases, NamesAreUniqueAndValid) {
  std::set<std::string> seen;
  const std::vector<Case> cases = Cases(/*real_shapes=*/true);
  for (const Case& c : cases) {
    EXPECT_TRUE(ValidName(c.name())) << c.name();
    EXPECT_TRUE(seen.insert(c.name()).second) << "two cases named " << c.name();
    EXPECT_GT(c.max_nmse, 0) << c.name();
  }
  EXPECT_GT(cases.size(), 300u);
}

TEST(BackendOpsCases, NmseCountsNonFiniteMismatches) {
  EXPECT_EQ(testing::Nmse({1, 2}, {1, 2}), 0);
  EXPECT_NEAR(testing::Nmse({1, 3}, {1, 2}), 1.0 / 5, 1e-12);
  EXPECT_TRUE(std::isinf(testing::Nmse({1, NAN}, {1, 2})));
  EXPECT_TRUE(std::isinf(testing::Nmse({1, INFINITY}, {1, 2})));
  EXPECT_TRUE(std::isinf(testing::Nmse({1, INFINITY}, {1, -INFINITY})));
  EXPECT_EQ(testing::Nmse({1, -INFINITY}, {1, -INFINITY}), 0);
}

// Finds the backends and registers one test per (case, backend), case by case (so the
// reference result of a case is computed once for all backends).
void RegisterCases() {
  State& s = S();
  s.perf = EnvOn("HERD_BACKEND_OPS_PERF");
  s.cases = Cases(EnvOn("HERD_BACKEND_OPS_REAL_SHAPES"));
  const std::vector<std::string> selected = SelectedKinds();
  for (const BackendKind& k : BackendKinds()) {
    if (!selected.empty() && std::find(selected.begin(), selected.end(), k.name) == selected.end()) continue;
    const std::vector<DeviceInfo> devs = k.devices();
    if (devs.empty()) {
      const std::string why = k.why_none ? k.why_none() : "";
      s.skipped.push_back(absl::StrCat(k.name, ": no device here", why.empty() ? "" : absl::StrCat(" (", why, ")")));
      continue;
    }
    for (const DeviceInfo& d : devs) {
      s.slots.push_back(
          {absl::StrCat(k.name, d.index > 0 ? absl::StrCat(d.index) : ""), d.description, &k, d.index, nullptr, ""});
    }
  }
  if (s.slots.empty()) {
    const std::string why =
        absl::StrCat("no device for the selected backend(s) ", selected.empty() ? "all" : absl::StrJoin(selected, ","),
                     " here; skipped: ", absl::StrJoin(s.skipped, "; "));
    ::testing::RegisterTest("BackendOps", "no_device", nullptr, nullptr, __FILE__, __LINE__, [why]() -> OpCase* {
      struct Skip : OpCase {
        explicit Skip(std::string w) : OpCase(0, 0), why(std::move(w)) {}
        void TestBody() override { GTEST_SKIP() << why; }
        std::string why;
      };
      return new Skip(why);
    });
    return;
  }
  for (size_t c = 0; c < s.cases.size(); ++c) {
    for (size_t b = 0; b < s.slots.size(); ++b) {
      const int ci = static_cast<int>(c), si = static_cast<int>(b);
      ::testing::RegisterTest("BackendOps", absl::StrCat(s.slots[b].label, "/", s.cases[c].name()).c_str(), nullptr,
                              nullptr, __FILE__, __LINE__, [ci, si]() -> OpCase* { return new OpCase(ci, si); });
    }
  }
}

}  // namespace
}  // namespace herd

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  herd::RegisterCases();
  ::testing::AddGlobalTestEnvironment(new herd::Summary());
  return RUN_ALL_TESTS();
}
