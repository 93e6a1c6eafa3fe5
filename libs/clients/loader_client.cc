#include "libs/clients/loader_client.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/base/status_macros.h"

namespace herd::loader {
namespace {

using Clock = std::chrono::system_clock;

bool Retryable(grpc::StatusCode c) {
  switch (c) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::ABORTED:
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return true;
    default:
      return false;
  }
}

uint32_t Crc32(const std::string& data) {
  return static_cast<uint32_t>(
      ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data.data()), static_cast<uInt>(data.size())));
}

// The local file matches what the loader described (so the mmap is the same model).
bool SameLayout(const gguf::GgufFile& f, const herd::v1::ModelInfo& info) {
  if (f.file_size() != info.file_size() || f.data_offset() != info.data_offset() ||
      f.tensors().size() != static_cast<size_t>(info.tensors_size()) ||
      f.metadata().size() != static_cast<size_t>(info.metadata_size())) {
    return false;
  }
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const gguf::TensorInfo& t = f.tensors()[i];
    const herd::v1::TensorEntry& e = info.tensors(static_cast<int>(i));
    if (t.name != e.name() || f.data_offset() + t.offset != e.offset() || t.nbytes != e.nbytes()) return false;
  }
  return true;
}

}  // namespace

std::shared_ptr<grpc::Channel> MakeLoaderChannel(const std::string& target, int max_message_bytes,
                                                 const serving::ClientSecurity& security) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(max_message_bytes);
  args.SetMaxSendMessageSize(max_message_bytes);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return serving::MakeChannel(target, security, args);
}

namespace {

// GetModelInfo; with `wait_for_ready` the call waits (until the deadline) for a channel
// that is reconnecting instead of failing at once with UNAVAILABLE.
absl::StatusOr<herd::v1::ModelInfo> ModelInfoCall(herd::v1::Loader::StubInterface* stub, const std::string& name,
                                                  std::chrono::milliseconds deadline, bool include_sha256,
                                                  bool include_vocab_gguf, bool wait_for_ready) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Clock::now() + deadline);
  ctx.set_wait_for_ready(wait_for_ready);
  herd::v1::GetModelInfoRequest req;
  req.set_name(name);
  req.set_include_sha256(include_sha256);
  req.set_include_vocab_gguf(include_vocab_gguf);
  herd::v1::ModelInfo info;
  grpc::Status s = stub->GetModelInfo(&ctx, req, &info);
  if (!s.ok()) return FromGrpcStatus(s);
  return info;
}

}  // namespace

absl::StatusOr<herd::v1::ModelInfo> GetModelInfo(herd::v1::Loader::StubInterface* stub, const std::string& name,
                                                 std::chrono::milliseconds deadline, bool include_sha256,
                                                 bool include_vocab_gguf) {
  return ModelInfoCall(stub, name, deadline, include_sha256, include_vocab_gguf, /*wait_for_ready=*/false);
}

absl::StatusOr<std::vector<herd::v1::StoredModel>> ListModels(herd::v1::Loader::StubInterface* stub,
                                                              std::chrono::milliseconds deadline) {
  grpc::ClientContext ctx;
  ctx.set_deadline(Clock::now() + deadline);
  herd::v1::LoaderListModelsResponse resp;
  grpc::Status s = stub->ListModels(&ctx, herd::v1::LoaderListModelsRequest(), &resp);
  if (!s.ok()) return FromGrpcStatus(s);
  return std::vector<herd::v1::StoredModel>(resp.models().begin(), resp.models().end());
}

