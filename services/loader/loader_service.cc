#include "services/loader/loader_service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/base/sha256.h"
#include "libs/base/status_macros.h"
#include "libs/gguf/gguf.h"
#include "services/loader/quantize_backend.h"

namespace herd::loader {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Shown(const std::string& name) {
  std::string s = absl::CHexEscape(name.substr(0, 64));
  if (name.size() > 64) s += "...";
  return s;
}

// Prefixes a status message with the request field it concerns, keeping the code.
absl::Status WithField(const absl::Status& s, const char* field) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(field, ": ", s.message()));
}

// The largest element of an integer array value (per-layer hparams), or its scalar value.
int64_t IntOrMax(const gguf::Value* v) {
  if (v == nullptr) return 0;
  if (v->type() == gguf::ValueType::ARRAY) {
    int64_t m = 0;
    const gguf::ValueType t = v->array_type();
    if (t == gguf::ValueType::STRING || t == gguf::ValueType::ARRAY || t == gguf::ValueType::FLOAT32 ||
        t == gguf::ValueType::FLOAT64 || t == gguf::ValueType::BOOL) {
      return 0;
    }
    for (size_t i = 0; i < v->array_size(); ++i) m = std::max(m, v->IntAt(i));
    return m;
  }
  return v->is_integer() ? v->AsInt() : 0;
}

// hparams from metadata alone (llama.cpp key names), for any architecture: the store
// describes models it may not be able to run. Missing keys read as 0.
void FillHparams(const gguf::GgufFile& f, herd::v1::Hparams* hp) {
  auto arch = f.GetString("general.architecture");
  if (!arch.ok()) return;
  hp->set_architecture(*arch);
  auto get = [&](const char* key) { return IntOrMax(f.Find(absl::StrCat(*arch, ".", key))); };
  hp->set_n_ctx_train(get("context_length"));
  hp->set_n_embd(get("embedding_length"));
  hp->set_n_layer(get("block_count"));
  hp->set_n_head(get("attention.head_count"));
  hp->set_n_head_kv(f.Find(absl::StrCat(*arch, ".attention.head_count_kv")) != nullptr ? get("attention.head_count_kv")
                                                                                       : hp->n_head());
  hp->set_n_ff(get("feed_forward_length"));
  // n_vocab: rows of token_embd (what llama.cpp uses), else the token list, else vocab_size.
  if (const gguf::TensorInfo* t = f.FindTensor("token_embd.weight"); t != nullptr && t->n_dims >= 2) {
    hp->set_n_vocab(t->ne[1]);
  } else if (const gguf::Value* v = f.Find("tokenizer.ggml.tokens");
             v != nullptr && v->type() == gguf::ValueType::ARRAY) {
    hp->set_n_vocab(static_cast<int64_t>(v->array_size()));
  } else {
    hp->set_n_vocab(get("vocab_size"));
  }
}

std::string TypeString(const gguf::Value& v) {
  if (v.type() != gguf::ValueType::ARRAY) return gguf::ValueTypeName(v.type());
  return absl::StrCat("array[", gguf::ValueTypeName(v.array_type()), ",", v.array_size(), "]");
}

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<LoaderServiceImpl>> LoaderServiceImpl::Create(const LoaderOptions& opts) {
  if (opts.max_chunk_bytes < kMinChunkBytes || opts.max_chunk_bytes > kMaxChunkBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_chunk_bytes ", opts.max_chunk_bytes, " is outside ", kMinChunkBytes, "..", kMaxChunkBytes));
  }
  if (opts.max_message_bytes < static_cast<int64_t>(kMaxChunkBytes) + 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_message_bytes ", opts.max_message_bytes, " is below one chunk (", kMaxChunkBytes, ")"));
  }
  if (opts.quantize_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("quantize_threads ", opts.quantize_threads, " is negative"));
  }
  if (opts.max_concurrent_quantize < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_concurrent_quantize ", opts.max_concurrent_quantize, " must be at least 1"));
  }
  HERD_ASSIGN_OR_RETURN(auto store, ModelStore::Open(opts.models_dir));
  return std::unique_ptr<LoaderServiceImpl>(new LoaderServiceImpl(opts, std::move(store)));
}

