#include "libs/backend/remote/remote_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/backend/remote/wire.h"
#include "libs/base/status_macros.h"
#include "proto/herd/v1/remote.grpc.pb.h"

namespace herd::remote {
namespace {

void* const kFakeBase = reinterpret_cast<void*>(uintptr_t{0x1000});

}  // namespace

// One buffer on the server: its id there (new after the server restarted) and the writes
// that can be sent again after a restart because their source is memory the caller
// declared stable (AddStableHostRegion: the model's file mapping).
struct BufferRecord {
  std::atomic<uint64_t> id{0};
  uint64_t size = 0;
  struct Write {
    uint64_t offset;
    const uint8_t* src;
    uint64_t size;
  };
  std::vector<Write> replay;  // guarded by Conn::mu_
};

// The link to one server and the queue of commands not yet sent. Shared by the backend
// and its buffers (a buffer freed after the backend still queues its Free).
class RemoteBackend::Conn {
 public:
  explicit Conn(RemoteOptions opts)
      : opts_(std::move(opts)), stub_(v1::RemoteCompute::NewStub(opts_.channel)), client_(NewClientId()) {}

  // A random id naming this client to the server (its buffers' owner).
  static uint64_t NewClientId() {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ 1;
  }

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
    const char* hint = s.error_code() == grpc::StatusCode::UNAUTHENTICATED
                           ? " (the cluster key: set the same HERD_CLUSTER_KEY / --cluster_key_file on the worker "
                             "and on herd-compute)"
                           : "";
    return absl::Status(link ? absl::StatusCode::kUnavailable : static_cast<absl::StatusCode>(s.error_code()),
                        absl::StrCat("remote backend ", opts_.address, ": ", call, ": ", s.error_message(), hint));
  }

