// libFuzzer target: the remote compute server (libs/backend/remote/remote_server.h), which
// validates every message a client sends before it touches a byte. One ComputeServer over
// a real CpuBackend (1 thread, 1 MiB of buffers) lives for the whole run; each input
// allocates its buffers, runs one Execute and frees what it allocated.
//   byte 0 even: the rest is a serialized herd.v1.ExecuteRequest (buffer ids 0..7 mapped
//     to this input's buffers and the instance made right, each half the time);
//   byte 0 odd: the rest is a little program building a mostly-valid request (buffers of
//     chosen sizes, then set/get/copy/clear/free/compute/prepare commands whose graphs are
//     built like the client's, shapes derived from their sources, with rare mutations).
// Invariants besides "no crash, no sanitizer report": every error is INVALID_ARGUMENT,
// ABORTED, RESOURCE_EXHAUSTED, OUT_OF_RANGE or UNIMPLEMENTED with a message; a wrong
// instance is ABORTED; a failing command is named ("commands[i] (kind): ..."); the reads
// are one per successful get; bytes_allocated() stays within max_buffer_bytes and is 0
// once the input's buffers are freed.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

#include "libs/backend/cpu_backend.h"
#include "libs/backend/remote/remote_server.h"
#include "libs/backend/remote/wire.h"
#include "libs/gguf/ggml_type.h"
#include "libs/tensor/tensor.h"

namespace {

using herd::GgmlType;
using herd::Op;
namespace v1 = herd::v1;

constexpr uint64_t kInstance = 0x5eed;
constexpr uint64_t kMaxBytes = uint64_t{1} << 20;

void Check(bool ok, const char* what, const absl::Status& s = absl::OkStatus()) {
  if (!ok) {
    fprintf(stderr, "remote_compute_fuzz: invariant failed: %s (status: %s)\n", what, s.ToString().c_str());
    abort();
  }
}

herd::remote::ComputeServer& Server() {
  static herd::remote::ComputeServer* server = [] {
    herd::remote::ServerOptions o;
    o.max_buffer_bytes = kMaxBytes;
    o.max_graph_tensors = 64;
    o.max_commands = 64;
    return new herd::remote::ComputeServer(std::make_unique<herd::CpuBackend>(1), o, kInstance);
  }();
  return *server;
}

void CheckError(const absl::Status& s) {
  if (s.ok()) return;
  const absl::StatusCode c = s.code();
  Check(c == absl::StatusCode::kInvalidArgument || c == absl::StatusCode::kAborted ||
            c == absl::StatusCode::kResourceExhausted || c == absl::StatusCode::kOutOfRange ||
            c == absl::StatusCode::kUnimplemented,
        "error code is one a client's message may cause", s);
  Check(!s.message().empty(), "error has a message", s);
}

// Bytes of the input, read front to back; 0 once they run out.
class In {
 public:
  In(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  uint8_t U8() { return i_ < n_ ? d_[i_++] : 0; }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | U8();
    return v;
  }
  uint64_t U64() { return uint64_t{U32()} << 32 | U32(); }
  // 0..n-1
  uint32_t Below(uint32_t n) { return n == 0 ? 0 : U8() % n; }
  template <typename T, size_t N>
  T Pick(const T (&v)[N]) {
    return v[Below(N)];
  }
  // True with probability about 1/n; false once the bytes ran out (no mutations then).
  bool OneIn(uint32_t n) { return !empty() && Below(n) == 0; }
  std::string Bytes(size_t n) {
    std::string s;
    for (size_t i = 0; i < n && i_ < n_; ++i) s.push_back(static_cast<char>(d_[i_++]));
    return s;
  }
  bool empty() const { return i_ >= n_; }

