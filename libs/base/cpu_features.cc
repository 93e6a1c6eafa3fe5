#include "libs/base/cpu_features.h"

#include <cstdlib>
#include <cstring>

namespace herd {

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures f = [] {
    CpuFeatures c;
    __builtin_cpu_init();
    c.avx2 = __builtin_cpu_supports("avx2");
    c.fma = __builtin_cpu_supports("fma");
    c.f16c = true;  // every AVX2 CPU we dispatch to has F16C; verified via cpuid below
#if defined(__x86_64__)
    unsigned a, b, cx, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(cx), "=d"(d) : "a"(1), "c"(0));
    c.f16c = (cx >> 29) & 1;
#endif
    c.avx512f = __builtin_cpu_supports("avx512f");
    c.avx512bw = __builtin_cpu_supports("avx512bw");
    c.avx512vl = __builtin_cpu_supports("avx512vl");
    c.avx512dq = __builtin_cpu_supports("avx512dq");
    c.avx512vnni = __builtin_cpu_supports("avx512vnni");
    c.avx512bf16 = __builtin_cpu_supports("avx512bf16");
    return c;
  }();
  return f;
}

Isa BestIsa() {
  static const Isa best = [] {
    const CpuFeatures& f = GetCpuFeatures();
    Isa hw = Isa::kScalar;
    if (f.avx2 && f.fma && f.f16c) hw = Isa::kAvx2;
    if (hw == Isa::kAvx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) hw = Isa::kAvx512;
    const char* env = std::getenv("HERD_ISA");
    if (env != nullptr) {
      Isa want = hw;
      if (std::strcmp(env, "scalar") == 0) want = Isa::kScalar;
      if (std::strcmp(env, "avx2") == 0) want = Isa::kAvx2;
      if (std::strcmp(env, "avx512") == 0) want = Isa::kAvx512;
      if (static_cast<int>(want) < static_cast<int>(hw)) hw = want;
    }
    return hw;
  }();
  return best;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

std::string CpuFeatureString() {
  const CpuFeatures& f = GetCpuFeatures();
  std::string s;
  auto add = [&](const char* n, bool v) {
    if (!s.empty()) s += " | ";
    s += n;
    s += v ? " = 1" : " = 0";
  };
  add("AVX2", f.avx2);
  add("FMA", f.fma);
  add("F16C", f.f16c);
  add("AVX512", f.avx512f);
  add("AVX512_VNNI", f.avx512vnni);
  add("AVX512_BF16", f.avx512bf16);
  return s;
}

}  // namespace herd
