// Device throughput on random-weight LLaMA models of real sizes (issue #16 item 5):
// pp512 and tg128 at batch 1 (llama-bench's tests) and batched decode at 1/4/16/64
// sequences (llama-batched-bench's S_TG, as llama_bench's bd), medians of --reps runs, with
// decode expressed as a fraction of the device's memory bandwidth.
//
//   bazel build //bench:gpu_bench && bazel-bin/bench/gpu_bench [--backend cuda] [--device 0]
//       [--models tinyllama-1.1b,7b] [--types q4_0,f16] [--reps 3] [--pp 512] [--tg 128]
//       [--bd 1,4,16,64] [--bd_steps 64] [--peak_gbps 4500] [--max_seconds 0]
//   //bench:gpu_bench_hip is the same with the hip kind (--backend hip; links ROCm's runtime).
//
// Models: bench_models' shapes (tinyllama-1.1b; 7b = LLaMA-2 7B, 4096 dim, 32 layers, 32
// heads, 32 KV heads, FFN 11008, vocab 32000, untied output) in each --types, written with
// the threaded writer (streamed: one tensor in memory at a time) into --cache_dir
// (default $XDG_CACHE_HOME/herd-bench, ~/.cache/herd-bench, else $TMPDIR/herd-bench) and
// reused while their recipe stamp matches. A model whose file does not fit in the free
// disk space, or whose weights and KV cache do not fit in the device's memory, is skipped
// with a row saying so. 7b is ~3.6 GiB in Q4_0 and ~12.6 GiB in F16.
//
// Bandwidth: the backend's own device-to-device copy (Backend::CopyTensor of --bw_mib MiB
// buffers; cudaMemcpyAsync on cuda), counted as bytes read + bytes written per second, best
// of 10: "copy BW". --peak_gbps (default 4500: 4.50 TB/s, the streaming-read bandwidth
// measured on the device tool's H200 in issue #16) is the second reference. Decode rows
// give the bytes a token needs divided by its time: the weights it reads (every weight
// tensor, but of token_embd only its one row when the output matrix is separate) plus the
// K and V of the cells it attends to (the average over the run: positions 0..tg-1 for tg),
// per decode step for bd (weights once, KV per sequence). These are the bytes the
// computation needs, not what the kernels fetch (a kernel that reads masked cells or reads
// weights twice does not show here). pp is compute-bound: no bandwidth figures.
//
// Exit status: 0 after the table, and 0 with "no <backend> device: skipped" when the
// backend has no device here (so it can run anywhere); 2 for usage errors; 1 for real
// errors (a failed decode, an unreadable model).
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include "bench/bench_models.h"
#include "libs/backend/cuda/cuda_backend.h"
#include "libs/backend/registry.h"
#include "libs/backend/sched.h"
#include "libs/base/status_macros.h"
#include "libs/engine/engine.h"
#include "libs/gguf/ggml_type.h"
#include "libs/gguf/gguf.h"
#include "libs/model/model.h"

ABSL_FLAG(std::string, backend, "cuda", "backend kind (cpu, vulkan, cuda; hip in gpu_bench_hip)");
ABSL_FLAG(int, device, 0, "device index within the backend kind");
ABSL_FLAG(int, threads, 4, "CPU threads: the cpu backend's compute, a device's CPU fallback");
ABSL_FLAG(std::string, models, "tinyllama-1.1b,7b", "comma-separated model shapes (bench_models)");
ABSL_FLAG(std::string, types, "q4_0,f16", "comma-separated weight types");
ABSL_FLAG(int, reps, 3, "timed runs per test (the median is printed), after one untimed warm-up run");
ABSL_FLAG(bool, warmup, true, "run each test once untimed first");
ABSL_FLAG(int, pp, 512, "prompt tokens of the pp test (one batch; 0 = no pp test)");
ABSL_FLAG(int, tg, 128, "generated tokens of the tg test (batch 1 from an empty cache; 0 = no tg test)");
ABSL_FLAG(std::string, bd, "1,4,16,64", "sequence counts of the batched-decode tests (empty = none)");
ABSL_FLAG(int, bd_steps, 64, "decode steps of each batched-decode test (after a 1-token prompt per sequence)");
ABSL_FLAG(double, peak_gbps, 4500,
          "reference bandwidth in GB/s (default: 4.50 TB/s, the H200's measured streaming-read bandwidth, issue #16); "
          "0 = no such column");