LoaderServiceImpl::LoaderServiceImpl(const LoaderOptions& opts, ModelStore store)
    : opts_(opts), store_(std::move(store)) {
  if (opts_.registry == nullptr) own_registry_ = std::make_unique<serving::Registry>();
  registry_ = opts_.registry != nullptr ? opts_.registry : own_registry_.get();
  requests_ =
      registry_->Counter("herd_loader_requests_total", "Loader RPCs by method and status code.", {"method", "code"});
  bytes_sent_ = registry_->Counter("herd_loader_bytes_sent_total", "Model bytes sent by ReadTensors.");
  latency_ = registry_->Histogram("herd_loader_request_seconds", "Loader RPC latency in seconds.", {"method"});
  in_flight_ = registry_->Gauge("herd_loader_in_flight", "Loader RPCs in progress.", {"method"});
}

LoaderServiceImpl::~LoaderServiceImpl() = default;

grpc::Status LoaderServiceImpl::Finish(const char* method, grpc::ServerContext* ctx, const std::string& model,
                                       absl::Status s, double start_s, const std::string& extra) {
  // A call the client abandoned reads CANCELLED / DEADLINE_EXCEEDED, whatever stopped it.
  if (!s.ok() && ctx != nullptr && ctx->IsCancelled()) {
    const bool expired = ctx->deadline() <= std::chrono::system_clock::now();
    s = expired ? absl::DeadlineExceededError(absl::StrCat(method, ": deadline exceeded"))
                : absl::CancelledError(absl::StrCat(method, ": cancelled by the client"));
  }
  const double secs = NowSeconds() - start_s;
  const std::string code = absl::StatusCodeToString(s.code());
  requests_->Add(1, {method, code});
  latency_->Observe(secs, {method});
  in_flight_->Add(-1, {method});
  std::ostringstream os;
  os << "rpc=" << method;
  if (!model.empty()) os << " model=\"" << Shown(model) << "\"";
  if (ctx != nullptr) os << " peer=" << ctx->peer();
  os << " code=" << code << " ms=" << static_cast<int64_t>(secs * 1e3 + 0.5);
  if (!extra.empty()) os << " " << extra;
  if (!s.ok()) os << " error=\"" << absl::CHexEscape(s.message()) << "\"";
  // Client mistakes and hang-ups are routine; anything else is worth a warning.
  const bool routine = s.ok() || s.code() == absl::StatusCode::kCancelled ||
                       s.code() == absl::StatusCode::kDeadlineExceeded || s.code() == absl::StatusCode::kNotFound ||
                       s.code() == absl::StatusCode::kInvalidArgument || s.code() == absl::StatusCode::kOutOfRange ||
                       s.code() == absl::StatusCode::kAlreadyExists;
  if (routine) {
    HERD_LOG(Info) << os.str();
  } else {
    HERD_LOG(Warning) << os.str();
  }
  return ToGrpcStatus(s);
}

// ---------------------------------------------------------------------------------
// ListModels

absl::StatusOr<herd::v1::LoaderListModelsResponse> LoaderServiceImpl::List() const {
  HERD_ASSIGN_OR_RETURN(auto entries, store_.List());
  herd::v1::LoaderListModelsResponse resp;
  for (const StoreEntry& e : entries) {
    herd::v1::StoredModel* m = resp.add_models();
    m->set_name(e.name);
    m->set_size_bytes(e.size_bytes);
    auto f = gguf::GgufFile::Open(e.real_path);
    if (!f.ok()) {
      m->set_error(std::string(f.status().message()));
      continue;
    }
    auto arch = (*f)->GetString("general.architecture");
    if (arch.ok()) {
      m->set_architecture(*arch);
    } else {
      m->set_error(std::string(arch.status().message()));
    }
  }
  return resp;
}

grpc::Status LoaderServiceImpl::ListModels(grpc::ServerContext* ctx, const herd::v1::LoaderListModelsRequest*,
                                           herd::v1::LoaderListModelsResponse* resp) {
  const double t0 = NowSeconds();
  in_flight_->Add(1, {"ListModels"});
  auto r = List();
  if (r.ok()) *resp = *std::move(r);
  return Finish("ListModels", ctx, "", r.status(), t0, r.ok() ? absl::StrCat("models=", resp->models_size()) : "");
}

// ---------------------------------------------------------------------------------
// GetModelInfo

