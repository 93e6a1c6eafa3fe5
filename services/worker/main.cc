// herd-worker: one compute backend, one model, continuous batching over its KV cache
// (service herd.v1.Worker), with grpc.health.v1, server reflection and Prometheus
// metrics. The backend is chosen by name (--backend, --device; libs/backend/registry.h).
//
//   worker --loader=HOST:PORT --model=NAME [--port=50053] [--metrics_port=9093]
//   worker --model_path=FILE.gguf [...]
//
// Prints "worker listening on HOST:PORT" and "worker metrics on HOST:PORT" on stdout
// once serving (port 0 picks a free port), so a launcher can read the ports. SIGTERM /
// SIGINT: health turns NOT_SERVING, new sequences are refused (UNAVAILABLE), in-flight
// sessions get --grace_ms to finish and are then cancelled.
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

#include "libs/backend/registry.h"
#include "libs/backend/remote/remote_backend.h"
#include "libs/backend/sched.h"
#include "libs/base/log.h"
#include "libs/clients/address.h"
#include "libs/clients/draft_client.h"
#include "libs/clients/loader_client.h"
#include "libs/engine/engine.h"
#include "libs/engine/scheduler.h"
#include "libs/model/model.h"
#include "libs/serving/flags.h"
#include "libs/serving/metrics.h"
#include "libs/serving/prefix_blocks.h"
#include "libs/serving/security_flags.h"
#include "libs/serving/server.h"
#include "libs/serving/service_flags.h"
#include "libs/serving/service_main.h"
#include "libs/tokenizer/tokenizer.h"
#include "services/worker/worker_service.h"

ABSL_FLAG(std::string, loader, "",
          "Loader address HOST:PORT to fetch --model from (mmap when its file is readable here, else streamed).");
ABSL_FLAG(std::string, model, "", "Model name in the loader's store (with --loader); also the name reported by Info.");
ABSL_FLAG(std::string, model_path, "", "Open this local GGUF file instead of asking a loader.");
ABSL_FLAG(int, load_timeout_ms, 600000,
          "Deadline for fetching the model from the loader (ms); while the loader is unreachable (starting, "
          "restarting) the worker keeps asking until then.");
ABSL_FLAG(int, port, 50053, "gRPC port (0 = pick a free port; the chosen one is printed).");
ABSL_FLAG(int, metrics_port, 9093, "Prometheus /metrics HTTP port (0 = pick a free port; -1 = disabled).");
ABSL_FLAG(int, threads, 0,
          "CPU compute threads (0 = all hardware threads); with a device backend, the CPU fallback's.");
ABSL_FLAG(std::string, backend, "cpu",
          "Compute backend: cpu, vulkan, ... (what this build and machine have is listed when the name is wrong); or "
          "a comma-separated list splitting the model's layers across backends in list order, remote compute "
          "servers (herd-compute) as remote://HOST:PORT: cpu,remote://10.0.0.7:50061");
ABSL_FLAG(std::string, tensor_split, "",
          "With a --backend list: the share of the layers each listed backend holds, comma-separated (llama.cpp's "
          "--tensor-split: 3,1 = three quarters on the first); empty = even");
ABSL_FLAG(int, remote_timeout_ms, 30000,
          "Deadline of every call to a remote compute server (ms): a forward pass whose server does not answer in "
          "time fails with UNAVAILABLE naming it");
ABSL_FLAG(int, device, 0, "Device index within --backend (its devices are listed when the index is wrong).");
ABSL_FLAG(int64_t, n_ctx, 0, "KV cache cells shared by all sequences (0 = the model's context length, at most 4096).");
ABSL_FLAG(int64_t, n_ctx_seq, 0, "Most KV cells one sequence may use, its context (0 = n_ctx, the whole pool).");
ABSL_FLAG(int64_t, n_batch, 512, "Most tokens in one forward pass (prompt chunks + decode tokens + drafts).");
ABSL_FLAG(int, max_sequences, 8,
          "Most sequences active at once; they share the n_ctx KV cells as they grow (preempted when full).");
ABSL_FLAG(bool, prefix_cache, true,
          "Keep ended sequences' KV cells and reuse them for prompts sharing a prefix (evicted when room is needed).");
