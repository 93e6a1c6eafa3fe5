// The AVX2 kernel unit (kernels_avx2.cc) compiled a second time with AVX-512 VNNI flags
// (BUILD: AVX512_COPTS), for its packed GEMMs only: gemm_avx2.inc then sums its int8
// products with one VNNI vpdpbusd on 8 int32 lanes where the AVX2 build takes maddubs +
// madd + add (the same exact int32 sums, so the same results bit for bit, and the same
// packed layout). The unit's other exports are renamed here and left unused: the
// AVX-512 row kernels are kernels_avx512.cc.
// GCC 12's AVX-512 headers: see kernels_avx512.cc (GCC PR 105593); the header's lines only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#define Avx2PackedTile Avx512VnniPackedTile
#define Avx2Kernels Avx2KernelsBuiltForVnni
#define FlashAttnF16HeadsAvx2 FlashAttnF16HeadsAvx2BuiltForVnni
#define SharedAttnTileAvx2 SharedAttnTileAvx2BuiltForVnni
#include "libs/kernels/cpu/kernels_avx2.cc"
