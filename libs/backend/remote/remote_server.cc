#include "libs/backend/remote/remote_server.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/backend/remote/wire.h"

namespace herd::remote {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace

struct ComputeServer::Held {
  std::unique_ptr<Buffer> buf;
  uint64_t size = 0;
  uint64_t owner = 0;  // the client that allocated it
  // Weights prepared for the backend's kernels (Tensor::extra), by offset.
  std::map<uint64_t, std::unique_ptr<Tensor>> prepared;
};

struct ComputeServer::Graph {
  std::deque<Tensor> tensors;  // headers built from the wire
  std::vector<Tensor*> ptrs;   // by wire index (a prepared weight's own header when one matches)
  std::vector<Tensor*> nodes;  // compute nodes, in order
};

ComputeServer::ComputeServer(std::unique_ptr<Backend> backend, ServerOptions opts, uint64_t instance)
    : backend_(std::move(backend)), opts_(opts), instance_(instance), weight_types_(ProbeWeightTypes(*backend_)) {}

ComputeServer::~ComputeServer() = default;

absl::Status ComputeServer::Admit(uint64_t client) {
  {
    std::lock_guard<std::mutex> l(heard_mu_);
    for (const auto& [c, t] : heard_) {
      auto it = clients_.find(c);
      if (it != clients_.end() && t > it->second) it->second = t;
    }
    heard_.clear();
  }
  const auto now = std::chrono::steady_clock::now();
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (now - it->second <= opts_.client_idle) {
      ++it;
      continue;
    }
    for (auto b = buffers_.begin(); b != buffers_.end();) {
      if (b->second->owner == it->first) {
        allocated_ -= b->second->size;
        b = buffers_.erase(b);
      } else {
        ++b;
      }
    }
    released_.push_back(it->first);
    if (released_.size() > 4096) released_.pop_front();
    it = clients_.erase(it);
  }
  if (std::find(released_.begin(), released_.end(), client) != released_.end()) {
    return absl::AbortedError(absl::StrCat("client ", client, " was idle for more than ", opts_.client_idle.count(),
                                           " ms: its buffers were released"));
  }
  clients_[client] = now;
  client_ = client;
  return absl::OkStatus();
}

size_t ComputeServer::n_clients() const {
  std::lock_guard<std::mutex> lock(mu_);
  return clients_.size();
}

v1::GetDeviceResponse ComputeServer::Device(uint64_t client) {
  {
    // Not mu_: a compute may hold it for seconds. Admit merges this (bounded: past 4096
    // distinct callers between two calls, the rest wait for their next probe).
    std::lock_guard<std::mutex> l(heard_mu_);
    if (heard_.size() < 4096 || heard_.count(client) != 0) heard_[client] = std::chrono::steady_clock::now();
  }
  v1::GetDeviceResponse r;
  const DeviceInfo d = backend_->device();
  r.set_name(d.name);
  r.set_description(d.description);
  r.set_memory_total(d.memory_total);
  r.set_memory_free(d.memory_free);
  r.set_alignment(backend_->default_buffer_type()->alignment());
  r.set_max_buffer_bytes(opts_.max_buffer_bytes);
  r.set_instance(instance_);
  r.set_protocol_version(kProtocolVersion);
  for (int t : weight_types_.get_rows) r.add_get_rows_types(t);
  for (int t : weight_types_.mul_mat) r.add_mul_mat_types(t);
  for (int t : weight_types_.set_rows) r.add_set_rows_types(t);
  return r;
}

absl::StatusOr<uint64_t> ComputeServer::Alloc(uint64_t instance, uint64_t size, uint64_t client) {
  std::lock_guard<std::mutex> lock(mu_);
  if (instance != instance_) return RestartedError(instance_);
  if (absl::Status s = Admit(client); !s.ok()) return s;
  if (size == 0) return absl::InvalidArgumentError("AllocBuffer: size must be > 0");
  if (size > opts_.max_buffer_bytes || allocated_ > opts_.max_buffer_bytes - size) {
    return absl::ResourceExhaustedError(absl::StrCat("AllocBuffer: ", size, " bytes would exceed the server's ",
                                                     opts_.max_buffer_bytes, "-byte limit (", allocated_,
                                                     " bytes held)"));
  }
  absl::StatusOr<std::unique_ptr<Buffer>> b = backend_->default_buffer_type()->Allocate(size);
  if (!b.ok()) return b.status();
  auto h = std::make_unique<Held>();
  h->buf = *std::move(b);
  h->size = size;
  h->owner = client;
  h->buf->Clear(0);
  const uint64_t id = next_id_++;
  buffers_[id] = std::move(h);
  allocated_ += size;
  return id;
}

