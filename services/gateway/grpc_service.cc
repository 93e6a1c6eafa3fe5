// The public gRPC service herd.v1.Gateway over a Gateway.
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/server_callback_handlers.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/method_handler.h"

#include "libs/base/status_macros.h"
#include "services/gateway/gateway.h"
#include "services/gateway/lenient.pb.h"
#include "services/gateway/request_validation.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway {
namespace {

absl::Time DeadlineOf(const grpc::ServerContextBase* ctx) {
  const auto d = ctx->deadline();
  if (d >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(d);
}

std::string Bytes(const grpc::ByteBuffer& raw) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (raw.Dump(&slices).ok()) {
    bytes.reserve(raw.Length());
    for (const grpc::Slice& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  return bytes;
}

absl::Status CheckUtf8(const std::string& field, const std::string& s) {
  size_t bad = 0;
  if (IsValidUtf8(s, &bad)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(field, ": invalid UTF-8 at byte ", bad));
}

absl::Status Utf8Errors(const lenient::GenerateRequest& req) {
  absl::Status s = CheckUtf8("model", req.model());
  if (s.ok() && req.has_text()) s = CheckUtf8("prompt.text", req.text());
  for (int i = 0; s.ok() && i < req.chat().messages_size(); ++i) {
    const lenient::ChatMessage& m = req.chat().messages(i);
    const std::string f = absl::StrCat("chat.messages[", i, "].");
    s = CheckUtf8(f + "role", m.role());
    if (s.ok()) s = CheckUtf8(f + "content", m.content());
    if (s.ok()) s = CheckUtf8(f + "name", m.name());
    if (s.ok()) s = CheckUtf8(f + "tool_call_id", m.tool_call_id());
    if (s.ok()) s = CheckUtf8(f + "tool_calls_json", m.tool_calls_json());
  }
  if (s.ok()) s = CheckUtf8("chat.tools_json", req.chat().tools_json());
  if (s.ok()) s = CheckUtf8("chat.tool_choice", req.chat().tool_choice());
  if (s.ok()) s = CheckUtf8("chat.tool_choice_function", req.chat().tool_choice_function());
  if (s.ok()) s = CheckUtf8("chat.reasoning_format", req.chat().reasoning_format());
  if (s.ok()) s = CheckUtf8("chat.reasoning_effort", req.chat().reasoning_effort());
  for (int i = 0; s.ok() && i < req.stop_size(); ++i) s = CheckUtf8(absl::StrCat("stop[", i, "]"), req.stop(i));
  if (s.ok()) s = CheckUtf8("speculative.type", req.speculative().type());
  if (s.ok()) s = CheckUtf8("sampling.grammar", req.sampling().grammar());
  return s;
}

absl::Status Utf8Errors(const lenient::TokenizeRequest& req) {
  absl::Status s = CheckUtf8("model", req.model());
  if (s.ok()) s = CheckUtf8("text", req.text());
  return s;
}

absl::Status Utf8Errors(const lenient::DetokenizeRequest& req) { return CheckUtf8("model", req.model()); }

template <typename Lenient, typename Public>
absl::Status ParseStrict(absl::string_view bytes, Public* out) {
  if (out->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return absl::OkStatus();
  Lenient view;
  if (view.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    HERD_RETURN_IF_ERROR(Utf8Errors(view));
  }
  return absl::InvalidArgumentError(absl::StrCat("request: ", bytes.size(), " bytes are not a valid ",
                                                 Public::descriptor()->full_name(), " protobuf message"));
}

template <typename Msg>
absl::Status ParsePlain(const grpc::ByteBuffer& raw, Msg* out) {
  const std::string bytes = Bytes(raw);
  if (out->ParseFromString(bytes)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("request: ", bytes.size(), " bytes are not a valid ",
                                                 Msg::descriptor()->full_name(), " protobuf message"));
}

// One Generate call: a write reactor fed by a sink that queues the generation's
// messages (written one at a time) and ends the call once the generation is done.
// The reactor deletes itself in OnDone; the sink (held by the gateway until the
// generation's end) outlives it and then drops what comes.
class GenerateCall final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  class Sink : public GenerateSink {
   public:
    explicit Sink(GenerateCall* call) : call_(call) {}
    bool Write(const v1::GenerateResponse& msg) override {
      GenerateCall* start = nullptr;
      const v1::GenerateResponse* first = nullptr;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (call_ == nullptr || cancelled_.load() || finishing_) return false;
        q_.push_back(msg);
        if (!writing_) {
          writing_ = true;
          start = call_;
          first = &q_.front();
        }
      }
      // Outside the lock: a reaction may run on this thread.
      if (start != nullptr) start->StartWrite(first);
      return true;
    }
    bool Cancelled() override { return cancelled_.load(); }
    // Ends the call with `st` once the queued messages are written.
    void Finish(const grpc::Status& st) {
      GenerateCall* fin = nullptr;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (finishing_) return;
        finishing_ = true;
        final_ = st;
        if (!writing_) fin = call_;
      }
      if (fin != nullptr) fin->Finish(st);
    }

   private:
    friend class GenerateCall;
    // OnWriteDone: the next message, or the deferred Finish.
    void WriteDone(bool ok) {
      GenerateCall* next = nullptr;
      const v1::GenerateResponse* msg = nullptr;
      GenerateCall* fin = nullptr;
      grpc::Status st;
      {
        std::lock_guard<std::mutex> l(mu_);
        q_.pop_front();
        if (!ok) {
          cancelled_ = true;
          q_.clear();
        }
        if (!q_.empty()) {
          next = call_;
          msg = &q_.front();
        } else {
          writing_ = false;
          if (finishing_) fin = call_;
          st = final_;
        }
      }
      if (next != nullptr) next->StartWrite(msg);
      if (fin != nullptr) fin->Finish(st);
    }
    void Detach() {
      std::lock_guard<std::mutex> l(mu_);
      call_ = nullptr;
    }

    std::mutex mu_;
    GenerateCall* call_;
    std::deque<v1::GenerateResponse> q_;  // front: being written (its address is stable)
    bool writing_ = false;
    bool finishing_ = false;
    grpc::Status final_;
    std::atomic<bool> cancelled_{false};
  };

  GenerateCall() : sink_(std::make_shared<Sink>(this)) { constructed_.store(true, std::memory_order_release); }
  std::shared_ptr<Sink> sink() const { return sink_; }

  void OnWriteDone(bool ok) override {
    Acquire();
    sink_->WriteDone(ok);
  }
  void OnCancel() override {
    Acquire();
    sink_->cancelled_ = true;
  }
  void OnDone() override {
    Acquire();
    sink_->Detach();
    delete this;
  }

 private:
  // gRPC hands the reactor to its callback threads through lock-free queues that
  // ThreadSanitizer cannot see (Debian's gRPC is not instrumented): an explicit edge
  // from the constructor.
  void Acquire() const { (void)constructed_.load(std::memory_order_acquire); }

  std::atomic<bool> constructed_{false};
  std::shared_ptr<Sink> sink_;
};

}  // namespace

