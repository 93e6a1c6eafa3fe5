// llama-bench-style throughput of the CPU engine: pp128 (one 128-token prompt batch)
// and tg64 (64 single-token decodes), on random-weight LLaMA models of the shapes
// llama.cpp was measured on (../shared/reference/perf), printed next to the peer's
// figures and their ratio.
//   bazel run --config=bench //bench:llama_bench -- [--model llama-110m|tinyllama-1.1b]
//       [--types f16,q8_0,q4_0] [--threads 1,2] [--reps 3] [--tests pp,tg[,pp512,bd]] [--backend cpu|vulkan|cuda]
//       [--pin 1|0] [--ggml_order 0|1]
// --pin 1 (default) binds each CPU thread to its own core (BackendOptions::pin_threads), as
// llama-bench runs under OMP_PROC_BIND=TRUE OMP_PLACES=cores (how the peer is measured).
// --ggml_order 1: BackendOptions::ggml_order (Q8_0 / Q5_0 in ggml's summation order), to
// measure what exactness with llama.cpp costs.
//   //bench:llama_bench_hip is the same with --backend hip (AMD GPUs, ROCm's runtime linked).
// pp512 = one 512-token prompt; bd = batched decode at B = 1..32 sequences (see ExtraTests).
// Like llama-quantize, a Q4_0 model keeps its output tensor (token_embd when tied) in Q6_K.
// With ../shared's Llama-2 vocabulary present the models are written once into
// [--cache_dir, default ~/.cache/herd-bench]/models/<model>-<type>.gguf (path printed on
// stderr), the files serve_bench uses and llama.cpp's llama-bench loads.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "bench/bench_models.h"
#include "libs/backend/registry.h"
#include "libs/base/cpu_features.h"
#include "libs/base/fp16.h"
#include "libs/base/status_macros.h"
#include "libs/engine/engine.h"
#include "libs/gguf/ggml_type.h"
#include "libs/model/model.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

// Peer figures: "| llama-110m F16 | pp t1 | tg t1 | pp t2 | tg t2 |". The reference
// machines differ: README.md was measured with AVX-512, llamacpp-avx2.md on an
// AVX2-only one; compare against the table of this CPU's kind.
std::string PeerTable() {
  // SharedDir: $HERD_SHARED, else ../shared found from here or from the workspace
  // (`bazel run` starts in the runfiles tree).
  const std::string shared = SharedDir();
  return (shared.empty() ? std::string("../shared") : shared) + "/reference/perf/" +
         (GetCpuFeatures().avx512f ? "README.md" : "llamacpp-avx2.md");
}

std::map<std::string, std::vector<double>> PeerFigures() {
  std::map<std::string, std::vector<double>> out;
  const std::string path = PeerTable();
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < 7) continue;
    std::vector<double> v;
    for (size_t i = 2; i < 6; ++i) {
      double d;
      std::string c(absl::StripAsciiWhitespace(cells[i]));
      if (absl::SimpleAtod(c, &d)) v.push_back(d);
    }
    if (v.size() == 4) out[std::string(absl::StripAsciiWhitespace(cells[1]))] = v;
  }
  return out;
}

double Median(std::vector<double> v);

// pp512 (one 512-token prompt) and batched decode: B = 1, 2, 4, 8, 16, 32 sequences, each a
// 1-token prompt then 64 steps of one token per sequence in one batch per step; prints
// total generated tokens/s (llama-batched-bench's S_TG). No peer figures for these in
// ../shared/reference/perf: the llama.cpp column reads 0 (build llama.cpp for a same-run
// ratio: llama-bench -p 512, llama-batched-bench -npp 1 -ntg 64 -npl 1,2,4,8,16,32).
bool ExtraTests(engine::Engine& e, const std::string& model, const std::string& type, int nt, int reps, bool pp512,
                bool bd) {
  std::mt19937 rng(11);
  if (pp512) {
    std::vector<double> v;
    for (int r = 0; r < reps + 1; ++r) {
      e.kv().Clear();
      engine::Batch b;
      for (int i = 0; i < 512; ++i) b.Add(static_cast<int32_t>(rng() % 32000), i, 0, i == 511);
      const auto t0 = std::chrono::steady_clock::now();
      if (!e.Decode(b).ok()) return false;
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) v.push_back(512 / s);
    }
    std::printf("| %s | %s | %d | pp512 | %.1f | 0 | - |\n", model.c_str(), type.c_str(), nt, Median(v));
  }
  for (int B : {1, 2, 4, 8, 16, 32}) {
    if (!bd) break;
    std::vector<double> v;
    for (int r = 0; r < reps + 1; ++r) {
      e.kv().Clear();
      engine::Batch b;
      for (int q = 0; q < B; ++q) b.Add(static_cast<int32_t>(rng() % 32000), 0, q, true);
      if (!e.Decode(b).ok()) return false;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 1; i <= 64; ++i) {
        b.Clear();
        for (int q = 0; q < B; ++q) b.Add(static_cast<int32_t>(rng() % 32000), i, q, true);
        if (!e.Decode(b).ok()) return false;
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) v.push_back(B * 64 / s);
    }
    std::printf("| %s | %s | %d | tg64 B=%d | %.1f | 0 | - |\n", model.c_str(), type.c_str(), nt, B, Median(v));
    std::fflush(stdout);
  }
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The command line of llama_bench (see `usage`).
struct BenchArgs {
  std::string model = "llama-110m", types = "f16,q8_0,q4_0", threads = "1,2", backend_name = "cpu";
  std::string tests = "pp,tg";
  int reps = 3;
  bool pin = true;
  bool ggml_order = false;
  std::string cache_dir;
};

