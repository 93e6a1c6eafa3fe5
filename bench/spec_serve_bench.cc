// Worker-run speculative decoding under serving load: serve_bench's streaming
// /v1/completions clients against a local herd cluster (`herd up`'s LocalCluster) once
// per speculation mode, with the greedy outputs of every speculative mode checked
// against the plain ("none") mode's for the same prompts.
//
//   bazel build //bench:spec_serve_bench && bazel-bin/bench/spec_serve_bench \
//       --concurrency=1,8,16 --requests_per_client=2 --threads=1
//
// The target is a random-weight llama-110m in --target_type (default f16); the draft
// model is the same weights (bench_models writes the same numbers for a shape whatever
// the type) in --draft_type (default q4_0), so it agrees with the target most of the
// time. Both files are written once into --cache_dir with the Llama-2 vocabulary.
// Modes (--modes): "none", an n-gram type ("ngram-simple", ...), or "draft-model:N"
// (N draft workers, each -t --draft_threads); each mode gets its own cluster with one
// target worker (-t --threads) and a warm-up request, all clusters up at once; then per
// round (--rounds), each mode in turn (the order rotated each round) runs every
// --concurrency level: C clients x --requests_per_client requests of --max_tokens greedy
// tokens (temperature 0, ignore_eos), prompts that differ per request and round (8 to 96
// words), each body carrying "speculative": {"type": MODE} ({"type": "none"} for none).
// One table row per (mode, level), medians over the rounds: tok/s, TTFT p50/p90, ITL
// p50/p90 (between streamed events: several accepted tokens can arrive in one), the
// target worker's draft and accepted tokens, draft errors and switch-offs over the level
// (its /metrics before and after), and tok/s relative to "none" at the same level (the
// median of the rounds' ratios to none in the same round). The none mode's requests run twice (--none_repeat; the
// second pass, in a fresh cluster, is not tabulated) because greedy decoding under
// batching is not bit-reproducible: a near-tie of these random weights' logits can go
// either way between two plain runs. A speculative output equal to neither none pass for the same
// prompt is a mismatch: reported on stderr, and the exit status is 1.
// --server=HOST:PORT sends the same load to a running server instead (e.g. llama-server
// -md; the modes then only change the "speculative" field, and acceptance is "-"
// unless the server's /metrics has herd's worker counters).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include "bench/bench_models.h"
#include "bench/http_load.h"
#include "bench/serve_stats.h"
#include "libs/base/status_macros.h"
#include "libs/gguf/ggml_type.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

ABSL_FLAG(std::string, modes, "none,ngram-simple,draft-model:1,draft-model:2",
          "comma-separated modes: none, an n-gram speculative type, or draft-model:N (N draft workers)");
ABSL_FLAG(std::string, concurrency, "1,8,16,32", "comma-separated concurrent streaming clients, one level each");
ABSL_FLAG(int, requests_per_client, 2, "requests per level = this x concurrency");
ABSL_FLAG(int, rounds, 1,
          "every mode runs every level once per round (new prompts each round), all modes' clusters up at once and "
          "their order rotated each round; the table gives medians over the rounds and tok/s vs none as the median "
          "of each round's ratio to none's figure of the same round (same-run medians on a noisy machine)");
ABSL_FLAG(int, max_tokens, 96, "max_tokens of each request (ignore_eos: each generates exactly this many)");
ABSL_FLAG(std::string, model, "llama-110m", "random-weight model shape: llama-110m or tinyllama-1.1b");
ABSL_FLAG(std::string, target_type, "f16", "weight type of the target model");
ABSL_FLAG(std::string, draft_type, "q4_0", "weight type of the draft model (the target's weights, quantized)");
ABSL_FLAG(bool, draft_unrelated, false,
          "draft with OTHER random weights of the same shape and vocabulary (bench_models' threaded generator): "
          "its drafts are almost always rejected, the case where speculation must turn itself off");