 private:
  const uint8_t* d_;
  size_t n_;
  size_t i_ = 0;
};

// What the program knows of a buffer it allocated.
struct Buf {
  uint64_t id;
  uint64_t size;
};

// What the program knows of a tensor it put in the graph (the server's checks redone).
struct Shadow {
  int type;
  int64_t ne[4];
  uint64_t nb[4];
  int root;  // index of the view root, or -1
  bool valid;
};

uint64_t RowSize(int type, int64_t ne0) {
  const herd::GgmlTypeTraits* tr = herd::GetGgmlTypeTraits(static_cast<uint32_t>(type));
  if (tr == nullptr || tr->block_size <= 0) return 0;
  return static_cast<uint64_t>(ne0 / tr->block_size) * tr->type_size;
}

void Contiguous(Shadow* s) {
  const herd::GgmlTypeTraits* tr = herd::GetGgmlTypeTraits(static_cast<uint32_t>(s->type));
  s->nb[0] = tr != nullptr ? tr->type_size : 4;
  s->nb[1] = RowSize(s->type, s->ne[0]);
  s->nb[2] = s->nb[1] * static_cast<uint64_t>(s->ne[1]);
  s->nb[3] = s->nb[2] * static_cast<uint64_t>(s->ne[2]);
}

class Program {
 public:
  explicit Program(In* in) : in_(*in) {}

  uint64_t BufferId(const std::vector<Buf>& bufs) {
    if (bufs.empty() || in_.OneIn(16)) return in_.U8() % 4 == 0 ? 0 : in_.U64();
    return bufs[in_.Below(static_cast<uint32_t>(bufs.size()))].id;
  }
  uint64_t SizeOf(const std::vector<Buf>& bufs, uint64_t id) {
    for (const Buf& b : bufs) {
      if (b.id == id) return b.size;
    }
    return 4096;
  }
  // An offset in a buffer of `size` bytes: mostly multiples of 64 inside it.
  uint64_t Offset(uint64_t size) {
    switch (in_.Below(8)) {
      case 0:
        return in_.U64();
      case 1:
        return size - in_.Below(64);
      case 2:
        return in_.U32() % (size + 1);
      default:
        return (uint64_t{in_.U8()} * 64) % (size + 64);
    }
  }
  uint64_t Length(uint64_t size) {
    switch (in_.Below(8)) {
      case 0:
        return in_.U64();
      case 1:
        return size;
      default:
        return in_.U8() % 129;
    }
  }

  int Type() {
    static const int kTypes[] = {0, 0, 0, 1, 26, 2, 8, 12, 14, 30, 24};
    return in_.OneIn(12) ? static_cast<int>(in_.U8()) - 8 : in_.Pick(kTypes);
  }
  int64_t Extent() {
    static const int64_t kNe[] = {1, 2, 3, 4, 16, 32, 64};
    return in_.OneIn(24) ? static_cast<int64_t>(in_.U32()) - 4 : in_.Pick(kNe);
  }