ABSL_FLAG(bool, measure_bw, true, "measure the backend's device-to-device copy bandwidth");
ABSL_FLAG(int, bw_mib, 2048, "size of each of the two buffers of the copy-bandwidth measurement");
ABSL_FLAG(std::string, cache_dir, "",
          "where the model files are written once and reused (default $XDG_CACHE_HOME/herd-bench, "
          "~/.cache/herd-bench, else $TMPDIR/herd-bench or /tmp/herd-bench)");
ABSL_FLAG(int, write_threads, 0, "threads that generate the weights (0 = every hardware thread)");
ABSL_FLAG(double, max_seconds, 0,
          "time budget: once spent, nothing new starts (the remaining tests and models are listed as skipped); "
          "0 = none");

namespace herd::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

constexpr double kGiB = 1073741824.0;

// --max_seconds.
struct Budget {
  Clock::time_point start = Clock::now();
  double limit = 0;
  bool Spent() const { return limit > 0 && Seconds(start) >= limit; }
};

bool MakeDirs(const std::string& path) {
  std::string cur;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&cur, "/", part);
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

// The first of --cache_dir, $XDG_CACHE_HOME/herd-bench, ~/.cache/herd-bench,
// $TMPDIR/herd-bench, /tmp/herd-bench that exists or can be created (--cache_dir only).
std::string CacheDir() {
  if (!absl::GetFlag(FLAGS_cache_dir).empty()) return absl::GetFlag(FLAGS_cache_dir);
  std::vector<std::string> c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && x[0] == '/')
    c.push_back(absl::StrCat(x, "/herd-bench"));
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/')
    c.push_back(absl::StrCat(h, "/.cache/herd-bench"));
  if (const char* t = std::getenv("TMPDIR"); t != nullptr && t[0] == '/') c.push_back(absl::StrCat(t, "/herd-bench"));
  c.push_back("/tmp/herd-bench");
  for (const std::string& d : c) {
    if (MakeDirs(d) && ::access(d.c_str(), W_OK) == 0) return d;
  }
  return c.back();
}

uint64_t FreeBytes(const std::string& dir) {
  struct statvfs v;
  if (::statvfs(dir.c_str(), &v) != 0) return 0;
  return static_cast<uint64_t>(v.f_bavail) * v.f_frsize;
}

constexpr char kStampKey[] = "herd.bench.recipe";

// The model file in `dir`, written unless one with the same recipe stamp is there.
// Returns "" with the reason in *skip when it is not there and there is no room for it.
absl::StatusOr<std::string> PrepareModel(const Shape& s, GgmlType t, const std::string& dir, std::string* skip) {
  const std::string type = absl::AsciiStrToLower(GgmlTypeName(t));
  const std::string path = absl::StrCat(dir, "/", s.name, "-", type, ".gguf");
  // What the bytes depend on: bench_models' threaded recipe (v1), the shape, the type.
  const std::string stamp = absl::StrCat("gpu_bench v1 threaded ", s.name, " ", GgmlTypeName(t));
  if (auto f = gguf::GgufFile::Open(path); f.ok()) {
    auto got = (*f)->GetString(kStampKey);
    if (got.ok() && *got == stamp) {
      std::fprintf(stderr, "gpu_bench: reusing %s\n", path.c_str());
      return path;
    }
  }
  // The data, plus room for the header and a margin so the disk is not filled to the brim.
  const uint64_t need = ModelDataBytes(s, t) + (uint64_t{256} << 20);
  const uint64_t have = FreeBytes(dir);
  if (have < need) {
    *skip = absl::StrFormat("skipped: writing it needs %.1f GiB, %s has %.1f GiB free", need / kGiB, dir, have / kGiB);
    return std::string();
  }
  WriteOptions o;
  o.extra_key = kStampKey;
  o.extra_value = stamp;
  o.threads = absl::GetFlag(FLAGS_write_threads);
  if (o.threads <= 0) o.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::fprintf(stderr, "gpu_bench: writing %s (%.2f GiB of random weights, %d threads; reused next time)\n",
               path.c_str(), ModelDataBytes(s, t) / kGiB, o.threads);
  const auto t0 = Clock::now();
  HERD_RETURN_IF_ERROR(WriteModel(s, t, path, o));
  std::fprintf(stderr, "gpu_bench: wrote %s in %.1f s\n", path.c_str(), Seconds(t0));
  return path;
}

