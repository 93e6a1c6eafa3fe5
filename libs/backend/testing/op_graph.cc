#include "libs/backend/testing/op_graph.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "libs/base/status_macros.h"
#include "libs/tensor/quants.h"

namespace herd::testing {

Tensor* OpGraph::Raw(GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> bytes) {
  Tensor* t = g_.NewTensor(type, std::move(ne));
  t->name = "leaf" + std::to_string(data_.size());
  t->is_input = true;
  bytes.resize(t->nbytes());
  data_[t] = std::move(bytes);
  return t;
}

std::vector<float> OpGraph::Floats(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = u(rng);
  return v;
}

Tensor* OpGraph::F32(std::vector<int64_t> ne, uint32_t seed, float lo, float hi) {
  int64_t n = 1;
  for (int64_t e : ne) n *= e;
  return F32Values(std::move(ne), Floats(n, seed, lo, hi));
}

Tensor* OpGraph::F32Values(std::vector<int64_t> ne, const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::memcpy(b.data(), v.data(), b.size());
  return Raw(GgmlType::F32, std::move(ne), std::move(b));
}

Tensor* OpGraph::Typed(GgmlType type, std::vector<int64_t> ne, uint32_t seed) {
  if (type == GgmlType::F32) return F32(std::move(ne), seed);
  int64_t rows = 1;
  for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
  const std::vector<float> v = Floats(ne[0] * rows, seed);
  const size_t row_bytes = GgmlRowSize(type, ne[0]);
  std::vector<uint8_t> b(row_bytes * static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    QuantizeRow(type, v.data() + r * ne[0], b.data() + static_cast<size_t>(r) * row_bytes, ne[0]);
  }
  return Raw(type, std::move(ne), std::move(b));
}

Tensor* OpGraph::I32(const std::vector<int32_t>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(int32_t));
  std::memcpy(b.data(), v.data(), b.size());
  return Raw(GgmlType::I32, {static_cast<int64_t>(v.size())}, std::move(b));
}

absl::StatusOr<std::unique_ptr<PlacedGraph>> PlacedGraph::Create(Backend* be, const BuildFn& fn, bool place_nodes) {
  std::unique_ptr<PlacedGraph> p(new PlacedGraph());
  p->be_ = be;
  p->out_ = fn(p->b_);
  Graph& g = p->b_.g();
  g.SetOutput(p->out_);
  BufferType* bt = be->default_buffer_type();
  const size_t align = bt->alignment();
  const auto rounded = [&](const Tensor* t) { return (t->nbytes() + align - 1) / align * align; };
  size_t total = 0;
  for (const auto& [t, bytes] : p->b_.data()) total += rounded(t);
  if (place_nodes) {
    for (Tensor* n : g.nodes()) {
      if (n->view_src == nullptr) total += rounded(n);
    }
  }
  HERD_ASSIGN_OR_RETURN(p->buf_, bt->Allocate(total));
  size_t off = 0;
  for (const auto& [t, bytes] : p->b_.data()) {
    HERD_RETURN_IF_ERROR(PlaceTensor(t, p->buf_.get(), off));
    off += rounded(t);
    HERD_RETURN_IF_ERROR(be->SetTensor(t, bytes.data(), 0, bytes.size()));
  }
  if (place_nodes) {
    for (Tensor* n : g.nodes()) {
      if (n->view_src != nullptr) {
        n->data = static_cast<uint8_t*>(n->view_src->data) + n->view_offs;
        n->buffer = n->view_src->buffer;
      } else {
        HERD_RETURN_IF_ERROR(PlaceTensor(n, p->buf_.get(), off));
        off += rounded(n);
      }
    }
    p->placed_ = Graph::Placed(g.nodes());
  }
  return p;
}

absl::Status PlacedGraph::Compute() {
  HERD_RETURN_IF_ERROR(be_->GraphCompute(placed_ != nullptr ? *placed_ : b_.g()));
  return be_->Synchronize();
}

absl::StatusOr<std::vector<float>> PlacedGraph::Output() const {
  const Tensor* out = out_;
  std::vector<uint8_t> raw(out->nbytes());
  HERD_RETURN_IF_ERROR(be_->GetTensor(out, raw.data(), 0, raw.size()));
  std::vector<float> v(static_cast<size_t>(out->nelements()));
  int64_t k = 0;
  for (int64_t i3 = 0; i3 < out->ne[3]; ++i3) {
    for (int64_t i2 = 0; i2 < out->ne[2]; ++i2) {
      for (int64_t i1 = 0; i1 < out->ne[1]; ++i1, ++k) {
        const uint8_t* row = raw.data() + i1 * out->nb[1] + i2 * out->nb[2] + i3 * out->nb[3];
        DequantizeRow(out->type, row, v.data() + k * out->ne[0], out->ne[0]);
      }
    }
  }
  return v;
}

size_t PlacedGraph::input_bytes() const {
  size_t n = 0;
  for (const auto& [t, bytes] : b_.data()) n += bytes.size();
  return n;
}

absl::StatusOr<std::vector<float>> RunOn(Backend* be, const BuildFn& fn, bool place_nodes) {
  HERD_ASSIGN_OR_RETURN(std::unique_ptr<PlacedGraph> p, PlacedGraph::Create(be, fn, place_nodes));
  HERD_RETURN_IF_ERROR(p->Compute());
  return p->Output();
}

double Nmse(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(got[i]) != std::isnan(want[i]) || std::isinf(got[i]) != std::isinf(want[i])) {
      return std::numeric_limits<double>::infinity();
    }
    if (std::isnan(want[i])) continue;
    if (std::isinf(want[i])) {
      if (got[i] != want[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm == 0 ? err : err / norm;
}

std::vector<float> CausalMask(int64_t n_kv, int64_t rows, bool alibi) {
  std::vector<float> m(static_cast<size_t>(n_kv * rows));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t pos = std::max<int64_t>(n_kv - rows + r, 0);
    for (int64_t c = 0; c < n_kv; ++c) {
      m[static_cast<size_t>(r * n_kv + c)] = c > pos ? -std::numeric_limits<float>::infinity()
                                             : alibi ? -static_cast<float>(pos - c)
                                                     : 0.0f;
    }
  }
  return m;
}

}  // namespace herd::testing