uint64_t ComputeServer::bytes_allocated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

size_t ComputeServer::n_buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buffers_.size();
}

absl::StatusOr<ComputeServer::Held*> ComputeServer::Find(uint64_t id) {
  auto it = buffers_.find(id);
  if (it == buffers_.end() || it->second->owner != client_) {
    return absl::InvalidArgumentError(absl::StrCat("unknown buffer ", id));
  }
  return it->second.get();
}

absl::Status ComputeServer::Range(uint64_t id, uint64_t offset, uint64_t size, Held** out) {
  absl::StatusOr<Held*> h = Find(id);
  if (!h.ok()) return h.status();
  if (offset > (*h)->size || size > (*h)->size - offset) {
    return absl::InvalidArgumentError(absl::StrCat("bytes [", offset, ", ", offset, " + ", size,
                                                   ") lie outside buffer ", id, " (", (*h)->size, " bytes)"));
  }
  *out = *h;
  return absl::OkStatus();
}

void ComputeServer::Invalidate(Held* h, uint64_t offset, uint64_t size, std::vector<std::unique_ptr<Tensor>>* dropped) {
  for (auto it = h->prepared.begin(); it != h->prepared.end();) {
    const uint64_t lo = it->first;
    const uint64_t hi = lo + it->second->nbytes();
    if (lo < offset + size && offset < hi) {
      if (dropped != nullptr) dropped->push_back(std::move(it->second));
      it = h->prepared.erase(it);
    } else {
      ++it;
    }
  }
}