// Parses --flag value / --flag=value into `*args`; anything else is an error (a typo must
// not run the defaults). Returns -1 to go on, else the exit status (0 after --help, 2 on
// a bad flag, with the usage printed).
int ParseArgs(int argc, char** argv, BenchArgs* args) {
  const char* usage =
      "usage: llama_bench [--model llama-110m|tinyllama-1.1b] [--types f16,q8_0,q4_0] [--threads 1,2]\n"
      "         [--reps 3] [--tests pp,tg[,pp512,bd]] [--backend cpu|vulkan|cuda] [--pin 1|0] [--ggml_order 0|1] "
      "[--cache_dir DIR]\n"
      "  (--flag value or --flag=value)\n";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], v;
    if (a == "--help" || a == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (const size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      std::fprintf(stderr, "%s needs a value\n%s", a.c_str(), usage);
      return 2;
    }
    if (a == "--model") {
      args->model = v;
    } else if (a == "--types") {
      args->types = v;
    } else if (a == "--threads") {
      args->threads = v;
    } else if (a == "--backend") {
      args->backend_name = v;
    } else if (a == "--reps") {
      args->reps = std::atoi(v.c_str());
    } else if (a == "--tests") {
      args->tests = v;
    } else if (a == "--cache_dir") {
      args->cache_dir = v;
    } else if (a == "--pin") {
      args->pin = std::atoi(v.c_str()) != 0;
    } else if (a == "--ggml_order") {
      args->ggml_order = std::atoi(v.c_str()) != 0;
    } else {
      std::fprintf(stderr, "unknown flag %s\n%s", a.c_str(), usage);
      return 2;
    }
  }
  return -1;
}

// The benchmark model file of `shape` in type `wt`. With ../shared's Llama-2 vocabulary
// the file is cached (shared with serve_bench) and llama.cpp's llama-bench loads the same
// file for a same-run comparison; without it, a temporary /tmp/herd-bench-* file (the
// caller removes it). Errors: those of CachedModel / WriteModel.
absl::StatusOr<std::string> BenchModelPath(const bench::Shape& shape, GgmlType wt, const std::string& model,
                                           const std::string& tname, const std::string& cache_dir) {
  const std::string shared = SharedDir();
  const std::string vocab =
      (shared.empty() ? std::string("../shared") : shared) + "/models/vocab/ggml-vocab-llama-spm.gguf";
  if (std::ifstream(vocab).good()) {
    bool reused = false;
    absl::StatusOr<std::string> p =
        bench::CachedModel(shape, wt, cache_dir.empty() ? bench::DefaultCacheDir() : cache_dir, vocab, &reused);
    if (!p.ok()) return absl::Status(p.status().code(), p.status().ToString());
    return p;
  }
  std::string path = absl::StrCat("/tmp/herd-bench-", model, "-", tname, ".gguf");
  HERD_RETURN_IF_ERROR(bench::WriteModel(shape, wt, path));
  return path;
}

// pp128 (one 128-token prompt) and tg64 (64 single-token decodes) throughputs in t/s,
// `reps` measured runs after one warm-up, appended to `*pp` / `*tg` when asked for.
// False when a Decode fails.
bool RunPpTg(engine::Engine& e, int reps, bool run_pp, bool run_tg, std::vector<double>* pp, std::vector<double>* tg) {
  std::mt19937 rng(7);
  for (int r = 0; r < reps + 1; ++r) {
    e.kv().Clear();
    engine::Batch b;
    for (int i = 0; i < 128; ++i) b.Add(static_cast<int32_t>(rng() % 32000), i, 0, i == 127);
    auto t0 = std::chrono::steady_clock::now();
    double s = 0;
    if (run_pp) {
      if (!e.Decode(b).ok()) return false;
      s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) pp->push_back(128 / s);
      e.kv().Clear();
    }
    if (!run_tg) continue;
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 64; ++i) {
      b.Clear();
      b.Add(static_cast<int32_t>(rng() % 32000), i, 0, true);
      if (!e.Decode(b).ok()) return false;
    }
    s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) tg->push_back(64 / s);
  }
  return true;
}

}  // namespace
}  // namespace herd