ABSL_FLAG(int, threads, 2, "compute threads of the target worker");
ABSL_FLAG(int, draft_threads, 1, "compute threads of each draft worker");
ABSL_FLAG(int, max_seqs, 0, "sequences of the target worker; 0 = the larger of 16 and the highest level");
ABSL_FLAG(int64_t, ctx, 16384, "KV cells of the target worker");
ABSL_FLAG(int, draft_max, 0, "speculative.draft_max of each request (0 = not sent: the worker's default)");
ABSL_FLAG(int, draft_min, -1, "speculative.draft_min of each request (-1 = not sent)");
ABSL_FLAG(double, draft_p_min, 0.0,
          "speculative.draft_p_min of the draft-model requests (-1 = not sent: 0.75, which the flat distributions "
          "of random weights seldom reach, so the draft model would propose nothing)");
ABSL_FLAG(bool, none_repeat, true,
          "run the none mode's requests twice, the second time in a fresh cluster (not tabulated): a speculative "
          "output counts as "
          "equal when it equals either pass (greedy outputs under batching can flip at near-ties)");
ABSL_FLAG(std::string, cache_dir, "", "where the model GGUFs are written once and reused (default as serve_bench)");
ABSL_FLAG(std::string, vocab, "", "GGUF whose tokenizer the models get (default SHARED/models/vocab/...-llama-spm)");
ABSL_FLAG(std::string, server, "", "HOST:PORT of a running OpenAI-compatible server to measure instead");
ABSL_FLAG(std::string, server_model, "", "model name to request with --server");
ABSL_FLAG(int, timeout_s, 600, "per-request limit in seconds");
ABSL_FLAG(bool, verbose, false, "forward the services' logs to stderr");
ABSL_FLAG(std::vector<std::string>, worker_flags, {},
          "extra flags for the target worker, comma-separated (e.g. --worker_flags=--adaptive_speculation=false)");
ABSL_FLAG(std::vector<std::string>, draft_flags, {}, "extra flags for the draft workers, comma-separated");
ABSL_FLAG(std::vector<std::string>, gateway_flags, {"--info_timeout_ms=5000"},
          "extra flags for the gateway, comma-separated. The default gives its Info polls 5 s instead of 1 s: on a "
          "loaded 2-core machine a poll of the only worker can miss 1 s, which marks it not live and fails requests "
          "with HTTP 503 \"no live worker serves it\"");