absl::Status ComputeServer::Execute(const v1::ExecuteRequest& req, v1::ExecuteResponse* resp,
                                    std::chrono::system_clock::time_point deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::chrono::system_clock::now() >= deadline) {
    return absl::DeadlineExceededError("Execute: reached the server after its deadline; not run");
  }
  if (req.instance() != instance_) return RestartedError(instance_);
  if (absl::Status s = Admit(req.client()); !s.ok()) return s;
  if (req.commands_size() > opts_.max_commands) {
    return absl::InvalidArgumentError(
        absl::StrCat("Execute: ", req.commands_size(), " commands (at most ", opts_.max_commands, ")"));
  }
  for (int i = 0; i < req.commands_size(); ++i) {
    const v1::Command& c = req.commands(i);
    absl::Status s = RunCommand(c, resp);
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("commands[", i, "] (", CommandName(c), "): ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status ComputeServer::RunCommand(const v1::Command& c, v1::ExecuteResponse* resp) {
  switch (c.kind_case()) {
    case v1::Command::kSet: {
      Held* h = nullptr;
      const v1::SetBytes& s = c.set();
      if (absl::Status st = Range(s.buffer(), s.offset(), s.data().size(), &h); !st.ok()) return st;
      Invalidate(h, s.offset(), s.data().size());
      if (!s.data().empty())
        std::memcpy(static_cast<uint8_t*>(h->buf->base()) + s.offset(), s.data().data(), s.data().size());
      return absl::OkStatus();
    }
    case v1::Command::kGet: {
      Held* h = nullptr;
      const v1::GetBytes& g = c.get();
      if (absl::Status st = Range(g.buffer(), g.offset(), g.size(), &h); !st.ok()) return st;
      resp->add_reads()->assign(static_cast<const char*>(h->buf->base()) + g.offset(), g.size());
      return absl::OkStatus();
    }
    case v1::Command::kCopy: {
      const v1::CopyBytes& cp = c.copy();
      Held* src = nullptr;
      Held* dst = nullptr;
      if (absl::Status st = Range(cp.src_buffer(), cp.src_offset(), cp.size(), &src); !st.ok()) return st;
      if (absl::Status st = Range(cp.dst_buffer(), cp.dst_offset(), cp.size(), &dst); !st.ok()) return st;
      Invalidate(dst, cp.dst_offset(), cp.size());
      if (cp.size() > 0) {
        std::memmove(static_cast<uint8_t*>(dst->buf->base()) + cp.dst_offset(),
                     static_cast<const uint8_t*>(src->buf->base()) + cp.src_offset(), cp.size());
      }
      return absl::OkStatus();
    }
    case v1::Command::kClear: {
      if (c.clear().value() > 255) {
        return absl::InvalidArgumentError(absl::StrCat("value ", c.clear().value(), " is not a byte"));
      }
      absl::StatusOr<Held*> h = Find(c.clear().buffer());
      if (!h.ok()) return h.status();
      Invalidate(*h, 0, (*h)->size);
      (*h)->buf->Clear(static_cast<uint8_t>(c.clear().value()));
      return absl::OkStatus();
    }
    case v1::Command::kFree: {
      auto it = buffers_.find(c.free().buffer());
      if (it == buffers_.end() || it->second->owner != client_) {
        return absl::InvalidArgumentError(absl::StrCat("unknown buffer ", c.free().buffer()));
      }
      allocated_ -= it->second->size;
      buffers_.erase(it);
      return absl::OkStatus();
    }
    case v1::Command::kCompute:
      return Compute(c.compute());
    case v1::Command::kPrepare:
      return Prepare(c.prepare());
    default:
      return absl::InvalidArgumentError("empty command");
  }
}

absl::Status ComputeServer::BuildTensors(const google::protobuf::RepeatedPtrField<v1::WireTensor>& wire,
                                         bool leaves_only, Graph* g) {
  if (wire.size() > opts_.max_graph_tensors) {
    return absl::InvalidArgumentError(absl::StrCat(wire.size(), " tensors (at most ", opts_.max_graph_tensors, ")"));
  }
  g->ptrs.reserve(static_cast<size_t>(wire.size()));
  for (int i = 0; i < wire.size(); ++i) {
    const v1::WireTensor& w = wire[i];
    g->tensors.emplace_back();
    Tensor* t = &g->tensors.back();
    absl::Status s = DecodeHeader(w, i, g->ptrs, t);
    if (s.ok() && leaves_only && t->op != Op::kNone) {
      s = absl::InvalidArgumentError(absl::StrCat("op ", OpName(t->op), " where only leaves are allowed"));
    }
    // Where the bytes are: leaves and compute nodes in a buffer; views and SET_ROWS in
    // their root.
    if (s.ok() && t->view_src == nullptr) {
      Held* h = nullptr;
      // The buffer's base is aligned (Device().alignment): the offset makes the address.
      if (const uint64_t align = TypeAlignment(t->type); w.offset() % align != 0) {
        s = absl::InvalidArgumentError(absl::StrCat("offset ", w.offset(), " is not a multiple of ", align, " (",
                                                    GgmlTypeName(t->type), " alignment)"));
      }
      if (s.ok()) s = Range(w.buffer(), w.offset(), t->nbytes(), &h);
      if (s.ok()) {
        t->buffer = h->buf.get();
        t->data = static_cast<uint8_t*>(h->buf->base()) + w.offset();
        auto it = h->prepared.find(w.offset());
        if (t->op == Op::kNone && it != h->prepared.end() && SameLayout(*it->second, *t)) {
          g->ptrs.push_back(it->second.get());
          continue;
        }
      }
    } else if (s.ok()) {
      t->buffer = t->view_src->buffer;
      t->data = static_cast<uint8_t*>(t->view_src->data) + t->view_offs;
    }
    if (s.ok() && t->op != Op::kNone && t->op != Op::kView && !backend_->SupportsOp(*t)) {
      s = absl::InvalidArgumentError(
          absl::StrCat(backend_->name(), " does not compute ", OpName(t->op), " with these sources"));
    }
    // A node's bytes are its own while it runs: a kernel may copy a source row over its
    // output (memcpy of overlapping ranges). Exactly in place (same bytes, same layout)
    // is allowed; SET_ROWS writes into its src[0] by definition.
    for (int k = 0; s.ok() && k < 4 && t->op != Op::kNone && t->op != Op::kView && t->op != Op::kSetRows; ++k) {
      const Tensor* src = t->src[k];
      if (src == nullptr || src->buffer != t->buffer) continue;
      const auto* lo = static_cast<const uint8_t*>(t->data);
      const auto* src_lo = static_cast<const uint8_t*>(src->data);
      const bool overlap = lo < src_lo + src->nbytes() && src_lo < lo + t->nbytes();
      if (overlap && !(lo == src_lo && SameLayout(*t, *src))) {
        s = absl::InvalidArgumentError(
            absl::StrCat("its bytes overlap those of src[", k, "] (only exactly in place, same offset and layout)"));
      }
    }
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("tensors[", i, "] '", w.name().substr(0, kMaxName), "': ", s.message()));
    }
    g->ptrs.push_back(t);
    if (t->op != Op::kNone && t->op != Op::kView) g->nodes.push_back(t);
  }
  return absl::OkStatus();
}

