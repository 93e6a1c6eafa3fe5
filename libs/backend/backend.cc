#include "libs/backend/backend.h"

#include "absl/strings/str_cat.h"

#include "libs/tensor/graph_alloc.h"

namespace herd {

absl::StatusOr<std::unique_ptr<Buffer>> BufferType::FromHostPtr(void*, size_t) {
  return absl::UnimplementedError(absl::StrCat("buffer type ", name(), " cannot wrap host memory"));
}

absl::Status LocateTensor(const Tensor* t, const BufferType* buft, absl::string_view backend, const Buffer** buf,
                          size_t* offset) {
  const Buffer* b = t->buffer != nullptr ? t->buffer : (t->view_src != nullptr ? t->view_src->buffer : nullptr);
  if (t->data == nullptr || b == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("tensor '", t->name, "' has no data in a buffer"));
  }
  if (b->type() != buft) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t->name, "' is in a ", b->type()->name(), " buffer, not in ", backend, " memory"));
  }
  const uint8_t* base = static_cast<const uint8_t*>(b->base());
  const uint8_t* p = static_cast<const uint8_t*>(t->data);
  if (p < base || static_cast<size_t>(p - base) + t->nbytes() > b->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t->name, "' (", t->nbytes(), " bytes) lies outside its ", b->size(), "-byte buffer"));
  }
  *buf = b;
  *offset = static_cast<size_t>(p - base);
  return absl::OkStatus();
}

absl::Status PlaceInScratch(Graph& g, size_t alignment, void* fake_base,
                            const std::function<absl::Status(size_t)>& ensure_scratch,
                            const std::unique_ptr<Buffer>& scratch) {
  if (g.placed()) return absl::OkStatus();
  GraphPlan plan = PlanGraph(g, alignment);
  if (plan.arena_size > 0) {
    absl::Status s = ensure_scratch(plan.arena_size);
    if (!s.ok()) return s;
  }
  ApplyPlan(plan, g, fake_base);
  for (Tensor* t : plan.tensors) t->buffer = scratch.get();
  for (Tensor* t : g.nodes()) {
    if (t->view_src != nullptr) t->buffer = t->view_src->buffer;
  }
  return absl::OkStatus();
}

absl::Status PlaceTensor(Tensor* t, Buffer* buf, size_t offset) {
  const size_t align = buf->type()->alignment();
  if (offset % align != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t->name, "': offset ", offset, " is not a multiple of ", align));
  }
  if (offset + t->nbytes() > buf->size()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t->name, "' (", t->nbytes(), " bytes at ", offset,
                                                   ") does not fit in a ", buf->size(), "-byte buffer"));
  }
  t->buffer = buf;
  t->data = static_cast<uint8_t*>(buf->base()) + offset;
  return absl::OkStatus();
}

}  // namespace herd