absl::Status ParseRequestBytes(absl::string_view bytes, v1::GenerateRequest* out) {
  return ParseStrict<lenient::GenerateRequest>(bytes, out);
}
absl::Status ParseRequestBytes(absl::string_view bytes, v1::TokenizeRequest* out) {
  return ParseStrict<lenient::TokenizeRequest>(bytes, out);
}
absl::Status ParseRequestBytes(absl::string_view bytes, v1::DetokenizeRequest* out) {
  return ParseStrict<lenient::DetokenizeRequest>(bytes, out);
}

GatewayServiceImpl::GatewayServiceImpl(Gateway* gateway) : gw_(gateway) {
  using grpc::internal::RpcMethod;
  using grpc::internal::RpcServiceMethod;
  // Every handler takes the raw request and records a malformed one like any other
  // INVALID_ARGUMENT.
  auto bad = [](GatewayServiceImpl* s, const char* method, const absl::Status& st) {
    s->gw_->RecordRequest(method, st, absl::ZeroDuration());
    return ToGrpcStatus(st);
  };
  AddMethod(new RpcServiceMethod("/herd.v1.Gateway/Generate", RpcMethod::SERVER_STREAMING, nullptr));
  MarkMethodCallback(
      0, new grpc::internal::CallbackServerStreamingHandler<grpc::ByteBuffer, v1::GenerateResponse>(
             [this](grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw) { return Generate(ctx, raw); }));
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/Tokenize", RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::TokenizeResponse, grpc::ByteBuffer,
                                           grpc::protobuf::MessageLite>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                v1::TokenizeResponse* resp) {
            v1::TokenizeRequest req;
            if (absl::Status st = ParseRequestBytes(Bytes(*raw), &req); !st.ok()) return bad(s, "Tokenize", st);
            return s->Tokenize(ctx, req, resp);
          },
          this)));
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/Detokenize", RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::DetokenizeResponse,
                                           grpc::ByteBuffer, grpc::protobuf::MessageLite>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                v1::DetokenizeResponse* resp) {
            v1::DetokenizeRequest req;
            if (absl::Status st = ParseRequestBytes(Bytes(*raw), &req); !st.ok()) return bad(s, "Detokenize", st);
            return s->Detokenize(ctx, req, resp);
          },
          this)));
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/ListModels", RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::ListModelsResponse,
                                           grpc::ByteBuffer, grpc::protobuf::MessageLite>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw,
                v1::ListModelsResponse* resp) {
            v1::ListModelsRequest req;
            if (absl::Status st = ParsePlain(*raw, &req); !st.ok()) return bad(s, "ListModels", st);
            return s->ListModels(ctx, &req, resp);
          },
          this)));
  AddMethod(new RpcServiceMethod(
      "/herd.v1.Gateway/Embed", RpcMethod::NORMAL_RPC,
      new grpc::internal::RpcMethodHandler<GatewayServiceImpl, grpc::ByteBuffer, v1::EmbedResponse, grpc::ByteBuffer,
                                           grpc::protobuf::MessageLite>(
          [bad](GatewayServiceImpl* s, grpc::ServerContext* ctx, const grpc::ByteBuffer* raw, v1::EmbedResponse* resp) {
            v1::EmbedRequest req;
            if (absl::Status st = ParsePlain(*raw, &req); !st.ok()) return bad(s, "Embed", st);
            return s->Embed(ctx, &req, resp);
          },
          this)));
}

