// Serving throughput and latency of a local herd cluster (`herd up`'s LocalCluster:
// loader, workers, gateway as processes), driven the way llama-server was measured in
// ../shared/reference/perf/llamacpp-avx2.md ("Serving: llama-server vs herd"): C
// concurrent clients stream POST /v1/completions (stream, temperature 0, ignore_eos,
// max_tokens 64, ~24-word prompts that differ per request), 3 x C requests per level.
// Prints aggregate generated tokens/s, TTFT p50/p99 and inter-token latency p50/p99 per
// level next to the llama-server figures, with herd/llama-server ratios.
//
//   bazel build //bench:serve_bench && bazel-bin/bench/serve_bench --concurrency=1,8,16
//
// Cluster mode (--tenants=T): T tenants with their own long prefixes over --workers
// workers, once per --route_policies entry, e.g.
//   bazel-bin/bench/serve_bench --tenants=8 --prefix_words=300 --workers=4 --threads=1 \
//       --concurrency=8 --requests_per_client=6 --route_policies=least_loaded,prefix
//
// The model is a random-weight llama-110m Q4_0 (llama_bench's weights) with the Llama-2
// vocabulary of ../shared/models/vocab/ggml-vocab-llama-spm.gguf, written once into
// --cache_dir and reused. --server=HOST:PORT measures a server that is already running
// (llama-server too: it speaks the same API) instead of starting a cluster.
// Any failed request (connection, HTTP status, an "error" event, a missing [DONE], fewer
// tokens than max_tokens) ends the run with exit status 1 and the cause on stderr.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include "bench/bench_models.h"
#include "bench/http_load.h"
#include "bench/serve_stats.h"
#include "libs/base/status_macros.h"
#include "libs/gguf/gguf.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

ABSL_FLAG(std::string, concurrency, "1,8,16,32", "comma-separated concurrent streaming clients, one level each");
ABSL_FLAG(int, requests_per_client, 3, "requests per level = this x concurrency");
ABSL_FLAG(int, rounds, 1,
          "measure every level this many times, the order of the levels reversed every other round; the table "
          "gives each level's median round figures (this machine's speed drifts between minutes)");
ABSL_FLAG(int, max_tokens, 64, "max_tokens of each request (ignore_eos: each generates exactly this many)");
ABSL_FLAG(int, prompt_words, 24, "words of each request's own prompt (~30 tokens with the Llama-2 vocab for 24)");
ABSL_FLAG(bool, shared_prefix, false, "start every prompt with the same --prefix_words words (prefix caching)");
ABSL_FLAG(int, prefix_words, 200, "length of the --shared_prefix prefix in words");
ABSL_FLAG(int, tenants, 0,
          "cluster mode: T tenants, each with its own --prefix_words-word prefix; every request starts with the prefix "
          "of a tenant drawn at random (plus its own --prompt_words). Prints the prefix hit rate (usage "
          "prompt_tokens_details.cached_tokens over prompt tokens) against the ideal (each tenant's prefix computed "
          "once), TTFT p50/p90 and the load spread over the workers, per --route_policies entry");
ABSL_FLAG(bool, print_requests, false,
          "cluster mode: print every request (in the order the clients took them) to stderr: tenant, cached / prompt "
          "tokens, TTFT");
ABSL_FLAG(std::string, route_policies, "",
          "comma-separated gateway --route_policy values to compare (least_loaded, prefix), a fresh cluster each; "
          "empty: the gateway's default");
ABSL_FLAG(std::string, model, "llama-110m", "random-weight model shape: llama-110m or tinyllama-1.1b");
ABSL_FLAG(std::string, type, "q4_0", "weight type of the model (f16, q8_0, q4_0, ...)");
ABSL_FLAG(int, workers, 1, "workers (herd up --workers)");
ABSL_FLAG(int, threads, 2, "compute threads per worker (herd up -t)");
ABSL_FLAG(int, max_seqs, 0, "sequences per worker (herd up --max-seqs); 0 = the larger of 16 and the highest level");
ABSL_FLAG(int64_t, ctx, 16384, "KV cells per worker (herd up -c)");
ABSL_FLAG(std::string, cache_dir, "",
          "where the model GGUF is written once and reused (default $XDG_CACHE_HOME/herd-bench, "
          "~/.cache/herd-bench, or /tmp/herd-bench)");