absl::StatusOr<std::string> LoaderServiceImpl::CachedSha256(const std::string& real_path,
                                                            const std::function<bool()>& cancelled) {
  struct stat st;
  if (::stat(real_path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(real_path, ": ", std::strerror(errno)));
  }
  const int64_t mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  const int64_t ctime_ns = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = sha_cache_.find(real_path);
    if (it != sha_cache_.end() && it->second.size == static_cast<uint64_t>(st.st_size) && it->second.ino == st.st_ino &&
        it->second.mtime_ns == mtime_ns && it->second.ctime_ns == ctime_ns) {
      return it->second.hex;
    }
  }
  HERD_ASSIGN_OR_RETURN(auto hex, Sha256File(real_path, cancelled));
  std::lock_guard<std::mutex> l(mu_);
  sha_cache_[real_path] = {static_cast<uint64_t>(st.st_size), static_cast<uint64_t>(st.st_ino), mtime_ns, ctime_ns,
                           hex};
  return hex;
}

absl::StatusOr<herd::v1::ModelInfo> LoaderServiceImpl::Describe(const herd::v1::GetModelInfoRequest& req,
                                                                const std::function<bool()>& cancelled) {
  HERD_ASSIGN_OR_RETURN(auto path, store_.Resolve(req.name()));
  HERD_ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(path));
  const gguf::GgufFile& f = *file;

  herd::v1::ModelInfo info;
  info.set_name(req.name());
  info.set_file_size(f.file_size());
  info.set_local_path(path);
  info.set_data_offset(f.data_offset());
  FillHparams(f, info.mutable_hparams());
  for (const gguf::KeyValue& kv : f.metadata()) {
    herd::v1::MetadataEntry* e = info.add_metadata();
    e->set_key(kv.key);
    e->set_type(TypeString(kv.value));
    e->set_value(kv.value.DebugString());
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    herd::v1::TensorEntry* e = info.add_tensors();
    e->set_name(t.name);
    e->set_type(GgmlTypeName(t.type));
    for (uint32_t d = 0; d < t.n_dims; ++d) e->add_ne(t.ne[d]);
    e->set_offset(f.data_offset() + t.offset);
    e->set_nbytes(t.nbytes);
  }
  if (req.include_vocab_gguf()) {
    // All metadata, no tensors: what Vocab::FromGguf needs, in the exact stored types.
    gguf::GgufWriter w(f.version());
    for (const gguf::KeyValue& kv : f.metadata()) w.SetValue(kv.key, kv.value);
    info.set_vocab_gguf(w.WriteToString());
  }
  if (req.include_sha256()) {
    HERD_ASSIGN_OR_RETURN(auto hex, CachedSha256(path, cancelled));
    info.set_sha256(hex);
  }
  const size_t bytes = info.ByteSizeLong();
  if (static_cast<int64_t>(bytes) > opts_.max_message_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model info of '", Shown(req.name()), "' is ", bytes, " bytes, above the message limit of ",
                     opts_.max_message_bytes, (req.include_vocab_gguf() ? " (try without include_vocab_gguf)" : "")));
  }
  return info;
}

grpc::Status LoaderServiceImpl::GetModelInfo(grpc::ServerContext* ctx, const herd::v1::GetModelInfoRequest* req,
                                             herd::v1::ModelInfo* resp) {
  const double t0 = NowSeconds();
  in_flight_->Add(1, {"GetModelInfo"});
  auto r = Describe(*req, [ctx] { return ctx->IsCancelled(); });
  std::string extra;
  if (r.ok()) {
    *resp = *std::move(r);
    extra = absl::StrCat("tensors=", resp->tensors_size(), " sha256=", req->include_sha256() ? 1 : 0,
                         " vocab_bytes=", resp->vocab_gguf().size());
  }
  return Finish("GetModelInfo", ctx, req->name(), r.status(), t0, extra);
}

// ---------------------------------------------------------------------------------
// ReadTensors

