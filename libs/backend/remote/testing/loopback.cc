#include "libs/backend/remote/testing/loopback.h"

#include "absl/strings/str_cat.h"

#include "libs/backend/cpu_backend.h"

namespace herd::remote::testing {

absl::StatusOr<std::unique_ptr<LoopbackServer>> LoopbackServer::Start(int n_threads, ServerOptions opts,
                                                                      uint64_t instance, int port) {
  std::unique_ptr<LoopbackServer> s(new LoopbackServer());
  s->server_ = std::make_unique<ComputeServer>(std::make_unique<CpuBackend>(n_threads), opts, instance);
  s->service_ = std::make_unique<RemoteComputeService>(s->server_.get());
  grpc::ServerBuilder b;
  const int want = port;
  port = 0;
  b.AddListeningPort(absl::StrCat("127.0.0.1:", want), grpc::InsecureServerCredentials(), &port);
  b.SetMaxReceiveMessageSize(64 << 20);
  b.SetMaxSendMessageSize(64 << 20);
  b.RegisterService(s->service_.get());
  s->grpc_ = b.BuildAndStart();
  if (s->grpc_ == nullptr || port == 0) return absl::UnavailableError("loopback compute server: cannot bind a port");
  s->address_ = absl::StrCat("127.0.0.1:", port);
  return s;
}

LoopbackServer::~LoopbackServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<RemoteBackend>> LoopbackServer::Connect(std::chrono::milliseconds timeout) const {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  RemoteOptions o;
  o.address = address_;
  o.channel = grpc::CreateCustomChannel(address_, grpc::InsecureChannelCredentials(), args);
  o.timeout = timeout;
  return RemoteBackend::Connect(std::move(o));
}

void LoopbackServer::Shutdown() {
  if (grpc_ != nullptr) {
    grpc_->Shutdown(std::chrono::system_clock::now());
    grpc_->Wait();
    grpc_.reset();
  }
}

}  // namespace herd::remote::testing