ABSL_FLAG(int, max_cached_prefixes, 64, "Most cached prompt prefixes kept (least recently used dropped first).");
// Speculation run by the worker (SessionStart.speculative; WorkerInfo.spec_types).
ABSL_FLAG(bool, worker_speculation, true,
          "draft here: the scheduler asks every speculative sequence's draft once per pass (n-gram types "
          "in-process, draft-model from --draft_workers) and sizes drafts to acceptance and load; false: callers "
          "(an older gateway) send drafts with each step");
ABSL_FLAG(bool, adaptive_speculation, true,
          "size each draft to its sequence's acceptance and the batch's per-token cost, and pause drafting while "
          "it measures no speedup (false: every draft asks for draft_max)");
ABSL_FLAG(std::string, draft_workers, "",
          "comma-separated draft worker addresses \"h1:p1,h2:p2\" (herd.v1.Draft) for draft-model speculation");
ABSL_FLAG(std::string, draft_workers_dns, "",
          "NAME:PORT; every address NAME resolves to is a draft worker (e.g. a Kubernetes headless service)");
ABSL_FLAG(int, draft_timeout_ms, 50,
          "deadline of each pass's draft call; a late, failing or absent draft worker means plain steps, never an "
          "error");
ABSL_FLAG(int, max_prefill_tokens, 256,
          "Most prompt tokens one forward pass prefills while several sequences are active (0 = n_batch): prompts "
          "arriving together start streaming sooner.");
ABSL_FLAG(int, max_prefill_ms, 0,
          "With several sequences active, also bound a pass's prompt tokens to what fits in this many ms at the "
          "measured pass cost (0 = off): keeps inter-token latency and the wait of cached or short prompts behind a "
          "long uncached one near this bound on a slow or shared host.");
ABSL_FLAG(int, max_queue, 64, "Most sequences waiting for admission with --queue_policy=wait.");
ABSL_FLAG(std::string, queue_policy, "wait",
          "When every slot is busy: wait (FIFO queue of --max_queue) or reject (RESOURCE_EXHAUSTED).");
ABSL_FLAG(int, max_draft, 1024, "Longest draft a Step may carry (longer: INVALID_ARGUMENT).");
ABSL_FLAG(std::string, kv_type, "f16", "KV cache element type: f16 or f32.");
ABSL_FLAG(bool, repack, true,
          "CPU: repack Q4_0/Q8_0/F16 matmul weights at load into the batched kernels' 8-row panels (llama.cpp's "
          "CPU_REPACK; --norepack is llama.cpp's --no-repack: the kernels then repack per call).");
ABSL_FLAG(int32_t, prefix_block_tokens, 16,
          "Block size (tokens) of the prefix-cache digest WorkerInfo carries for the gateway's prefix-aware routing "
          "(0: no digest).");
ABSL_FLAG(int32_t, prefix_digest_max_blocks, 65536, "Most block hashes one prefix-cache digest carries.");
ABSL_FLAG(bool, ggml_order, false,
          "CPU: reproduce llama.cpp's x86 CPU results bit for bit: Q8_0/Q5_0 weights stay unpacked and are summed in "
          "ggml's 8-float-lane order (prompt processing of those types 4-5x slower, decode 20-40%). For checking "
          "against llama.cpp.");
ABSL_FLAG(bool, shared_prefix_attention, false,
          "CPU, F16 KV: a batch (decode steps, and prompt chunks of streams that start together) attends KV cells "
          "that several sequences share (a common prompt prefix) once per 64 tokens for all of them, merging by "
          "log-sum-exp (F32). Greedy output then depends on the batch's composition (not "
          "bit-identical to solo or speculative decoding). Ignored with --ggml_order.");
ABSL_FLAG(bool, pin_threads, false,
          "CPU: bind each compute thread to its own core (llama.cpp's --cpu-strict 1). For a pod given whole cores "
          "(the static CPU manager policy); under a CFS quota the kernel's placement shares better.");
ABSL_FLAG(std::string, pooling, "",
          "Embeddings pooling of requests that name none: mean, cls or last (llama.cpp --pooling); "
          "empty = the GGUF's <arch>.pooling_type, else mean");
ABSL_FLAG(bool, matryoshka, false,
          "The model's embeddings may be truncated to a prefix (Matryoshka-trained): enables OpenAI `dimensions`");

