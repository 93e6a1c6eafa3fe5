// The server side of the remote backend (proto/herd/v1/remote.proto): buffers and graph
// compute of a local backend (the CPU) offered to workers on other hosts, every message
// validated before anything is touched. ComputeServer holds the state and checks (no
// gRPC: the fuzz target drives it directly); RemoteComputeService is its gRPC face, which
// services/compute/main.cc serves with the cluster key and TLS of every internal service.
//
// What a client controls is bounded before it is used: buffer bytes in total
// (max_buffer_bytes), tensors per graph, extents and strides (no overflow), names. A
// tensor is (buffer id, offset) or (root index, view offset): its bytes must lie in its
// buffer (views: in their root), and a compute node's type, extents and strides must be
// what its op makes of its sources (libs/tensor/tensor.h's builders) and what the
// backend's SupportsOp accepts; indices of GET_ROWS / SET_ROWS are checked by the
// kernels. Nothing is trusted from the wire as a pointer.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/backend/backend.h"
#include "libs/backend/remote/wire.h"
#include "proto/herd/v1/remote.grpc.pb.h"

namespace herd::remote {

/// Limits of a compute server.
struct ServerOptions {
  /// Bytes of buffers held at once, over every client (--max_buffer_bytes).
  uint64_t max_buffer_bytes = uint64_t{16} << 30;
  /// Tensors in one ComputeGraph or PrepareWeights command.
  int max_graph_tensors = 1 << 16;
  /// Commands in one Execute call.
  int max_commands = 1 << 16;
  /// A client not heard from for this long has its buffers released (--client_idle_s).
  std::chrono::milliseconds client_idle{std::chrono::seconds(60)};
};

/// The state of one compute server: its backend, the buffers clients allocated, and the
/// weights prepared for the backend's kernels. Thread-safe (one call at a time).
class ComputeServer {
 public:
  /// `backend` must compute in host memory (the CPU). `instance` identifies this start
  /// (random in the service; fixed in tests).
  ComputeServer(std::unique_ptr<Backend> backend, ServerOptions opts, uint64_t instance);
  ~ComputeServer();

  /// GetDevice's answer; keeps `client`'s buffers alive. Never waits for a compute in
  /// progress (the server's lock), so a worker's health probe is answered while another
  /// call runs a long prompt.
  v1::GetDeviceResponse Device(uint64_t client = 0);
  /// A zeroed buffer of `size` bytes owned by `client`; its id. Errors: ABORTED for another
  /// instance or a client whose buffers were released (idle); INVALID_ARGUMENT for size 0;
  /// RESOURCE_EXHAUSTED past max_buffer_bytes.
  absl::StatusOr<uint64_t> Alloc(uint64_t instance, uint64_t size, uint64_t client = 0);
  /// Runs the commands of req.client() in order (only its own buffers exist for it),
  /// appending each read's bytes to resp. Errors: ABORTED for another instance or a
  /// released client; INVALID_ARGUMENT for too many commands or the first bad command
  /// ("commands[i] (op): ..."), after the commands before it took effect; the backend's
  /// errors of a compute, named the same way.
  /// `deadline`: the caller's; a call that gets the server's lock after it is not run
  /// (DEADLINE_EXCEEDED): a request held up by a cut link must not write into buffers
  /// after its client gave up on it and moved on.
  absl::Status Execute(const v1::ExecuteRequest& req, v1::ExecuteResponse* resp,
                       std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max());

  /// Bytes of buffers held now.
  uint64_t bytes_allocated() const;
  /// Buffers held now.
  size_t n_buffers() const;
  /// Clients holding buffers or heard from within client_idle.
  size_t n_clients() const;

 private:
  struct Held;
  struct Graph;
  absl::Status RunCommand(const v1::Command& c, v1::ExecuteResponse* resp);
  // Releases idle clients' buffers; then ABORTED when `client` was released, else marks it
  // heard from now.
  absl::Status Admit(uint64_t client);
  absl::StatusOr<Held*> Find(uint64_t id);
  absl::Status Range(uint64_t id, uint64_t offset, uint64_t size, Held** out);
  // Drops prepared-weight layouts overlapping [offset, offset + size) of `h`; into
  // `dropped` when given (a graph about to run may still read their headers).
  void Invalidate(Held* h, uint64_t offset, uint64_t size, std::vector<std::unique_ptr<Tensor>>* dropped = nullptr);
  absl::Status BuildTensors(const google::protobuf::RepeatedPtrField<v1::WireTensor>& wire, bool leaves_only, Graph* g);
  absl::Status Compute(const v1::ComputeGraph& c);
  absl::Status Prepare(const v1::PrepareWeights& p);

  mutable std::mutex mu_;
  std::unique_ptr<Backend> backend_;
  const ServerOptions opts_;
  const uint64_t instance_;
  uint64_t next_id_ = 1;
  uint64_t client_ = 0;  // the caller of the call being served (owner of new buffers)
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> clients_;  // last heard from
  std::deque<uint64_t> released_;  // clients whose buffers were released (the last 4096)
  // GetDevice's keep-alives, taken without mu_ and merged into clients_ by Admit.
  std::mutex heard_mu_;
  std::unordered_map<uint64_t, std::chrono::steady_clock::time_point> heard_;
  const WeightTypes weight_types_;  // what GetDevice reports
  uint64_t allocated_ = 0;
  std::unordered_map<uint64_t, std::unique_ptr<Held>> buffers_;
};

/// herd.v1.RemoteCompute over a ComputeServer (not owned). `after_call` (optional) runs
/// after every call with its method and status (the service main's metrics).
class RemoteComputeService final : public v1::RemoteCompute::Service {
 public:
  using AfterCall = std::function<void(const char* method, const absl::Status& status)>;
  explicit RemoteComputeService(ComputeServer* server, AfterCall after_call = nullptr)
      : server_(server), after_call_(std::move(after_call)) {}
  grpc::Status GetDevice(grpc::ServerContext* ctx, const v1::GetDeviceRequest* req,
                         v1::GetDeviceResponse* resp) override;
  grpc::Status AllocBuffer(grpc::ServerContext* ctx, const v1::AllocBufferRequest* req,
                           v1::AllocBufferResponse* resp) override;
  grpc::Status Execute(grpc::ServerContext* ctx, const v1::ExecuteRequest* req, v1::ExecuteResponse* resp) override;

 private:
  grpc::Status Done(const char* method, const absl::Status& s);
  ComputeServer* server_;
  AfterCall after_call_;
};

}  // namespace herd::remote