namespace herd::bench {
namespace {

using json = nlohmann::json;

int Fail(const std::string& msg) {
  std::fprintf(stderr, "spec_serve_bench: error: %s\n", msg.c_str());
  return 1;
}

// One --modes entry.
struct Mode {
  std::string name;  // as listed
  std::string type;  // the request's speculative.type
  int draft_workers = 0;
};

// Parses --modes. Errors: INVALID_ARGUMENT for an empty list or a bad draft worker count.
absl::StatusOr<std::vector<Mode>> ParseModes(const std::string& s) {
  std::vector<Mode> out;
  for (absl::string_view part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    Mode m;
    m.name = std::string(absl::StripAsciiWhitespace(part));
    const size_t colon = m.name.find(':');
    m.type = m.name.substr(0, colon);
    if (m.type == "draft-model" || m.type == "draft") m.draft_workers = 1;
    if (colon != std::string::npos &&
        (!absl::SimpleAtoi(m.name.substr(colon + 1), &m.draft_workers) || m.draft_workers < 1)) {
      return absl::InvalidArgumentError(absl::StrCat("--modes: '", m.name, "': want TYPE or TYPE:N with N >= 1"));
    }
    out.push_back(m);
  }
  if (out.empty()) return absl::InvalidArgumentError("--modes: empty");
  return out;
}

// Request i of level `level`'s prompt: unique per (level, i), 8 to 96 words.
std::string PromptFor(int level, int i) {
  static const int kWordsPerPrompt[] = {8, 24, 48, 16, 96, 32};
  const int n = kWordsPerPrompt[static_cast<size_t>(i) % (sizeof(kWordsPerPrompt) / sizeof(kWordsPerPrompt[0]))];
  return Words(n, 100000u * static_cast<uint32_t>(level + 1) + static_cast<uint32_t>(i));
}

// The streaming greedy request body of `prompt` in `mode`.
std::string Body(const std::string& model, const std::string& prompt, const Mode& mode, int max_tokens) {
  json spec = {{"type", mode.type}};
  if (mode.type != "none") {
    if (absl::GetFlag(FLAGS_draft_max) > 0) spec["draft_max"] = absl::GetFlag(FLAGS_draft_max);
    if (absl::GetFlag(FLAGS_draft_min) >= 0) spec["draft_min"] = absl::GetFlag(FLAGS_draft_min);
    if (mode.draft_workers > 0 && absl::GetFlag(FLAGS_draft_p_min) >= 0) {
      spec["draft_p_min"] = absl::GetFlag(FLAGS_draft_p_min);
    }
  }
  json j = {{"model", model},   {"prompt", prompt}, {"max_tokens", max_tokens},
            {"temperature", 0}, {"stream", true},   {"ignore_eos", true}};
  j["speculative"] = spec;
  return j.dump();
}

// The target workers' speculation counters (summed over workers).
struct SpecCounters {
  bool ok = false;  // every /metrics answered with herd's worker counters
  double draft = 0, accepted = 0, passes = 0, errors = 0, offs = 0;
  double enabled = 0, speedup = 0;  // gauges (summed; one worker here)
};

// Reads the counters from every `metrics` endpoint's GET /metrics.
SpecCounters ReadCounters(const std::vector<Target>& metrics) {
  SpecCounters c;
  c.ok = !metrics.empty();
  for (const Target& t : metrics) {
    absl::StatusOr<std::string> m = HttpCall(t, "GET", "/metrics", "");
    if (!m.ok() || m->find("herd_worker_spec_draft_tokens_total") == std::string::npos) {
      c.ok = false;
      continue;
    }
    c.draft += MetricSum(*m, "herd_worker_spec_draft_tokens_total");
    c.accepted += MetricSum(*m, "herd_worker_spec_accepted_tokens_total");
    c.passes += MetricSum(*m, "herd_worker_spec_passes_total");
    c.errors += MetricSum(*m, "herd_worker_spec_draft_errors_total");
    c.offs += MetricSum(*m, "herd_worker_spec_switch_offs_total");
    c.enabled += MetricSum(*m, "herd_worker_spec_enabled");
    c.speedup += MetricSum(*m, "herd_worker_spec_speedup");
  }
  return c;
}

// One (mode, level) of the table.
struct Row {
  std::string mode;
  int c = 0, requests = 0, round = 0;
  double tok_s = 0, ttft_p50 = 0, ttft_p90 = 0, itl_p50 = 0, itl_p90 = 0;
  bool have_spec = false;
  double draft = 0, accepted = 0, errors = 0, offs = 0;
};

// What one mode produced: its rows, the text of each prompt, notes for the footer.
struct ModeRun {
  std::vector<Row> rows;
  std::map<std::string, std::string> text_of;         // prompt -> generated text
  std::map<std::string, int> level_of;                // prompt -> its level's C
  std::map<std::string, std::string> repeat_text_of;  // none with --none_repeat: the second pass's
  std::vector<std::string> notes;
};

// Runs every level of round `round` against `target` (the round's prompts: new ones for
// every round), reading `metrics` (worker endpoints) around each.
// Errors: UNAVAILABLE "concurrency C: ..." when a request fails.
absl::Status RunLevels(const Target& target, const std::vector<Target>& metrics, const Mode& mode,
                       const std::vector<int>& levels, int round, ModeRun* run) {
  const int max_tokens = absl::GetFlag(FLAGS_max_tokens);
  std::atomic<bool> abort{false};
  for (size_t li = 0; li < levels.size(); ++li) {
    const int c = levels[li];
    std::vector<std::string> prompts, bodies;
    for (int i = 0; i < c * absl::GetFlag(FLAGS_requests_per_client); ++i) {
      prompts.push_back(PromptFor(static_cast<int>(li + static_cast<size_t>(round) * levels.size()), i));
      bodies.push_back(Body(target.model, prompts.back(), mode, max_tokens));
    }
    const std::string load_before = LoadAverage();
    std::fprintf(stderr, "spec_serve_bench: %s C=%d round %d: %zu requests (load average %s)\n", mode.name.c_str(), c,
                 round + 1, bodies.size(), load_before.c_str());
    const SpecCounters before = ReadCounters(metrics);
    LoadResult load = RunClients(target, bodies, c, max_tokens, absl::GetFlag(FLAGS_timeout_s), &abort);
    if (!load.error.empty()) return absl::UnavailableError(absl::StrCat("concurrency ", c, ": ", load.error));
    const SpecCounters after = ReadCounters(metrics);
    std::vector<double> ttft, itl;
    int64_t tokens = 0;
    for (size_t i = 0; i < load.results.size(); ++i) {
      const RequestResult& r = load.results[i];
      ttft.push_back(r.ttft_ms);
      itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
      tokens += r.completion_tokens;
      run->text_of[prompts[i]] = r.text;
      run->level_of[prompts[i]] = c;
    }
    Row row;
    row.mode = mode.name;
    row.c = c;
    row.requests = static_cast<int>(bodies.size());
    row.round = round;
    row.tok_s = load.seconds > 0 ? static_cast<double>(tokens) / load.seconds : 0;
    row.ttft_p50 = Percentile(ttft, 50);
    row.ttft_p90 = Percentile(ttft, 90);
    row.itl_p50 = Percentile(itl, 50);
    row.itl_p90 = Percentile(itl, 90);
    row.have_spec = before.ok && after.ok;
    row.draft = after.draft - before.draft;
    row.accepted = after.accepted - before.accepted;
    row.errors = after.errors - before.errors;
    row.offs = after.offs - before.offs;
    std::fprintf(stderr,
                 "spec_serve_bench: %s C=%d: %.1f tok/s, TTFT p50 %.0f ms, ITL p50 %.1f ms, drafted %.0f, accepted "
                 "%.0f, draft errors %.0f, switch-offs %.0f\n",
                 mode.name.c_str(), c, row.tok_s, row.ttft_p50, row.itl_p50, row.draft, row.accepted, row.errors,
                 row.offs);
    run->notes.push_back(absl::StrFormat(
        "%s C=%d%s: load %s -> %s%s", mode.name, c, round > 0 ? absl::StrCat(" round ", round + 1) : "", load_before,
        LoadAverage(),
        after.ok ? absl::StrFormat(", spec_enabled %.0f, spec_speedup %.2f", after.enabled, after.speedup) : ""));
    run->rows.push_back(row);
  }
  return absl::OkStatus();
}

// The model files: target and draft (same shape and weights, two types).
struct Models {
  PreparedModel target, draft;
};

// A mode's cluster (none with --server) and where its requests and metrics go.
struct ModeTarget {
  std::unique_ptr<cli::LocalCluster> cluster;
  Target target;
  std::vector<Target> metrics;
};

// Starts a cluster for `mode` (unless --server) and warms it up (one request).
// Errors: UNAVAILABLE naming the mode when the cluster does not start or the warm-up fails.
absl::Status StartMode(const Models& models, const Mode& mode, const std::vector<int>& levels, ModeTarget* out) {
  const bool own = absl::GetFlag(FLAGS_server).empty();
  if (own) {
    cli::ClusterOptions o;
    o.models_dir = models.target.dir;
    o.models = {models.target.name};
    o.workers_per_model = 1;
    o.threads_per_worker = absl::GetFlag(FLAGS_threads);
    o.n_ctx = absl::GetFlag(FLAGS_ctx);
    const int max_level = *std::max_element(levels.begin(), levels.end());
    o.max_sequences = absl::GetFlag(FLAGS_max_seqs) > 0 ? absl::GetFlag(FLAGS_max_seqs) : std::max(16, max_level);
    o.extra_worker_flags = {"--kv_type=f16"};
    for (const std::string& f : absl::GetFlag(FLAGS_worker_flags)) o.extra_worker_flags.push_back(f);
    for (const std::string& f : absl::GetFlag(FLAGS_gateway_flags)) o.extra_gateway_flags.push_back(f);
    o.draft_workers = mode.draft_workers;
    if (mode.draft_workers > 0) {
      o.model_draft = models.draft.path;
      o.draft_target_model = models.target.name;
      o.extra_draft_flags = {absl::StrCat("--threads=", absl::GetFlag(FLAGS_draft_threads))};
      for (const std::string& f : absl::GetFlag(FLAGS_draft_flags)) o.extra_draft_flags.push_back(f);
    }
    o.restart = false;
    o.quiet = !absl::GetFlag(FLAGS_verbose);
    std::fprintf(stderr, "spec_serve_bench: %s: starting loader, 1 worker (-t %d), %d draft worker(s), gateway\n",
                 mode.name.c_str(), o.threads_per_worker, o.draft_workers);
    out->cluster = std::make_unique<cli::LocalCluster>();
    if (absl::Status st = out->cluster->Start(o, std::chrono::seconds(300)); !st.ok()) {
      return absl::UnavailableError(absl::StrCat(mode.name, ": cluster did not start: ", st.message()));
    }
    out->target = TargetOf(out->cluster->gateway_http_addr(), models.target.name);
    for (cli::Process* w : out->cluster->workers()) out->metrics.push_back(TargetOf(w->metrics_addr, ""));
  } else {
    out->target = TargetOf(absl::GetFlag(FLAGS_server), absl::GetFlag(FLAGS_server_model));
    out->metrics.push_back(out->target);
  }
  // Warm-up (not measured): pages the weights in, starts the draft workers' sessions.
  RequestResult r =
      StreamCompletion(out->target, Body(out->target.model, Words(8, 1), mode, 8), 8, absl::GetFlag(FLAGS_timeout_s));
  if (!r.error.empty()) return absl::UnavailableError(absl::StrCat(mode.name, ": warm-up request: ", r.error));
  return absl::OkStatus();
}

void StopModes(std::vector<ModeTarget>* targets) {
  for (ModeTarget& t : *targets) {
    if (t.cluster != nullptr) t.cluster->Stop();
  }
}

// The none requests of every round again in a fresh cluster (not tabulated), into
// run->repeat_text_of: how reproducible plain greedy outputs are when the same prompts
// are batched differently.
absl::Status RepeatNone(const Models& models, const Mode& mode, const std::vector<int>& levels, ModeRun* run) {
  std::vector<ModeTarget> t(1);
  absl::Status st = StartMode(models, mode, levels, &t[0]);
  Mode again = mode;
  again.name = mode.name + " (repeat)";
  ModeRun second;
  for (int r = 0; st.ok() && r < absl::GetFlag(FLAGS_rounds); ++r) {
    st = RunLevels(t[0].target, t[0].metrics, again, levels, r, &second);
  }
  StopModes(&t);
  run->repeat_text_of = std::move(second.text_of);
  if (!st.ok()) return absl::UnavailableError(absl::StrCat(again.name, ": ", st.message()));
  return absl::OkStatus();
}

// Prints mismatch number `n` (the first 3) of `mode` to stderr: where `text` leaves `ref`.
void PrintMismatch(int n, const std::string& mode, int c, const std::string& prompt, const std::string& text,
                   const std::string& ref) {
  if (n > 3) return;
  size_t at = 0;
  while (at < text.size() && at < ref.size() && text[at] == ref[at]) ++at;
  std::fprintf(stderr, "spec_serve_bench: MISMATCH %s vs none, C=%d, prompt \"%s\": from byte %zu: \"%s\" vs \"%s\"\n",
               mode.c_str(), c, prompt.c_str(), at, text.substr(at, 40).c_str(), ref.substr(at, 40).c_str());
}

// Compares every speculative mode's texts with the none passes' (every "none" mode and
// its --none_repeat pass: greedy decoding under batching is not bit-reproducible, so a
// near-tie can go either way between two plain runs); describes the results in `lines`,
// prints the mismatches (texts equal to no none pass) to stderr, returns their number.
int CheckOutputs(const std::vector<Mode>& modes, const std::vector<ModeRun>& runs, std::vector<std::string>* lines) {
  std::map<std::string, std::vector<const std::string*>> refs;  // prompt -> none texts, first pass first
  for (size_t m = 0; m < modes.size(); ++m) {
    if (modes[m].type != "none") continue;
    for (const auto& [prompt, text] : runs[m].text_of) refs[prompt].push_back(&text);
    for (const auto& [prompt, text] : runs[m].repeat_text_of) refs[prompt].push_back(&text);
  }
  if (refs.empty()) {
    lines->push_back("outputs not checked: no \"none\" mode");
    return 0;
  }
  int unstable = 0;
  for (const auto& [prompt, texts] : refs) {
    for (const std::string* t : texts) {
      if (*t != *texts[0]) {
        ++unstable;
        break;
      }
    }
  }
  lines->push_back(absl::StrCat("none passes: ", refs.size() - unstable, " of ", refs.size(),
                                " prompts gave the same text every pass"));
  int total = 0;
  for (size_t m = 0; m < modes.size(); ++m) {
    if (modes[m].type == "none") continue;
    int compared = 0, first = 0, any = 0;
    for (const auto& [prompt, text] : runs[m].text_of) {
      auto it = refs.find(prompt);
      if (it == refs.end()) continue;
      ++compared;
      first += text == *it->second[0] ? 1 : 0;
      bool found = false;
      for (const std::string* t : it->second) found = found || *t == text;
      if (found) {
        ++any;
      } else {
        PrintMismatch(compared - any, modes[m].name, runs[m].level_of.at(prompt), prompt, text, *it->second[0]);
      }
    }
    lines->push_back(absl::StrCat(modes[m].name, ": ", first, " of ", compared, " equal to none's first pass, ", any,
                                  " to a none pass", any < compared ? " (MISMATCH)" : ""));
    total += compared - any;
  }
  return total;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The markdown table: one row per (mode, level) with the medians of its rounds' figures
// (requests, accepted, drafted, errors and switch-offs summed) and tok/s relative to the
// none mode at the same level: the median of each round's ratio to none's tok/s in the
// same round, each round's ratio listed after it when there are several.
std::string FormatRows(const std::vector<ModeRun>& runs) {
  std::map<std::pair<int, int>, double> none_tok_s;  // (C, round) -> tok/s
  for (const ModeRun& run : runs) {
    for (const Row& r : run.rows) {
      if (r.mode == "none") none_tok_s.try_emplace({r.c, r.round}, r.tok_s);
    }
  }
  std::string out =
      "| mode | C | requests | tok/s | TTFT p50 ms | TTFT p90 ms | ITL p50 ms | ITL p90 ms | accepted / drafted | "
      "acceptance | draft errors | switch-offs | tok/s vs none "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const ModeRun& run : runs) {
    std::vector<int> levels;  // in order of appearance
    for (const Row& r : run.rows) {
      if (std::find(levels.begin(), levels.end(), r.c) == levels.end()) levels.push_back(r.c);
    }
    for (int c : levels) {
      Row sum;
      std::vector<double> tok_s, ttft50, ttft90, itl50, itl90, ratio;
      sum.have_spec = true;
      for (const Row& r : run.rows) {
        if (r.c != c) continue;
        sum.mode = r.mode;
        sum.requests += r.requests;
        tok_s.push_back(r.tok_s);
        ttft50.push_back(r.ttft_p50);
        ttft90.push_back(r.ttft_p90);
        itl50.push_back(r.itl_p50);
        itl90.push_back(r.itl_p90);
        sum.have_spec = sum.have_spec && r.have_spec;
        sum.draft += r.draft;
        sum.accepted += r.accepted;
        sum.errors += r.errors;
        sum.offs += r.offs;
        const auto none = none_tok_s.find({c, r.round});
        if (none != none_tok_s.end() && none->second > 0) ratio.push_back(r.tok_s / none->second);
      }
      std::string vs = ratio.empty() ? "-" : absl::StrFormat("%.2fx", Median(ratio));
      if (ratio.size() > 1) {
        vs += " (" + absl::StrJoin(ratio, ", ", [](std::string* o, double x) { absl::StrAppendFormat(o, "%.2f", x); }) +
              ")";
      }
      const std::string acc =
          !sum.have_spec  ? "- | -"
          : sum.draft > 0 ? absl::StrFormat("%.0f / %.0f | %.2f", sum.accepted, sum.draft, sum.accepted / sum.draft)
                          : absl::StrFormat("%.0f / 0 | -", sum.accepted);
      absl::StrAppendFormat(&out, "| %s | %d | %d | %.1f | %.0f | %.0f | %.1f | %.1f | %s | %s | %s | %s |\n", sum.mode,
                            c, sum.requests, Median(tok_s), Median(ttft50), Median(ttft90), Median(itl50),
                            Median(itl90), acc, sum.have_spec ? absl::StrFormat("%.0f", sum.errors) : "-",
                            sum.have_spec ? absl::StrFormat("%.0f", sum.offs) : "-", vs);
    }
  }
  return out;
}

// Parses --concurrency. Empty on a bad entry (the message printed).
std::vector<int> ParseLevels() {
  std::vector<int> levels;
  for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_concurrency), ',', absl::SkipEmpty())) {
    int v;
    if (!absl::SimpleAtoi(c, &v) || v < 1 || v > 4096) {
      std::fprintf(stderr, "spec_serve_bench: --concurrency: '%s' is not a number in [1, 4096]\n",
                   std::string(c).c_str());
      return {};
    }
    levels.push_back(v);
  }
  return levels;
}

