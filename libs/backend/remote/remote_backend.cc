#include "libs/backend/remote/remote_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/backend/remote/wire.h"
#include "libs/base/status_macros.h"
#include "proto/herd/v1/remote.grpc.pb.h"

namespace herd::remote {
namespace {

void* const kFakeBase = reinterpret_cast<void*>(uintptr_t{0x1000});

}  // namespace

// The link to one server and the queue of commands not yet sent. Shared by the backend
// and its buffers (a buffer freed after the backend still queues its Free).
class RemoteBackend::Conn {
 public:
  explicit Conn(RemoteOptions opts) : opts_(std::move(opts)), stub_(v1::RemoteCompute::NewStub(opts_.channel)) {}

  const RemoteOptions& opts() const { return opts_; }

  // UNAVAILABLE naming the server, with the call and gRPC's words.
  absl::Status LinkError(const char* call, const grpc::Status& s) const {
    if (s.error_code() == grpc::StatusCode::ABORTED) {
      return absl::UnavailableError(absl::StrCat("remote backend ", opts_.address, ": ", s.error_message()));
    }
    const bool link = s.error_code() == grpc::StatusCode::UNAVAILABLE ||
                      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                      s.error_code() == grpc::StatusCode::CANCELLED || s.error_code() == grpc::StatusCode::UNKNOWN ||
                      s.error_code() == grpc::StatusCode::INTERNAL;
    return absl::Status(link ? absl::StatusCode::kUnavailable : static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("remote backend ", opts_.address, ": ", call, ": ", s.error_message()));
  }

  absl::StatusOr<v1::GetDeviceResponse> GetDevice() {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + opts_.timeout);
    v1::GetDeviceResponse resp;
    grpc::Status s = stub_->GetDevice(&ctx, v1::GetDeviceRequest(), &resp);
    Count(0, resp.ByteSizeLong());
    if (!s.ok()) return LinkError("GetDevice", s);
    return resp;
  }

  void SetInstance(uint64_t instance) {
    std::lock_guard<std::mutex> lock(mu_);
    instance_ = instance;
  }
  uint64_t instance() const {
    std::lock_guard<std::mutex> lock(mu_);
    return instance_;
  }
  bool lost() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lost_;
  }

  absl::StatusOr<uint64_t> Alloc(uint64_t size) {
    v1::AllocBufferRequest req;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (lost_) return LostError();
      req.set_instance(instance_);
    }
    req.set_size(size);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + opts_.timeout);
    v1::AllocBufferResponse resp;
    grpc::Status s = stub_->AllocBuffer(&ctx, req, &resp);
    Count(req.ByteSizeLong(), resp.ByteSizeLong());
    if (!s.ok()) {
      if (s.error_code() == grpc::StatusCode::ABORTED) MarkLost();
      return LinkError("AllocBuffer", s);
    }
    return resp.buffer();
  }

  // Queues a command; `read` (with `dst`) for a GetBytes. Sends when the queue is large.
  absl::Status Queue(v1::Command c, void* dst = nullptr) {
    std::unique_lock<std::mutex> lock(mu_);
    if (lost_) return LostError();
    pending_bytes_ += c.ByteSizeLong();
    if (c.has_get()) {
      reads_.push_back({dst, c.get().size()});
      pending_bytes_ += c.get().size();
    }
    *pending_.add_commands() = std::move(c);
    if (pending_bytes_ < opts_.max_batch_bytes) return absl::OkStatus();
    return FlushLocked(lock);
  }

  absl::Status Flush() {
    std::unique_lock<std::mutex> lock(mu_);
    return FlushLocked(lock);
  }

  RemoteStats stats() const {
    RemoteStats st;
    st.round_trips = round_trips_.load();
    st.bytes_sent = bytes_sent_.load();
    st.bytes_received = bytes_received_.load();
    return st;
  }

 private:
  absl::Status LostError() const {
    return absl::UnavailableError(
        absl::StrCat("remote backend ", opts_.address, ": the compute server restarted and its buffers are gone"));
  }
  void MarkLost() {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ = true;
  }
  void Count(size_t sent, size_t received) {
    round_trips_++;
    bytes_sent_ += sent;
    bytes_received_ += received;
  }

  absl::Status FlushLocked(std::unique_lock<std::mutex>& lock) {
    if (pending_.commands_size() == 0) return absl::OkStatus();
    if (lost_) {
      pending_.clear_commands();
      reads_.clear();
      pending_bytes_ = 0;
      return LostError();
    }
    v1::ExecuteRequest req;
    req.Swap(&pending_);
    req.set_instance(instance_);
    std::vector<std::pair<void*, uint64_t>> reads;
    reads.swap(reads_);
    pending_bytes_ = 0;
    // One call at a time, in order: the lock stays held (commands queued meanwhile by
    // other threads wait for it).
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + opts_.timeout);
    v1::ExecuteResponse resp;
    grpc::Status s = stub_->Execute(&ctx, req, &resp);
    Count(req.ByteSizeLong(), resp.ByteSizeLong());
    if (!s.ok()) {
      if (s.error_code() == grpc::StatusCode::ABORTED) lost_ = true;
      return LinkError("Execute", s);
    }
    if (resp.reads_size() != static_cast<int>(reads.size())) {
      return absl::InternalError(absl::StrCat("remote backend ", opts_.address, ": ", resp.reads_size(),
                                              " reads answered for ", reads.size(), " asked"));
    }
    for (size_t i = 0; i < reads.size(); ++i) {
      const std::string& bytes = resp.reads(static_cast<int>(i));
      if (bytes.size() != reads[i].second) {
        return absl::InternalError(absl::StrCat("remote backend ", opts_.address, ": read ", i, " has ", bytes.size(),
                                                " bytes, not ", reads[i].second));
      }
      if (!bytes.empty()) std::memcpy(reads[i].first, bytes.data(), bytes.size());
    }
    (void)lock;
    return absl::OkStatus();
  }

  const RemoteOptions opts_;
  std::unique_ptr<v1::RemoteCompute::Stub> stub_;
  mutable std::mutex mu_;
  uint64_t instance_ = 0;
  bool lost_ = false;
  v1::ExecuteRequest pending_;
  std::vector<std::pair<void*, uint64_t>> reads_;
  size_t pending_bytes_ = 0;
  std::atomic<uint64_t> round_trips_{0}, bytes_sent_{0}, bytes_received_{0};
};

