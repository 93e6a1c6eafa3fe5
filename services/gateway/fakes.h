// In-process fakes of herd.v1.Worker and herd.v1.Loader on 127.0.0.1 for the gateway's
// tests: scripted token streams, configurable load, refusal, slowness and death.
#pragma once
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

#include "proto/herd/v1/loader.grpc.pb.h"
#include "proto/herd/v1/worker.grpc.pb.h"

namespace herd::gateway::testing {

/// Polls `pred` every 5 ms until it holds (true) or timeout_ms pass (then pred() once more).
bool WaitFor(const std::function<bool()>& pred, int timeout_ms = 5000);

struct FakeWorkerConfig {
  std::string model = "stories260K";
  std::string architecture = "llama";
  std::string backend = "cpu";
  int64_t n_ctx = 1024;
  int64_t n_ctx_seq = 256;
  int64_t n_vocab = 512;
  int32_t max_sequences = 8;
  // Load reported by Info.
  int32_t active = 0;
  int32_t queued = 0;
  int64_t kv_cells_used = 0;
  int64_t kv_cells_cached = 0;
  // Tokens emitted one per forward pass, in order. After the script: the EOS token
  // (eos = true; it ends the current Step's run, a later Step gets EOS again) when
  // eos_after_script, else the script again from the start.
  std::vector<int32_t> script = {300, 301, 302};
  bool eos_after_script = true;
  int32_t eos_id = 2;
  int token_delay_ms = 0;
  // Answer Session with this error after reading Start (OK = serve).
  grpc::StatusCode refuse = grpc::StatusCode::OK;
  // Info fails (as if the worker were unhealthy) when true.
  bool info_fails = false;
  // Info answers after this long (a worker too busy to answer its poll in time).
  int info_delay_ms = 0;
  // Embed: answers this error (OK = serve). Served vectors are {n_tokens, first token,
  // last token, pooling} as floats (pooling UNSPECIFIED reported as LAST).
  grpc::StatusCode embed_refuse = grpc::StatusCode::OK;
  // Reported by Info: WorkerInfo.matryoshka.
  bool matryoshka = false;
  // Reported by Info: WorkerInfo.draining (a SIGTERM'd worker). Sessions are still served
  // unless `refuse` says otherwise.
  bool draining = false;
};

class FakeWorker final : public v1::Worker::Service {
 public:
  explicit FakeWorker(FakeWorkerConfig config = {});
  ~FakeWorker() override;

  /// Serves on 127.0.0.1:port (0 = any free port).
  absl::Status Start(int port = 0);
  /// Shuts the server down at once, cancelling open sessions (a crash, as the gateway
  /// sees it).
  void Kill();
  std::string address() const;
  int port() const { return port_; }

  /// Changes the configuration (takes effect for later calls).
  void Update(const std::function<void(FakeWorkerConfig&)>& f);
  FakeWorkerConfig config() const;

  int sessions_started() const { return started_.load(); }
  int sessions_active() const { return active_.load(); }
  /// Sessions that ended because the client cancelled or closed them early.
  int sessions_cancelled() const { return cancelled_.load(); }
  /// Total StepResults written.
  int steps_written() const { return steps_.load(); }
  v1::SessionStart last_start() const;
  /// Steps requested, in order (n_steps of each Step message).
  std::vector<int32_t> step_requests() const;
  /// The draft of each Step message, in order (empty: none). A draft is verified
  /// against the script: accepted while it matches, plus one token.
  std::vector<std::vector<int32_t>> drafts() const;
  /// How many draft_probs entries each Step message carried.
  std::vector<int> draft_probs_counts() const;

  grpc::Status Info(grpc::ServerContext* ctx, const v1::WorkerInfoRequest* req, v1::WorkerInfo* resp) override;
  grpc::Status Session(grpc::ServerContext* ctx,
                       grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>* stream) override;
  grpc::Status Embed(grpc::ServerContext* ctx, const v1::WorkerEmbedRequest* req,
                     v1::WorkerEmbedResponse* resp) override;
  /// Embed calls received (answered or refused).
  int embed_calls() const { return embed_calls_.load(); }
  v1::WorkerEmbedRequest last_embed() const;

 private:
  mutable std::mutex mu_;
  FakeWorkerConfig config_;
  v1::SessionStart last_start_;
  std::vector<int32_t> step_requests_;
  std::vector<std::vector<int32_t>> drafts_;
  std::vector<int> draft_probs_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<int> started_{0}, active_{0}, cancelled_{0}, steps_{0};
  std::atomic<int> embed_calls_{0};
  v1::WorkerEmbedRequest last_embed_;
};

/// A loader that serves vocabulary-only GGUF files (GetModelInfo with vocab_gguf).
class FakeLoader final : public v1::Loader::Service {
 public:
  FakeLoader() = default;
  ~FakeLoader() override;
  /// Serves `model` with the metadata of the GGUF file at `gguf_path` (tensors dropped,
  /// as the real loader's vocab_gguf). Errors from opening the file.
  absl::Status AddModelFromFile(const std::string& model, const std::string& gguf_path);
  absl::Status Start(int port = 0);
  void Kill();
  std::string address() const;
  int get_model_info_calls() const { return calls_.load(); }

  grpc::Status ListModels(grpc::ServerContext* ctx, const v1::LoaderListModelsRequest* req,
                          v1::LoaderListModelsResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const v1::GetModelInfoRequest* req, v1::ModelInfo* resp) override;

 private:
  std::mutex mu_;
  std::map<std::string, std::string> vocab_;  // model -> vocab-only GGUF bytes
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::atomic<int> calls_{0};
};

}  // namespace herd::gateway::testing