absl::Status LoaderServiceImpl::StreamTensors(const herd::v1::ReadTensorsRequest& req,
                                              const std::function<bool()>& cancelled, const ChunkSink& sink,
                                              uint64_t* bytes_sent) {
  *bytes_sent = 0;
  uint32_t chunk = req.chunk_size();
  if (chunk == 0) {
    chunk = kDefaultChunkBytes;
  } else if (chunk < kMinChunkBytes || chunk > kMaxChunkBytes) {
    return absl::InvalidArgumentError(absl::StrCat("chunk_size ", chunk, " is outside ", kMinChunkBytes, "..",
                                                   kMaxChunkBytes, " (0 = ", kDefaultChunkBytes, ")"));
  }
  chunk = std::min(chunk, opts_.max_chunk_bytes);
  HERD_ASSIGN_OR_RETURN(auto path, store_.Resolve(req.name()));

  Fd fd;
  fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd.fd < 0) {
    return absl::InternalError(absl::StrCat("cannot open model '", Shown(req.name()), "': ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InternalError(absl::StrCat("cannot stat model '", Shown(req.name()), "'"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (req.offset() > size) {
    return absl::OutOfRangeError(
        absl::StrCat("offset ", req.offset(), " is beyond the end of '", Shown(req.name()), "' (", size, " bytes)"));
  }
  if (req.length() > size - req.offset()) {
    return absl::OutOfRangeError(absl::StrCat("offset ", req.offset(), " + length ", req.length(),
                                              " is beyond the end of '", Shown(req.name()), "' (", size, " bytes)"));
  }
  const uint64_t end = req.length() == 0 ? size : req.offset() + req.length();
  ::posix_fadvise(fd.fd, static_cast<off_t>(req.offset()), static_cast<off_t>(end - req.offset()),
                  POSIX_FADV_SEQUENTIAL);

  herd::v1::TensorChunk msg;
  std::string* data = msg.mutable_data();
  for (uint64_t off = req.offset(); off < end;) {
    if (cancelled && cancelled()) return absl::CancelledError("ReadTensors cancelled by the client");
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, end - off));
    data->resize(n);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::pread(fd.fd, &(*data)[got], n - got, static_cast<off_t>(off + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) {
        return absl::InternalError(
            absl::StrCat("reading '", Shown(req.name()), "' at ", off + got, ": ", std::strerror(errno)));
      }
      if (r == 0) {
        return absl::AbortedError(
            absl::StrCat("'", Shown(req.name()), "' shrank while being read (at ", off + got, " of ", size, " bytes)"));
      }
      got += static_cast<size_t>(r);
    }
    msg.set_offset(off);
    msg.set_crc32(static_cast<uint32_t>(
        ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data->data()), static_cast<uInt>(n))));
    if (!sink(msg)) return absl::CancelledError("ReadTensors stream closed by the client");
    *bytes_sent += n;
    bytes_sent_->Add(static_cast<double>(n));
    off += n;
  }
  return absl::OkStatus();
}

grpc::Status LoaderServiceImpl::ReadTensors(grpc::ServerContext* ctx, const herd::v1::ReadTensorsRequest* req,
                                            grpc::ServerWriter<herd::v1::TensorChunk>* writer) {
  const double t0 = NowSeconds();
  in_flight_->Add(1, {"ReadTensors"});
  uint64_t sent = 0;
  absl::Status s = StreamTensors(
      *req, [ctx] { return ctx->IsCancelled(); }, [writer](const herd::v1::TensorChunk& c) { return writer->Write(c); },
      &sent);
  return Finish("ReadTensors", ctx, req->name(), s, t0,
                absl::StrCat("offset=", req->offset(), " length=", req->length(), " bytes_sent=", sent));
}

// ---------------------------------------------------------------------------------
// Quantize

