// Run-time CPU feature detection for kernel dispatch.
#pragma once
#include <string>

namespace herd {

/// Instruction-set levels the CPU kernels have paths for.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
};

/// Features of the running CPU (cached after the first call).
const CpuFeatures& GetCpuFeatures();

/// Highest Isa this CPU supports: kAvx512 needs F+BW+VL+DQ (+AVX2/FMA/F16C);
/// kAvx2 needs AVX2+FMA+F16C. Overridable with env HERD_ISA=scalar|avx2|avx512
/// (never above what the CPU supports).
Isa BestIsa();

/// "scalar" / "avx2" / "avx512".
const char* IsaName(Isa isa);

/// e.g. "AVX2 = 1 | AVX512 = 1 | AVX512_VNNI = 1 | ..." for logs.
std::string CpuFeatureString();

}  // namespace herd
