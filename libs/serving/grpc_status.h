// Conversions between absl::Status (how libs and services report errors) and
// grpc::Status (what crosses the wire). Both keep the code and the message; the
// numeric codes of the two enums are the same (canonical error codes).
#pragma once
#include "absl/status/status.h"
#include "grpcpp/grpcpp.h"

namespace herd::serving {

/// absl::Status -> grpc::Status with the same code and message (OK -> grpc::Status::OK).
/// Never fails.
grpc::Status ToGrpcStatus(const absl::Status& s);

/// grpc::Status -> absl::Status with the same code and message (OK -> absl::OkStatus()).
/// Never fails.
absl::Status FromGrpcStatus(const grpc::Status& s);

}  // namespace herd::serving