  // Tensor `i` of a graph over the earlier ones.
  v1::WireTensor Tensor(int i, bool leaves_only, const std::vector<Buf>& bufs, std::vector<Shadow>* sh) {
    v1::WireTensor w;
    Shadow s{};
    s.root = -1;
    s.valid = true;
    w.set_name("t" + std::to_string(i));
    int op = 0;
    if (!leaves_only && i > 0 && !in_.OneIn(3)) {
      op = in_.OneIn(16) ? static_cast<int>(in_.U8()) - 4
                         : 1 + static_cast<int>(in_.Below(static_cast<int>(Op::kCount) - 1));
    }
    w.set_op(op);
    const int n = static_cast<int>(sh->size());
    auto src_pick = [&] { return n == 0 ? 0 : static_cast<int>(in_.Below(static_cast<uint32_t>(n))); };
    if (op == 0 || op < 0 || op >= static_cast<int>(Op::kCount)) {
      // A leaf.
      s.type = Type();
      const herd::GgmlTypeTraits* tr = herd::GetGgmlTypeTraits(static_cast<uint32_t>(s.type < 0 ? 999 : s.type));
      const int64_t block = tr != nullptr && tr->block_size > 0 ? tr->block_size : 1;
      s.ne[0] = Extent() * (in_.OneIn(8) ? 1 : block);
      for (int d = 1; d < 4; ++d) s.ne[d] = d == 1 || in_.OneIn(4) ? Extent() : 1;
      Contiguous(&s);
      if (in_.OneIn(16)) s.nb[in_.Below(4)] = in_.OneIn(2) ? in_.U64() : in_.U8();
      const uint64_t id = BufferId(bufs);
      w.set_buffer(id);
      w.set_offset(Offset(SizeOf(bufs, id)));
      if (op != 0) {
        for (int k = 0; k < 4; ++k) w.add_src(in_.OneIn(2) ? -1 : src_pick());
      }
    } else if (op == static_cast<int>(Op::kView)) {
      const int j = src_pick();
      const Shadow& from = (*sh)[static_cast<size_t>(j)];
      const int root = from.root >= 0 ? from.root : j;
      s = from;
      s.root = root;
      s.valid = from.valid;
      for (int d = 0; d < 4; ++d) {
        if (in_.OneIn(3) && s.ne[d] > 1) s.ne[d] = 1 + in_.Below(static_cast<uint32_t>(s.ne[d]));
      }
      if (in_.OneIn(12)) s.ne[in_.Below(4)] = Extent();
      w.add_src(j);
      w.set_view_src(in_.OneIn(16) ? static_cast<int>(in_.U8()) - 2 : root + 1);
      w.set_view_offs(in_.OneIn(8) ? in_.U64() : uint64_t{in_.Below(4)} * s.nb[0] * (in_.OneIn(2) ? 1 : 16));
    } else {
      ComputeNode(static_cast<Op>(op), n, src_pick, sh, &w, &s);
      if (static_cast<Op>(op) != Op::kSetRows || in_.OneIn(8)) {
        const uint64_t id = BufferId(bufs);
        w.set_buffer(id);
        w.set_offset(Offset(SizeOf(bufs, id)));
      }
    }
    w.set_type(s.type);
    for (int d = 0; d < 4; ++d) {
      w.add_ne(s.ne[d]);
      w.add_nb(s.nb[d]);
    }
    if (in_.OneIn(32)) w.clear_ne();
    if (in_.OneIn(32)) w.add_nb(in_.U8());
    sh->push_back(s);
    return w;
  }

