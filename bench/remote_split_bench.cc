// What splitting a model across two processes costs: greedy decode (tg) and prompt
// processing (pp) on (a) one CPU backend in this process and (b) the layer split
// `--backend cpu,remote://ADDR --tensor_split 1,1` (CreateSplitBackend, as the worker
// builds it) whose second half runs in a real herd-compute process (services/compute,
// started here on loopback with --threads, no cluster key), each side computing on
// --threads CPU threads. Prints tok/s of both, the ratio split / one process, and what
// crosses the wire (RemoteStats): round trips and bytes sent + received per pp pass and
// per decoded token; tg after prompts of several lengths shows what grows with the
// context: the KV work on both sides, and on the wire only the attention mask's row (4
// bytes per attended cell), still one round trip per token.
//   bazel build //bench:remote_split_bench && bazel-bin/bench/remote_split_bench
//       [--model llama-110m|tinyllama-1.1b|PATH.gguf] [--type f16|q8_0|q4_0] [--threads 1]
//       [--pp 128] [--tg 64] [--contexts 16,128,512] [--reps 2] [--compute PATH] [--cache_dir DIR]
// The random-weight models are those of llama_bench (cached with ../shared's vocabulary).
// Both processes share this machine's cores: on a small machine the compute server and
// the client compete for them.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpcpp/grpcpp.h"

#include "bench/bench_models.h"
#include "libs/backend/registry.h"
#include "libs/backend/remote/remote_backend.h"
#include "libs/base/status_macros.h"
#include "libs/engine/engine.h"
#include "libs/gguf/ggml_type.h"
#include "libs/model/model.h"
#include "tests/child_process.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

struct Args {
  std::string model = "llama-110m", type = "f16", contexts = "16,128,512", compute, cache_dir;
  int threads = 1, pp = 128, tg = 64, reps = 2;
};

int ParseArgs(int argc, char** argv, Args* a) {
  const char* usage =
      "usage: remote_split_bench [--model llama-110m|tinyllama-1.1b|PATH.gguf] [--type f16|q8_0|q4_0]\n"
      "         [--threads 1] [--pp 128] [--tg 64] [--contexts 16,128,512] [--reps 2] [--compute PATH]\n"
      "         [--cache_dir DIR]   (--flag value or --flag=value)\n";
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i], v;
    if (f == "--help" || f == "-h") {
      std::printf("%s", usage);
      return 0;
    }
    if (const size_t eq = f.find('='); f.rfind("--", 0) == 0 && eq != std::string::npos) {
      v = f.substr(eq + 1);
      f = f.substr(0, eq);
    } else if (i + 1 < argc) {
      v = argv[++i];
    } else {
      std::fprintf(stderr, "%s needs a value\n%s", f.c_str(), usage);
      return 2;
    }
    int n = 0;
    const bool is_int = absl::SimpleAtoi(v, &n);
    if (f == "--model") {
      a->model = v;
    } else if (f == "--type") {
      a->type = v;
    } else if (f == "--contexts") {
      a->contexts = v;
    } else if (f == "--compute") {
      a->compute = v;
    } else if (f == "--cache_dir") {
      a->cache_dir = v;
    } else if (is_int && n > 0 && f == "--threads") {
      a->threads = n;
    } else if (is_int && n > 0 && f == "--pp") {
      a->pp = n;
    } else if (is_int && n > 0 && f == "--tg") {
      a->tg = n;
    } else if (is_int && n > 0 && f == "--reps") {
      a->reps = n;
    } else {
      std::fprintf(stderr, "bad flag %s=%s\n%s", f.c_str(), v.c_str(), usage);
      return 2;
    }
  }
  return -1;
}

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = 0;
  return buf;
}