// The --draft_unrelated draft: the same shape, type and vocabulary as `draft`, other
// random weights (WriteModel's threaded generator draws other bytes than the serial one
// CachedModel uses), written once beside it as <name>-unrelated.gguf.
absl::StatusOr<PreparedModel> UnrelatedDraft(const PreparedModel& draft, const std::string& shared) {
  const Shape* shape = FindShape(absl::GetFlag(FLAGS_model));
  GgmlType wt;
  if (shape == nullptr || !ParseGgmlType(absl::AsciiStrToLower(absl::GetFlag(FLAGS_draft_type)), &wt)) {
    return absl::InvalidArgumentError("--draft_unrelated: unknown --model or --draft_type");
  }
  std::string vocab = absl::GetFlag(FLAGS_vocab);
  if (vocab.empty()) vocab = shared + "/models/vocab/ggml-vocab-llama-spm.gguf";
  PreparedModel m = draft;
  m.name = draft.name + "-unrelated";
  m.path = absl::StrCat(draft.dir, "/", m.name, ".gguf");
  if (::access(m.path.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "writing the unrelated draft %s\n", m.path.c_str());
    WriteOptions o;
    o.vocab_path = vocab;
    o.threads = 2;
    const std::string tmp = m.path + ".tmp";
    HERD_RETURN_IF_ERROR(WriteModel(*shape, wt, tmp, o));
    if (std::rename(tmp.c_str(), m.path.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("rename ", tmp, " -> ", m.path, " failed"));
    }
  }
  return m;
}