ABSL_FLAG(std::string, vocab, "",
          "GGUF whose tokenizer the model gets (default SHARED/models/vocab/ggml-vocab-llama-spm.gguf)");
ABSL_FLAG(std::string, reference, "",
          "markdown with the llama-server figures (default SHARED/reference/perf/llamacpp-avx2.md; SHARED = "
          "$HERD_SHARED or ../shared)");
ABSL_FLAG(std::string, server, "",
          "HOST:PORT of a running OpenAI-compatible server to measure instead of a new cluster");
ABSL_FLAG(std::string, server_model, "", "model name to request with --server (default: the model's file name)");
ABSL_FLAG(int, timeout_s, 600, "per-request limit in seconds (no byte for this long, or the whole request)");
ABSL_FLAG(bool, verbose, false, "forward the services' logs to stderr");
ABSL_FLAG(std::vector<std::string>, gateway_flags, {},
          "extra flags for the gateway, comma-separated (e.g. --gateway_flags=--route_max_extra_load=8)");
ABSL_FLAG(std::vector<std::string>, worker_flags, {},
          "extra flags for the worker, comma-separated (e.g. --worker_flags=--n_batch=256,--prefix_cache=false)");

namespace herd::bench {
namespace {

using json = nlohmann::json;

// The --model/--type model file (http_load PrepareModel). Returns its models dir and name.
absl::Status PrepareModel(const std::string& shared, std::string* models_dir, std::string* name) {
  HERD_ASSIGN_OR_RETURN(PreparedModel m,
                        bench::PrepareModel(absl::GetFlag(FLAGS_model), absl::GetFlag(FLAGS_type),
                                            absl::GetFlag(FLAGS_cache_dir), absl::GetFlag(FLAGS_vocab), shared));
  *models_dir = m.dir;
  *name = m.name;
  return absl::OkStatus();
}

// ---- a level: C clients, requests_per_client x C requests ----

struct Level {
  LevelResult result;
  int64_t prompt_tokens = 0;  // summed
  int64_t cached_tokens = 0;  // summed
  double ttft_p90_ms = 0;
  // TTFTs of the requests whose prefix cache supplied under half of the prompt (misses)
  // and of the others (hits).
  std::vector<double> ttft_miss, ttft_hit;
  std::vector<int> tenant;  // per request (--tenants)
  std::string error;        // the first failed request's
};

// Tenant t's shared prefix (--tenants): --prefix_words words of its own.
std::string TenantPrefix(int t) { return Words(absl::GetFlag(FLAGS_prefix_words), 777000u + static_cast<uint32_t>(t)); }

Level RunLevel(const Target& t, int concurrency, int first_request_id, std::atomic<bool>* abort) {
  const int n_requests = absl::GetFlag(FLAGS_requests_per_client) * concurrency;
  const int max_tokens = absl::GetFlag(FLAGS_max_tokens);
  const int timeout_s = absl::GetFlag(FLAGS_timeout_s);
  const std::string prefix =
      absl::GetFlag(FLAGS_shared_prefix) ? Words(absl::GetFlag(FLAGS_prefix_words), 4242) + " " : "";
  std::vector<std::string> bodies;
  Level out;
  const int tenants = absl::GetFlag(FLAGS_tenants);
  std::mt19937 pick(static_cast<uint32_t>(first_request_id) * 2654435761u);
  for (int i = 0; i < n_requests; ++i) {
    std::string own = prefix;
    if (tenants > 0) {
      out.tenant.push_back(static_cast<int>(pick() % static_cast<uint32_t>(tenants)));
      own = TenantPrefix(out.tenant.back()) + " ";
    }
    const json j = {
        {"model", t.model},
        {"prompt", own + Words(absl::GetFlag(FLAGS_prompt_words), static_cast<uint32_t>(first_request_id + i))},
        {"max_tokens", max_tokens},
        {"temperature", 0},
        {"stream", true},
        {"ignore_eos", true}};
    bodies.push_back(j.dump());
  }
  LoadResult load = RunClients(t, bodies, concurrency, max_tokens, timeout_s, abort);
  out.error = load.error;
  if (!out.error.empty()) return out;
  std::vector<double> ttft, itl;
  int64_t tokens = 0;
  for (const RequestResult& r : load.results) {
    ttft.push_back(r.ttft_ms);
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    tokens += r.completion_tokens;
    out.prompt_tokens += r.prompt_tokens;
    out.cached_tokens += r.cached_tokens;
    (2 * r.cached_tokens < r.prompt_tokens ? out.ttft_miss : out.ttft_hit).push_back(r.ttft_ms);
    if (absl::GetFlag(FLAGS_print_requests) && tenants > 0) {
      const size_t i = static_cast<size_t>(&r - load.results.data());
      std::fprintf(stderr, "serve_bench: request %zu tenant %d cached %lld/%lld ttft %.0f\n", i, out.tenant[i],
                   static_cast<long long>(r.cached_tokens), static_cast<long long>(r.prompt_tokens), r.ttft_ms);
    }
  }
  out.ttft_p90_ms = Percentile(ttft, 90);
  out.result = Summarize(concurrency, n_requests, tokens, load.seconds, ttft, itl);
  return out;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "serve_bench: error: %s\n", msg.c_str());
  return 1;
}

// --tenants: one cluster per --route_policies entry; per level the prefix hit rate
// against the ideal, TTFT p50/p90, tok/s and the sessions per worker.
int ClusterMain(const std::vector<int>& levels) {
  const std::string shared = SharedDir();
  std::vector<std::string> policies = absl::StrSplit(absl::GetFlag(FLAGS_route_policies), ',', absl::SkipEmpty());
  if (policies.empty()) policies.push_back("");
  const int max_level = *std::max_element(levels.begin(), levels.end());
  const int tenants = absl::GetFlag(FLAGS_tenants);
  struct Row {
    std::string policy;
    int c = 0, requests = 0;
    double tok_s = 0, ttft_p50 = 0, ttft_p90 = 0, hit = 0, ideal = 0, max_over_mean = 0;
    std::string spread;
  };
  std::vector<Row> rows;
  std::string setup;
  for (const std::string& policy : policies) {
    cli::ClusterOptions o;
    std::string model;
    if (absl::Status st = PrepareModel(shared, &o.models_dir, &model); !st.ok()) return Fail(st.ToString());
    o.models = {model};
    o.workers_per_model = absl::GetFlag(FLAGS_workers);
    o.threads_per_worker = absl::GetFlag(FLAGS_threads);
    o.n_ctx = absl::GetFlag(FLAGS_ctx);
    o.max_sequences = absl::GetFlag(FLAGS_max_seqs) > 0 ? absl::GetFlag(FLAGS_max_seqs) : std::max(16, max_level);
    o.extra_worker_flags = {"--kv_type=f16"};
    for (const std::string& f : absl::GetFlag(FLAGS_worker_flags)) o.extra_worker_flags.push_back(f);
    for (const std::string& f : absl::GetFlag(FLAGS_gateway_flags)) o.extra_gateway_flags.push_back(f);
    if (!policy.empty()) o.extra_gateway_flags.push_back(absl::StrCat("--route_policy=", policy));
    o.restart = false;
    o.quiet = !absl::GetFlag(FLAGS_verbose);
    std::fprintf(stderr, "serve_bench: route policy %s: starting loader, %d worker(s) (-t %d), gateway\n",
                 policy.empty() ? "(default)" : policy.c_str(), o.workers_per_model, o.threads_per_worker);
    cli::LocalCluster cluster;
    if (absl::Status st = cluster.Start(o, std::chrono::seconds(300)); !st.ok()) {
      cluster.Stop();
      return Fail(absl::StrCat("cluster did not start: ", st.message()));
    }
    setup = absl::StrCat(o.workers_per_model, " workers x -t ", o.threads_per_worker, ", --max-seqs ", o.max_sequences,
                         ", -c ", o.n_ctx);
    const Target target = TargetOf(cluster.gateway_http_addr(), model);
    const Target metrics = TargetOf(cluster.gateway_metrics_addr(), model);
    // Tokens of each tenant's prefix with BOS: what a request can reuse once its tenant's
    // prefix is cached on the worker it lands on.
    std::vector<int64_t> prefix_tokens(static_cast<size_t>(tenants));
    for (int t = 0; t < tenants; ++t) {
      const json req = {{"model", model}, {"content", TenantPrefix(t)}, {"add_special", true}};
      absl::StatusOr<std::string> r = HttpCall(target, "POST", "/tokenize", req.dump());
      if (!r.ok()) {
        cluster.Stop();
        return Fail(absl::StrCat("tokenize: ", r.status().message()));
      }
      prefix_tokens[static_cast<size_t>(t)] = static_cast<int64_t>(json::parse(*r)["tokens"].size());
    }
    {
      const json j = {{"model", model},   {"prompt", Words(8, 1)}, {"max_tokens", 4},
                      {"temperature", 0}, {"stream", true},        {"ignore_eos", true}};
      RequestResult r = StreamCompletion(target, j.dump(), 4, absl::GetFlag(FLAGS_timeout_s));
      if (!r.error.empty()) {
        cluster.Stop();
        return Fail(absl::StrCat("warm-up request: ", r.error));
      }
    }
    std::vector<bool> seen(static_cast<size_t>(tenants), false);  // prefix computed once somewhere
    std::map<std::string, double> sessions_before;
    std::atomic<bool> abort{false};
    int request_id = 5000;
    for (int c : levels) {
      Level l = RunLevel(target, c, request_id, &abort);
      request_id += c * absl::GetFlag(FLAGS_requests_per_client);
      if (!l.error.empty()) {
        cluster.Stop();
        return Fail(absl::StrCat("concurrency ", c, ": ", l.error));
      }
      int64_t ideal = 0;
      for (int t : l.tenant) {
        if (seen[static_cast<size_t>(t)]) ideal += prefix_tokens[static_cast<size_t>(t)];
        seen[static_cast<size_t>(t)] = true;
      }
      // Sessions per worker during this level, from the gateway's counter.
      absl::StatusOr<std::string> m = HttpCall(metrics, "GET", "/metrics", "");
      std::map<std::string, double> now;
      if (m.ok()) {
        for (absl::string_view line : absl::StrSplit(*m, '\n')) {
          if (!absl::StartsWith(line, "herd_gateway_worker_sessions_total{")) continue;
          const size_t q0 = line.find('"'), q1 = line.rfind('"'), sp = line.rfind(' ');
          double v = 0;
          if (q0 == absl::string_view::npos || q1 <= q0 || sp == absl::string_view::npos ||
              !absl::SimpleAtod(line.substr(sp + 1), &v)) {
            continue;
          }
          now[std::string(line.substr(q0 + 1, q1 - q0 - 1))] = v;
        }
      }
      std::vector<std::string> spread;
      double sum = 0, mx = 0;
      for (const auto& [w, v] : now) {
        const double d = v - sessions_before[w];
        spread.push_back(absl::StrFormat("%.0f", d));
        sum += d;
        mx = std::max(mx, d);
      }
      sessions_before = now;
      Row row;
      row.policy = policy.empty() ? "(default)" : policy;
      row.c = c;
      row.requests = l.result.requests;
      row.tok_s = l.result.tok_s;
      row.ttft_p50 = l.result.ttft_p50_ms;
      row.ttft_p90 = l.ttft_p90_ms;
      row.hit = l.prompt_tokens > 0 ? static_cast<double>(l.cached_tokens) / static_cast<double>(l.prompt_tokens) : 0;
      row.ideal = l.prompt_tokens > 0 ? static_cast<double>(ideal) / static_cast<double>(l.prompt_tokens) : 0;
      row.max_over_mean = sum > 0 && !now.empty() ? mx / (sum / static_cast<double>(now.size())) : 0;
      row.spread = absl::StrJoin(spread, "/");
      std::fprintf(stderr, "serve_bench: %s C=%d: %.1f tok/s, TTFT p50 %.0f p90 %.0f ms, hit rate %.2f (ideal %.2f)\n",
                   row.policy.c_str(), c, row.tok_s, row.ttft_p50, row.ttft_p90, row.hit, row.ideal);
      std::fprintf(stderr,
                   "serve_bench: %s C=%d: %zu misses (cache supplied < half the prompt; %d tenants' first), TTFT "
                   "p50/p90 %.0f/%.0f ms; %zu hits, TTFT p50/p90 %.0f/%.0f ms\n",
                   row.policy.c_str(), c, l.ttft_miss.size(), tenants, Percentile(l.ttft_miss, 50),
                   Percentile(l.ttft_miss, 90), l.ttft_hit.size(), Percentile(l.ttft_hit, 50),
                   Percentile(l.ttft_hit, 90));
      if (m.ok()) {
        for (absl::string_view line : absl::StrSplit(*m, '\n')) {
          if (absl::StartsWith(line, "herd_gateway_route_decisions_total{")) {
            std::fprintf(stderr, "serve_bench: %s %s\n", row.policy.c_str(), std::string(line).c_str());
          }
        }
      }
      rows.push_back(row);
    }
    cluster.Stop();
  }
  std::printf(
      "## serve_bench cluster mode: %s %s, %s; %d tenants x %d-word prefix + %d own words, max_tokens %d, "
      "%d x C requests per level\n\n",
      absl::GetFlag(FLAGS_model).c_str(), absl::AsciiStrToUpper(absl::GetFlag(FLAGS_type)).c_str(), setup.c_str(),
      tenants, absl::GetFlag(FLAGS_prefix_words), absl::GetFlag(FLAGS_prompt_words), absl::GetFlag(FLAGS_max_tokens),
      absl::GetFlag(FLAGS_requests_per_client));
  std::printf(
      "| route policy | C | requests | tok/s | TTFT p50 ms | TTFT p90 ms | prefix hit rate | ideal | of ideal | "
      "sessions per worker | max / mean |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %d | %d | %.1f | %.0f | %.0f | %.3f | %.3f | %.0f%% | %s | %.2f |\n", r.policy.c_str(), r.c,
                r.requests, r.tok_s, r.ttft_p50, r.ttft_p90, r.hit, r.ideal, r.ideal > 0 ? 100 * r.hit / r.ideal : 0,
                r.spread.c_str(), r.max_over_mean);
  }
  return 0;
}