class RemoteBackend::RemoteBuffer : public Buffer {
 public:
  RemoteBuffer(BufferType* type, std::shared_ptr<Conn> conn, uint64_t id, size_t size)
      : type_(type), conn_(std::move(conn)), id_(id), size_(size) {}
  ~RemoteBuffer() override {
    v1::Command c;
    c.mutable_free()->set_buffer(id_);
    (void)conn_->Queue(std::move(c));  // sent with the next call; lost with a lost server
  }
  BufferType* type() const override { return type_; }
  void* base() const override { return kFakeBase; }
  size_t size() const override { return size_; }
  void Clear(uint8_t value) override {
    v1::Command c;
    c.mutable_clear()->set_buffer(id_);
    c.mutable_clear()->set_value(value);
    (void)conn_->Queue(std::move(c));
  }
  uint64_t id() const { return id_; }

 private:
  BufferType* type_;
  std::shared_ptr<Conn> conn_;
  uint64_t id_;
  size_t size_;
};

class RemoteBackend::RemoteBufferType : public BufferType {
 public:
  RemoteBufferType(std::shared_ptr<Conn> conn, size_t alignment) : conn_(std::move(conn)), alignment_(alignment) {}
  std::string name() const override { return absl::StrCat("Remote(", conn_->opts().address, ")"); }
  size_t alignment() const override { return alignment_; }
  bool is_host() const override { return false; }
  absl::StatusOr<std::unique_ptr<Buffer>> Allocate(size_t size) override {
    if (size == 0) size = alignment_;
    size = (size + alignment_ - 1) / alignment_ * alignment_;
    HERD_ASSIGN_OR_RETURN(uint64_t id, conn_->Alloc(size));
    return std::unique_ptr<Buffer>(new RemoteBuffer(this, conn_, id, size));
  }

 private:
  std::shared_ptr<Conn> conn_;
  size_t alignment_;
};