int main(int argc, char** argv) {
  using namespace herd;
  BenchArgs args;
  if (const int rc = ParseArgs(argc, argv, &args); rc >= 0) return rc;
  const std::string &model = args.model, &types = args.types, &threads = args.threads;
  const std::string &backend_name = args.backend_name, &tests = args.tests, &cache_dir = args.cache_dir;
  const int reps = args.reps;
  const bool pin = args.pin, ggml_order = args.ggml_order;
  const bench::Shape* shape = bench::FindShape(model);
  if (shape == nullptr) {
    std::fprintf(stderr, "unknown --model %s (%s)\n", model.c_str(), bench::ShapeNames().c_str());
    return 2;
  }
  const std::vector<std::string> test_list = absl::StrSplit(tests, ',');
  auto wants = [&](const char* t) { return std::find(test_list.begin(), test_list.end(), t) != test_list.end(); };
  const bool run_pp = wants("pp");
  const bool run_tg = wants("tg");
  const bool run_pp512 = wants("pp512");
  const bool run_bd = wants("bd");  // batched decode, llama-batched-bench style
  auto peer = PeerFigures();
  std::printf("threads pinned to cores: %s\n", pin ? "yes (--pin 1)" : "no (--pin 0)");
  std::printf("llama.cpp figures: %s%s\n\n", PeerTable().c_str(),
              peer.empty() ? " (not found: set HERD_SHARED; the llama.cpp column reads 0)" : "");
  std::printf("| model | type | threads | test | herd t/s | llama.cpp t/s | ratio |\n|---|---|---|---|---|---|---|\n");
  for (absl::string_view tname : absl::StrSplit(types, ',')) {
    GgmlType wt;
    if (!ParseGgmlType(std::string(tname), &wt)) {
      std::fprintf(stderr, "unknown type %s\n", std::string(tname).c_str());
      return 2;
    }
    auto model_path = BenchModelPath(*shape, wt, model, std::string(tname), cache_dir);
    if (!model_path.ok()) {
      std::fprintf(stderr, "%s\n", std::string(model_path.status().message()).c_str());
      return 1;
    }
    const std::string path = *model_path;
    std::fprintf(stderr, "llama_bench: %s\n", path.c_str());
    auto m = model::Model::Load(path);
    if (!m.ok()) {
      std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str());
      return 1;
    }
    std::string upper = GgmlTypeName(wt);
    for (absl::string_view th : absl::StrSplit(threads, ',')) {
      int nt = std::atoi(std::string(th).c_str());
      BackendOptions bo;
      bo.n_threads = nt;
      bo.pin_threads = pin;
      bo.ggml_order = ggml_order;
      auto made = CreateBackend(backend_name, bo);
      if (!made.ok()) {
        std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
        return 1;
      }
      Backend& backend = **made;
      if (absl::Status ps = (*m)->PlaceWeights(&backend); !ps.ok()) {
        std::fprintf(stderr, "%s\n", ps.ToString().c_str());
        return 1;
      }
      engine::EngineParams ep;
      ep.n_ctx = (run_pp512 || run_bd) ? 4096 : 256;
      auto e = engine::Engine::Create(**m, ep, &backend);
      if (!e.ok()) return 1;
      if (run_pp512 || run_bd) {
        if (!ExtraTests(**e, model, upper, nt, reps, run_pp512, run_bd)) return 1;
        if (!run_pp && !run_tg) continue;
      }
      std::vector<double> pp, tg;
      if (!RunPpTg(**e, reps, run_pp, run_tg, &pp, &tg)) return 1;
      auto it = peer.find(model + " " + upper);
      for (int test = 0; test < 2; ++test) {
        if ((test == 0 ? pp : tg).empty()) continue;
        const double ours = Median(test == 0 ? pp : tg);
        double theirs = 0;
        if (it != peer.end()) theirs = it->second[static_cast<size_t>((nt == 2 ? 2 : 0) + test)];
        std::printf("| %s | %s | %d | %s | %.1f | %.1f | %.2f |\n", model.c_str(), upper.c_str(), nt,
                    test == 0 ? "pp128" : "tg64", ours, theirs, theirs > 0 ? ours / theirs : 0.0);
        std::fflush(stdout);
      }
    }
    if (absl::StartsWith(path, "/tmp/herd-bench-")) std::remove(path.c_str());  // uncached (no vocabulary)
  }
  return 0;
}