absl::Status ComputeServer::Compute(const v1::ComputeGraph& c) {
  Graph g;
  if (absl::Status s = BuildTensors(c.tensors(), /*leaves_only=*/false, &g); !s.ok()) return s;
  if (g.nodes.empty()) return absl::OkStatus();
  // Nodes write their own bytes: layouts prepared over them are stale. The graph may
  // hold their headers as sources (BuildTensors), so they live until it has run.
  std::vector<std::unique_ptr<Tensor>> dropped;
  for (Tensor* n : g.nodes) {
    Tensor* root = n->view_src != nullptr ? n->view_src : n;
    for (auto& [id, h] : buffers_) {
      if (h->buf.get() == root->buffer) {
        Invalidate(h.get(),
                   static_cast<uint64_t>(static_cast<uint8_t*>(n->data) - static_cast<uint8_t*>(h->buf->base())),
                   n->nbytes(), &dropped);
        break;
      }
    }
  }
  std::unique_ptr<herd::Graph> placed = herd::Graph::Placed(g.nodes);
  absl::Status s = backend_->GraphCompute(*placed);
  if (s.ok()) s = backend_->Synchronize();
  return s;
}

absl::Status ComputeServer::Prepare(const v1::PrepareWeights& p) {
  Graph g;
  if (absl::Status s = BuildTensors(p.tensors(), /*leaves_only=*/true, &g); !s.ok()) return s;
  // Each weight is prepared once, over bytes of its own: a layout replaced or dropped
  // while this command runs would leave a dangling tensor among the fresh ones.
  std::vector<size_t> order(g.ptrs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](size_t i) {
    return std::make_pair(reinterpret_cast<uintptr_t>(g.ptrs[i]->buffer), reinterpret_cast<uintptr_t>(g.ptrs[i]->data));
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  size_t reach = 0;  // the tensor reaching furthest so far in this buffer
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t prev = order[k - 1];
    const size_t cur = order[k];
    if (key(prev).first != key(cur).first) {
      reach = k;
      continue;
    }
    const size_t far = order[reach];
    if (key(cur).second < key(far).second + g.ptrs[far]->nbytes()) {
      const size_t hi = std::max(far, cur);
      return absl::InvalidArgumentError(
          absl::StrCat("tensors[", hi, "] '", p.tensors(static_cast<int>(hi)).name().substr(0, kMaxName),
                       "' overlaps tensors[", std::min(far, cur), "]: weights are prepared once each"));
    }
    if (key(cur).second + g.ptrs[cur]->nbytes() > key(far).second + g.ptrs[far]->nbytes()) reach = k;
  }
  std::vector<Tensor*> fresh;
  for (size_t i = 0; i < g.ptrs.size(); ++i) {
    Tensor* t = g.ptrs[i];
    Held* h = nullptr;
    for (auto& [id, held] : buffers_) {
      if (held->buf.get() == t->buffer) h = held.get();
    }
    if (h == nullptr) continue;
    const uint64_t offset =
        static_cast<uint64_t>(static_cast<uint8_t*>(t->data) - static_cast<uint8_t*>(h->buf->base()));
    auto it = h->prepared.find(offset);
    if (it != h->prepared.end() && it->second.get() == t) continue;  // already prepared
    auto copy = std::make_unique<Tensor>(*t);
    fresh.push_back(copy.get());
    Invalidate(h, offset, copy->nbytes());
    h->prepared[offset] = std::move(copy);
  }
  if (fresh.empty()) return absl::OkStatus();
  return backend_->PrepareWeights(fresh);
}

grpc::Status RemoteComputeService::Done(const char* method, const absl::Status& s) {
  if (after_call_) after_call_(method, s);
  return ToGrpc(s);
}

grpc::Status RemoteComputeService::GetDevice(grpc::ServerContext*, const v1::GetDeviceRequest* req,
                                             v1::GetDeviceResponse* resp) {
  *resp = server_->Device(req->client());
  return Done("GetDevice", absl::OkStatus());
}

grpc::Status RemoteComputeService::AllocBuffer(grpc::ServerContext*, const v1::AllocBufferRequest* req,
                                               v1::AllocBufferResponse* resp) {
  absl::StatusOr<uint64_t> id = server_->Alloc(req->instance(), req->size(), req->client());
  if (id.ok()) resp->set_buffer(*id);
  return Done("AllocBuffer", id.status());
}

grpc::Status RemoteComputeService::Execute(grpc::ServerContext* ctx, const v1::ExecuteRequest* req,
                                           v1::ExecuteResponse* resp) {
  return Done("Execute", server_->Execute(*req, resp, ctx->deadline()));
}

}  // namespace herd::remote