absl::StatusOr<std::unique_ptr<RemoteBackend>> RemoteBackend::Connect(RemoteOptions opts) {
  if (opts.channel == nullptr) return absl::InvalidArgumentError("remote backend: no channel");
  auto conn = std::make_shared<Conn>(std::move(opts));
  HERD_ASSIGN_OR_RETURN(v1::GetDeviceResponse dev, conn->GetDevice());
  if (dev.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat("remote backend ", conn->opts().address, " speaks protocol ",
                                                      dev.protocol_version(), ", this build ", kProtocolVersion));
  }
  const size_t align = std::max<size_t>(dev.alignment(), 1);
  if ((align & (align - 1)) != 0 || align > 256) {
    return absl::FailedPreconditionError(
        absl::StrCat("remote backend ", conn->opts().address, ": alignment ", align, " is not a power of 2 <= 256"));
  }
  conn->SetInstance(dev.instance());
  std::unique_ptr<RemoteBackend> b(new RemoteBackend(conn));
  b->buft_ = std::make_unique<RemoteBufferType>(conn, align);
  b->dev_ = std::move(dev);
  auto types = [](const google::protobuf::RepeatedField<int32_t>& ids) {
    std::vector<int32_t> v(ids.begin(), ids.end());
    return [v](GgmlType t) { return std::find(v.begin(), v.end(), static_cast<int32_t>(t)) != v.end(); };
  };
  b->limits_.get_rows_type = types(b->dev_.get_rows_types());
  b->limits_.mul_mat_type = types(b->dev_.mul_mat_types());
  b->limits_.set_rows_type = types(b->dev_.set_rows_types());
  return b;
}

RemoteBackend::RemoteBackend(std::shared_ptr<Conn> conn) : conn_(std::move(conn)) {}

RemoteBackend::~RemoteBackend() {
  scratch_.reset();
  (void)conn_->Flush();  // the frees
}

std::string RemoteBackend::name() const { return absl::StrCat("Remote(", conn_->opts().address, ")"); }

DeviceInfo RemoteBackend::device() const {
  DeviceInfo d;
  d.backend = "remote";
  d.name = name();
  d.description = absl::StrCat(dev_.name(), " on ", conn_->opts().address, ": ", dev_.description());
  d.memory_total = dev_.memory_total();
  d.memory_free = dev_.memory_free();
  d.host_visible = false;
  return d;
}

BufferType* RemoteBackend::default_buffer_type() { return buft_.get(); }

absl::Status RemoteBackend::Locate(const Tensor* t, uint64_t* id, uint64_t* offset) const {
  const Buffer* buf = nullptr;
  size_t off = 0;
  HERD_RETURN_IF_ERROR(LocateTensor(t, buft_.get(), name(), &buf, &off));
  *id = static_cast<const RemoteBuffer*>(buf)->id();
  *offset = off;
  return absl::OkStatus();
}

absl::Status RemoteBackend::SetTensor(Tensor* t, const void* data, size_t offset, size_t size) {
  uint64_t id = 0, base = 0;
  HERD_RETURN_IF_ERROR(Locate(t, &id, &base));
  if (offset > t->nbytes() || size > t->nbytes() - offset) {
    return absl::OutOfRangeError(absl::StrCat("write of ", size, " bytes at ", offset, " past tensor '", t->name, "' (",
                                              t->nbytes(), " bytes)"));
  }
  t->extra.reset();
  const size_t chunk = std::max<size_t>(conn_->opts().max_batch_bytes, 1);
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t done = 0; done < size || (size == 0 && done == 0); done += chunk) {
    if (size == 0) break;
    const size_t n = std::min(chunk, size - done);
    v1::Command c;
    v1::SetBytes* s = c.mutable_set();
    s->set_buffer(id);
    s->set_offset(base + offset + done);
    s->set_data(p + done, n);
    HERD_RETURN_IF_ERROR(conn_->Queue(std::move(c)));
  }
  return absl::OkStatus();
}

absl::Status RemoteBackend::SetTensorAsync(Tensor* t, const void* data, size_t offset, size_t size) {
  return SetTensor(t, data, offset, size);
}

absl::Status RemoteBackend::GetTensorAsync(const Tensor* t, void* data, size_t offset, size_t size) {
  uint64_t id = 0, base = 0;
  HERD_RETURN_IF_ERROR(Locate(t, &id, &base));
  if (offset > t->nbytes() || size > t->nbytes() - offset) {
    return absl::OutOfRangeError(
        absl::StrCat("read of ", size, " bytes at ", offset, " past tensor '", t->name, "' (", t->nbytes(), " bytes)"));
  }
  const size_t chunk = std::max<size_t>(conn_->opts().max_batch_bytes, 1);
  uint8_t* p = static_cast<uint8_t*>(data);
  for (size_t done = 0; done < size; done += chunk) {
    const size_t n = std::min(chunk, size - done);
    v1::Command c;
    v1::GetBytes* g = c.mutable_get();
    g->set_buffer(id);
    g->set_offset(base + offset + done);
    g->set_size(n);
    HERD_RETURN_IF_ERROR(conn_->Queue(std::move(c), p + done));
  }
  return absl::OkStatus();
}

