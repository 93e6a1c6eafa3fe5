// Element kernels for the model-family ops of the graph IR that the transformer
// core (kernels.h) does not cover. F32, scalar, bit-exact with ggml's CPU backend.
#pragma once
#include <cstdint>

namespace herd::cpu {

/// ggml_compute_forward_clamp_f32: y[i] = MAX(MIN(x[i], hi), lo) with ggml's macros
/// (so a NaN input gives `hi`). y == x allowed. Used for MPT/DBRX/OLMo clamp_kqv.
void Clamp(const float* x, float* y, int64_t n, float lo, float hi);

}  // namespace herd::cpu
