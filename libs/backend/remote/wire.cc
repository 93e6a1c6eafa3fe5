#include "libs/backend/remote/wire.h"

#include <cstring>
#include <unordered_map>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"

namespace herd::remote {
namespace {

constexpr int64_t kMaxExtent = int64_t{1} << 32;
constexpr unsigned __int128 kMaxElements = static_cast<unsigned __int128>(1) << 40;
constexpr uint64_t kMaxStride = uint64_t{1} << 48;
constexpr unsigned __int128 kMaxSpan = static_cast<unsigned __int128>(1) << 48;

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

// Sources each op needs (required) and may have (allowed), as bit masks of src[i].
struct Arity {
  int required;
  int allowed;
};

Arity ArityOf(Op op) {
  switch (op) {
    case Op::kNone:
      return {0, 0};
    case Op::kView:
      return {1, 1};
    case Op::kGetRows:
    case Op::kMulMat:
    case Op::kAdd:
    case Op::kMul:
    case Op::kSwiglu:
      return {3, 3};
    case Op::kSoftMax:
      return {1, 3};
    case Op::kRope:
      return {3, 7};
    case Op::kFlashAttnExt:
      return {7, 15};
    case Op::kSetRows:
      return {7, 7};
    default:  // the unary ops
      return {1, 1};
  }
}

Tensor* RootOf(Tensor* t) { return t->view_src != nullptr ? t->view_src : t; }

}  // namespace

WeightTypes ProbeWeightTypes(const Backend& backend) {
  WeightTypes w;
  for (uint32_t id = 0; id < 64; ++id) {
    const GgmlTypeTraits* tr = GetGgmlTypeTraits(id);
    if (tr == nullptr || tr->block_size <= 0 || tr->type_size == 0) continue;
    const GgmlType type = static_cast<GgmlType>(id);
    Graph g;
    Tensor* a = g.NewTensor(type, {tr->block_size * 8, 8});
    Tensor* x = g.NewTensor(GgmlType::F32, {tr->block_size * 8, 2});
    Tensor* ids = g.NewTensor(GgmlType::I32, {2});
    if (backend.SupportsOp(*g.GetRows(a, ids))) w.get_rows.push_back(static_cast<int>(id));
    if (backend.SupportsOp(*g.MulMat(a, x))) w.mul_mat.push_back(static_cast<int>(id));
    if (backend.SupportsOp(*g.SetRows(a, x, ids))) w.set_rows.push_back(static_cast<int>(id));
  }
  return w;
}

absl::Status RestartedError(uint64_t instance) {
  return absl::AbortedError(
      absl::StrCat("the compute server restarted (now instance ", instance, "): its buffers are gone"));
}

std::string CommandName(const v1::Command& c) {
  switch (c.kind_case()) {
    case v1::Command::kSet:
      return "set";
    case v1::Command::kGet:
      return "get";
    case v1::Command::kCopy:
      return "copy";
    case v1::Command::kClear:
      return "clear";
    case v1::Command::kFree:
      return "free";
    case v1::Command::kCompute:
      return "compute";
    case v1::Command::kPrepare:
      return "prepare";
    default:
      return "empty";
  }
}

uint64_t TypeAlignment(GgmlType type) {
  const GgmlTypeTraits* tr = GetGgmlTypeTraits(type);
  if (tr == nullptr) return 1;
  for (uint64_t a : {8, 4, 2}) {
    if (tr->type_size % a == 0) return a;
  }
  return 1;
}

bool SameLayout(const Tensor& a, const Tensor& b) {
  if (a.type != b.type) return false;
  for (int i = 0; i < 4; ++i) {
    if (a.ne[i] != b.ne[i] || a.nb[i] != b.nb[i]) return false;
  }
  return true;
}

absl::Status DecodeHeader(const v1::WireTensor& w, int index, const std::vector<Tensor*>& earlier, Tensor* t) {
  if (w.name().size() > kMaxName) return Bad(absl::StrCat("name longer than ", kMaxName, " bytes"));
  t->name = w.name();
  const GgmlTypeTraits* tr = w.type() < 0 ? nullptr : GetGgmlTypeTraits(static_cast<uint32_t>(w.type()));
  if (tr == nullptr || tr->block_size <= 0 || tr->type_size == 0)
    return Bad(absl::StrCat("unknown type id ", w.type()));
  t->type = static_cast<GgmlType>(w.type());
  if (w.ne_size() != 4 || w.nb_size() != 4) {
    return Bad(absl::StrCat("ne and nb need 4 entries each (got ", w.ne_size(), " and ", w.nb_size(), ")"));
  }
  unsigned __int128 elements = 1;
  for (int i = 0; i < 4; ++i) {
    if (w.ne(i) < 1 || w.ne(i) > kMaxExtent) return Bad(absl::StrCat("ne[", i, "] = ", w.ne(i), " outside [1, 2^32]"));
    if (w.nb(i) > kMaxStride) return Bad(absl::StrCat("nb[", i, "] = ", w.nb(i), " above 2^48"));
    elements *= static_cast<unsigned __int128>(w.ne(i));
    if (elements > kMaxElements) return Bad("more than 2^40 elements");
    t->ne[i] = w.ne(i);
    t->nb[i] = w.nb(i);
  }
  if (t->ne[0] % tr->block_size != 0) {
    return Bad(absl::StrCat("ne[0] = ", t->ne[0], " is not whole ", GgmlTypeName(t->type), " blocks"));
  }
  if (t->nb[0] != tr->type_size) {
    return Bad(
        absl::StrCat("nb[0] = ", t->nb[0], " is not the ", GgmlTypeName(t->type), " element size ", tr->type_size));
  }
  const uint64_t align = TypeAlignment(t->type);
  for (int i = 1; i < 4; ++i) {
    if (t->nb[i] % align != 0) {
      return Bad(absl::StrCat("nb[", i, "] = ", t->nb[i], " is not a multiple of ", align, " (", GgmlTypeName(t->type),
                              " alignment)"));
    }
  }
  unsigned __int128 span = GgmlRowSize(t->type, t->ne[0]);
  for (int i = 1; i < 4; ++i) span += static_cast<unsigned __int128>(t->ne[i] - 1) * t->nb[i];
  if (span > kMaxSpan) return Bad("spans more than 2^48 bytes");

  if (w.op() < 0 || w.op() >= static_cast<int>(Op::kCount)) return Bad(absl::StrCat("unknown op id ", w.op()));
  t->op = static_cast<Op>(w.op());
  if (w.src_size() > 4 || w.i_params_size() > 8 || w.f_params_size() > 8) {
    return Bad("at most 4 sources, 8 integer and 8 float parameters");
  }
  const Arity arity = ArityOf(t->op);
  for (int i = 0; i < 4; ++i) {
    const int s = i < w.src_size() ? w.src(i) : -1;
    if (s != -1 && (s < 0 || s >= index)) {
      return Bad(absl::StrCat("src[", i, "] = ", s, " is not an earlier tensor (index ", index, ")"));
    }
    const bool have = s >= 0;
    if (have && !(arity.allowed & (1 << i))) return Bad(absl::StrCat(OpName(t->op), " takes no src[", i, "]"));
    if (!have && (arity.required & (1 << i))) return Bad(absl::StrCat(OpName(t->op), " needs src[", i, "]"));
    t->src[i] = have ? earlier[static_cast<size_t>(s)] : nullptr;
  }
  for (int i = 0; i < w.i_params_size(); ++i) t->i_params[i] = w.i_params(i);
  for (int i = 0; i < w.f_params_size(); ++i) t->f_params[i] = w.f_params(i);
  if (t->op != Op::kView && w.view_src() != 0) return Bad("view_src is set on a tensor that is not a view");

  if (t->op == Op::kNone) return absl::OkStatus();
  if (t->op == Op::kView) {
    const int r = w.view_src() - 1;
    if (r < 0 || r >= index) return Bad(absl::StrCat("view_src = ", w.view_src(), " is not an earlier tensor + 1"));
    Tensor* root = earlier[static_cast<size_t>(r)];
    if (root != RootOf(t->src[0]) || root->view_src != nullptr) {
      return Bad(absl::StrCat("view_src = ", w.view_src(), " is not the root of src[0]"));
    }
    if (t->type != t->src[0]->type) return Bad("a view's type differs from its source's");
    if (w.view_offs() % align != 0) {
      return Bad(absl::StrCat("view_offs = ", w.view_offs(), " is not a multiple of ", align, " (",
                              GgmlTypeName(t->type), " alignment)"));
    }
    const size_t root_bytes = root->nbytes();
    if (w.view_offs() > root_bytes || span > root_bytes - w.view_offs()) {
      return Bad(absl::StrCat("view of ", static_cast<uint64_t>(span), " bytes at ", w.view_offs(),
                              " lies outside its root (", root_bytes, " bytes)"));
    }
    t->view_src = root;
    t->view_offs = w.view_offs();
    return absl::OkStatus();
  }

  // A compute node: what its op makes of its sources.
  Tensor want;
  const Tensor* a = t->src[0];
  const Tensor* b = t->src[1];
  want.type = GgmlType::F32;
  for (int i = 0; i < 4; ++i) want.ne[i] = a->ne[i];
  switch (t->op) {
    case Op::kGetRows:
      want.ne[1] = b->ne[0];
      want.ne[2] = want.ne[3] = 1;
      break;
    case Op::kMulMat:
      want.ne[0] = a->ne[1];
      for (int i = 1; i < 4; ++i) want.ne[i] = b->ne[i];
      break;
    case Op::kFlashAttnExt:
      want.ne[0] = t->src[2]->ne[0];
      want.ne[3] = 1;
      break;
    case Op::kSwiglu:
      // The kernel reads b at every row of a.
      for (int i = 1; i < 4; ++i) {
        if (b->ne[i] < a->ne[i]) return Bad("swiglu: src[1] has fewer rows than src[0]");
      }
      break;
    case Op::kSetRows:
      want.type = a->type;
      break;
    default:
      break;
  }
  SetContiguousStrides(&want);
  if (t->op == Op::kSetRows) {
    for (int i = 0; i < 4; ++i) want.nb[i] = a->nb[i];
  }
  if (!SameLayout(want, *t)) {
    return Bad(absl::StrCat(OpName(t->op), ": type ", GgmlTypeName(t->type), " [", t->ne[0], ", ", t->ne[1], ", ",
                            t->ne[2], ", ", t->ne[3], "] with its strides is not what it makes of its sources (",
                            GgmlTypeName(want.type), " [", want.ne[0], ", ", want.ne[1], ", ", want.ne[2], ", ",
                            want.ne[3], "])"));
  }
  if (t->op == Op::kSetRows) {  // writes into its destination: a view of it
    Tensor* dst = t->src[0];
    t->view_src = RootOf(dst);
    t->view_offs = dst->view_src != nullptr ? dst->view_offs : 0;
  }
  return absl::OkStatus();
}

namespace {

// Encodes tensors in dependency order, each once.
class Encoder {
 public:
  Encoder(const LocateFn& locate, google::protobuf::RepeatedPtrField<v1::WireTensor>* out)
      : locate_(locate), out_(out) {}

