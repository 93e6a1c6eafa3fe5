#include "services/gateway/in_process_testing.h"

#include <thread>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/serving/server.h"

namespace herd::gateway::testing {
namespace {

// Serves `service` on 127.0.0.1 at a free port (*port).
absl::StatusOr<std::unique_ptr<grpc::Server>> Serve(grpc::Service* service, int* port) {
  serving::GrpcServerOptions so;
  so.address = "127.0.0.1:0";
  return serving::StartGrpcServer(so, {service}, port);
}

}  // namespace

absl::Status StartLoaderServer(const std::string& models_dir, serving::Registry* registry, LoaderServer* out) {
  loader::LoaderOptions lo;
  lo.models_dir = models_dir;
  lo.registry = registry;
  HERD_ASSIGN_OR_RETURN(out->service, loader::LoaderServiceImpl::Create(lo));
  HERD_ASSIGN_OR_RETURN(out->server, Serve(out->service.get(), &out->port));
  return absl::OkStatus();
}

void WorkerServer::Stop(std::chrono::system_clock::time_point deadline) {
  if (server) server->Shutdown(deadline);
  server.reset();
  service.reset();
  scheduler.reset();
  engine.reset();
}

absl::Status StartWorkerServer(const model::Model& model, const tokenizer::Vocab* vocab, Backend* backend,
                               int64_t n_ctx, serving::Registry* registry, WorkerServer* out) {
  engine::EngineParams ep;
  ep.n_ctx = n_ctx;
  ep.n_batch = 64;
  HERD_ASSIGN_OR_RETURN(out->engine, engine::Engine::Create(model, ep, backend));
  engine::SchedulerConfig sc;
  sc.max_sequences = 4;
  sc.n_ctx_seq = 512;
  HERD_ASSIGN_OR_RETURN(out->scheduler, engine::Scheduler::Create(out->engine.get(), vocab, sc));
  worker::WorkerServiceOptions wo;
  wo.model_name = "stories260K";
  wo.architecture = model.hparams().arch;
  out->service = std::make_unique<worker::WorkerServiceImpl>(out->scheduler.get(), wo, registry);
  HERD_ASSIGN_OR_RETURN(out->server, Serve(out->service.get(), &out->port));
  return absl::OkStatus();
}

void GatewayServer::Stop(std::chrono::system_clock::time_point deadline) {
  if (gw) gw->CancelAll();
  if (server) server->Shutdown(deadline);
  if (gw) gw->Stop();
}

absl::Status StartGatewayServer(const GatewayOptions& options, serving::Registry* registry, int n_workers,
                                GatewayServer* out) {
  out->gw = std::make_unique<Gateway>(options, registry);
  HERD_RETURN_IF_ERROR(out->gw->Start());
  out->service = std::make_unique<GatewayServiceImpl>(out->gw.get());
  int port = 0;
  HERD_ASSIGN_OR_RETURN(out->server, Serve(out->service.get(), &port));
  out->stub =
      v1::Gateway::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (out->gw->pool().live_count() < n_workers && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (out->gw->pool().live_count() < n_workers) {
    return absl::DeadlineExceededError(
        absl::StrCat(out->gw->pool().live_count(), " of ", n_workers, " workers live after 20 s"));
  }
  return absl::OkStatus();
}

}  // namespace herd::gateway::testing