grpc::ServerWriteReactor<v1::GenerateResponse>* GatewayServiceImpl::Generate(grpc::CallbackServerContext* ctx,
                                                                             const grpc::ByteBuffer* raw) {
  auto* call = new GenerateCall();
  std::shared_ptr<GenerateCall::Sink> sink = call->sink();
  v1::GenerateRequest req;
  if (absl::Status st = ParseRequestBytes(Bytes(*raw), &req); !st.ok()) {
    gw_->RecordRequest("Generate", st, absl::ZeroDuration());
    sink->Finish(ToGrpcStatus(st));
    return call;
  }
  auto g = gw_->Prepare(req, DeadlineOf(ctx), "Generate");
  if (!g.ok()) {
    sink->Finish(ToGrpcStatus(g.status()));
    return call;
  }
  gw_->RunAsync(std::shared_ptr<Gateway::Generation>(std::move(*g)), sink,
                [sink](absl::Status st) { sink->Finish(ToGrpcStatus(st)); });
  return call;
}

grpc::Status GatewayServiceImpl::Tokenize(grpc::ServerContext* ctx, const v1::TokenizeRequest& req,
                                          v1::TokenizeResponse* resp) {
  auto r = gw_->Tokenize(req, DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GatewayServiceImpl::Detokenize(grpc::ServerContext* ctx, const v1::DetokenizeRequest& req,
                                            v1::DetokenizeResponse* resp) {
  auto r = gw_->Detokenize(req, DeadlineOf(ctx));
  if (!r.ok()) return ToGrpcStatus(r.status());
  *resp = std::move(*r);
  return grpc::Status::OK;
}

grpc::Status GatewayServiceImpl::ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                                            v1::ListModelsResponse* resp) {
  const absl::Time t0 = absl::Now();
  v1::ListModelsResponse models = gw_->ListModels();
  resp->Swap(&models);
  gw_->RecordRequest("ListModels", absl::OkStatus(), absl::Now() - t0);
  return grpc::Status::OK;
}

}  // namespace herd::gateway
