// Client helpers for herd.v1.Loader, for the other services: fetch a model's GGUF
// (mmap of the loader's file when this process can read it, else a resumable,
// CRC-checked ReadTensors stream), its vocab-only GGUF, and its description. Every
// call carries a deadline.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpcpp/grpcpp.h"

#include "libs/gguf/gguf.h"
#include "libs/serving/grpc_status.h"
#include "libs/serving/security.h"
#include "proto/herd/v1/loader.grpc.pb.h"

namespace herd::loader {

// grpc::Status -> absl::Status (one implementation: libs/serving/grpc_status.h).
using serving::FromGrpcStatus;

/// A channel to a loader at `target` ("host:port"), secured as `security` says (TLS,
/// cluster key; default plaintext), whose receive limit (`max_message_bytes`, default
/// 64 MiB) admits 4 MiB chunks and large vocab GGUFs (gRPC's default is 4 MiB).
/// Reconnects after 100 ms, backing off to at most 1 s (gRPC's default grows to 120 s),
/// so a restarted loader is found again quickly.
std::shared_ptr<grpc::Channel> MakeLoaderChannel(const std::string& target, int max_message_bytes = 64 << 20,
                                                 const serving::ClientSecurity& security = {});

struct FetchOptions {
  /// Open ModelInfo.local_path directly (mmap) when it is a readable regular file of
  /// the same size with the same GGUF layout; otherwise stream.
  bool allow_local_mmap = true;
  /// ReadTensors chunk size (4 KiB..4 MiB; the channel must admit it).
  uint32_t chunk_size = 1 << 20;
  /// ReadTensors calls in all, the first included; a broken stream, a CRC mismatch or
  /// a retryable error (UNAVAILABLE, ABORTED, INTERNAL, UNKNOWN, DATA_LOSS,
  /// RESOURCE_EXHAUSTED) resumes from the last verified offset while attempts remain.
  int max_attempts = 5;
  /// Pause before a resume; doubles each time (capped by the deadline).
  std::chrono::milliseconds retry_backoff{50};
  /// While the loader is unreachable (GetModelInfo answers UNAVAILABLE: not started
  /// yet, restarting), keep asking until the deadline (calls that wait for the channel
  /// to connect); false = fail at once.
  bool wait_for_loader = false;
};

/// How a fetch went.
struct FetchStats {
  bool mmapped = false;         // the loader's file was opened locally
  int attempts = 0;             // ReadTensors calls
  int crc_failures = 0;         // chunks whose CRC-32 did not match
  uint64_t bytes_streamed = 0;  // verified bytes received
};

/// GetModelInfo with a deadline of `deadline` from now.
absl::StatusOr<herd::v1::ModelInfo> GetModelInfo(herd::v1::Loader::StubInterface* stub, const std::string& name,
                                                 std::chrono::milliseconds deadline, bool include_sha256 = false,
                                                 bool include_vocab_gguf = false);

/// ListModels with a deadline of `deadline` from now.
absl::StatusOr<std::vector<herd::v1::StoredModel>> ListModels(herd::v1::Loader::StubInterface* stub,
                                                              std::chrono::milliseconds deadline);

/// Streams bytes [offset, offset + length) of model `name` into *out (resized to
/// `length`), verifying each chunk's offset and CRC-32 and resuming after failures as
/// FetchOptions says, all before the absolute `deadline`. Errors: the loader's
/// (NOT_FOUND, INVALID_ARGUMENT, OUT_OF_RANGE, ...), DEADLINE_EXCEEDED, or the last
/// retryable error once the attempts are spent.
absl::Status ReadModelBytes(herd::v1::Loader::StubInterface* stub, const std::string& name, uint64_t offset,
                            uint64_t length, std::chrono::system_clock::time_point deadline, const FetchOptions& opts,
                            std::string* out, FetchStats* stats = nullptr);

/// The whole model as a parsed GGUF: the loader's file mapped in place when this process
/// can read it (same size and layout), else streamed into memory (ReadModelBytes) and
/// parsed with GgufFile::FromBytes. All calls share the one `deadline` (from now).
/// Errors: the loader's, the GGUF reader's (INVALID_ARGUMENT), DEADLINE_EXCEEDED.
absl::StatusOr<std::unique_ptr<gguf::GgufFile>> FetchModel(herd::v1::Loader::StubInterface* stub,
                                                           const std::string& name, std::chrono::milliseconds deadline);
absl::StatusOr<std::unique_ptr<gguf::GgufFile>> FetchModel(herd::v1::Loader::StubInterface* stub,
                                                           const std::string& name, std::chrono::milliseconds deadline,
                                                           const FetchOptions& opts, FetchStats* stats = nullptr);

/// The model's vocab-only GGUF (all metadata, no tensors; ModelInfo.vocab_gguf),
/// parsed: what a gateway passes to tokenizer::Vocab::FromGguf. The channel's receive
/// limit must admit it (MakeLoaderChannel does for up to 64 MiB).
absl::StatusOr<std::unique_ptr<gguf::GgufFile>> FetchVocabGguf(herd::v1::Loader::StubInterface* stub,
                                                               const std::string& name,
                                                               std::chrono::milliseconds deadline);

}  // namespace herd::loader