namespace {

int Fail(const std::string& msg) { return herd::serving::StartupFailure("herd-worker", msg); }

std::string BaseName(const std::string& path) {
  std::string b = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (b.size() > 5 && b.substr(b.size() - 5) == ".gguf") b.resize(b.size() - 5);
  return b;
}

// The worker's own flags, in range. Errors: INVALID_ARGUMENT naming the flag.
absl::Status CheckFlags(const herd::serving::ServiceFlags& flags) {
  auto bad = [](const std::string& msg) { return absl::InvalidArgumentError(msg); };
  const std::string loader_addr = absl::GetFlag(FLAGS_loader), model_name_flag = absl::GetFlag(FLAGS_model),
                    model_path = absl::GetFlag(FLAGS_model_path);
  if (model_path.empty() && (loader_addr.empty() || model_name_flag.empty())) {
    return bad("give --model_path=FILE, or --loader=HOST:PORT with --model=NAME");
  }
  const int threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0 || threads > 1024) return bad(absl::StrCat("--threads ", threads, " is outside 0..1024"));
  const int64_t n_ctx = absl::GetFlag(FLAGS_n_ctx), n_ctx_seq = absl::GetFlag(FLAGS_n_ctx_seq),
                n_batch = absl::GetFlag(FLAGS_n_batch);
  if (n_ctx < 0 || n_ctx > (int64_t{1} << 24)) return bad(absl::StrCat("--n_ctx ", n_ctx, " is outside 0..16777216"));
  if (n_ctx_seq < 0) return bad(absl::StrCat("--n_ctx_seq ", n_ctx_seq, " must be >= 0"));
  if (n_batch < 1 || n_batch > 65536) return bad(absl::StrCat("--n_batch ", n_batch, " is outside 1..65536"));
  const int max_sequences = absl::GetFlag(FLAGS_max_sequences), max_queue = absl::GetFlag(FLAGS_max_queue);
  if (max_sequences < 1 || max_sequences > 4096) {
    return bad(absl::StrCat("--max_sequences ", max_sequences, " is outside 1..4096"));
  }
  if (max_queue < 0) return bad(absl::StrCat("--max_queue ", max_queue, " must be >= 0"));
  const std::string policy = absl::GetFlag(FLAGS_queue_policy), kv_type = absl::GetFlag(FLAGS_kv_type);
  if (policy != "wait" && policy != "reject") return bad("--queue_policy must be wait or reject, got " + policy);
  if (kv_type != "f16" && kv_type != "f32") return bad("--kv_type must be f16 or f32, got " + kv_type);
  if (absl::GetFlag(FLAGS_max_draft) < 0) return bad("--max_draft must be >= 0");
  if (absl::GetFlag(FLAGS_load_timeout_ms) < 1) return bad("--load_timeout_ms must be >= 1");
  if (flags.max_message_bytes < (1 << 20)) return bad("--max_message_bytes must be >= 1048576");
  return absl::OkStatus();
}

// The model of --model_path, or --model fetched from --loader; `*name` is its name (the
// file's base name when --model is not given). Errors: the message to fail start-up with.
absl::StatusOr<std::unique_ptr<herd::model::Model>> LoadModel(const herd::serving::ServiceFlags& flags,
                                                              const herd::serving::ClientSecurity& client_security,
                                                              std::string* name) {
  const std::string loader_addr = absl::GetFlag(FLAGS_loader), model_path = absl::GetFlag(FLAGS_model_path);
  *name = absl::GetFlag(FLAGS_model);
  if (!model_path.empty()) {
    auto m = herd::model::Model::Load(model_path);
    if (!m.ok()) {
      return absl::Status(m.status().code(), absl::StrCat("--model_path ", model_path, ": ", m.status().message()));
    }
    if (name->empty()) *name = BaseName(model_path);
    return m;
  }
  auto channel = herd::loader::MakeLoaderChannel(loader_addr, flags.max_message_bytes, client_security);
  auto stub = herd::v1::Loader::NewStub(channel);
  herd::loader::FetchStats fs;
  herd::loader::FetchOptions fopts;
  fopts.wait_for_loader = true;  // a loader that is (re)starting: retry until --load_timeout_ms
  auto f = herd::loader::FetchModel(stub.get(), *name, std::chrono::milliseconds(absl::GetFlag(FLAGS_load_timeout_ms)),
                                    fopts, &fs);
  if (!f.ok()) {
    return absl::Status(f.status().code(),
                        absl::StrCat("fetching model ", *name, " from ", loader_addr, ": ", f.status().ToString()));
  }
  HERD_LOG(Info) << "worker: model " << *name << " from " << loader_addr
                 << (fs.mmapped ? " (mapped the loader's file)"
                                : absl::StrCat(" (streamed ", fs.bytes_streamed, " bytes)"));
  auto m = herd::model::Model::FromGguf(*std::move(f));
  if (!m.ok()) return absl::Status(m.status().code(), absl::StrCat("model ", *name, ": ", m.status().message()));
  return m;
}