// Runs each concurrency level of `levels` `n_rounds` times (alternating their order each
// round), appending each run's result to `(*rounds_of)[level index]` and a line about it
// (tok/s, load average) to `*notes`. Errors: UNAVAILABLE "concurrency C: ..." when a
// level's requests fail.
absl::Status RunRounds(const Target& target, const std::vector<int>& levels, int n_rounds,
                       std::vector<std::vector<LevelResult>>* rounds_of, std::vector<std::string>* notes) {
  std::atomic<bool> abort{false};
  int request_id = 1000;
  std::vector<size_t> order;  // indices into levels, round after round
  for (int round = 0; round < n_rounds; ++round) {
    for (size_t i = 0; i < levels.size(); ++i) order.push_back(round % 2 == 0 ? i : levels.size() - 1 - i);
  }
  for (size_t step = 0; step < order.size(); ++step) {
    const int c = levels[order[step]];
    const int round = static_cast<int>(step / levels.size()) + 1;
    const std::string load_before = LoadAverage();
    std::fprintf(stderr, "serve_bench: concurrency %d%s: %d requests (load average %s)\n", c,
                 n_rounds > 1 ? absl::StrCat(", round ", round).c_str() : "",
                 c * absl::GetFlag(FLAGS_requests_per_client), load_before.c_str());
    Level l = RunLevel(target, c, request_id, &abort);
    request_id += c * absl::GetFlag(FLAGS_requests_per_client);
    if (!l.error.empty()) return absl::UnavailableError(absl::StrCat("concurrency ", c, ": ", l.error));
    const LevelResult& r = l.result;
    std::fprintf(stderr,
                 "serve_bench: concurrency %d: %lld tokens in %.2f s = %.1f tok/s, TTFT p50 %.0f ms, ITL p50 %.1f ms, "
                 "%.1f prompt tokens/request\n",
                 c, static_cast<long long>(r.tokens), r.seconds, r.tok_s, r.ttft_p50_ms, r.itl_p50_ms,
                 static_cast<double>(l.prompt_tokens) / r.requests);
    notes->push_back(absl::StrCat("C=", c, n_rounds > 1 ? absl::StrCat(" round ", round) : "", ": ",
                                  absl::StrFormat("%.1f", r.tok_s), " tok/s, load ", load_before, " -> ", LoadAverage(),
                                  ", ", absl::StrFormat("%.1f", static_cast<double>(l.prompt_tokens) / r.requests),
                                  " prompt tokens/request"));
    (*rounds_of)[order[step]].push_back(r);
  }
  return absl::OkStatus();
}

