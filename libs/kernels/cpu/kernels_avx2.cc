// AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c (see BUILD).
#include <immintrin.h>

#include "libs/kernels/cpu/internal.h"

namespace herd::cpu::internal {
namespace {
const IsaKernels kAvx2 = {{}, {}, nullptr, nullptr, nullptr};
}  // namespace
const IsaKernels& Avx2Kernels() { return kAvx2; }
}  // namespace herd::cpu::internal