absl::Status ReadModelBytes(herd::v1::Loader::StubInterface* stub, const std::string& name, uint64_t offset,
                            uint64_t length, Clock::time_point deadline, const FetchOptions& opts, std::string* out,
                            FetchStats* stats) {
  FetchStats local;
  if (stats == nullptr) stats = &local;
  out->assign(length, '\0');
  uint64_t done = 0;  // verified bytes, out[0, done)
  absl::Status last = absl::UnavailableError("no attempt made");
  auto backoff = opts.retry_backoff;
  while (done < length) {
    if (stats->attempts >= std::max(1, opts.max_attempts)) {
      return absl::Status(last.code(), absl::StrCat("ReadTensors '", name, "': gave up after ", stats->attempts,
                                                    " attempts at byte ", offset + done, ": ", last.message()));
    }
    if (stats->attempts > 0) {
      const auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) break;
      std::this_thread::sleep_for(std::min<Clock::duration>(backoff, left));
      backoff *= 2;
      HERD_LOG(Info) << "ReadTensors '" << name << "': resuming at byte " << offset + done
                     << " after: " << last.message();
    }
    if (Clock::now() >= deadline) break;
    ++stats->attempts;
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline);
    herd::v1::ReadTensorsRequest req;
    req.set_name(name);
    req.set_offset(offset + done);
    req.set_length(length - done);
    req.set_chunk_size(opts.chunk_size);
    std::unique_ptr<grpc::ClientReaderInterface<herd::v1::TensorChunk>> reader = stub->ReadTensors(&ctx, req);
    herd::v1::TensorChunk chunk;
    bool broken = false;
    while (reader->Read(&chunk)) {
      const std::string& d = chunk.data();
      if (chunk.offset() != offset + done || d.empty() || d.size() > length - done) {
        last = absl::DataLossError(absl::StrCat("unexpected chunk at offset ", chunk.offset(), " of ", d.size(),
                                                " bytes (expected offset ", offset + done, ")"));
        broken = true;
      } else if (Crc32(d) != chunk.crc32()) {
        ++stats->crc_failures;
        last = absl::DataLossError(absl::StrCat("CRC-32 mismatch in the chunk at offset ", chunk.offset()));
        broken = true;
      }
      if (broken) {
        ctx.TryCancel();
        while (reader->Read(&chunk)) {
        }
        break;
      }
      std::memcpy(&(*out)[done], d.data(), d.size());
      done += d.size();
      stats->bytes_streamed += d.size();
    }
    const grpc::Status s = reader->Finish();
    if (broken) continue;
    if (s.ok()) {
      if (done < length) {
        last = absl::DataLossError(absl::StrCat("stream ended at byte ", offset + done, " of ", offset + length));
      }
      continue;
    }
    if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) break;
    if (!Retryable(s.error_code())) return FromGrpcStatus(s);
    last = FromGrpcStatus(s);
  }
  if (done < length) {
    return absl::DeadlineExceededError(
        absl::StrCat("ReadTensors '", name, "': deadline exceeded at byte ", offset + done, " of ", offset + length));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<gguf::GgufFile>> FetchModel(herd::v1::Loader::StubInterface* stub,
                                                           const std::string& name,
                                                           std::chrono::milliseconds deadline) {
  return FetchModel(stub, name, deadline, FetchOptions());
}

absl::StatusOr<std::unique_ptr<gguf::GgufFile>> FetchModel(herd::v1::Loader::StubInterface* stub,
                                                           const std::string& name, std::chrono::milliseconds deadline,
                                                           const FetchOptions& opts, FetchStats* stats) {
  FetchStats local;
  if (stats == nullptr) stats = &local;
  const Clock::time_point end = Clock::now() + deadline;
  auto info = GetModelInfo(stub, name, deadline);
  // A loader that is down (or restarting): ask again until the deadline, each call
  // waiting up to 5 s for the channel to (re)connect (the channel retries the
  // connection itself, MakeLoaderChannel's backoff), so the loader is found as soon as
  // it listens.
  while (opts.wait_for_loader && absl::IsUnavailable(info.status())) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left <= std::chrono::milliseconds(0)) break;
    HERD_LOG(Warning) << "model '" << name << "': loader unavailable (" << info.status().message()
                      << "); waiting for it";
    const Clock::time_point t0 = Clock::now();
    info = ModelInfoCall(stub, name, std::min(left, std::chrono::milliseconds(5000)), false, false,
                         /*wait_for_ready=*/true);
    if (absl::IsDeadlineExceeded(info.status()) && Clock::now() < end) {
      info = absl::UnavailableError(absl::StrCat("loader not reachable (", info.status().message(), ")"));
    }
    // Never spin: a call that failed at once waits a little before the next.
    if (!info.ok() && Clock::now() - t0 < std::chrono::milliseconds(100)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  if (!info.ok()) return info.status();

  if (opts.allow_local_mmap && !info->local_path().empty()) {
    struct stat st;
    if (::stat(info->local_path().c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        static_cast<uint64_t>(st.st_size) == info->file_size()) {
      auto f = gguf::GgufFile::Open(info->local_path());
      if (f.ok() && SameLayout(**f, *info)) {
        stats->mmapped = true;
        HERD_LOG(Info) << "model '" << name << "': mapped " << info->local_path() << " (" << info->file_size()
                       << " bytes)";
        return f;
      }
      HERD_LOG(Info) << "model '" << name << "': " << info->local_path()
                     << " differs from the loader's file; streaming instead";
    }
  }
  std::string bytes;
  HERD_RETURN_IF_ERROR(ReadModelBytes(stub, name, 0, info->file_size(), end, opts, &bytes, stats));
  HERD_LOG(Info) << "model '" << name << "': streamed " << bytes.size() << " bytes in " << stats->attempts
                 << " call(s)";
  return gguf::GgufFile::FromBytes(std::move(bytes), name);
}

absl::StatusOr<std::unique_ptr<gguf::GgufFile>> FetchVocabGguf(herd::v1::Loader::StubInterface* stub,
                                                               const std::string& name,
                                                               std::chrono::milliseconds deadline) {
  HERD_ASSIGN_OR_RETURN(auto info,
                        GetModelInfo(stub, name, deadline, /*include_sha256=*/false, /*include_vocab_gguf=*/true));
  if (info.vocab_gguf().empty()) {
    return absl::InternalError(absl::StrCat("loader sent no vocab_gguf for '", name, "'"));
  }
  return gguf::GgufFile::FromBytes(std::move(*info.mutable_vocab_gguf()), name + " (vocab)");
}

}  // namespace herd::loader