int Main() {
  const std::vector<int> levels = ParseLevels();
  absl::StatusOr<std::vector<Mode>> modes = ParseModes(absl::GetFlag(FLAGS_modes));
  if (!modes.ok()) return Fail(std::string(modes.status().message()));
  if (levels.empty() || absl::GetFlag(FLAGS_requests_per_client) < 1 || absl::GetFlag(FLAGS_max_tokens) < 2) {
    std::fprintf(stderr,
                 "spec_serve_bench: need --concurrency levels, --requests_per_client >= 1, --max_tokens >= 2\n");
    return 2;
  }
  Models models;
  if (absl::GetFlag(FLAGS_server).empty()) {
    const std::string shared = SharedDir();
    for (auto [type, out] : {std::pair{absl::GetFlag(FLAGS_target_type), &models.target},
                             std::pair{absl::GetFlag(FLAGS_draft_type), &models.draft}}) {
      absl::StatusOr<PreparedModel> m = PrepareModel(absl::GetFlag(FLAGS_model), type, absl::GetFlag(FLAGS_cache_dir),
                                                     absl::GetFlag(FLAGS_vocab), shared);
      if (!m.ok()) return Fail(m.status().ToString());
      *out = *m;
    }
    if (absl::GetFlag(FLAGS_draft_unrelated)) {
      absl::StatusOr<PreparedModel> m = UnrelatedDraft(models.draft, shared);
      if (!m.ok()) return Fail(m.status().ToString());
      models.draft = *m;
    }
  }
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (rounds < 1 || rounds > 100) return Fail("--rounds: want 1 to 100");
  std::vector<ModeRun> runs(modes->size());
  {
    // Every mode's cluster up at once (idle while another mode runs), the order of the
    // modes rotated each round, so that a slower minute of the machine falls on all.
    std::vector<ModeTarget> targets(modes->size());
    absl::Status st;
    for (size_t m = 0; st.ok() && m < modes->size(); ++m) st = StartMode(models, (*modes)[m], levels, &targets[m]);
    for (int r = 0; st.ok() && r < rounds; ++r) {
      for (size_t k = 0; st.ok() && k < modes->size(); ++k) {
        const size_t m = (k + static_cast<size_t>(r)) % modes->size();
        st = RunLevels(targets[m].target, targets[m].metrics, (*modes)[m], levels, r, &runs[m]);
        if (!st.ok()) st = absl::UnavailableError(absl::StrCat((*modes)[m].name, ": ", st.message()));
      }
    }
    StopModes(&targets);
    if (!st.ok()) return Fail(st.ToString());
  }
  for (size_t m = 0; m < modes->size(); ++m) {
    if ((*modes)[m].type != "none" || !absl::GetFlag(FLAGS_none_repeat)) continue;
    if (absl::Status st = RepeatNone(models, (*modes)[m], levels, &runs[m]); !st.ok()) return Fail(st.ToString());
  }
  std::vector<std::string> check;
  const int mismatches = CheckOutputs(*modes, runs, &check);

  const int max_level = *std::max_element(levels.begin(), levels.end());
  const std::string setup =
      absl::GetFlag(FLAGS_server).empty()
          ? absl::StrFormat(
                "%s %s target, %s draft (same weights); 1 worker -t %d, draft workers -t %d, --max-seqs %d, "
                "-c %d",
                absl::GetFlag(FLAGS_model), absl::AsciiStrToUpper(absl::GetFlag(FLAGS_target_type)),
                absl::AsciiStrToUpper(absl::GetFlag(FLAGS_draft_type)), absl::GetFlag(FLAGS_threads),
                absl::GetFlag(FLAGS_draft_threads),
                absl::GetFlag(FLAGS_max_seqs) > 0 ? absl::GetFlag(FLAGS_max_seqs) : std::max(16, max_level),
                absl::GetFlag(FLAGS_ctx))
          : absl::StrCat("server ", absl::GetFlag(FLAGS_server));
  std::printf("## spec_serve_bench: %s\n\n", setup.c_str());
  std::printf(
      "streaming POST /v1/completions, 8-96-word prompts (unique per request), max_tokens %d, temperature 0, "
      "ignore_eos, %d x C requests per level%s; acceptance from the target worker's /metrics over each level\n\n",
      absl::GetFlag(FLAGS_max_tokens), absl::GetFlag(FLAGS_requests_per_client),
      rounds > 1 ? absl::StrFormat(" and round, %d rounds (figures: medians over the rounds)", rounds).c_str() : "");
  std::fputs(FormatRows(runs).c_str(), stdout);
  std::printf("\noutputs: %s\n", absl::StrJoin(check, "; ").c_str());
  std::vector<std::string> notes;
  for (const ModeRun& run : runs) notes.insert(notes.end(), run.notes.begin(), run.notes.end());
  std::printf("\n%s\n", absl::StrJoin(notes, "; ").c_str());
  if (mismatches > 0) return Fail(absl::StrCat(mismatches, " speculative outputs differ from none's"));
  return 0;
}

}  // namespace
}  // namespace herd::bench

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "worker-run speculative decoding under serving load: a local herd cluster per mode (none, n-gram, "
      "draft-model with N draft workers) under C concurrent streaming clients, outputs checked against none.\n"
      "  spec_serve_bench [--modes=none,ngram-simple,draft-model:1,draft-model:2] [--concurrency=1,8,16,32] "
      "[--server=HOST:PORT]");
  absl::ParseCommandLine(argc, argv);
  return herd::bench::Main();
}
