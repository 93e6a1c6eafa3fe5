// AVX-512 (F/BW/VL/DQ, optional VNNI) kernels. Compiled with -mavx512* (see BUILD).
#include <immintrin.h>

#include "libs/kernels/cpu/internal.h"

namespace herd::cpu::internal {
namespace {
const IsaKernels kAvx512 = {{}, {}, nullptr, nullptr, nullptr};
}  // namespace
const IsaKernels& Avx512Kernels(bool vnni) { (void)vnni; return kAvx512; }
}  // namespace herd::cpu::internal