  // `compute`: t is computed by this graph (its sources are encoded, its op kept);
  // otherwise t is read as it is (a view keeps its op; anything else becomes a leaf).
  absl::StatusOr<int> Add(const Tensor* t, bool compute, int depth) {
    auto it = index_.find(t);
    if (it != index_.end()) return it->second;
    if (depth > 64) return absl::InvalidArgumentError(absl::StrCat("tensor '", t->name, "': views nested too deep"));
    v1::WireTensor w;
    const bool view = t->op == Op::kView || (t->op == Op::kSetRows && !compute);
    int src[4] = {-1, -1, -1, -1};
    if (view) {
      // A view (or an earlier SET_ROWS, read as a view of its destination): its root first.
      const Tensor* root = t->view_src != nullptr ? t->view_src : t;
      HERD_ASSIGN_OR_RETURN(int r, Add(root, false, depth + 1));
      src[0] = r;
      w.set_view_src(r + 1);
      w.set_view_offs(t->view_offs);
    } else if (compute) {
      for (int i = 0; i < 4; ++i) {
        if (t->src[i] == nullptr) continue;
        HERD_ASSIGN_OR_RETURN(src[i], Add(t->src[i], false, depth + 1));
      }
    }
    w.set_type(static_cast<int>(t->type));
    for (int i = 0; i < 4; ++i) {
      w.add_ne(t->ne[i]);
      w.add_nb(t->nb[i]);
    }
    w.set_op(view ? static_cast<int>(Op::kView) : compute ? static_cast<int>(t->op) : 0);
    if (view || compute) {
      for (int s : src) w.add_src(s);
    }
    if (compute) {
      for (int32_t p : t->i_params) w.add_i_params(p);
      for (float p : t->f_params) w.add_f_params(p);
    }
    if (!view && !(compute && t->op == Op::kSetRows)) {
      absl::StatusOr<std::pair<uint64_t, uint64_t>> at = locate_(t);
      if (!at.ok()) return at.status();
      w.set_buffer(at->first);
      w.set_offset(at->second);
    }
    w.set_name(t->name.substr(0, kMaxName));
    const int id = out_->size();
    *out_->Add() = std::move(w);
    index_[t] = id;
    return id;
  }

 private:
  const LocateFn& locate_;
  google::protobuf::RepeatedPtrField<v1::WireTensor>* out_;
  std::unordered_map<const Tensor*, int> index_;
};

}  // namespace

absl::Status EncodeGraph(const std::vector<Tensor*>& nodes, const LocateFn& locate, v1::ComputeGraph* out) {
  Encoder enc(locate, out->mutable_tensors());
  for (const Tensor* n : nodes) {
    if (n->op == Op::kNone || n->op == Op::kView) continue;
    absl::StatusOr<int> i = enc.Add(n, /*compute=*/true, 0);
    if (!i.ok()) return i.status();
  }
  return absl::OkStatus();
}

absl::Status EncodeLeaves(const std::vector<Tensor*>& leaves, const LocateFn& locate, v1::PrepareWeights* out) {
  Encoder enc(locate, out->mutable_tensors());
  for (const Tensor* t : leaves) {
    if (t->op != Op::kNone) continue;
    absl::StatusOr<int> i = enc.Add(t, /*compute=*/false, 0);
    if (!i.ok()) return i.status();
  }
  return absl::OkStatus();
}

}  // namespace herd::remote