  // With wait_for_ready, waits for the link to be (re-)established rather than failing at
  // once while the channel connects or backs off: up to the timeout, or with `probe` up to
  // 5 s (the device watch's once-a-second check).
  absl::StatusOr<v1::GetDeviceResponse> GetDevice(bool probe = false, bool wait_for_ready = true) {
    grpc::ClientContext ctx;
    ctx.set_deadline(
        std::chrono::system_clock::now() +
        (probe ? std::min<std::chrono::milliseconds>(opts_.timeout, std::chrono::seconds(5)) : opts_.timeout));
    ctx.set_wait_for_ready(wait_for_ready);
    v1::GetDeviceResponse resp;
    v1::GetDeviceRequest req;
    req.set_client(client_.load());
    grpc::Status s = stub_->GetDevice(&ctx, req, &resp);
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
    uint64_t instance = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (lost_) return LostError();
      instance = instance_;
    }
    return AllocOn(instance, size);
  }

  absl::StatusOr<uint64_t> AllocOn(uint64_t instance, uint64_t size) {
    v1::AllocBufferRequest req;
    req.set_instance(instance);
    req.set_size(size);
    req.set_client(client_.load());
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

  std::shared_ptr<BufferRecord> NewRecord(uint64_t id, uint64_t size) {
    auto r = std::make_shared<BufferRecord>();
    r->id = id;
    r->size = size;
    std::lock_guard<std::mutex> lock(mu_);
    records_[r.get()] = r;
    return r;
  }
  void Forget(BufferRecord* r) {
    std::lock_guard<std::mutex> lock(mu_);
    records_.erase(r);
  }

  void AddStable(const void* p, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    stable_.emplace_back(reinterpret_cast<uintptr_t>(p), n);
  }

  // Remembers a write for replay when its source is stable; drops replays it overwrites.
  void NoteWrite(BufferRecord* r, uint64_t offset, const void* src, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& w = r->replay;
    if (!w.empty()) {
      w.erase(std::remove_if(
                  w.begin(), w.end(),
                  [&](const BufferRecord::Write& x) { return x.offset < offset + size && offset < x.offset + x.size; }),
              w.end());
    }
    const uintptr_t a = reinterpret_cast<uintptr_t>(src);
    for (const auto& [lo, n] : stable_) {
      if (a >= lo && a - lo <= n && size <= n - (a - lo)) {
        w.push_back({offset, static_cast<const uint8_t*>(src), size});
        return;
      }
    }
  }
  void NoteOverwrite(BufferRecord* r, uint64_t offset, uint64_t size) { NoteWrite(r, offset, nullptr, size); }

  void NotePrepare(const v1::Command& c) {
    std::lock_guard<std::mutex> lock(mu_);
    prepares_.push_back(c);
  }

  // After a restart: new buffers for every live one, the stable writes and the prepared
  // weights sent again. Other contents are lost (zero).
  absl::Status Restore(uint64_t instance) {
    std::vector<std::shared_ptr<BufferRecord>> recs;
    {
      std::lock_guard<std::mutex> lock(mu_);
      lost_ = true;  // nothing else goes out meanwhile
      pending_.clear_commands();
      reads_.clear();
      pending_bytes_ = 0;
      instance_ = instance;
      client_ = NewClientId();  // the old one's buffers are gone (or being released)
      for (auto& [p, r] : records_) recs.push_back(r);
    }
    std::unordered_map<uint64_t, uint64_t> ids;
    for (const auto& r : recs) {
      HERD_ASSIGN_OR_RETURN(uint64_t id, AllocOn(instance, r->size));
      ids[r->id.load()] = id;
      r->id = id;
    }
    v1::ExecuteRequest req;
    size_t bytes = 0;
    auto send = [&]() -> absl::Status {
      if (req.commands_size() == 0) return absl::OkStatus();
      req.set_instance(instance);
      req.set_client(client_.load());
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + opts_.timeout);
      v1::ExecuteResponse resp;
      grpc::Status s = stub_->Execute(&ctx, req, &resp);
      Count(req.ByteSizeLong(), resp.ByteSizeLong());
      req.clear_commands();
      bytes = 0;
      return s.ok() ? absl::OkStatus() : LinkError("Execute (restoring buffers)", s);
    };
    std::vector<v1::Command> prepares;
    {
      std::lock_guard<std::mutex> lock(mu_);
      prepares = prepares_;
    }
    for (const auto& r : recs) {
      std::vector<BufferRecord::Write> writes;
      {
        std::lock_guard<std::mutex> lock(mu_);
        writes = r->replay;
      }
      for (const BufferRecord::Write& w : writes) {
        for (uint64_t done = 0; done < w.size;) {
          const uint64_t n = std::min<uint64_t>(opts_.max_batch_bytes, w.size - done);
          v1::SetBytes* sb = req.add_commands()->mutable_set();
          sb->set_buffer(r->id.load());
          sb->set_offset(w.offset + done);
          sb->set_data(w.src + done, n);
          bytes += n;
          done += n;
          if (bytes >= opts_.max_batch_bytes) HERD_RETURN_IF_ERROR(send());
        }
      }
    }
    for (v1::Command& c : prepares) {
      bool live = true;
      for (v1::WireTensor& t : *c.mutable_prepare()->mutable_tensors()) {
        auto it = ids.find(t.buffer());
        if (it == ids.end()) {
          live = false;
          break;
        }
        t.set_buffer(it->second);
      }
      if (live) *req.add_commands() = std::move(c);
    }
    HERD_RETURN_IF_ERROR(send());
    std::lock_guard<std::mutex> lock(mu_);
    prepares_.clear();
    for (v1::Command& c : prepares) {
      if (c.has_prepare()) prepares_.push_back(c);
    }
    lost_ = false;
    return absl::OkStatus();
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
    return absl::UnavailableError(absl::StrCat(
        "remote backend ", opts_.address,
        ": the compute server lost this worker's buffers (it restarted, or released them after the link was "
        "down longer than its --client_idle_s)"));
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
    req.set_client(client_.load());
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
  std::atomic<uint64_t> client_;
  bool lost_ = false;
  v1::ExecuteRequest pending_;
  std::vector<std::pair<void*, uint64_t>> reads_;
  size_t pending_bytes_ = 0;
  std::atomic<uint64_t> round_trips_{0}, bytes_sent_{0}, bytes_received_{0};
  std::unordered_map<BufferRecord*, std::shared_ptr<BufferRecord>> records_;
  std::vector<std::pair<uintptr_t, size_t>> stable_;
  std::vector<v1::Command> prepares_;  // PrepareWeights sent, for a restore
};

