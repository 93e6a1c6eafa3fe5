#include "libs/serving/service_main.h"

#include <signal.h>

#include <thread>

#include "gtest/gtest.h"

#include "libs/serving/metrics.h"

namespace herd::serving {
namespace {

TEST(ServiceMainTest, ChecksPortFlags) {
  EXPECT_TRUE(CheckPortFlags(0, -1).ok());
  EXPECT_TRUE(CheckPortFlags(65535, 65535).ok());
  EXPECT_EQ(CheckPortFlags(-1, 0).message(), "--port -1 is outside 0..65535");
  EXPECT_EQ(CheckPortFlags(65536, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckPortFlags(1, -2).message(), "--metrics_port -2 is outside -1..65535");
  EXPECT_EQ(CheckPortFlags(1, 65536).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServiceMainTest, ListenAddressBracketsIpv6) {
  EXPECT_EQ(ListenAddress("127.0.0.1", 50052), "127.0.0.1:50052");
  EXPECT_EQ(ListenAddress("::1", 0), "[::1]:0");
}

TEST(ServiceMainTest, StartupFailureReturnsOne) { EXPECT_EQ(StartupFailure("herd-test", "expected"), 1); }

// Starts metrics and gRPC on free ports, then an early-caught SIGTERM ends Wait().
TEST(ServiceMainTest, ServesAndShutsDownOnEarlySignal) {
  Registry registry;
  ServiceMain process("test");
  auto off = process.StartMetrics(&registry, {}, "127.0.0.1", -1);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(*off, -1);
  auto m = process.StartMetrics(&registry, {}, "127.0.0.1", 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_GT(*m, 0);
  GrpcServerOptions opts;
  opts.address = ListenAddress("127.0.0.1", 0);
  auto port = process.StartGrpc(opts, {}, "herd.v1.Test");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_GT(*port, 0);
  ASSERT_NE(process.server(), nullptr);
  CatchSignalsEarly();
  EXPECT_FALSE(SignalledEarly());
  ASSERT_EQ(::raise(SIGTERM), 0);
  EXPECT_TRUE(SignalledEarly());
  process.Wait(std::chrono::milliseconds(100));  // returns: the signal is honoured
  process.ResetServer();
  EXPECT_EQ(process.server(), nullptr);
  process.StopMetrics();
  process.StopMetrics();  // idempotent
}

TEST(ServiceMainTest, PortsInUseAreErrors) {
  Registry registry;
  ServiceMain a("a"), b("b");
  auto m = a.StartMetrics(&registry, {}, "127.0.0.1", 0);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE(b.StartMetrics(&registry, {}, "127.0.0.1", *m).ok());
}

}  // namespace
}  // namespace herd::serving
