// herd health: a grpc.health.v1 probe for container images without a shell (the
// exec probes of k8s/ and tools/images_smoke.sh).
//   herd health ADDR [--service NAME] [--timeout S]
// Calls grpc.health.v1.Health/Check on ADDR (HOST:PORT) for NAME (default "": the
// server as a whole). Exit status 0 when the answer is SERVING, 1 otherwise
// (NOT_SERVING, unknown service, unreachable, deadline), 2 on usage errors; always
// exactly one line on stderr. Debian ships no generated stubs for grpc.health.v1, so
// the two tiny messages are spoken as raw protobuf bytes.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"

#include "tools/herd/args.h"
#include "tools/herd/client_security.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {

void AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool ReadVarint(const std::string& s, size_t* pos, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < s.size(); shift += 7) {
    const uint8_t b = static_cast<uint8_t>(s[(*pos)++]);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// HealthCheckResponse{status = 1 (enum)} -> the status; -1 when malformed.
int ParseStatus(const std::string& s) {
  int status = 0;  // proto3 default: UNKNOWN
  size_t pos = 0;
  while (pos < s.size()) {
    uint64_t key, v;
    if (!ReadVarint(s, &pos, &key)) return -1;
    switch (key & 7) {
      case 0:  // varint
        if (!ReadVarint(s, &pos, &v)) return -1;
        if ((key >> 3) == 1) status = static_cast<int>(v);
        break;
      case 1:
        pos += 8;
        break;
      case 5:
        pos += 4;
        break;
      case 2:  // length-delimited
        if (!ReadVarint(s, &pos, &v) || v > s.size() - pos) return -1;
        pos += v;
        break;
      default:
        return -1;
    }
  }
  return pos == s.size() ? status : -1;
}

const char* StatusName(int s) {
  switch (s) {
    case 0:
      return "UNKNOWN";
    case 1:
      return "SERVING";
    case 2:
      return "NOT_SERVING";
    case 3:
      return "SERVICE_UNKNOWN";
    default:
      return "INVALID";
  }
}

}  // namespace

int CmdHealth(int argc, char** argv) {
  static const std::vector<FlagSpec> specs = WithClientSecurityFlags({
      {{"--service"}, true, "service name to ask about (\"\" = the server as a whole)", ""},
      {{"--timeout"}, true, "deadline of the check in seconds", "5"},
      {{"-h", "--help"}, false, "show this help", ""},
  });
  const std::string usage = "usage: herd health ADDR [--service NAME] [--timeout S]\n" + Args::Usage(specs) +
                            "exit status 0 when ADDR answers SERVING, 1 otherwise\n";
  auto args = Args::Parse(specs, argc, argv, 2);
  auto usage_error = [&](const std::string& msg) {
    std::fprintf(stderr, "herd: error: %s (usage: herd health ADDR [--service NAME] [--timeout S])\n", msg.c_str());
    return 2;
  };
  if (!args.ok()) return usage_error(std::string(args.status().message()));
  if (args->Has("-h")) {
    std::fputs(usage.c_str(), stdout);
    return 0;
  }
  if (args->positional().size() != 1) return usage_error("health: give exactly one ADDR (HOST:PORT)");
  const std::string addr = args->positional()[0];
  const std::string service = args->Get("--service");
  auto timeout = args->GetDouble("--timeout");
  if (!timeout.ok()) return usage_error(std::string(timeout.status().message()));
  if (!(*timeout > 0) || *timeout > 3600) return usage_error("--timeout: must be in (0, 3600] seconds");

  std::string req;  // HealthCheckRequest{service = 1}
  if (!service.empty()) {
    req.push_back(0x0a);
    AppendVarint(&req, service.size());
    req += service;
  }
  // Health is open by default on herd services; a key is sent when one is configured
  // (services started with --open_health=false).
  auto security = ClientSecurityFromArgs(*args, {"HERD_API_KEY", "HERD_CLUSTER_KEY"});
  if (!security.ok()) {  // e.g. a CA file not mounted (yet): unhealthy, not a usage error
    std::fprintf(stderr, "herd: health %s: error: %s\n", addr.c_str(),
                 std::string(security.status().message()).c_str());
    return 1;
  }
  auto channel = serving::MakeChannel(addr, *security);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::microseconds(static_cast<int64_t>(*timeout * 1e6)));
  grpc::Slice in_slice(req);
  grpc::ByteBuffer in(&in_slice, 1), out;
  grpc::Status st = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
      channel.get(), grpc::internal::RpcMethod("/grpc.health.v1.Health/Check", grpc::internal::RpcMethod::NORMAL_RPC),
      &ctx, in, &out);
  const std::string what = absl::StrCat(addr, service.empty() ? "" : absl::StrCat(" service ", service));
  if (!st.ok()) {
    std::fprintf(stderr, "herd: health %s: error: %s (code %d)\n", what.c_str(), st.error_message().c_str(),
                 static_cast<int>(st.error_code()));
    return 1;
  }
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (out.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  const int status = ParseStatus(bytes);
  std::fprintf(stderr, "herd: health %s: %s\n", what.c_str(), StatusName(status));
  return status == 1 ? 0 : 1;
}

}  // namespace herd::cli