// services/compute/compute: --compute, else this binary's runfiles (data dependency), the
// bazel-bin tree next to it, or the runfiles directory `bazel run` starts in.
absl::StatusOr<std::string> FindCompute(const std::string& flag) {
  std::vector<std::string> candidates;
  if (!flag.empty()) candidates.push_back(flag);
  const std::string rel = "services/compute/compute";
  const std::string self = SelfExe();
  if (!self.empty()) {
    candidates.push_back(self + ".runfiles/herd/" + rel);
    candidates.push_back(self.substr(0, self.rfind('/')) + "/../" + rel);  // bazel-bin/bench/..
  }
  if (const char* r = std::getenv("RUNFILES_DIR")) candidates.push_back(std::string(r) + "/herd/" + rel);
  candidates.push_back(rel);
  for (const std::string& c : candidates) {
    if (::access(c.c_str(), X_OK) == 0) return c;
  }
  return absl::NotFoundError(absl::StrCat("cannot find ", rel, " (looked in: ", absl::StrJoin(candidates, ", "),
                                          "); `bazel build //bench:remote_split_bench` builds it, or pass --compute"));
}

// Starts herd-compute (`binary`) on a free loopback port without a cluster key and waits
// for "compute listening on HOST:PORT"; returns HOST:PORT.
absl::StatusOr<std::string> StartCompute(ChildProcess* proc, const std::string& binary, int threads) {
  ::unsetenv("HERD_CLUSTER_KEY");  // loopback, no key: the child inherits the environment
  HERD_RETURN_IF_ERROR(proc->Start({binary, "--port=0", "--metrics_port=-1", absl::StrCat("--threads=", threads)}));
  absl::StatusOr<std::string> addr = proc->ReadAfter("compute listening on ");
  if (!addr.ok()) return absl::UnavailableError(absl::StrCat(binary, " exited before announcing its address"));
  return addr;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int32_t Argmax(const engine::Engine& e) {
  const float* l = e.Logits(e.n_outputs() - 1);
  int32_t best = 0;
  for (int32_t t = 1; t < e.n_vocab(); ++t) best = l[t] > l[best] ? t : best;
  return best;
}

// What one measurement gives: median tok/s over the reps, wire cost per unit (pp pass or
// decoded token) of the last rep, and the greedy ids (tg).
struct Figure {
  double tok_s = 0, round_trips = 0, bytes = 0;
  std::vector<int32_t> ids;
};

using StatsFn = std::function<remote::RemoteStats()>;

// A prompt of n tokens (fixed ids, the same for both configurations).
std::vector<int32_t> Prompt(int n, int64_t n_vocab) {
  std::vector<int32_t> p;
  uint32_t x = 12345;
  for (int i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    p.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(n_vocab)));
  }
  return p;
}

absl::Status DecodePrompt(engine::Engine& e, const std::vector<int32_t>& prompt) {
  e.kv().Clear();
  engine::Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
  return e.Decode(b);
}

// pp: one Decode of an n-token prompt.
absl::StatusOr<Figure> RunPp(engine::Engine& e, int n, int reps, const StatsFn& stats) {
  const std::vector<int32_t> prompt = Prompt(n, e.n_vocab());
  HERD_RETURN_IF_ERROR(DecodePrompt(e, prompt));  // warm-up
  Figure f;
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    const remote::RemoteStats s0 = stats ? stats() : remote::RemoteStats{};
    const auto t0 = std::chrono::steady_clock::now();
    HERD_RETURN_IF_ERROR(DecodePrompt(e, prompt));
    v.push_back(n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const remote::RemoteStats s1 = stats ? stats() : remote::RemoteStats{};
    f.round_trips = static_cast<double>(s1.round_trips - s0.round_trips);
    f.bytes = static_cast<double>(s1.bytes_sent + s1.bytes_received - s0.bytes_sent - s0.bytes_received);
  }
  f.tok_s = Median(v);
  return f;
}

// tg: greedy decode of n tokens after a ctx-token prompt (the prompt is not timed).
absl::StatusOr<Figure> RunTg(engine::Engine& e, int ctx, int n, int reps, const StatsFn& stats) {
  const std::vector<int32_t> prompt = Prompt(ctx, e.n_vocab());
  Figure f;
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    HERD_RETURN_IF_ERROR(DecodePrompt(e, prompt));
    std::vector<int32_t> ids = {Argmax(e)};
    const remote::RemoteStats s0 = stats ? stats() : remote::RemoteStats{};
    const auto t0 = std::chrono::steady_clock::now();
    engine::Batch b;
    for (int i = 0; i < n; ++i) {
      b.Clear();
      b.Add(ids.back(), ctx + i, 0, true);
      HERD_RETURN_IF_ERROR(e.Decode(b));
      ids.push_back(Argmax(e));
    }
    v.push_back(n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const remote::RemoteStats s1 = stats ? stats() : remote::RemoteStats{};
    f.round_trips = static_cast<double>(s1.round_trips - s0.round_trips) / n;
    f.bytes = static_cast<double>(s1.bytes_sent + s1.bytes_received - s0.bytes_sent - s0.bytes_received) / n;
    f.ids = std::move(ids);
  }
  f.tok_s = Median(v);
  return f;
}

