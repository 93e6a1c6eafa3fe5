#include "libs/backend/backend.h"

#include "absl/strings/str_cat.h"

namespace herd {

absl::StatusOr<std::unique_ptr<Buffer>> BufferType::FromHostPtr(void*, size_t) {
  return absl::UnimplementedError(absl::StrCat("buffer type ", name(), " cannot wrap host memory"));
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
