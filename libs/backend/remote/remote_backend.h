// The `remote` backend: a Backend whose buffers and graph compute live in a herd compute
// server (services/compute, proto/herd/v1/remote.proto) on another host, so that the
// scheduler (libs/backend/sched.h) can keep some layers of a model there (llama.cpp's
// RPC backend, ggml-rpc; API remoting in the design). The channel comes from the caller,
// secured like every herd client (serving::MakeChannel: TLS / mTLS, cluster key).
//
// Round trips: writes (SetTensor, SetTensorAsync, CopyTensor, Clear), graph computes and
// queued reads (GetTensorAsync) are batched and sent in one Execute call at the next
// GetTensor or Synchronize (or when max_batch_bytes are queued), so a decode step that
// sends its inputs, computes its layers and reads what later layers need costs one round
// trip. The price: an error of a queued write or compute (the server's validation, a
// lost link) is returned by that later call. Every call has a deadline.
//
// Failures: a server that cannot be reached (or misses the deadline) gives UNAVAILABLE
// naming it ("remote backend 10.0.0.7:50061: ..."); a server that restarted (a new
// instance: every buffer gone) gives UNAVAILABLE too, and the backend stays lost
// (lost() true) until Reconnect().
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/backend/backend.h"
#include "libs/backend/op_support.h"
#include "proto/herd/v1/remote.pb.h"

namespace herd::remote {

/// How to reach a compute server.
struct RemoteOptions {
  std::string address;                       ///< "host:port", for messages
  std::shared_ptr<grpc::Channel> channel;    ///< to `address`, secured by the caller
  std::chrono::milliseconds timeout{30000};  ///< deadline of every call
  /// Bytes of writes queued before they are sent without waiting for a read.
  size_t max_batch_bytes = size_t{16} << 20;
};

/// What crossed the wire since the backend was created (for benchmarks and metrics).
struct RemoteStats {
  uint64_t round_trips = 0;     ///< gRPC calls (Execute, AllocBuffer, GetDevice)
  uint64_t bytes_sent = 0;      ///< serialized request bytes
  uint64_t bytes_received = 0;  ///< serialized response bytes
};

class RemoteBackend : public Backend {
 public:
  /// Asks the server for its device (GetDevice), again every 250 ms for up to min(timeout,
  /// 15 s) while it cannot be reached (it may still be starting). Errors: UNAVAILABLE
  /// naming the address with the link's last words ("Connection refused");
  /// UNAUTHENTICATED without the cluster key (saying so); FAILED_PRECONDITION for another
  /// protocol version; INVALID_ARGUMENT without a channel.
  static absl::StatusOr<std::unique_ptr<RemoteBackend>> Connect(RemoteOptions opts);
  ~RemoteBackend() override;

  /// "Remote(host:port)".
  std::string name() const override;
  /// Backend kind "remote": the server's device (name, description, memory).
  DeviceInfo device() const override;
  /// Buffers on the server (base() is an opaque address, alignment the server's).
  BufferType* default_buffer_type() override;

  /// Queued (see the file comment): the bytes are copied, errors come later.
  absl::Status SetTensor(Tensor* t, const void* data, size_t offset, size_t size) override;
  absl::Status SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) override;
  /// Sends what is queued and this read; returns when `data` is filled.
  absl::Status GetTensor(const Tensor* t, void* data, size_t offset, size_t size) override;
  /// Queued: `data` is filled by the next Synchronize (or GetTensor).
  absl::Status GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) override;
  absl::Status CopyTensor(const Tensor* src, Tensor* dst) override;
  /// Sends what is queued. Errors: those of the queued commands, UNAVAILABLE for the link.
  absl::Status Synchronize() override;

  /// Queues a PrepareWeights command for the weights in this backend's memory (the
  /// server's CPU repacks them once, like a local CPU backend).
  absl::Status PrepareWeights(const std::vector<Tensor*>& weights) override;
  /// The op's shape rules and the weight types the server reported.
  bool SupportsOp(const Tensor& node) const override;
  /// Queues the graph (placing an unplaced one in a scratch buffer on the server).
  absl::Status GraphCompute(Graph& g) override;

  /// True once the server restarted under this backend (its buffers are gone).
  bool lost() const;
  /// Whether the server answers now (GetDevice within the timeout). After a restart
  /// (another instance) it first restores this backend's memory: every live buffer is
  /// allocated again, the writes from stable host memory (AddStableHostRegion) and the
  /// prepared weights are sent again, and DATA_LOSS says the rest (the KV cache) is gone;
  /// later calls work again. Errors: UNAVAILABLE naming the server while it cannot be
  /// reached; DATA_LOSS once after a restore.
  absl::Status CheckDevice() override;
  /// Host memory [p, p + size) that stays valid and unchanged for the backend's life (a
  /// model's file mapping): writes from it are remembered (pointer and range, not a copy)
  /// and sent again after a server restart.
  void AddStableHostRegion(const void* p, size_t size);
  RemoteStats stats() const;
  const std::string& address() const;

 private:
  class Conn;
  class RemoteBuffer;
  class RemoteBufferType;
  explicit RemoteBackend(std::shared_ptr<Conn> conn);
  absl::Status Locate(const Tensor* t, uint64_t* id, uint64_t* offset) const;
  absl::Status EnsureScratch(size_t bytes);

  std::shared_ptr<Conn> conn_;
  std::unique_ptr<RemoteBufferType> buft_;
  OpLimits limits_;
  v1::GetDeviceResponse dev_;
  std::unique_ptr<Buffer> scratch_;
};

}  // namespace herd::remote
