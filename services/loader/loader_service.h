// herd.v1.Loader over a model directory: lists models, describes them (metadata,
// hparams, tensor table, sha256, a vocab-only GGUF), streams their bytes in
// CRC-checked chunks, and quantizes them into new models of the store.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/serving/grpc_status.h"
#include "libs/serving/metrics.h"
#include "proto/herd/v1/loader.grpc.pb.h"
#include "services/loader/model_store.h"
#include "services/loader/quantize_backend.h"

namespace herd::loader {

/// Full gRPC method name of Quantize: the loader's --admin_key_file keys guard it
/// (ServerSecurity::method_keys).
inline constexpr char kQuantizeMethod[] = "/herd.v1.Loader/Quantize";

/// Bounds of ReadTensorsRequest.chunk_size (0 selects kDefaultChunkBytes).
inline constexpr uint32_t kMinChunkBytes = 4 << 10;
inline constexpr uint32_t kMaxChunkBytes = 4 << 20;
inline constexpr uint32_t kDefaultChunkBytes = 1 << 20;

struct LoaderOptions {
  /// The model directory (must exist).
  std::string models_dir;
  /// Server-side cap on chunk sizes, kMinChunkBytes..kMaxChunkBytes: requests for larger
  /// chunks (still within the protocol's range) get chunks of this size.
  uint32_t max_chunk_bytes = kMaxChunkBytes;
  /// The gRPC server's send limit: a GetModelInfo answer larger than this is refused
  /// with RESOURCE_EXHAUSTED instead of failing in transport.
  int64_t max_message_bytes = 64 << 20;
  /// Threads per Quantize job (0 = all hardware threads).
  int quantize_threads = 0;
  /// Quantize jobs running at once; more get RESOURCE_EXHAUSTED.
  int max_concurrent_quantize = 1;
  /// The quantizer behind Quantize; nullptr = RunQuantizeJob (libs/quant when linked,
  /// else UNIMPLEMENTED). Tests substitute their own.
  std::function<absl::Status(const QuantizeJob&, const std::function<void(const QuantizeReport&)>&,
                             const std::atomic<bool>*)>
      quantizer;
  /// Where the herd_loader_* metrics go; nullptr = a registry owned by the service.
  serving::Registry* registry = nullptr;
};

/// The Loader service. Thread-safe; every RPC is independent.
///
/// Errors (as gRPC codes): INVALID_ARGUMENT for a bad model name (see
/// ValidateModelName), a name resolving outside the store, a corrupt GGUF (the reader's
/// message) or an out-of-range field (named); NOT_FOUND for an unknown model;
/// OUT_OF_RANGE for a ReadTensors offset/length past the end of the file; ALREADY_EXISTS
/// for a Quantize target that exists; CANCELLED / DEADLINE_EXCEEDED when the client
/// gives up; RESOURCE_EXHAUSTED for an answer above the message limit or too many
/// Quantize jobs.
class LoaderServiceImpl : public herd::v1::Loader::Service {
 public:
  /// Opens the store. Errors: the store's (missing directory, not a directory) and
  /// INVALID_ARGUMENT for an option out of range.
  static absl::StatusOr<std::unique_ptr<LoaderServiceImpl>> Create(const LoaderOptions& opts);
  ~LoaderServiceImpl() override;

  grpc::Status ListModels(grpc::ServerContext* ctx, const herd::v1::LoaderListModelsRequest* req,
                          herd::v1::LoaderListModelsResponse* resp) override;
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const herd::v1::GetModelInfoRequest* req,
                            herd::v1::ModelInfo* resp) override;
  grpc::Status ReadTensors(grpc::ServerContext* ctx, const herd::v1::ReadTensorsRequest* req,
                           grpc::ServerWriter<herd::v1::TensorChunk>* writer) override;
  grpc::Status Quantize(grpc::ServerContext* ctx, const herd::v1::QuantizeRequest* req,
                        grpc::ServerWriter<herd::v1::QuantizeProgress>* writer) override;

  // The RPC bodies without gRPC plumbing (metrics and logs are added by the RPCs).
  // `cancelled` is polled during long work; when it turns true the call ends with
  // CANCELLED.

  /// ListModels: every model of the store; unreadable files carry `error`.
  absl::StatusOr<herd::v1::LoaderListModelsResponse> List() const;
  /// GetModelInfo.
  absl::StatusOr<herd::v1::ModelInfo> Describe(const herd::v1::GetModelInfoRequest& req,
                                               const std::function<bool()>& cancelled);
  /// Receives one chunk; returns false when the stream is broken (the client left).
  using ChunkSink = std::function<bool(const herd::v1::TensorChunk&)>;
  /// ReadTensors: validates the request, then emits chunks in order. *bytes_sent
  /// counts data bytes accepted by `sink`.
  absl::Status StreamTensors(const herd::v1::ReadTensorsRequest& req, const std::function<bool()>& cancelled,
                             const ChunkSink& sink, uint64_t* bytes_sent);
  /// Receives one progress report; returns false when the stream is broken.
  using ProgressSink = std::function<bool(const herd::v1::QuantizeProgress&)>;
  /// Quantize: validates, runs the job on its own thread and reports progress (at most
  /// every 100 ms plus a final `done` message) from the calling thread.
  absl::Status RunQuantize(const herd::v1::QuantizeRequest& req, const std::function<bool()>& cancelled,
                           const ProgressSink& sink);

  const ModelStore& store() const { return store_; }
  serving::Registry* registry() const { return registry_; }

 private:
  LoaderServiceImpl(const LoaderOptions& opts, ModelStore store);
  absl::StatusOr<std::string> CachedSha256(const std::string& real_path, const std::function<bool()>& cancelled);
  grpc::Status Finish(const char* method, grpc::ServerContext* ctx, const std::string& model, absl::Status s,
                      double start_s, const std::string& extra);

  LoaderOptions opts_;
  ModelStore store_;
  std::unique_ptr<serving::Registry> own_registry_;
  serving::Registry* registry_;
  serving::MetricFamily* requests_;
  serving::MetricFamily* bytes_sent_;
  serving::MetricFamily* latency_;
  serving::MetricFamily* in_flight_;

  struct ShaEntry {
    uint64_t size, ino;
    int64_t mtime_ns, ctime_ns;
    std::string hex;
  };
  std::mutex mu_;
  std::map<std::string, ShaEntry> sha_cache_;  // by real path
  std::set<std::string> quantizing_;           // target paths of running jobs
};

// absl::Status -> grpc::Status (one implementation: libs/serving/grpc_status.h).
using serving::ToGrpcStatus;

}  // namespace herd::loader