class RemoteBackend::RemoteBuffer : public Buffer {
 public:
  RemoteBuffer(BufferType* type, std::shared_ptr<Conn> conn, uint64_t id, size_t size)
      : type_(type), conn_(std::move(conn)), rec_(conn_->NewRecord(id, size)), size_(size) {}
  ~RemoteBuffer() override {
    v1::Command c;
    c.mutable_free()->set_buffer(rec_->id.load());
    conn_->Forget(rec_.get());
    (void)conn_->Queue(std::move(c));  // sent with the next call; lost with a lost server
  }
  BufferType* type() const override { return type_; }
  void* base() const override { return kFakeBase; }
  size_t size() const override { return size_; }
  void Clear(uint8_t value) override {
    v1::Command c;
    c.mutable_clear()->set_buffer(rec_->id.load());
    c.mutable_clear()->set_value(value);
    conn_->NoteOverwrite(rec_.get(), 0, size_);
    (void)conn_->Queue(std::move(c));
  }
  uint64_t id() const { return rec_->id.load(); }
  BufferRecord* record() const { return rec_.get(); }

 private:
  BufferType* type_;
  std::shared_ptr<Conn> conn_;
  std::shared_ptr<BufferRecord> rec_;
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
  // The server may still be starting (a worker and its compute server started together):
  // ask again every 250 ms for up to min(timeout, 15 s), each ask failing fast, so that a
  // wrong address ends with what the link said ("Connection refused"), not a bare deadline.
  const auto start = std::chrono::steady_clock::now();
  const auto give_up =
      start + std::min<std::chrono::milliseconds>(conn->opts().timeout, std::chrono::milliseconds(15000));
  absl::StatusOr<v1::GetDeviceResponse> got = conn->GetDevice(/*probe=*/false, /*wait_for_ready=*/false);
  while (!got.ok() && absl::IsUnavailable(got.status()) && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    got = conn->GetDevice(/*probe=*/false, /*wait_for_ready=*/false);
  }
  if (!got.ok()) {
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    return absl::Status(got.status().code(),
                        absl::StrCat(got.status().message(), " (tried for ", waited / 1000.0, " s)"));
  }
  v1::GetDeviceResponse dev = *std::move(got);
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
  const Buffer* buf = t->buffer != nullptr ? t->buffer : t->view_src->buffer;
  conn_->NoteWrite(static_cast<const RemoteBuffer*>(buf)->record(), base + offset, data, size);
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
  const Buffer* dbuf = dst->buffer != nullptr ? dst->buffer : dst->view_src->buffer;
  conn_->NoteOverwrite(static_cast<const RemoteBuffer*>(dbuf)->record(), doff, dst->nbytes());
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
  conn_->NotePrepare(c);
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

absl::Status RemoteBackend::CheckDevice() {
  HERD_ASSIGN_OR_RETURN(v1::GetDeviceResponse dev, conn_->GetDevice(/*probe=*/true));
  if (dev.instance() == conn_->instance() && !conn_->lost()) return absl::OkStatus();
  HERD_RETURN_IF_ERROR(conn_->Restore(dev.instance()));
  return absl::DataLossError(absl::StrCat("remote backend ", conn_->opts().address,
                                          ": the compute server restarted; its weights were sent again, the rest of "
                                          "its memory (the KV cache) is lost"));
}

void RemoteBackend::AddStableHostRegion(const void* p, size_t size) { conn_->AddStable(p, size); }

RemoteStats RemoteBackend::stats() const { return conn_->stats(); }

const std::string& RemoteBackend::address() const { return conn_->opts().address; }

}  // namespace herd::remote
