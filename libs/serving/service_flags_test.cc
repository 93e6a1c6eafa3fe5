#include "libs/serving/service_flags.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, host);
ABSL_DECLARE_FLAG(int, grace_ms);
ABSL_DECLARE_FLAG(int, max_message_bytes);

namespace herd::serving {
namespace {

TEST(ServiceFlags, DefaultsAndPorts) {
  auto f = ReadServiceFlags(50052, 9092);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->host, "127.0.0.1");
  EXPECT_EQ(f->port, 50052);
  EXPECT_EQ(f->metrics_port, 9092);
  EXPECT_EQ(f->grace.count(), 5000);
  EXPECT_EQ(f->max_message_bytes, 64 << 20);
}

TEST(ServiceFlags, ReadsSetFlags) {
  absl::SetFlag(&FLAGS_host, "0.0.0.0");
  absl::SetFlag(&FLAGS_grace_ms, 0);
  absl::SetFlag(&FLAGS_max_message_bytes, 1 << 20);
  auto f = ReadServiceFlags(0, -1);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->host, "0.0.0.0");
  EXPECT_EQ(f->grace.count(), 0);
  EXPECT_EQ(f->max_message_bytes, 1 << 20);
  EXPECT_EQ(f->metrics_port, -1);
  absl::SetFlag(&FLAGS_host, "127.0.0.1");
  absl::SetFlag(&FLAGS_grace_ms, 5000);
  absl::SetFlag(&FLAGS_max_message_bytes, 64 << 20);
}

TEST(ServiceFlags, RejectsBadValues) {
  EXPECT_EQ(ReadServiceFlags(70000, 9092).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadServiceFlags(50052, -2).status().code(), absl::StatusCode::kInvalidArgument);
  absl::SetFlag(&FLAGS_grace_ms, -1);
  auto f = ReadServiceFlags(50052, 9092);
  EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.status().message(), "--grace_ms must be >= 0");
  absl::SetFlag(&FLAGS_grace_ms, 5000);
}

}  // namespace
}  // namespace herd::serving