// The service's options from the flags and the model. Errors: INVALID_ARGUMENT naming
// the flag (--pooling, --prefix_block_tokens, --prefix_digest_max_blocks).
absl::StatusOr<herd::worker::WorkerServiceOptions> ServiceOptions(const herd::model::Model& model,
                                                                  const std::string& model_name,
                                                                  const std::string& backend_name) {
  herd::worker::WorkerServiceOptions wopts;
  wopts.model_name = model_name;
  wopts.architecture = model.hparams().arch;
  wopts.backend = backend_name;
  wopts.default_pooling = herd::engine::DefaultPooling(model.file(), model.hparams().arch);
  if (const std::string p = absl::GetFlag(FLAGS_pooling); !p.empty()) {
    auto parsed = herd::engine::ParsePooling(p);
    if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("--pooling: ", parsed.status().message()));
    wopts.default_pooling = *parsed;
  }
  wopts.matryoshka = absl::GetFlag(FLAGS_matryoshka);
  wopts.prefix_block_tokens = absl::GetFlag(FLAGS_prefix_block_tokens);
  wopts.prefix_digest_max_blocks = absl::GetFlag(FLAGS_prefix_digest_max_blocks);
  wopts.worker_speculation = absl::GetFlag(FLAGS_worker_speculation);
  if (wopts.prefix_block_tokens < 0 || wopts.prefix_block_tokens > herd::serving::kMaxPrefixBlockTokens) {
    return absl::InvalidArgumentError(absl::StrCat("--prefix_block_tokens ", wopts.prefix_block_tokens,
                                                   " must be in [0, ", herd::serving::kMaxPrefixBlockTokens, "]"));
  }
  if (wopts.prefix_digest_max_blocks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefix_digest_max_blocks ", wopts.prefix_digest_max_blocks, " must be >= 0"));
  }
  return wopts;
}

// The draft workers of draft-model speculation (--draft_workers, --draft_workers_dns,
// --draft_timeout_ms). Errors: INVALID_ARGUMENT naming the flag.
absl::StatusOr<herd::draft::DraftClientOptions> DraftClientOptions(const herd::serving::ClientSecurity& security) {
  herd::draft::DraftClientOptions o;
  if (!absl::GetFlag(FLAGS_draft_workers).empty()) {
    auto list = herd::clients::ParseAddressList(absl::GetFlag(FLAGS_draft_workers), "draft_workers");
    if (!list.ok()) return absl::InvalidArgumentError(absl::StrCat("--", list.status().message()));
    o.addresses = *list;
  }
  o.dns = absl::GetFlag(FLAGS_draft_workers_dns);
  if (absl::GetFlag(FLAGS_draft_timeout_ms) < 1) return absl::InvalidArgumentError("--draft_timeout_ms must be >= 1");
  o.deadline = std::chrono::milliseconds(absl::GetFlag(FLAGS_draft_timeout_ms));
  o.security = security;
  return o;
}