struct Results {
  Figure pp;
  std::vector<Figure> tg;  // per context
};

absl::StatusOr<Results> RunAll(const model::Model& m, Backend* backend, const Args& a, const std::vector<int>& ctxs,
                               const StatsFn& stats) {
  engine::EngineParams ep;
  int max_ctx = a.pp;
  for (int c : ctxs) max_ctx = std::max(max_ctx, c + a.tg + 1);
  ep.n_ctx = max_ctx;
  ep.n_batch = std::max(a.pp, *std::max_element(ctxs.begin(), ctxs.end()));
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> e, engine::Engine::Create(m, ep, backend));
  Results r;
  HERD_ASSIGN_OR_RETURN(r.pp, RunPp(*e, a.pp, a.reps, stats));
  for (int c : ctxs) {
    HERD_ASSIGN_OR_RETURN(Figure f, RunTg(*e, c, a.tg, a.reps, stats));
    r.tg.push_back(std::move(f));
  }
  return r;
}

absl::StatusOr<std::string> ModelPath(const Args& a, bool* temporary) {
  *temporary = false;
  if (absl::StrContains(a.model, '/') || absl::EndsWith(a.model, ".gguf")) return a.model;
  const bench::Shape* shape = bench::FindShape(a.model);
  if (shape == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown --model ", a.model, " (", bench::ShapeNames(), ")"));
  }
  GgmlType wt;
  if (!ParseGgmlType(a.type, &wt)) return absl::InvalidArgumentError(absl::StrCat("unknown --type ", a.type));
  const std::string shared = SharedDir();
  const std::string vocab =
      (shared.empty() ? std::string("../shared") : shared) + "/models/vocab/ggml-vocab-llama-spm.gguf";
  if (std::ifstream(vocab).good()) {
    bool reused = false;
    return bench::CachedModel(*shape, wt, a.cache_dir.empty() ? bench::DefaultCacheDir() : a.cache_dir, vocab, &reused);
  }
  const std::string path = absl::StrCat("/tmp/herd-bench-", a.model, "-", a.type, ".gguf");
  HERD_RETURN_IF_ERROR(bench::WriteModel(*shape, wt, path));
  *temporary = true;
  return path;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "remote_split_bench: %s\n", s.ToString().c_str());
  return 1;
}