// Bytes read + written per second by the backend's CopyTensor between two `bytes`-byte
// buffers of its default memory, best of 10 after one warm-up copy; 0 with *why when it
// cannot be measured (allocation or copy failure).
double CopyBandwidth(Backend& b, size_t bytes, std::string* why) {
  BufferType* bt = b.default_buffer_type();
  auto b1 = bt->Allocate(bytes);
  auto b2 = b1.ok() ? bt->Allocate(bytes) : b1.status();
  if (!b2.ok()) {
    *why = b2.status().ToString();
    return 0;
  }
  (*b1)->Clear(1);
  (*b2)->Clear(2);
  Graph g;
  Tensor* src = g.NewTensor(GgmlType::F32, {static_cast<int64_t>(bytes / 4)}, "bw_src");
  Tensor* dst = g.NewTensor(GgmlType::F32, {static_cast<int64_t>(bytes / 4)}, "bw_dst");
  absl::Status st = PlaceTensor(src, b1->get(), 0);
  if (st.ok()) st = PlaceTensor(dst, b2->get(), 0);
  double best = 0;
  for (int i = 0; i < 11 && st.ok(); ++i) {
    const auto t0 = Clock::now();
    st = b.CopyTensor(i % 2 == 0 ? src : dst, i % 2 == 0 ? dst : src);
    if (st.ok()) st = b.Synchronize();
    const double s = Seconds(t0);
    if (i > 0 && s > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / s / 1e9);
  }
  if (!st.ok()) {
    *why = st.ToString();
    return 0;
  }
  return best;
}

struct Refs {
  double copy_gbps = 0;  // measured; 0 = not measured
  double peak_gbps = 0;  // --peak_gbps; 0 = none
};

struct Row {
  std::string model, type;
  double gib = 0;
};

void Print(const Row& r, const std::string& test, double tps, double bytes_per_second, const Refs& refs) {
  std::string gbs = "-", copy = "-", peak = "-";
  if (bytes_per_second > 0) {
    const double g = bytes_per_second / 1e9;
    gbs = absl::StrFormat("%.*f", g < 10 ? 2 : g < 100 ? 1 : 0, g);
    if (refs.copy_gbps > 0) copy = absl::StrFormat("%.1f%%", 100 * bytes_per_second / 1e9 / refs.copy_gbps);
    if (refs.peak_gbps > 0) peak = absl::StrFormat("%.1f%%", 100 * bytes_per_second / 1e9 / refs.peak_gbps);
  }
  std::printf("| %s | %s | %.2f | %s | %s | %s | %s | %s |\n", r.model.c_str(), r.type.c_str(), r.gib, test.c_str(),
              tps > 0 ? absl::StrFormat("%.1f", tps).c_str() : "-", gbs.c_str(), copy.c_str(), peak.c_str());
  std::fflush(stdout);
}

void PrintSkip(const Row& r, const std::string& what) {
  std::printf("| %s | %s | %.2f | %s | - | - | - | - |\n", r.model.c_str(), r.type.c_str(), r.gib, what.c_str());
  std::fflush(stdout);
}

// Runs `once` (returning seconds, or an error) warm-up + --reps times, within the budget.
// Sets *n_done to the timed runs done; the median of their seconds, or 0 when none ran.
absl::StatusOr<double> Repeat(const Budget& budget, const std::function<absl::StatusOr<double>()>& once, int* n_done) {
  std::vector<double> v;
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  const int runs = reps + (absl::GetFlag(FLAGS_warmup) ? 1 : 0);
  for (int r = 0; r < runs; ++r) {
    if (budget.Spent()) break;
    HERD_ASSIGN_OR_RETURN(double s, once());
    if (r >= runs - reps) v.push_back(s);
  }
  *n_done = static_cast<int>(v.size());
  return v.empty() ? 0.0 : Median(v);
}

std::string Partial(int done) {
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  return done < reps ? absl::StrCat(" (", done, " of ", reps, " runs: --max_seconds)") : "";
}