absl::Status LoaderServiceImpl::RunQuantize(const herd::v1::QuantizeRequest& req,
                                            const std::function<bool()>& cancelled, const ProgressSink& sink) {
  if (req.source().empty()) return absl::InvalidArgumentError("source: model name is empty");
  if (req.type().empty()) return absl::InvalidArgumentError("type: required (e.g. \"Q4_K_M\", \"Q8_0\")");
  auto src = store_.Resolve(req.source());
  if (!src.ok()) return WithField(src.status(), "source");
  auto dst = store_.PathForNewModel(req.target());
  if (!dst.ok()) return WithField(dst.status(), "target");
  {
    // Validate the source before taking a job slot: a corrupt file is INVALID_ARGUMENT.
    auto f = gguf::GgufFile::Open(*src);
    if (!f.ok()) return WithField(f.status(), "source");
  }
  if (!opts_.quantizer && !QuantizeAvailable()) {
    return RunQuantizeJob({}, nullptr, nullptr);  // UNIMPLEMENTED with its message
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    if (quantizing_.count(*dst) != 0) {
      return absl::AlreadyExistsError(absl::StrCat("target: model '", Shown(req.target()), "' is being created"));
    }
    if (static_cast<int>(quantizing_.size()) >= opts_.max_concurrent_quantize) {
      return absl::ResourceExhaustedError(
          absl::StrCat(quantizing_.size(), " quantize job(s) running (limit ", opts_.max_concurrent_quantize, ")"));
    }
    quantizing_.insert(*dst);
  }

  QuantizeJob job;
  job.src_path = *src;
  job.dst_path = *dst;
  job.type = req.type();
  job.pure = req.pure();
  job.output_tensor_type = req.output_tensor_type();
  job.token_embedding_type = req.token_embedding_type();
  job.tensor_type_overrides.assign(req.tensor_type().begin(), req.tensor_type().end());
  job.n_threads = opts_.quantize_threads > 0 ? opts_.quantize_threads
                                             : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  // The job runs on its own thread; this thread relays progress and watches for
  // cancellation, so the client's stream is only ever written from here.
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, fresh = false;
  QuantizeReport latest;
  absl::Status result;
  std::atomic<bool> cancel{false};
  const double job_start = NowSeconds();
  std::thread worker([&] {
    const auto& quantize = opts_.quantizer ? opts_.quantizer : RunQuantizeJob;
    absl::Status s = quantize(
        job,
        [&](const QuantizeReport& r) {
          std::lock_guard<std::mutex> l(mu);
          latest = r;
          fresh = true;
        },
        &cancel);
    std::lock_guard<std::mutex> l(mu);
    result = s;
    done = true;
    cv.notify_all();
  });

  auto to_proto = [](const QuantizeReport& r) {
    herd::v1::QuantizeProgress p;
    p.set_tensors_done(r.tensors_done);
    p.set_tensors_total(r.tensors_total);
    p.set_bytes_done(r.bytes_done);
    p.set_bytes_total(r.bytes_total);
    p.set_eta_seconds(r.eta_s);
    p.set_message(r.current_tensor);
    return p;
  };
  bool client_gone = false;
  {
    std::unique_lock<std::mutex> l(mu);
    while (!done) {
      cv.wait_for(l, std::chrono::milliseconds(100));
      if (!client_gone && cancelled && cancelled()) {
        client_gone = true;
        cancel = true;
      }
      if (fresh && !done && !client_gone) {
        fresh = false;
        const herd::v1::QuantizeProgress p = to_proto(latest);
        l.unlock();
        const bool ok = sink(p);
        l.lock();
        if (!ok) {
          client_gone = true;
          cancel = true;
        }
      }
    }
  }
  worker.join();
  {
    std::lock_guard<std::mutex> l(mu_);
    quantizing_.erase(*dst);
  }
  if (client_gone) return absl::CancelledError("Quantize cancelled by the client; no model written");
  if (!result.ok()) return result;
  herd::v1::QuantizeProgress last = to_proto(latest);
  last.set_done(true);
  struct stat st;
  const uint64_t out_size = ::stat(dst->c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  last.set_message(absl::StrCat("wrote model '", Shown(req.target()), "' (", out_size, " bytes, ", req.type(), ") in ",
                                static_cast<int64_t>((NowSeconds() - job_start) * 1000 + 0.5), " ms"));
  last.set_eta_seconds(0);
  if (!sink(last)) return absl::CancelledError("Quantize stream closed by the client after the model was written");
  return absl::OkStatus();
}

grpc::Status LoaderServiceImpl::Quantize(grpc::ServerContext* ctx, const herd::v1::QuantizeRequest* req,
                                         grpc::ServerWriter<herd::v1::QuantizeProgress>* writer) {
  const double t0 = NowSeconds();
  in_flight_->Add(1, {"Quantize"});
  absl::Status s = RunQuantize(
      *req, [ctx] { return ctx->IsCancelled(); },
      [writer](const herd::v1::QuantizeProgress& p) { return writer->Write(p); });
  return Finish("Quantize", ctx, req->source(), s, t0,
                absl::StrCat("target=\"", Shown(req->target()), "\" type=", Shown(req->type())));
}

}  // namespace herd::loader