  template <typename SrcPick>
  void ComputeNode(Op op, int n, SrcPick src_pick, std::vector<Shadow>* sh, v1::WireTensor* w, Shadow* s) {
    // Sources: required ones, and the optional ones half the time.
    int required = 1;
    int allowed = 1;
    switch (op) {
      case Op::kGetRows:
      case Op::kMulMat:
      case Op::kAdd:
      case Op::kMul:
      case Op::kSwiglu:
        required = allowed = 3;
        break;
      case Op::kSoftMax:
        allowed = 3;
        break;
      case Op::kRope:
        required = 3;
        allowed = 7;
        break;
      case Op::kFlashAttnExt:
        required = 7;
        allowed = 15;
        break;
      case Op::kSetRows:
        required = allowed = 7;
        break;
      default:
        break;
    }
    int src[4] = {-1, -1, -1, -1};
    for (int k = 0; k < 4; ++k) {
      const bool want = (required & (1 << k)) || ((allowed & (1 << k)) && in_.OneIn(2));
      if (in_.OneIn(32) ? !want : want) src[k] = n == 0 ? 0 : src_pick();
    }
    for (int k = 0; k < 4; ++k) w->add_src(src[k]);
    // What the op makes of its sources (libs/backend/remote/wire.cc's DecodeHeader).
    const Shadow* a = src[0] >= 0 && src[0] < n ? &(*sh)[static_cast<size_t>(src[0])] : nullptr;
    const Shadow* b = src[1] >= 0 && src[1] < n ? &(*sh)[static_cast<size_t>(src[1])] : nullptr;
    const Shadow* c = src[2] >= 0 && src[2] < n ? &(*sh)[static_cast<size_t>(src[2])] : nullptr;
    s->type = 0;
    for (int d = 0; d < 4; ++d) s->ne[d] = a != nullptr ? a->ne[d] : 1;
    if (op == Op::kGetRows && b != nullptr) {
      s->ne[1] = b->ne[0];
      s->ne[2] = s->ne[3] = 1;
    } else if (op == Op::kMulMat && a != nullptr && b != nullptr) {
      s->ne[0] = a->ne[1];
      for (int d = 1; d < 4; ++d) s->ne[d] = b->ne[d];
    } else if (op == Op::kFlashAttnExt && c != nullptr) {
      s->ne[0] = c->ne[0];
      s->ne[3] = 1;
    } else if (op == Op::kSetRows && a != nullptr) {
      s->type = a->type;
    }
    Contiguous(s);
    if (op == Op::kSetRows && a != nullptr) {
      for (int d = 0; d < 4; ++d) s->nb[d] = a->nb[d];
      s->root = a->root >= 0 ? a->root : src[0];
    }
    // Rare mutations of what the server recomputes.
    if (in_.OneIn(16)) s->type = Type();
    if (in_.OneIn(16)) s->ne[in_.Below(4)] = Extent();
    if (in_.OneIn(24)) s->nb[in_.Below(4)] = in_.U8();
    // Parameters.
    switch (op) {
      case Op::kRope: {
        const int64_t ne0 = a != nullptr ? a->ne[0] : 64;
        static const int kModes[] = {0, 2, 0, 2, 8, 24, 40};
        w->add_i_params(in_.OneIn(8) ? static_cast<int32_t>(in_.U32()) : static_cast<int32_t>(ne0 >> in_.Below(3)));
        w->add_i_params(in_.Pick(kModes));
        w->add_i_params(in_.OneIn(4) ? static_cast<int32_t>(in_.U32()) : 4096);
        static const float kBase[] = {10000.0f, 500000.0f, 1.0f, 0.0f, -1.0f};
        w->add_f_params(in_.Pick(kBase));
        w->add_f_params(in_.OneIn(4) ? 0.25f : 1.0f);
        w->add_f_params(in_.OneIn(4) ? 1.0f : 0.0f);
        w->add_f_params(1.0f);
        w->add_f_params(32.0f);
        w->add_f_params(1.0f);
        break;
      }
      default: {
        static const float kF[] = {1e-5f, 1.0f, 0.125f, 0.0f, -2.0f, 8.0f, 1e30f};
        const int nf = static_cast<int>(in_.Below(4));
        for (int k = 0; k < nf; ++k) w->add_f_params(in_.OneIn(8) ? static_cast<float>(in_.U32()) : in_.Pick(kF));
        const int ni = static_cast<int>(in_.Below(3));
        for (int k = 0; k < ni; ++k) w->add_i_params(static_cast<int32_t>(in_.U32()));
        break;
      }
    }
  }