// Every test on one model; false (with the cause on stderr) on a real error.
bool RunModel(const Shape& shape, GgmlType wt, const std::string& path, Backend& backend, const Refs& refs,
              const std::vector<int>& bd, const Budget& budget) {
  Row row{shape.name, GgmlTypeName(wt), 0};
  auto m = model::Model::Load(path);
  if (!m.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", m.status().ToString().c_str());
    return false;
  }
  row.gib = (*m)->weight_bytes() / kGiB;
  const int pp = std::max(0, absl::GetFlag(FLAGS_pp)), tg = std::max(0, absl::GetFlag(FLAGS_tg));
  const int steps = std::max(1, absl::GetFlag(FLAGS_bd_steps));
  int max_b = 0;
  for (int b : bd) max_b = std::max(max_b, b);
  engine::EngineParams ep;
  ep.n_ctx = std::max<int64_t>({pp, tg, int64_t{max_b} * (steps + 1), 16});
  ep.n_ctx = (ep.n_ctx + 255) / 256 * 256;
  ep.n_batch = std::max({512, pp, max_b});
  // Device memory: weights + KV (activations come on top; the device reports the rest).
  const DeviceInfo dev = backend.device();
  const auto& hp = (*m)->hparams();
  const double kv_need = 2.0 * 2 * static_cast<double>(hp.n_layer) * hp.n_embd_k_gqa() * static_cast<double>(ep.n_ctx);
  if (!dev.host_visible && dev.memory_total > 0 &&
      (*m)->weight_bytes() + kv_need > static_cast<double>(dev.memory_total)) {
    PrintSkip(row, absl::StrFormat("skipped: weights + KV cache need %.1f GiB, the device has %.1f GiB",
                                   ((*m)->weight_bytes() + kv_need) / kGiB, dev.memory_total / kGiB));
    return true;
  }
  auto t0 = Clock::now();
  if (absl::Status ps = (*m)->PlaceWeights(&backend); !ps.ok()) {
    if (ps.code() == absl::StatusCode::kResourceExhausted) {
      PrintSkip(row, absl::StrCat("skipped: ", ps.message()));
      return true;
    }
    std::fprintf(stderr, "gpu_bench: %s: %s\n", path.c_str(), ps.ToString().c_str());
    return false;
  }
  std::fprintf(stderr, "gpu_bench: %s %s: weights placed in %.1f s\n", row.model.c_str(), row.type.c_str(),
               Seconds(t0));
  auto e = engine::Engine::Create(**m, ep, &backend);
  if (!e.ok()) {
    if (e.status().code() == absl::StatusCode::kResourceExhausted) {
      PrintSkip(row, absl::StrCat("skipped: ", e.status().message()));
      return true;
    }
    std::fprintf(stderr, "gpu_bench: %s\n", e.status().ToString().c_str());
    return false;
  }
  engine::Engine& eng = **e;
  // Bytes a decoded token reads: the weights (of token_embd one row when the output matrix
  // is separate) and the K/V of each cell it attends to.
  double weight_read = static_cast<double>((*m)->weight_bytes());
  const gguf::TensorInfo* embd = (*m)->file().FindTensor("token_embd.weight");
  if (embd != nullptr && (*m)->file().FindTensor("output.weight") != nullptr) {
    weight_read -= static_cast<double>(embd->nbytes) - static_cast<double>(GgmlRowSize(embd->type, embd->ne[0]));
  }
  const double kv_cell = static_cast<double>(eng.kv().bytes()) / static_cast<double>(eng.kv().n_cells());
  const int32_t n_vocab = static_cast<int32_t>(hp.n_vocab);
  std::mt19937 rng(7);
  auto token = [&] { return static_cast<int32_t>(rng() % static_cast<uint32_t>(n_vocab)); };
  auto fail = [&](const absl::Status& st) {
    std::fprintf(stderr, "gpu_bench: %s %s: %s\n", row.model.c_str(), row.type.c_str(), st.ToString().c_str());
    return false;
  };
  int done = 0;
  if (pp > 0) {
    if (budget.Spent()) {
      PrintSkip(row, absl::StrCat("pp", pp, " skipped: --max_seconds"));
    } else {
      auto s = Repeat(
          budget,
          [&]() -> absl::StatusOr<double> {
            eng.kv().Clear();
            engine::Batch b;
            for (int i = 0; i < pp; ++i) b.Add(token(), i, 0, i == pp - 1);
            const auto t = Clock::now();
            HERD_RETURN_IF_ERROR(eng.Decode(b));
            return Seconds(t);
          },
          &done);
      if (!s.ok()) return fail(s.status());
      if (done > 0) Print(row, absl::StrCat("pp", pp, Partial(done)), pp / *s, 0, refs);
      if (done == 0) PrintSkip(row, absl::StrCat("pp", pp, " skipped: --max_seconds"));
    }
  }
  if (tg > 0) {
    if (budget.Spent()) {
      PrintSkip(row, absl::StrCat("tg", tg, " skipped: --max_seconds"));
    } else {
      auto s = Repeat(
          budget,
          [&]() -> absl::StatusOr<double> {
            eng.kv().Clear();
            engine::Batch b;
            const auto t = Clock::now();
            for (int i = 0; i < tg; ++i) {
              b.Clear();
              b.Add(token(), i, 0, true);
              HERD_RETURN_IF_ERROR(eng.Decode(b));
            }
            return Seconds(t);
          },
          &done);
      if (!s.ok()) return fail(s.status());
      if (done == 0) PrintSkip(row, absl::StrCat("tg", tg, " skipped: --max_seconds"));
      if (done > 0) {
        const double tps = tg / *s;
        Print(row, absl::StrCat("tg", tg, Partial(done)), tps, (weight_read + kv_cell * (tg + 1) / 2.0) * tps, refs);
      }
    }
  }
  for (int B : bd) {
    const std::string name = absl::StrCat("bd B=", B, " tg", steps);
    if (budget.Spent()) {
      PrintSkip(row, name + " skipped: --max_seconds");
      continue;
    }
    auto s = Repeat(
        budget,
        [&]() -> absl::StatusOr<double> {
          eng.kv().Clear();
          engine::Batch b;
          for (int q = 0; q < B; ++q) b.Add(token(), 0, q, true);
          HERD_RETURN_IF_ERROR(eng.Decode(b));
          const auto t = Clock::now();
          for (int i = 1; i <= steps; ++i) {
            b.Clear();
            for (int q = 0; q < B; ++q) b.Add(token(), i, q, true);
            HERD_RETURN_IF_ERROR(eng.Decode(b));
          }
          return Seconds(t);
        },
        &done);
    if (!s.ok()) return fail(s.status());
    if (done == 0) {
      PrintSkip(row, name + " skipped: --max_seconds");
      continue;
    }
    // Step i attends to i + 1 cells per sequence: (steps + 3) / 2 on average over 1..steps.
    const double step_bytes = weight_read + B * kv_cell * (steps + 3) / 2.0;
    Print(row, name + Partial(done), B * steps / *s, step_bytes * steps / *s, refs);
  }
  return true;
}