int Main(int argc, char** argv) {
  Args a;
  if (const int rc = ParseArgs(argc, argv, &a); rc >= 0) return rc;
  std::vector<int> ctxs;
  for (absl::string_view c : absl::StrSplit(a.contexts, ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(c, &n) || n < 1) return Fail(absl::InvalidArgumentError("--contexts: positive integers"));
    ctxs.push_back(n);
  }
  if (ctxs.empty()) return Fail(absl::InvalidArgumentError("--contexts is empty"));
  absl::StatusOr<std::string> compute = FindCompute(a.compute);
  if (!compute.ok()) return Fail(compute.status());
  bool temporary = false;
  absl::StatusOr<std::string> path = ModelPath(a, &temporary);
  if (!path.ok()) return Fail(path.status());
  std::fprintf(stderr, "remote_split_bench: model %s, compute server %s\n", path->c_str(), compute->c_str());

  BackendOptions bo;
  bo.n_threads = a.threads;
  // (a) One process: one CPU backend.
  Results one;
  {
    absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(*path);
    if (!m.ok()) return Fail(m.status());
    absl::StatusOr<std::unique_ptr<Backend>> cpu = CreateBackend("cpu", bo);
    if (!cpu.ok()) return Fail(cpu.status());
    if (absl::Status s = (*m)->PlaceWeights(cpu->get()); !s.ok()) return Fail(s);
    absl::StatusOr<Results> r = RunAll(**m, cpu->get(), a, ctxs, nullptr);
    if (!r.ok()) return Fail(r.status());
    one = *std::move(r);
  }
  // (b) The split: this process's CPU, then a herd-compute process.
  ChildProcess proc(SIGTERM);
  absl::StatusOr<std::string> addr = StartCompute(&proc, *compute, a.threads);
  if (!addr.ok()) return Fail(addr.status());
  absl::StatusOr<std::unique_ptr<model::Model>> m = model::Model::Load(*path);
  if (!m.ok()) return Fail(m.status());
  SplitOptions so;
  so.n_layer = (*m)->hparams().n_layer;
  so.tensor_split = {1, 1};
  remote::RemoteBackend* remote = nullptr;
  so.connect_remote = [&](const std::string& address) -> absl::StatusOr<std::unique_ptr<Backend>> {
    grpc::ChannelArguments ca;
    ca.SetMaxReceiveMessageSize(64 << 20);
    ca.SetMaxSendMessageSize(64 << 20);
    remote::RemoteOptions ro;
    ro.address = address;
    ro.channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), ca);
    absl::StatusOr<std::unique_ptr<remote::RemoteBackend>> b = remote::RemoteBackend::Connect(ro);
    if (!b.ok()) return b.status();
    remote = b->get();
    return std::unique_ptr<Backend>(*std::move(b));
  };
  absl::StatusOr<std::unique_ptr<Backend>> split = CreateSplitBackend("cpu,remote://" + *addr, bo, so);
  if (!split.ok()) return Fail(split.status());
  if (absl::Status s = (*m)->PlaceWeights(split->get()); !s.ok()) return Fail(s);
  if (absl::Status s = (*split)->Synchronize(); !s.ok()) return Fail(s);
  const remote::RemoteStats load = remote->stats();
  StatsFn stats = [&] { return remote->stats(); };
  absl::StatusOr<Results> sr = RunAll(**m, split->get(), a, ctxs, stats);
  if (!sr.ok()) return Fail(sr.status());

  const bool named = !(absl::StrContains(a.model, '/') || absl::EndsWith(a.model, ".gguf"));
  std::printf("remote_split_bench: %s (%.0f MiB of weights), %d CPU thread(s) per side, median of %d rep(s)\n",
              named ? absl::StrCat(a.model, " ", a.type, ": ", *path).c_str() : path->c_str(),
              static_cast<double>((*m)->weight_bytes()) / (1 << 20), a.threads, a.reps);
  std::printf(
      "split: cpu,remote://%s (herd-compute process, --threads=%d), --tensor_split 1,1; load: %llu round "
      "trips, %.1f MiB sent\n\n",
      addr->c_str(), a.threads, static_cast<unsigned long long>(load.round_trips),
      static_cast<double>(load.bytes_sent) / (1 << 20));
  std::printf("| test | one process t/s | split t/s | split / one | round trips | bytes sent+received |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| pp%d | %.1f | %.1f | %.2f | %.1f per pass | %.0f per pass |\n", a.pp, one.pp.tok_s, sr->pp.tok_s,
              sr->pp.tok_s / one.pp.tok_s, sr->pp.round_trips, sr->pp.bytes);
  bool same = true;
  for (size_t i = 0; i < ctxs.size(); ++i) {
    const Figure &o = one.tg[i], &s = sr->tg[i];
    same = same && o.ids == s.ids;
    std::printf("| tg%d after %d | %.1f | %.1f | %.2f | %.2f per token | %.0f per token |\n", a.tg, ctxs[i], o.tok_s,
                s.tok_s, s.tok_s / o.tok_s, s.round_trips, s.bytes);
  }
  std::printf("\ngreedy ids of the split %s those of one process\n", same ? "equal" : "DIFFER FROM");
  std::fflush(stdout);
  if (temporary) std::remove(path->c_str());
  return same ? 0 : 1;
}

}  // namespace
}  // namespace herd

int main(int argc, char** argv) { return herd::Main(argc, argv); }
