// One request must never crash the gateway: JSON nested 10^6 deep in every HTTP field
// that takes JSON, and in the gRPC API's JSON text fields, gets INVALID_ARGUMENT (HTTP
// 400) naming the limit; protobuf messages nested 10^5 deep (unknown groups) are refused
// too. Runs under ASan (tag asan) as well as plainly: a recursive walk of such input
// exhausts the stack, which ASan reports as stack-overflow.
#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

#include "libs/base/json_nesting.h"
#include "libs/serving/metrics.h"
#include "libs/serving/server.h"
#include "services/gateway/fakes.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_server.h"
#include "tests/shared_data.h"

namespace herd::gateway {
namespace {

const bool kSigpipeIgnored = [] {
  std::signal(SIGPIPE, SIG_IGN);
  return true;
}();

using json = nlohmann::json;

constexpr int kMillion = 1000000;

// `depth` copies of `open`, `inner`, then `depth` copies of `close`: built as text
// (nlohmann's dump of such a value would itself recurse).
std::string Nest(int depth, const std::string& open, const std::string& close, const std::string& inner = "1") {
  std::string s;
  s.reserve(static_cast<size_t>(depth) * (open.size() + close.size()) + inner.size());
  for (int i = 0; i < depth; ++i) s += open;
  s += inner;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

// The schema of the reported crash: {"type":"object","properties":{"k": ...}} repeated
// (37 bytes a level: 10^5 levels are the reported 3.7 MB; 10^6 would pass the gateway's
// 16 MiB body limit and get 413 before any parsing).
std::string DeepSchema(int depth) { return Nest(depth, R"({"type":"object","properties":{"k":)", "}}", "{}"); }

// 10^6 levels in 2 MB (arrays) or 6 MB (objects): within the body limit.
std::string DeepArray(int depth) { return Nest(depth, "[", "]"); }
std::string DeepObject(int depth) { return Nest(depth, R"({"k":)", "}"); }

constexpr int kReported = 100000;  // the reported crash's nesting

class DeepInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shared = SharedDir();
    if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
    const std::string path = shared + "/models/stories260K.gguf";
    ASSERT_TRUE(loader_.AddModelFromFile("stories260K", path).ok());
    ASSERT_TRUE(loader_.Start().ok());
    testing::FakeWorkerConfig c;
    c.model = "stories260K";
    worker_ = std::make_unique<testing::FakeWorker>(c);
    ASSERT_TRUE(worker_->Start().ok());
    GatewayOptions o;
    o.loader_address = loader_.address();
    o.pool.addresses.push_back(worker_->address());
    o.pool.poll_interval = absl::Milliseconds(50);
    o.pool.info_timeout = absl::Milliseconds(2000);
    gw_ = std::make_unique<Gateway>(o, &registry_);
    ASSERT_TRUE(gw_->Start().ok());
    for (int i = 0; i < 400 && gw_->pool().live_count() != 1; ++i) {
      gw_->pool().PollNow();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_EQ(gw_->pool().live_count(), 1);
    svc_ = std::make_unique<GatewayServiceImpl>(gw_.get());
    serving::GrpcServerOptions so;
    so.address = "127.0.0.1:0";
    auto server = serving::StartGrpcServer(so, {svc_.get()}, &port_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    http_ = std::make_unique<HttpFrontEnd>(gw_.get());
    auto hp = http_->Start("127.0.0.1", 0);
    ASSERT_TRUE(hp.ok()) << hp.status();
    http_port_ = *hp;
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials());
  }

  void TearDown() override {
    if (gw_) gw_->CancelAll();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (http_) http_->Stop();
    if (gw_) gw_->Stop();
  }

  // POSTs `body`; expects 400 with an error message naming the nesting limit.
  void ExpectRefused(const std::string& path, const std::string& body, const std::string& what) {
    httplib::Client cli("127.0.0.1", http_port_);
    cli.set_read_timeout(30, 0);
    const auto t0 = std::chrono::steady_clock::now();
    auto res = cli.Post(path, body, "application/json");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(res) << what << ": no response (" << httplib::to_string(res.error()) << ")";
    EXPECT_EQ(res->status, 400) << what << ": " << res->body;
    const json err = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(err.is_object()) << what << ": " << res->body;
    const std::string msg = err["error"]["message"].get<std::string>();
    EXPECT_NE(msg.find(absl::StrCat("nested deeper than ", kMaxJsonNesting, " levels")), std::string::npos)
        << what << ": " << msg;
    EXPECT_EQ(err["error"]["type"], "invalid_request_error") << what;
    std::printf("%-48s %8zu bytes  400 in %6.1f ms\n", what.c_str(), body.size(), ms);
  }

  // A normal completion still works (the gateway survived).
  void ExpectServing() {
    httplib::Client cli("127.0.0.1", http_port_);
    auto res =
        cli.Post("/v1/completions", R"({"model":"stories260K","prompt":"Once","max_tokens":2})", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }

  testing::FakeLoader loader_;
  std::unique_ptr<testing::FakeWorker> worker_;
  serving::Registry registry_;
  std::unique_ptr<Gateway> gw_;
  std::unique_ptr<GatewayServiceImpl> svc_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpFrontEnd> http_;
  std::shared_ptr<grpc::Channel> channel_;
  int port_ = 0, http_port_ = 0;
};

TEST_F(DeepInputTest, MillionDeepJsonInEveryHttpFieldGets400) {
  const std::string m = R"("model":"stories260K")";
  const std::string chat_msg = R"("messages":[{"role":"user","content":"hi"}])";
  std::vector<std::pair<std::string, std::pair<std::string, std::string>>> cases = {
      {"completions: whole body", {"/v1/completions", DeepArray(kMillion)}},
      {"completions: prompt", {"/v1/completions", absl::StrCat("{", m, R"(,"prompt":)", DeepArray(kMillion), "}")}},
      {"completions: stop",
       {"/v1/completions", absl::StrCat("{", m, R"(,"prompt":"x","stop":)", DeepArray(kMillion), "}")}},
      {"completions: logit_bias",
       {"/v1/completions", absl::StrCat("{", m, R"(,"prompt":"x","logit_bias":)", DeepObject(kMillion), "}")}},
      {"chat: messages[].content",
       {"/v1/chat/completions",
        absl::StrCat("{", m, R"(,"messages":[{"role":"user","content":)", DeepArray(kMillion), "}]}")}},
      {"chat: messages[].tool_calls",
       {"/v1/chat/completions", absl::StrCat("{", m, R"(,"messages":[{"role":"assistant","content":"","tool_calls":)",
                                             DeepArray(kMillion), "}]}")}},
      {"chat: tool_choice",
       {"/v1/chat/completions", absl::StrCat("{", m, ",", chat_msg, R"(,"tool_choice":)", DeepObject(kMillion), "}")}},
      {"responses: input", {"/v1/responses", absl::StrCat("{", m, R"(,"input":)", DeepArray(kMillion), "}")}},
      {"responses: input[].content",
       {"/v1/responses", absl::StrCat("{", m, R"(,"input":[{"role":"user","content":)", DeepArray(kMillion), "}]}")}},
      {"responses: metadata",
       {"/v1/responses", absl::StrCat("{", m, R"(,"input":"x","metadata":)", DeepObject(kMillion), "}")}},
      {"embeddings: input", {"/v1/embeddings", absl::StrCat("{", m, R"(,"input":)", DeepArray(kMillion), "}")}},
      {"embedding (llama.cpp): content",
       {"/embedding", absl::StrCat("{", m, R"(,"content":)", DeepArray(kMillion), "}")}},
      {"tokenize: content", {"/tokenize", absl::StrCat("{", m, R"(,"content":)", DeepArray(kMillion), "}")}},
      {"detokenize: tokens", {"/detokenize", absl::StrCat("{", m, R"(,"tokens":)", DeepArray(kMillion), "}")}},
  };
  // Fields that take a JSON schema: the reported crash's shape (10^5 levels, 3.7 MB) and
  // 10^6 levels of plain objects.
  for (const auto& [label, deep] : std::vector<std::pair<std::string, std::string>>{
           {"10^5 schema levels", DeepSchema(kReported)}, {"10^6 levels", DeepObject(kMillion)}}) {
    cases.push_back(
        {"completions: response_format.json_schema.schema, " + label,
         {"/v1/completions", absl::StrCat("{", m, R"(,"prompt":"x","response_format":{"type":"json_schema",)",
                                          R"("json_schema":{"name":"n","schema":)", deep, "}}}")}});
    cases.push_back({"completions: json_schema, " + label,
                     {"/v1/completions", absl::StrCat("{", m, R"(,"prompt":"x","json_schema":)", deep, "}")}});
    cases.push_back(
        {"chat: tools[].function.parameters, " + label,
         {"/v1/chat/completions",
          absl::StrCat("{", m, ",", chat_msg, R"(,"tools":[{"type":"function","function":{"name":"f","parameters":)",
                       deep, "}}]}")}});
    cases.push_back({"responses: tools[].parameters, " + label,
                     {"/v1/responses", absl::StrCat("{", m, R"(,"input":"x","tools":[{"type":"function","name":"f",)",
                                                    R"("parameters":)", deep, "}]}")}});
    cases.push_back(
        {"responses: text.format.schema, " + label,
         {"/v1/responses",
          absl::StrCat("{", m, R"(,"input":"x","text":{"format":{"type":"json_schema","name":"n","schema":)", deep,
                       "}}}")}});
    cases.push_back(
        {"chat: response_format.schema, " + label,
         {"/v1/chat/completions",
          absl::StrCat("{", m, ",", chat_msg, R"(,"response_format":{"type":"json_object","schema":)", deep, "}}")}});
  }
  // One level past the limit is enough.
  cases.push_back({"completions: json_schema one past the limit",
                   {"/v1/completions", absl::StrCat("{", m, R"(,"prompt":"x","json_schema":)",
                                                    Nest(kMaxJsonNesting, R"({"k":)", "}", "{}"), "}")}});
  for (const auto& [what, req] : cases) ExpectRefused(req.first, req.second, what);
  ExpectServing();
}

TEST_F(DeepInputTest, NestingWithinTheLimitIsServed) {
  // A schema 40 levels deep (about 80 JSON levels) converts and is served.
  httplib::Client cli("127.0.0.1", http_port_);
  const std::string body =
      absl::StrCat(R"({"model":"stories260K","prompt":"x","max_tokens":2,"json_schema":)", DeepSchema(40), "}");
  auto res = cli.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_FALSE(worker_->last_start().sampling().grammar().empty());
}

TEST_F(DeepInputTest, MillionDeepJsonInGrpcChatFieldsIsInvalidArgument) {
  auto stub = v1::Gateway::NewStub(channel_);
  auto run = [&](const v1::GenerateRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateResponse r;
    while (reader->Read(&r)) {
    }
    return reader->Finish();
  };
  v1::GenerateRequest base;
  base.set_model("stories260K");
  base.set_n_predict(2);
  auto* msg = base.mutable_chat()->add_messages();
  msg->set_role("user");
  msg->set_content("hi");
  {
    v1::GenerateRequest r = base;
    r.mutable_chat()->set_tools_json(DeepArray(kMillion));
    grpc::Status st = run(r);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(), "chat.tools_json: JSON nested deeper than 256"))
        << st.error_message();
  }
  {
    v1::GenerateRequest r = base;
    auto* call = r.mutable_chat()->add_messages();
    call->set_role("assistant");
    call->set_tool_calls_json(DeepArray(kMillion));
    grpc::Status st = run(r);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_TRUE(absl::StrContains(st.error_message(), "tool_calls_json: JSON nested deeper than 256"))
        << st.error_message();
  }
  grpc::Status ok = run(base);
  EXPECT_TRUE(ok.ok()) << ok.error_message();
}

// 10^5 nested unknown groups (field 1000, wire type 3): protobuf's parser stops at its
// recursion limit; the gateway answers INVALID_ARGUMENT and keeps serving.
TEST_F(DeepInputTest, DeeplyNestedProtobufIsRefused) {
  std::string bytes;
  for (int i = 0; i < 100000; ++i) bytes += "\xc3\x3e";  // tag (1000 << 3) | 3
  for (int i = 0; i < 100000; ++i) bytes += "\xc4\x3e";  // tag (1000 << 3) | 4
  for (const char* method : {"Tokenize", "Detokenize", "ListModels", "Embed"}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer req(&slice, 1), resp;
    grpc::Status st = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_.get(),
        grpc::internal::RpcMethod(absl::StrCat("/herd.v1.Gateway/", method).c_str(),
                                  grpc::internal::RpcMethod::NORMAL_RPC),
        &ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method << ": " << st.error_message();
  }
  ExpectServing();
}

}  // namespace
}  // namespace herd::gateway