absl::Status RemoteBackend::GetTensor(const Tensor* t, void* data, size_t offset, size_t size) {
  HERD_RETURN_IF_ERROR(GetTensorAsync(t, data, offset, size));
  return conn_->Flush();
}

absl::Status RemoteBackend::CopyTensor(const Tensor* src, Tensor* dst) {
  if (src->nbytes() != dst->nbytes() || src->type != dst->type) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot copy '", src->name, "' into '", dst->name, "': type or size differ"));
  }
  uint64_t sid = 0, soff = 0, did = 0, doff = 0;
  HERD_RETURN_IF_ERROR(Locate(src, &sid, &soff));
  HERD_RETURN_IF_ERROR(Locate(dst, &did, &doff));
  dst->extra.reset();
  v1::Command c;
  v1::CopyBytes* cp = c.mutable_copy();
  cp->set_src_buffer(sid);
  cp->set_src_offset(soff);
  cp->set_dst_buffer(did);
  cp->set_dst_offset(doff);
  cp->set_size(src->nbytes());
  return conn_->Queue(std::move(c));
}

absl::Status RemoteBackend::Synchronize() { return conn_->Flush(); }

absl::Status RemoteBackend::PrepareWeights(const std::vector<Tensor*>& weights) {
  std::vector<Tensor*> mine;
  for (Tensor* t : weights) {
    const Buffer* b = t->buffer != nullptr ? t->buffer : (t->view_src != nullptr ? t->view_src->buffer : nullptr);
    if (b != nullptr && b->type() == buft_.get() && t->op == Op::kNone) mine.push_back(t);
  }
  if (mine.empty()) return absl::OkStatus();
  v1::Command c;
  HERD_RETURN_IF_ERROR(EncodeLeaves(
      mine,
      [this](const Tensor* t) -> absl::StatusOr<std::pair<uint64_t, uint64_t>> {
        uint64_t id = 0, off = 0;
        HERD_RETURN_IF_ERROR(Locate(t, &id, &off));
        return std::make_pair(id, off);
      },
      c.mutable_prepare()));
  HERD_RETURN_IF_ERROR(conn_->Queue(std::move(c)));
  return conn_->Flush();
}

bool RemoteBackend::SupportsOp(const Tensor& node) const { return OpSupported(node, limits_); }

absl::Status RemoteBackend::EnsureScratch(size_t bytes) {
  if (scratch_ != nullptr && scratch_->size() >= bytes) return absl::OkStatus();
  scratch_.reset();
  HERD_ASSIGN_OR_RETURN(scratch_, buft_->Allocate(bytes));
  return absl::OkStatus();
}

absl::Status RemoteBackend::GraphCompute(Graph& g) {
  for (Tensor* n : g.nodes()) {
    if (!SupportsOp(*n)) {
      return absl::UnimplementedError(
          absl::StrCat(name(), " does not support ", OpName(n->op), " for node '", n->name, "'"));
    }
  }
  HERD_RETURN_IF_ERROR(PlaceInScratch(
      g, buft_->alignment(), kFakeBase, [this](size_t bytes) { return EnsureScratch(bytes); }, scratch_));
  v1::Command c;
  HERD_RETURN_IF_ERROR(EncodeGraph(
      g.nodes(),
      [this](const Tensor* t) -> absl::StatusOr<std::pair<uint64_t, uint64_t>> {
        uint64_t id = 0, off = 0;
        HERD_RETURN_IF_ERROR(Locate(t, &id, &off));
        return std::make_pair(id, off);
      },
      c.mutable_compute()));
  return conn_->Queue(std::move(c));
}

bool RemoteBackend::lost() const { return conn_->lost(); }

absl::Status RemoteBackend::Probe() {
  HERD_ASSIGN_OR_RETURN(v1::GetDeviceResponse dev, conn_->GetDevice());
  if (dev.instance() != conn_->instance()) {
    return absl::FailedPreconditionError(
        absl::StrCat("remote backend ", conn_->opts().address, ": the compute server restarted"));
  }
  return absl::OkStatus();
}

RemoteStats RemoteBackend::stats() const { return conn_->stats(); }

const std::string& RemoteBackend::address() const { return conn_->opts().address; }

}  // namespace herd::remote