// On shutdown: stop admitting, then wait up to `grace` for the open sessions to end.
// The backend of --backend: one kind, or a layer split over a list with remote compute
// servers reached with the worker's client security (TLS, cluster key).
absl::StatusOr<std::unique_ptr<herd::Backend>> MakeBackend(const std::string& spec, const herd::BackendOptions& bopts,
                                                           const herd::model::Model& model,
                                                           const herd::serving::ClientSecurity& security) {
  if (!herd::IsSplitSpec(spec)) {
    if (!absl::GetFlag(FLAGS_tensor_split).empty()) {
      return absl::InvalidArgumentError(
          "--tensor_split needs a --backend list to split over (e.g. --backend cpu,remote://HOST:PORT)");
    }
    return herd::CreateBackend(spec, bopts);
  }
  herd::SplitOptions so;
  so.n_layer = model.hparams().n_layer;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_tensor_split), ',', absl::SkipEmpty())) {
    double v = 0;
    if (!absl::SimpleAtod(part, &v) || !(v >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat("--tensor_split: '", part, "' is not a number >= 0"));
    }
    so.tensor_split.push_back(v);
  }
  // The weights' bytes stay in the model's mapping for the worker's life: a compute server
  // that restarts gets them again from there.
  const uint8_t* lo = nullptr;
  const uint8_t* hi = nullptr;
  for (const auto& t : model.file().tensors()) {
    if (t.data == nullptr) continue;
    if (lo == nullptr || t.data < lo) lo = t.data;
    if (hi == nullptr || t.data + t.nbytes > hi) hi = t.data + t.nbytes;
  }
  const int timeout_ms = absl::GetFlag(FLAGS_remote_timeout_ms);
  so.connect_remote = [&, lo, hi,
                       timeout_ms](const std::string& address) -> absl::StatusOr<std::unique_ptr<herd::Backend>> {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(64 << 20);
    args.SetMaxSendMessageSize(64 << 20);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    herd::remote::RemoteOptions ro;
    ro.address = address;
    ro.channel = herd::serving::MakeChannel(address, security, args);
    ro.timeout = std::chrono::milliseconds(timeout_ms);
    absl::StatusOr<std::unique_ptr<herd::remote::RemoteBackend>> b = herd::remote::RemoteBackend::Connect(ro);
    if (!b.ok()) return b.status();
    if (lo != nullptr) (*b)->AddStableHostRegion(lo, static_cast<size_t>(hi - lo));
    return std::unique_ptr<herd::Backend>(*std::move(b));
  };
  absl::StatusOr<std::unique_ptr<herd::Backend>> b = herd::CreateSplitBackend(spec, bopts, so);
  if (!b.ok()) return b.status();
  // Which layers went where: "layers 0-2 and the input on CPU; layers 3-4 and the output on
  // Remote(10.0.0.7:50061)".
  if (auto* sched = dynamic_cast<herd::Scheduler*>(b->get()); sched != nullptr) {
    const std::vector<size_t>& at = sched->layer_placement();
    std::vector<std::string> parts;
    for (size_t k = 0; k < sched->n_backends(); ++k) {
      std::vector<std::string> what;
      int64_t first = -1, last = -1;
      for (int64_t il = 0; il < so.n_layer; ++il) {
        if (at[static_cast<size_t>(il) + 1] != k) continue;
        if (first < 0) first = il;
        last = il;
      }
      if (first >= 0) what.push_back(absl::StrCat("layers ", first, "-", last));
      if (at.front() == k) what.push_back("the input");
      if (at.back() == k) what.push_back("the output");
      if (!what.empty()) parts.push_back(absl::StrCat(absl::StrJoin(what, " and "), " on ", sched->backend(k)->name()));
    }
    HERD_LOG(Info) << "worker: layer split of " << so.n_layer << " layers: " << absl::StrJoin(parts, "; ");
  }
  return b;
}

// Watches a backend that can be lost (remote compute servers) once a second: health
// NOT_SERVING (and Info / new sessions UNAVAILABLE, so the gateway routes elsewhere) while
// it cannot be reached, SERVING again when it answers; after a server
// restart (DATA_LOSS: its weights were sent again) the KV cache is dropped first, ending
// the sequences that used it.
class DeviceWatch {
 public:
  DeviceWatch(herd::Backend* backend, herd::engine::Scheduler* scheduler, herd::worker::WorkerServiceImpl* service,
              grpc::Server* server)
      : backend_(backend), scheduler_(scheduler), service_(service), server_(server), thread_([this] { Run(); }) {}
  ~DeviceWatch() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    bool serving = true;
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      l.unlock();
      absl::Status s = backend_->CheckDevice();
      if (absl::IsDataLoss(s)) {
        HERD_LOG(Warning) << "worker: " << s.message() << "; dropping the KV cache";
        scheduler_->DropKvCache(absl::UnavailableError(std::string(s.message())));
        s = absl::OkStatus();
      }
      l.lock();
      if (stop_) break;
      if (s.ok() != serving) {
        serving = s.ok();
        service_->SetBackendStatus(s);  // Info and new sessions: UNAVAILABLE while down
        server_->GetHealthCheckService()->SetServingStatus(serving);
        if (serving) {
          HERD_LOG(Info) << "worker: the backend is back: SERVING";
        } else {
          HERD_LOG(Warning) << "worker: NOT_SERVING: " << s.message();
        }
      }
      cv_.wait_for(l, std::chrono::seconds(1), [&] { return stop_; });
    }
  }

  herd::Backend* backend_;
  herd::engine::Scheduler* scheduler_;
  herd::worker::WorkerServiceImpl* service_;
  grpc::Server* server_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

