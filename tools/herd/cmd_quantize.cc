// herd quantize [flags] IN OUT TYPE [NTHREADS]: llama-quantize's command line over
// herd::quant::QuantizeModel (libs/quant). Flags (before the positional arguments,
// as llama-quantize takes them, or after):
//   --pure, --output-tensor-type T, --token-embedding-type T,
//   --tensor-type PATTERN=TYPE (repeatable), -t/--threads N, --dry-run, -h/--help.
// On a terminal a progress bar is drawn on stderr; Ctrl-C cancels (nothing is left).
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/gguf/gguf.h"
#include "libs/quant/quantize.h"
#include "libs/quant/type_rules.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {

std::atomic<bool> g_cancel{false};

void OnSigint(int) { g_cancel.store(true); }

std::string Usage() {
  return absl::StrCat(
      "usage: herd quantize [flags] IN.gguf OUT.gguf TYPE [NTHREADS]\n"
      "  TYPE: ",
      absl::StrJoin(quant::SupportedFileTypes(), " "),
      " (or the numeric llama_ftype)\n"
      "  --pure                        every 2-D weight gets TYPE's tensor type (no mixture rules)\n"
      "  --output-tensor-type T        ggml type for output.weight (q8_0, q6_K, f16, ...)\n"
      "  --token-embedding-type T      ggml type for token_embd.weight\n"
      "  --tensor-type PATTERN=T       tensors whose name matches the regex get type T (repeatable)\n"
      "  -t, --threads N               quantization threads (default: hardware threads)\n"
      "  --dry-run                     print the tensor types and sizes, write nothing\n");
}

int UsageError(const std::string& msg) {
  std::fprintf(stderr, "herd: quantize: %s\n%s", msg.c_str(), Usage().c_str());
  return 2;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "herd: error: %s\n", std::string(s.message()).c_str());
  return 1;
}

std::string Mib(uint64_t bytes) {
  return absl::StrCat(absl::SixDigits(static_cast<double>(bytes) / 1048576.0), " MiB");
}

std::string Clock(double s) {
  if (s < 0) return "--:--";
  const int t = static_cast<int>(s + 0.5);
  char buf[32];
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%02d:%02d", t / 60, t % 60);
  return buf;
}

// One progress-bar line, redrawn in place on a terminal.
void DrawBar(const quant::QuantizeProgress& p) {
  const double frac = p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1.0;
  constexpr int kWidth = 30;
  const int fill = static_cast<int>(frac * kWidth + 0.5);
  std::string bar(static_cast<size_t>(fill), '=');
  if (fill < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  std::string name = p.current_tensor;
  if (name.size() > 32) name = name.substr(0, 29) + "...";
  std::fprintf(stderr, "\r\033[K[%s] %3d%% %d/%d tensors, %.1f/%.1f MiB, %s elapsed, ETA %s %s", bar.c_str(),
               static_cast<int>(frac * 100.0 + 0.5), p.tensors_done, p.tensors_total,
               static_cast<double>(p.bytes_done) / 1048576.0, static_cast<double>(p.bytes_total) / 1048576.0,
               Clock(p.elapsed_s).c_str(), Clock(p.eta_s).c_str(), name.c_str());
  std::fflush(stderr);
}

// --dry-run: the plan llama-quantize --dry-run prints, without writing anything.
int DryRun(const std::string& in, const quant::QuantizeOptions& o) {
  auto file = gguf::GgufFile::Open(in);
  if (!file.ok()) return Fail(file.status());
  auto info = quant::ReadModelInfo(**file);
  if (!info.ok()) return Fail(info.status());
  quant::TypeOptions t;
  auto ft = quant::ParseFileType(o.type);
  if (!ft.ok()) return Fail(ft.status());
  t.file_type = *ft;
  t.pure = o.pure;
  if (!o.output_tensor_type.empty()) {
    auto v = quant::ParseQuantType(o.output_tensor_type, "--output-tensor-type");
    if (!v.ok()) return Fail(v.status());
    t.has_output_tensor_type = true;
    t.output_tensor_type = *v;
  }
  if (!o.token_embedding_type.empty()) {
    auto v = quant::ParseQuantType(o.token_embedding_type, "--token-embedding-type");
    if (!v.ok()) return Fail(v.status());
    t.has_token_embedding_type = true;
    t.token_embedding_type = *v;
  }
  for (const std::string& s : o.tensor_type_overrides) {
    auto v = quant::ParseTensorTypeOverride(s, "--tensor-type");
    if (!v.ok()) return Fail(v.status());
    t.overrides.push_back(std::move(*v));
  }
  auto plans = quant::PlanTensorTypes(**file, *info, t);
  if (!plans.ok()) return Fail(plans.status());
  uint64_t before = 0, after = 0;
  for (const quant::TensorPlan& p : *plans) {
    const size_t out = GgmlRowSize(p.type, p.src->ne[0]) * static_cast<size_t>(p.src->nelements() / p.src->ne[0]);
    before += p.src->nbytes;
    after += out;
    std::printf("%-40s %-6s -> %-6s %10zu bytes%s%s\n", p.src->name.c_str(), GgmlTypeName(p.src->type).c_str(),
                GgmlTypeName(p.type).c_str(), out, p.note.empty() ? "" : "  ", p.note.c_str());
  }
  std::printf("%s: %s -> %s\n", t.file_type.name.c_str(), Mib(before).c_str(), Mib(after).c_str());
  return 0;
}

}  // namespace

