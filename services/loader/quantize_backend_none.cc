// Built when libs/quant is not linked: Quantize answers UNIMPLEMENTED.
#include "services/loader/quantize_backend.h"

namespace herd::loader {

bool QuantizeAvailable() { return false; }

absl::Status RunQuantizeJob(const QuantizeJob&, const std::function<void(const QuantizeReport&)>&,
                            const std::atomic<bool>*) {
  return absl::UnimplementedError("Quantize is not available: this loader was built without libs/quant");
}

}  // namespace herd::loader