void DrainSessions(herd::worker::WorkerServiceImpl* service, std::chrono::milliseconds grace) {
  service->StopAdmitting();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  HERD_LOG(Info) << "worker: draining " << service->open_sessions() << " open sessions for up to " << grace.count()
                 << " ms";
  while (service->open_sessions() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (service->open_sessions() > 0) {
    HERD_LOG(Warning) << "worker: grace period over; cancelling " << service->open_sessions() << " sessions";
  }
}

}  // namespace

int main(int argc, char** argv) {
  herd::serving::ParseServiceFlags(
      argc, argv, "herd-worker",
      "herd-worker (--loader=HOST:PORT --model=NAME | --model_path=FILE.gguf) [--port=N] [--metrics_port=N]\n"
      "  [--threads=N] [--n_ctx=N] [--n_ctx_seq=N] [--n_batch=N] [--max_sequences=N] [--max_queue=N]\n"
      "  [--queue_policy=wait|reject] [--prefix_cache=true|false] [--max_cached_prefixes=N] [--kv_type=f16|f32]\n"
      "  [--grace_ms=N]: a herd compute worker",
      "services/worker/");
  // SIGTERM/SIGINT before the server's handlers are installed (while the model loads)
  // must not kill the process: remember it (exit after loading, or Wait() returns).
  herd::serving::CatchSignalsEarly();

  auto flags = herd::serving::ReadServiceFlags(absl::GetFlag(FLAGS_port), absl::GetFlag(FLAGS_metrics_port));
  if (!flags.ok()) return Fail(std::string(flags.status().message()));
  const std::string host = flags->host;
  const int metrics_port = flags->metrics_port;
  if (absl::Status s = CheckFlags(*flags); !s.ok()) return Fail(std::string(s.message()));
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const int64_t n_batch = absl::GetFlag(FLAGS_n_batch);
  const std::string policy = absl::GetFlag(FLAGS_queue_policy), kv_type = absl::GetFlag(FLAGS_kv_type);

  auto security = herd::serving::InternalSecurityFromFlags();
  if (!security.ok()) return Fail(std::string(security.status().message()));
  auto client_security = herd::serving::ClientSecurityFromFlags();
  if (!client_security.ok()) return Fail(std::string(client_security.status().message()));

  // The model: a local file, or through the loader.
  std::string model_name;
  auto loaded = LoadModel(*flags, *client_security, &model_name);
  if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
  std::unique_ptr<herd::model::Model> model = *std::move(loaded);
  auto vocab = herd::tokenizer::Vocab::FromGguf(model->file());
  if (!vocab.ok()) return Fail(absl::StrCat("model ", model_name, " vocabulary: ", vocab.status().message()));

  herd::BackendOptions bopts;
  bopts.n_threads = threads;
  bopts.device = absl::GetFlag(FLAGS_device);
  bopts.repack = absl::GetFlag(FLAGS_repack);
  bopts.pin_threads = absl::GetFlag(FLAGS_pin_threads);
  bopts.ggml_order = absl::GetFlag(FLAGS_ggml_order);
  bopts.shared_prefix_attention = absl::GetFlag(FLAGS_shared_prefix_attention);
  const std::string backend_name = absl::GetFlag(FLAGS_backend);
  auto backend = MakeBackend(backend_name, bopts, *model, *client_security);
  if (!backend.ok()) return Fail(absl::StrCat("--backend ", backend_name, ": ", backend.status().message()));
  if (absl::Status s = model->PlaceWeights(backend->get()); !s.ok()) {
    return Fail(absl::StrCat("model ", model_name, " on ", (*backend)->device().name, ": ", s.message()));
  }

  herd::engine::EngineParams ep;
  ep.n_ctx = absl::GetFlag(FLAGS_n_ctx);
  ep.n_batch = n_batch;
  ep.kv_type = kv_type == "f32" ? herd::GgmlType::F32 : herd::GgmlType::F16;
  auto engine = herd::engine::Engine::Create(*model, ep, backend->get());
  if (!engine.ok()) return Fail(absl::StrCat("engine: ", engine.status().message()));

  herd::engine::SchedulerConfig sc;
  sc.max_sequences = absl::GetFlag(FLAGS_max_sequences);
  sc.n_ctx_seq = absl::GetFlag(FLAGS_n_ctx_seq);
  sc.prefix_cache = absl::GetFlag(FLAGS_prefix_cache);
  sc.max_cached_prefixes = absl::GetFlag(FLAGS_max_cached_prefixes);
  sc.max_prefill_tokens = absl::GetFlag(FLAGS_max_prefill_tokens);
  sc.max_prefill_ms = absl::GetFlag(FLAGS_max_prefill_ms);
  sc.max_queue = absl::GetFlag(FLAGS_max_queue);
  sc.queue_policy = policy == "reject" ? herd::engine::QueuePolicy::kReject : herd::engine::QueuePolicy::kWait;
  sc.max_draft = absl::GetFlag(FLAGS_max_draft);
  sc.adaptive_speculation = absl::GetFlag(FLAGS_adaptive_speculation);
  auto scheduler = herd::engine::Scheduler::Create(engine->get(), vocab->get(), sc);
  if (!scheduler.ok()) return Fail(absl::StrCat("scheduler: ", scheduler.status().message()));

  if (herd::serving::SignalledEarly()) {
    HERD_LOG(Info) << "worker: signalled while loading; exiting";
    return 0;
  }

  herd::serving::Registry registry;
  auto wopts = ServiceOptions(*model, model_name, backend_name);
  if (!wopts.ok()) return Fail(std::string(wopts.status().message()));
  auto drafts = DraftClientOptions(*client_security);
  if (!drafts.ok()) return Fail(std::string(drafts.status().message()));
  std::unique_ptr<herd::draft::DraftClient> draft_client;
  if (wopts->worker_speculation && (!drafts->addresses.empty() || !drafts->dns.empty())) {
    draft_client = std::make_unique<herd::draft::DraftClient>(*std::move(drafts));
    wopts->draft_client = draft_client.get();
  }
  auto service = std::make_unique<herd::worker::WorkerServiceImpl>(scheduler->get(), *wopts, &registry);

  herd::serving::ServiceMain process("worker");
  auto m =
      process.StartMetrics(&registry, herd::serving::MetricsServerOptions(&security->cluster_keys), host, metrics_port);
  if (!m.ok()) return Fail(std::string(m.status().message()));
  herd::serving::GrpcServerOptions gopts = herd::serving::GrpcOptions(*flags, std::move(security->server));
  HERD_LOG(Info) << "worker: gRPC " << herd::serving::DescribeServerSecurity(gopts.security);
  auto server = process.StartGrpc(gopts, {service.get()}, "herd.v1.Worker");
  if (!server.ok()) return Fail(std::string(server.status().message()));

  HERD_LOG(Info) << "worker: model " << model_name << " (" << model->hparams().arch << ", n_vocab "
                 << model->hparams().n_vocab << "), backend " << backend_name << " on " << (*backend)->device().name
                 << " (" << (*backend)->device().description << "), " << threads << " CPU threads"
                 << ", n_ctx " << (*scheduler)->n_ctx() << ", n_ctx_seq " << (*scheduler)->n_ctx_seq() << ", n_batch "
                 << n_batch << ", " << (*scheduler)->capacity() << " sequences, queue " << policy;
  process.PrintListening(host);
  // A backend that can be lost (a remote compute server) is watched: health follows it.
  std::unique_ptr<DeviceWatch> watch;
  if (herd::IsSplitSpec(backend_name)) {
    watch = std::make_unique<DeviceWatch>(backend->get(), scheduler->get(), service.get(), process.server());
  }

  // Drain here rather than in grpc::Server::Shutdown(deadline), which also waits for idle
  // client connections to go away: once the last session ends, shut down at once.
  process.Wait(std::chrono::milliseconds(0), [&] {
    if (watch != nullptr) {
      watch->Stop();
      process.server()->GetHealthCheckService()->SetServingStatus(false);  // the watch may have set it
    }
    DrainSessions(service.get(), gopts.shutdown_grace);
  });
  process.ResetServer();  // every session has finished (or was cancelled at the grace deadline)
  service.reset();
  (*scheduler)->Shutdown();
  process.StopMetrics();
  HERD_LOG(Info) << "worker: stopped";
  return 0;
}