  // A command over `bufs`; `freed` collects buffers a free command names.
  v1::Command Command(const std::vector<Buf>& bufs) {
    v1::Command c;
    switch (in_.Below(9)) {
      case 0: {
        v1::SetBytes* s = c.mutable_set();
        s->set_buffer(BufferId(bufs));
        s->set_offset(Offset(SizeOf(bufs, s->buffer())));
        s->set_data(in_.Bytes(in_.OneIn(4) ? in_.U8() * 16u : in_.U8() % 65));
        break;
      }
      case 1: {
        v1::GetBytes* g = c.mutable_get();
        g->set_buffer(BufferId(bufs));
        const uint64_t size = SizeOf(bufs, g->buffer());
        g->set_offset(Offset(size));
        g->set_size(Length(size));
        break;
      }
      case 2: {
        v1::CopyBytes* cp = c.mutable_copy();
        cp->set_src_buffer(BufferId(bufs));
        cp->set_dst_buffer(BufferId(bufs));
        const uint64_t size = SizeOf(bufs, cp->src_buffer());
        cp->set_src_offset(Offset(size));
        cp->set_dst_offset(Offset(SizeOf(bufs, cp->dst_buffer())));
        cp->set_size(Length(size));
        break;
      }
      case 3:
        c.mutable_clear()->set_buffer(BufferId(bufs));
        c.mutable_clear()->set_value(in_.OneIn(8) ? in_.U32() : in_.U8());
        break;
      case 4:
        if (in_.OneIn(2)) {
          c.mutable_free()->set_buffer(BufferId(bufs));
          break;
        }
        [[fallthrough]];
      case 5:
      case 6:
      case 7: {
        std::vector<Shadow> sh;
        const int n = 1 + static_cast<int>(in_.Below(6));
        for (int i = 0; i < n; ++i) *c.mutable_compute()->add_tensors() = Tensor(i, false, bufs, &sh);
        break;
      }
      default: {
        std::vector<Shadow> sh;
        const int n = 1 + static_cast<int>(in_.Below(3));
        for (int i = 0; i < n; ++i) *c.mutable_prepare()->add_tensors() = Tensor(i, true, bufs, &sh);
        break;
      }
    }
    return c;
  }

