// Real in-process servers for the gateway's tests on real workers: a loader over a model
// directory, workers (Engine + Scheduler + WorkerServiceImpl) and the gateway's gRPC
// service, each on 127.0.0.1 at a free port.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

#include "libs/engine/engine.h"
#include "libs/engine/scheduler.h"
#include "libs/model/model.h"
#include "libs/serving/metrics.h"
#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/gateway.grpc.pb.h"
#include "services/gateway/gateway.h"
#include "services/loader/loader_service.h"
#include "services/worker/worker_service.h"

namespace herd::gateway::testing {

/// A LoaderServiceImpl and its server.
struct LoaderServer {
  std::unique_ptr<loader::LoaderServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

/// Serves the models of `models_dir` (metrics in `registry`, may be null). Errors from
/// creating the service or starting the server.
absl::Status StartLoaderServer(const std::string& models_dir, serving::Registry* registry, LoaderServer* out);

/// One worker's engine, scheduler, service and server.
struct WorkerServer {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<engine::Scheduler> scheduler;
  std::unique_ptr<worker::WorkerServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  /// Shuts the server down (open calls cancelled at `deadline`), then frees the service,
  /// the scheduler and the engine, in that order.
  void Stop(std::chrono::system_clock::time_point deadline);
};

/// Serves `model` (as "stories260K") on `backend` with a context of `n_ctx` cells, batches
/// of 64, 4 sequences of at most 512 cells (metrics in `registry`, may be null). Errors
/// from creating the engine or scheduler or starting the server.
absl::Status StartWorkerServer(const model::Model& model, const tokenizer::Vocab* vocab, Backend* backend,
                               int64_t n_ctx, serving::Registry* registry, WorkerServer* out);

/// A Gateway, its gRPC service and server, and a stub of that.
struct GatewayServer {
  std::unique_ptr<Gateway> gw;
  std::unique_ptr<GatewayServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<v1::Gateway::Stub> stub;

  /// Cancels every request, shuts the server down (by `deadline`) and stops the gateway.
  void Stop(std::chrono::system_clock::time_point deadline);
};

/// Starts a gateway with `options` (metrics in `registry`) and serves it, then waits up to
/// 20 s for `n_workers` live workers (a first Info can time out on a busy machine).
/// Errors from starting either; DEADLINE_EXCEEDED when the workers are not live in time.
absl::Status StartGatewayServer(const GatewayOptions& options, serving::Registry* registry, int n_workers,
                                GatewayServer* out);

}  // namespace herd::gateway::testing