int Usage(const std::string& msg) {
  std::fprintf(stderr, "gpu_bench: %s\n", msg.c_str());
  return 2;
}

int Main() {
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  const BackendKind* kind = nullptr;
  std::string kinds;
  for (const BackendKind& k : BackendKinds()) {
    absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", k.name);
    if (k.name == backend_name) kind = &k;
  }
  if (kind == nullptr) return Usage(absl::StrCat("--backend ", backend_name, ": not in this build (", kinds, ")"));
  const std::vector<DeviceInfo> devs = kind->devices();
  if (devs.empty()) {
    const std::string why = kind->why_none ? kind->why_none() : "";
    std::printf("gpu_bench: no %s device: skipped%s\n", backend_name.c_str(),
                why.empty() ? "" : absl::StrCat(" (", why, ")").c_str());
    return 0;
  }
  const int device = absl::GetFlag(FLAGS_device);
  if (device < 0 || device >= static_cast<int>(devs.size())) {
    return Usage(absl::StrCat("--device ", device, ": ", backend_name, " has ", devs.size(), " device(s) here (",
                              DescribeDevices(), ")"));
  }
  // Parse everything before any work.
  std::vector<std::pair<const Shape*, GgmlType>> runs;
  std::vector<const Shape*> shapes;
  for (absl::string_view n : absl::StrSplit(absl::GetFlag(FLAGS_models), ',', absl::SkipEmpty())) {
    const Shape* s = FindShape(std::string(absl::StripAsciiWhitespace(n)));
    if (s == nullptr) return Usage(absl::StrCat("--models: unknown model ", n, " (", ShapeNames(), ")"));
    shapes.push_back(s);
  }
  std::vector<GgmlType> types;
  for (absl::string_view n : absl::StrSplit(absl::GetFlag(FLAGS_types), ',', absl::SkipEmpty())) {
    GgmlType t;
    if (!ParseGgmlType(absl::AsciiStrToLower(absl::StripAsciiWhitespace(n)), &t)) {
      return Usage(absl::StrCat("--types: unknown type ", n));
    }
    types.push_back(t);
  }
  for (const Shape* s : shapes) {
    for (GgmlType t : types) runs.push_back({s, t});
  }
  std::vector<int> bd;
  for (absl::string_view n : absl::StrSplit(absl::GetFlag(FLAGS_bd), ',', absl::SkipEmpty())) {
    int b;
    if (!absl::SimpleAtoi(n, &b) || b < 1) return Usage(absl::StrCat("--bd: bad sequence count ", n));
    bd.push_back(b);
  }
  if (runs.empty()) return Usage("nothing to run: --models or --types is empty");

  BackendOptions bo;
  bo.n_threads = std::max(1, absl::GetFlag(FLAGS_threads));
  bo.device = device;
  auto made = CreateBackend(backend_name, bo);
  if (!made.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", made.status().ToString().c_str());
    return 1;
  }
  Backend& backend = **made;
  const DeviceInfo dev = backend.device();
  std::printf("gpu_bench: %s device %d: %s (%s)%s\n", backend_name.c_str(), device, dev.name.c_str(),
              dev.description.c_str(),
              dev.memory_total > 0 ? absl::StrFormat(", %.1f GiB", dev.memory_total / kGiB).c_str() : "");
  if (backend_name == "cuda") {
    const Scheduler* sched = dynamic_cast<const Scheduler*>(&backend);
    const bool blas = sched != nullptr && CudaBackendUsesCublas(sched->backend(0));
    std::printf("batched products (more than %d columns): %s\n", kCudaMatVecMaxCols,
                blas ? "cuBLAS" : "the backend's tiled kernel (no libcublas.so.13)");
  }
  Refs refs;
  refs.peak_gbps = std::max(0.0, absl::GetFlag(FLAGS_peak_gbps));
  if (absl::GetFlag(FLAGS_measure_bw)) {
    size_t bytes = static_cast<size_t>(std::max(1, absl::GetFlag(FLAGS_bw_mib))) << 20;
    if (dev.memory_total > 0) bytes = std::min<size_t>(bytes, dev.memory_total / 8 / 4096 * 4096);
    std::string why;
    refs.copy_gbps = CopyBandwidth(backend, bytes, &why);
    if (refs.copy_gbps > 0) {
      std::printf(
          "copy BW: %.0f GB/s (Backend::CopyTensor of %zu MiB in the device's memory: bytes read + "
          "written per second, best of 10)\n",
          refs.copy_gbps, bytes >> 20);
    } else {
      std::printf("copy BW: not measured (%s)\n", why.c_str());
    }
  }
  if (refs.peak_gbps > 0) {
    std::printf(
        "peak: %.0f GB/s (--peak_gbps; the default 4500 is the H200's measured streaming-read "
        "bandwidth, 4.50 TB/s, issue #16)\n",
        refs.peak_gbps);
  }
  std::printf("decode GB/s = (bytes of weights read per step + K/V bytes of the cells attended) x steps/s\n\n");
  std::printf(
      "| model | type | GiB | test | t/s | GB/s | %% of copy BW | %% of peak |\n"
      "|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);

  Budget budget;
  budget.limit = absl::GetFlag(FLAGS_max_seconds);
  const std::string dir = CacheDir();
  if (!MakeDirs(dir)) {
    std::fprintf(stderr, "gpu_bench: cannot create %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  for (const auto& [shape, type] : runs) {
    Row row{shape->name, GgmlTypeName(type), ModelDataBytes(*shape, type) / kGiB};
    if (budget.Spent()) {
      PrintSkip(row, "skipped: --max_seconds");
      continue;
    }
    std::string skip;
    absl::StatusOr<std::string> path = PrepareModel(*shape, type, dir, &skip);
    if (!path.ok()) {
      std::fprintf(stderr, "gpu_bench: %s\n", path.status().ToString().c_str());
      return 1;
    }
    if (path->empty()) {
      std::fprintf(stderr, "gpu_bench: %s %s: %s\n", row.model.c_str(), row.type.c_str(), skip.c_str());
      PrintSkip(row, skip);
      continue;
    }
    if (!RunModel(*shape, type, *path, backend, refs, bd, budget)) return 1;
  }
  std::printf("\ngpu_bench: done in %.0f s\n", Seconds(budget.start));
  return 0;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "gpu_bench [--backend cuda] [--device 0] [--models tinyllama-1.1b,7b] [--types q4_0,f16] [--reps 3] ...: "
      "pp512 / tg128 / batched-decode throughput of random-weight models on a device, decode as a fraction of "
      "its bandwidth");
  absl::ParseCommandLine(argc, argv);
  return herd::bench::Main();
}