 private:
  In& in_;
};

// Buffer ids 0..7 of a parsed message to this input's buffers.
void MapId(const std::vector<Buf>& bufs, uint64_t* id) {
  if (!bufs.empty() && *id < 8) *id = bufs[*id % bufs.size()].id;
}

void MapIds(const std::vector<Buf>& bufs, v1::ExecuteRequest* req) {
  auto map_tensors = [&](google::protobuf::RepeatedPtrField<v1::WireTensor>* ts) {
    for (v1::WireTensor& t : *ts) {
      uint64_t id = t.buffer();
      MapId(bufs, &id);
      t.set_buffer(id);
    }
  };
  for (v1::Command& c : *req->mutable_commands()) {
    uint64_t id = 0;
    switch (c.kind_case()) {
      case v1::Command::kSet:
        id = c.set().buffer();
        MapId(bufs, &id);
        c.mutable_set()->set_buffer(id);
        break;
      case v1::Command::kGet:
        id = c.get().buffer();
        MapId(bufs, &id);
        c.mutable_get()->set_buffer(id);
        break;
      case v1::Command::kCopy:
        id = c.copy().src_buffer();
        MapId(bufs, &id);
        c.mutable_copy()->set_src_buffer(id);
        id = c.copy().dst_buffer();
        MapId(bufs, &id);
        c.mutable_copy()->set_dst_buffer(id);
        break;
      case v1::Command::kClear:
        id = c.clear().buffer();
        MapId(bufs, &id);
        c.mutable_clear()->set_buffer(id);
        break;
      case v1::Command::kFree:
        id = c.free().buffer();
        MapId(bufs, &id);
        c.mutable_free()->set_buffer(id);
        break;
      case v1::Command::kCompute:
        map_tensors(c.mutable_compute()->mutable_tensors());
        break;
      case v1::Command::kPrepare:
        map_tensors(c.mutable_prepare()->mutable_tensors());
        break;
      default:
        break;
    }
  }
}

// Runs req and checks the answer.
void RunExecute(const v1::ExecuteRequest& req) {
  herd::remote::ComputeServer& server = Server();
  static const bool verbose = getenv("REMOTE_COMPUTE_FUZZ_VERBOSE") != nullptr;
  if (verbose) fprintf(stderr, "ExecuteRequest:\n%s", req.DebugString().c_str());
  v1::ExecuteResponse resp;
  const absl::Status s = server.Execute(req, &resp);
  if (verbose) fprintf(stderr, "Execute: %s, %d reads\n", s.ToString().c_str(), resp.reads_size());
  CheckError(s);
  Check(server.bytes_allocated() <= kMaxBytes, "bytes_allocated() within max_buffer_bytes");
  if (req.instance() != kInstance) {
    Check(s.code() == absl::StatusCode::kAborted, "a wrong instance is ABORTED", s);
    Check(resp.reads_size() == 0, "no reads for a wrong instance", s);
    return;
  }
  // The commands that ran: all, or those before the failing one it names.
  int ran = req.commands_size();
  if (!s.ok()) {
    const std::string msg(s.message());
    if (msg.rfind("commands[", 0) == 0) {
      ran = atoi(msg.c_str() + 9);
      Check(ran >= 0 && ran < req.commands_size(), "a failing command's index is in range", s);
      const std::string name = "] (" + herd::remote::CommandName(req.commands(ran)) + "): ";
      Check(msg.find(name) != std::string::npos, "a failing command is named by its kind", s);
    } else {
      Check(req.commands_size() > 64, "an error not naming a command is for too many commands", s);
      ran = 0;
    }
  }
  int gets = 0;
  for (int i = 0; i < ran; ++i) gets += req.commands(i).has_get() ? 1 : 0;
  Check(resp.reads_size() == gets, "one read per successful get", s);
  for (int i = 0, r = 0; i < ran; ++i) {
    if (!req.commands(i).has_get()) continue;
    Check(resp.reads(r++).size() == req.commands(i).get().size(), "a read has the bytes asked for", s);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  herd::remote::ComputeServer& server = Server();
  In in(data + 1, size - 1);
  std::vector<Buf> bufs;
  // Buffers (mode A: two of 4 KiB; mode B: 1-3 of chosen sizes).
  const bool structured = (data[0] & 1) != 0;
  const int n_bufs = structured ? 1 + static_cast<int>(in.Below(3)) : 2;
  for (int i = 0; i < n_bufs; ++i) {
    static const uint64_t kSizes[] = {256, 1024, 4096, 4096, 16384, 65536, 1 << 19};
    uint64_t bytes = 4096;
    if (structured) bytes = in.OneIn(16) ? in.U64() % (kMaxBytes + 2) : in.Pick(kSizes);
    absl::StatusOr<uint64_t> id = server.Alloc(kInstance, bytes);
    CheckError(id.status());
    Check(server.bytes_allocated() <= kMaxBytes, "bytes_allocated() within max_buffer_bytes");
    if (id.ok()) bufs.push_back({*id, bytes});
  }

  v1::ExecuteRequest req;
  if (!structured) {
    const bool map = (data[0] & 2) != 0;
    const bool fix_instance = (data[0] & 4) != 0;
    if (req.ParseFromArray(data + 1, static_cast<int>(size - 1))) {
      if (map) MapIds(bufs, &req);
      if (fix_instance) req.set_instance(kInstance);
      RunExecute(req);
    }
  } else {
    Program p(&in);
    req.set_instance(in.OneIn(32) ? in.U64() : kInstance);
    const int n = 1 + static_cast<int>(in.Below(8));
    for (int i = 0; i < n; ++i) *req.add_commands() = p.Command(bufs);
    RunExecute(req);
  }

  // Free what this input allocated (some a free command may have freed already).
  for (const Buf& b : bufs) {
    v1::ExecuteRequest f;
    f.set_instance(kInstance);
    f.add_commands()->mutable_free()->set_buffer(b.id);
    v1::ExecuteResponse resp;
    const absl::Status s = server.Execute(f, &resp);
    Check(s.ok() || s.code() == absl::StatusCode::kInvalidArgument, "free of an own buffer", s);
  }
  Check(server.n_buffers() == 0 && server.bytes_allocated() == 0, "every buffer freed, no bytes held");
  return 0;
}