int Main() {
  std::vector<int> levels;
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_concurrency), ',', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(c, &v) || v < 1 || v > 4096) {
      std::fprintf(stderr, "serve_bench: --concurrency: '%s' is not a number in [1, 4096]\n", std::string(c).c_str());
      return 2;
    }
    levels.push_back(v);
  }
  if (levels.empty() || absl::GetFlag(FLAGS_requests_per_client) < 1 || absl::GetFlag(FLAGS_max_tokens) < 2 ||
      absl::GetFlag(FLAGS_prompt_words) < 1 || absl::GetFlag(FLAGS_rounds) < 1) {
    std::fprintf(stderr,
                 "serve_bench: need --concurrency levels, --requests_per_client >= 1, --max_tokens >= 2, "
                 "--prompt_words >= 1, --rounds >= 1\n");
    return 2;
  }
  if (absl::GetFlag(FLAGS_tenants) > 0) {
    if (!absl::GetFlag(FLAGS_server).empty()) {
      std::fprintf(stderr, "serve_bench: --tenants starts its own clusters; it does not take --server\n");
      return 2;
    }
    return ClusterMain(levels);
  }
  const std::string shared = SharedDir();
  std::string ref_path = absl::GetFlag(FLAGS_reference);
  if (ref_path.empty() && !shared.empty()) ref_path = shared + "/reference/perf/llamacpp-avx2.md";
  const std::map<int, ServingRef> ref = ParseServingReference(ReadFile(ref_path));
  if (ref.empty()) {
    std::fprintf(stderr, "serve_bench: warning: no llama-server figures in '%s' (the table shows -)\n",
                 ref_path.c_str());
  }

  Target target;
  cli::LocalCluster cluster;
  bool own_cluster = false;
  const int max_level = *std::max_element(levels.begin(), levels.end());
  const int max_seqs = absl::GetFlag(FLAGS_max_seqs) > 0 ? absl::GetFlag(FLAGS_max_seqs) : std::max(16, max_level);
  std::string setup;
  if (!absl::GetFlag(FLAGS_server).empty()) {
    const std::string s = absl::GetFlag(FLAGS_server);
    const size_t colon = s.rfind(':');
    if (colon == std::string::npos || !absl::SimpleAtoi(s.substr(colon + 1), &target.port)) {
      std::fprintf(stderr, "serve_bench: --server: '%s' is not HOST:PORT\n", s.c_str());
      return 2;
    }
    target.host = s.substr(0, colon);
    target.model = absl::GetFlag(FLAGS_server_model);
    setup = absl::StrCat("server ", s);
  } else {
    cli::ClusterOptions o;
    if (absl::Status st = PrepareModel(shared, &o.models_dir, &target.model); !st.ok()) return Fail(st.ToString());
    o.models = {target.model};
    o.workers_per_model = absl::GetFlag(FLAGS_workers);
    o.threads_per_worker = absl::GetFlag(FLAGS_threads);
    o.n_ctx = absl::GetFlag(FLAGS_ctx);
    o.max_sequences = max_seqs;
    o.extra_worker_flags = {"--kv_type=f16"};  // herd up's default -ctk
    for (const std::string& f : absl::GetFlag(FLAGS_worker_flags)) o.extra_worker_flags.push_back(f);
    o.restart = false;  // a crash is an error here, not a restart
    o.quiet = !absl::GetFlag(FLAGS_verbose);
    std::fprintf(stderr, "serve_bench: starting loader, %d worker(s) (-t %d, --max-seqs %d, -c %lld), gateway\n",
                 o.workers_per_model, o.threads_per_worker, o.max_sequences, static_cast<long long>(o.n_ctx));
    own_cluster = true;
    if (absl::Status st = cluster.Start(o, std::chrono::seconds(300)); !st.ok()) {
      cluster.Stop();
      return Fail(absl::StrCat("cluster did not start: ", st.message()));
    }
    const std::string http = cluster.gateway_http_addr();
    const size_t colon = http.rfind(':');
    target.host = http.substr(0, colon);
    if (colon == std::string::npos || !absl::SimpleAtoi(http.substr(colon + 1), &target.port)) {
      cluster.Stop();
      return Fail(absl::StrCat("gateway HTTP address '", http, "' is not HOST:PORT"));
    }
    setup = absl::StrCat("herd up --workers ", o.workers_per_model, " -t ", o.threads_per_worker, " --max-seqs ",
                         o.max_sequences, " -c ", o.n_ctx, "; gateway http://", http);
  }
  auto stop = [&] {
    if (own_cluster) cluster.Stop();
  };

  // Warm-up (not measured): the first request pages the weights in.
  {
    const json j = {{"model", target.model}, {"prompt", Words(8, 1)}, {"max_tokens", 4},
                    {"temperature", 0},      {"stream", true},        {"ignore_eos", true}};
    RequestResult r = StreamCompletion(target, j.dump(), 4, absl::GetFlag(FLAGS_timeout_s));
    if (!r.error.empty()) {
      stop();
      return Fail(absl::StrCat("warm-up request: ", r.error));
    }
  }

  const int n_rounds = absl::GetFlag(FLAGS_rounds);
  std::vector<std::vector<LevelResult>> rounds_of(levels.size());  // per listed level, its rounds
  std::vector<std::string> notes;
  if (absl::Status st = RunRounds(target, levels, n_rounds, &rounds_of, &notes); !st.ok()) {
    stop();
    return Fail(std::string(st.message()));
  }
  stop();
  std::vector<LevelResult> results;
  for (const std::vector<LevelResult>& rounds : rounds_of) {
    auto m = MedianOfRounds(rounds);
    if (!m.ok()) return Fail(m.status().ToString());
    results.push_back(*m);
  }

  const std::string what =
      absl::GetFlag(FLAGS_server).empty()
          ? absl::StrCat(absl::GetFlag(FLAGS_model), " ", absl::AsciiStrToUpper(absl::GetFlag(FLAGS_type)))
          : absl::StrCat("model '", target.model, "'");
  const std::string prefix = absl::GetFlag(FLAGS_shared_prefix)
                                 ? absl::StrCat(", shared prefix of ", absl::GetFlag(FLAGS_prefix_words), " words")
                                 : "";
  std::printf("## serve_bench: %s%s, %s\n\n", what.c_str(), prefix.c_str(), setup.c_str());
  std::printf(
      "streaming POST /v1/completions, %d-word prompts, max_tokens %d, temperature 0, ignore_eos, %d x C "
      "requests per level%s; llama-server figures: %s\n\n",
      absl::GetFlag(FLAGS_prompt_words), absl::GetFlag(FLAGS_max_tokens), absl::GetFlag(FLAGS_requests_per_client),
      n_rounds > 1 ? absl::StrCat(" in each of ", n_rounds, " rounds (medians)").c_str() : "",
      ref_path.empty() ? "none" : ref_path.c_str());
  std::fputs(FormatTable(results, ref).c_str(), stdout);
  std::printf("\n%s\n", absl::StrJoin(notes, "; ").c_str());
  return 0;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "serving benchmark: a local herd cluster (or --server) under C concurrent streaming /v1/completions "
      "clients, next to llama-server's figures.\n  serve_bench [--concurrency=1,8,16,32] [--shared_prefix] "
      "[--model=llama-110m] [--type=q4_0] [--server=HOST:PORT]");
  absl::ParseCommandLine(argc, argv);
  return herd::bench::Main();
}