int CmdQuantize(int argc, char** argv) {
  quant::QuantizeOptions o;
  o.n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool dry_run = false;
  std::vector<std::string> pos;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      std::fputs(Usage().c_str(), stdout);
      return 0;
    } else if (a == "--pure") {
      o.pure = true;
    } else if (a == "--dry-run") {
      dry_run = true;
    } else if (a == "--output-tensor-type") {
      if (!value(&o.output_tensor_type)) return UsageError("--output-tensor-type needs a type");
    } else if (a == "--token-embedding-type") {
      if (!value(&o.token_embedding_type)) return UsageError("--token-embedding-type needs a type");
    } else if (a == "--tensor-type") {
      if (!value(&v)) return UsageError("--tensor-type needs PATTERN=TYPE");
      o.tensor_type_overrides.push_back(v);
    } else if (a == "-t" || a == "--threads") {
      int n;
      if (!value(&v) || !absl::SimpleAtoi(v, &n) || n < 1) return UsageError("-t needs a thread count >= 1");
      o.n_threads = n;
    } else if (a.size() > 1 && a[0] == '-') {
      return UsageError("unknown flag " + a);
    } else {
      pos.push_back(a);
    }
  }
  if (dry_run) {
    if (pos.size() < 2) return UsageError("--dry-run needs IN.gguf TYPE");
    o.type = pos.back();
    return DryRun(pos[0], o);
  }
  if (pos.size() < 3 || pos.size() > 4) return UsageError("expected IN.gguf OUT.gguf TYPE [NTHREADS]");
  o.type = pos[2];
  if (pos.size() == 4) {
    int n;
    if (!absl::SimpleAtoi(pos[3], &n) || n < 1) return UsageError("NTHREADS must be an integer >= 1");
    o.n_threads = n;
  }

  const bool tty = ::isatty(STDERR_FILENO) != 0;
  std::signal(SIGINT, OnSigint);
  quant::QuantizeProgress last{};
  absl::Status s = quant::QuantizeModel(
      pos[0], pos[1], o,
      [&](const quant::QuantizeProgress& p) {
        last = p;
        if (tty) DrawBar(p);
      },
      &g_cancel);
  std::signal(SIGINT, SIG_DFL);
  if (tty) std::fputs("\n", stderr);
  if (!s.ok()) return Fail(s);

  auto out = gguf::GgufFile::Open(pos[1]);
  if (!out.ok()) return Fail(out.status());
  std::map<std::string, int> counts;
  uint64_t bytes = 0, elements = 0;
  for (const gguf::TensorInfo& t : (*out)->tensors()) {
    ++counts[GgmlTypeName(t.type)];
    bytes += t.nbytes;
    elements += static_cast<uint64_t>(t.nelements());
  }
  std::string types;
  for (const auto& [name, n] : counts) absl::StrAppend(&types, types.empty() ? "" : ", ", name, " ", n);
  std::fprintf(stderr, "herd: wrote %s: %s, %zu tensors (%s), %s -> %s (%.2f bits per weight), %.2f s\n",
               pos[1].c_str(), quant::ParseFileType(o.type)->name.c_str(), (*out)->tensors().size(), types.c_str(),
               Mib(last.bytes_total).c_str(), Mib(bytes).c_str(),
               elements > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(elements) : 0.0, last.elapsed_s);
  return 0;
}

}  // namespace herd::cli
