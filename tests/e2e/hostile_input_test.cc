// Hostile input against real processes (LocalCluster: loader, worker, draft worker,
// gateway): JSON nested 10^6 deep in the gateway's HTTP bodies gets a 400 naming the
// limit, protobuf nested 10^5 deep (unknown groups) sent to every gRPC service is
// refused, and afterwards every process is the same process (same PID, no restart) and
// still serving.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

#include "proto/herd/v1/gateway.grpc.pb.h"
#include "tests/e2e/e2e_util.h"
#include "tests/shared_data.h"
#include "tools/herd/cluster.h"

namespace herd {
namespace {

// A write to a connection the server closed must fail, not kill the test (SIGPIPE).
const bool kSigpipeIgnored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

std::string Nest(int depth, const std::string& open, const std::string& close, const std::string& inner) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += open;
  s += inner;
  for (int i = 0; i < depth; ++i) s += close;
  return s;
}

// 10^5 nested unknown groups: field 1000, START_GROUP ... END_GROUP.
std::string NestedGroups() {
  std::string bytes;
  for (int i = 0; i < 100000; ++i) bytes += "\xc3\x3e";
  for (int i = 0; i < 100000; ++i) bytes += "\xc4\x3e";
  return bytes;
}

grpc::Status RawUnary(const std::string& addr, const std::string& method, const std::string& bytes) {
  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  grpc::Slice slice(bytes);
  grpc::ByteBuffer req(&slice, 1), resp;
  return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC), &ctx, req,
      &resp);
}

TEST(HostileInput, DeepJsonAndDeepProtobufNeverTakeAServiceDown) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  cli::LocalCluster cluster;
  cli::ClusterOptions o = e2e::TinyClusterOptions(shared);
  o.draft_workers = 1;
  o.n_ctx = 1024;
  ASSERT_TRUE(cluster.Start(o, std::chrono::seconds(120)).ok());
  std::map<std::string, pid_t> pids;
  for (cli::Process* p : cluster.processes()) pids[p->name] = p->pid;
  ASSERT_EQ(pids.size(), 4u);

  // HTTP: the reported crash (response_format.json_schema.schema 10^5 schema levels,
  // 3.7 MB) and 10^6 levels in the chat tools field (6 MB; within the 16 MiB body limit).
  const std::string http = cluster.gateway_http_addr();
  const std::string host = http.substr(0, http.rfind(':'));
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(http.substr(http.rfind(':') + 1), &port)) << http;
  const std::string schema = Nest(100000, R"({"type":"object","properties":{"k":)", "}}", "{}");
  const std::string deep = Nest(1000000, R"({"k":)", "}", "{}");
  const std::vector<std::pair<std::string, std::string>> bodies = {
      {"/v1/completions",
       absl::StrCat(R"({"model":"stories260K","prompt":"x","response_format":{"type":"json_schema",)",
                    R"("json_schema":{"name":"n","schema":)", schema, "}}}")},
      {"/v1/chat/completions",
       absl::StrCat(R"({"model":"stories260K","messages":[{"role":"user","content":"hi"}],)",
                    R"("tools":[{"type":"function","function":{"name":"f","parameters":)", deep, "}}]}")},
  };
  for (const auto& [path, body] : bodies) {
    httplib::Client cli(host, port);
    cli.set_read_timeout(30, 0);
    const auto t0 = std::chrono::steady_clock::now();
    auto res = cli.Post(path, body, "application/json");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(res) << path << ": " << httplib::to_string(res.error());
    EXPECT_EQ(res->status, 400) << path << ": " << res->body;
    EXPECT_NE(res->body.find("nested deeper than 256 levels"), std::string::npos) << res->body;
    std::printf("%s: %zu-byte deeply nested body -> %d in %.1f ms\n", path.c_str(), body.size(), res->status, ms);
  }

  // gRPC: every service, nested groups where a request message is expected.
  const std::string groups = NestedGroups();
  std::string worker_addr, draft_addr;
  for (cli::Process* p : cluster.workers()) worker_addr = p->grpc_addr;
  for (cli::Process* p : cluster.draft_workers()) draft_addr = p->grpc_addr;
  const std::vector<std::pair<std::string, std::string>> calls = {
      {cluster.loader_addr(), "/herd.v1.Loader/ListModels"},
      {cluster.loader_addr(), "/herd.v1.Loader/GetModelInfo"},
      {worker_addr, "/herd.v1.Worker/Info"},
      {worker_addr, "/herd.v1.Worker/Embed"},
      {draft_addr, "/herd.v1.Draft/Propose"},
      {draft_addr, "/herd.v1.Draft/EndSession"},
      {cluster.gateway_addr(), "/herd.v1.Gateway/Tokenize"},
      {cluster.gateway_addr(), "/herd.v1.Gateway/Embed"},
  };
  for (const auto& [addr, method] : calls) {
    // The method exists at that address: an empty message is not UNIMPLEMENTED.
    grpc::Status empty = RawUnary(addr, method, "");
    EXPECT_NE(empty.error_code(), grpc::StatusCode::UNIMPLEMENTED) << method << ": " << empty.error_message();
    grpc::Status st = RawUnary(addr, method, groups);
    EXPECT_FALSE(st.ok()) << method;
    // Refused as a bad message, not lost to a dead or unreachable server.
    EXPECT_NE(st.error_code(), grpc::StatusCode::UNAVAILABLE) << method << ": " << st.error_message();
    EXPECT_NE(st.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << method << ": " << st.error_message();
    std::printf("%s: 10^5 nested groups -> %d %s\n", method.c_str(), static_cast<int>(st.error_code()),
                st.error_message().c_str());
  }

  // Same processes, none restarted, and the whole path still serves.
  for (cli::Process* p : cluster.processes()) {
    EXPECT_EQ(p->pid, pids[p->name]) << p->name;
    EXPECT_EQ(cluster.Restarts(p->name), 0) << p->name;
    EXPECT_EQ(kill(p->pid, 0), 0) << p->name << " is gone";
  }
  auto stub = v1::Gateway::NewStub(grpc::CreateChannel(cluster.gateway_addr(), grpc::InsecureChannelCredentials()));
  v1::GenerateRequest req;
  req.set_model("stories260K");
  req.set_text("Once upon a time");
  req.set_n_predict(8);
  req.mutable_sampling()->set_temperature(0);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse r;
  int tokens = 0;
  while (reader->Read(&r)) tokens += r.token_ids_size();
  grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(tokens, 8);
  cluster.Stop();
}

}  // namespace
}  // namespace herd
