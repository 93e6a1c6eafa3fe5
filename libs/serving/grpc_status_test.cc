#include "libs/serving/grpc_status.h"

#include "gtest/gtest.h"

namespace herd::serving {
namespace {

TEST(GrpcStatusTest, RoundTripsCodeAndMessage) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  const grpc::Status g = ToGrpcStatus(absl::InvalidArgumentError("field x"));
  EXPECT_EQ(g.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(g.error_message(), "field x");
  const absl::Status a = FromGrpcStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "worker gone"));
  EXPECT_EQ(a.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(a.message(), "worker gone");
  EXPECT_EQ(FromGrpcStatus(ToGrpcStatus(absl::ResourceExhaustedError("full"))), absl::ResourceExhaustedError("full"));
}

}  // namespace
}  // namespace herd::serving
