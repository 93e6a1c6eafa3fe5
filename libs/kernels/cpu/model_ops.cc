#include "libs/kernels/cpu/model_ops.h"

namespace herd::cpu {

void Clamp(const float* x, float* y, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float m = v < hi ? v : hi;  // MIN(v, hi)
    y[i] = m > lo ? m : lo;           // MAX(m, lo)
  }
}

}  // namespace herd::cpu
