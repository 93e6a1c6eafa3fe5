#include "tests/e2e/e2e_util.h"

#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "httplib.h"

namespace herd::e2e {

double MetricSum(const std::string& metrics_addr, const std::string& name, const std::string& label) {
  const size_t colon = metrics_addr.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(metrics_addr.substr(colon + 1), &port)) return -1;
  httplib::Client cli(metrics_addr.substr(0, colon), port);
  cli.set_connection_timeout(2);
  cli.set_read_timeout(5);
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return -1;
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    absl::string_view key = line.substr(0, line.find(' '));
    if (key.substr(0, key.find('{')) != name) continue;
    if (!label.empty() && !absl::StrContains(key, label)) continue;
    double v;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
  }
  return sum;
}

bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

long ProcStatus(pid_t pid, const std::string& field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, field + ":")) continue;
    std::string v(absl::StripAsciiWhitespace(line.substr(field.size() + 1)));
    v = v.substr(0, v.find(' '));
    long n = 0;
    return absl::SimpleAtoi(v, &n) ? n : -1;
  }
  return -1;
}

int HealthStatus(const std::string& addr, std::chrono::milliseconds timeout) {
  // Debian ships no generated grpc.health.v1 stubs: the empty HealthCheckRequest and the
  // answer HealthCheckResponse{status = 1} are spoken as raw bytes (as `herd health` does).
  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  grpc::Slice empty("");
  grpc::ByteBuffer in(&empty, 1), out;
  grpc::Status st = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), grpc::internal::RpcMethod("/grpc.health.v1.Health/Check", grpc::internal::RpcMethod::NORMAL_RPC),
      &ctx, in, &out);
  if (!st.ok()) return -1;
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (out.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  if (bytes.empty()) return 0;  // proto3 default: UNKNOWN
  if (bytes.size() == 2 && bytes[0] == 0x08 && (bytes[1] & 0x80) == 0) return bytes[1];
  return -1;
}

cli::ClusterOptions TinyClusterOptions(const std::string& shared, std::vector<std::string> models) {
  cli::ClusterOptions o;
  o.models_dir = shared + "/models";
  o.models = std::move(models);
  o.workers_per_model = 1;
  o.quiet = true;
  return o;
}

v1::GenerateRequest Greedy(const std::string& model, const std::string& prompt, int n) {
  v1::GenerateRequest req;
  req.set_model(model);
  req.set_text(prompt);
  req.set_n_predict(n);
  req.mutable_sampling()->set_temperature(0.0f);
  return req;
}

}  // namespace herd::e2e
