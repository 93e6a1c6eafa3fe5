// ggml tensor element types as GGUF stores them (ids from ggml.h `enum ggml_type`),
// with their block geometry. The type ids are part of the GGUF file format.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace herd {

/// ggml_type ids (ggml.h). Gaps (4, 5, 31..33, 36..38) are removed types.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
};

/// Geometry of one type: `block_size` elements are stored in `type_size` bytes.
struct GgmlTypeTraits {
  const char* name;    // ggml's name, lower case: "f32", "q4_0", "q4_K", ...
  int64_t block_size;  // elements per block (1 for plain types)
  size_t type_size;    // bytes per block
};

/// Traits of `type`, or nullptr when the id is not a known ggml type.
const GgmlTypeTraits* GetGgmlTypeTraits(uint32_t type);
inline const GgmlTypeTraits* GetGgmlTypeTraits(GgmlType t) { return GetGgmlTypeTraits(static_cast<uint32_t>(t)); }

/// Upper-case display name ("F32", "Q4_0", "Q4_K", "IQ4_NL"); "UNKNOWN(id)" for unknown ids.
std::string GgmlTypeName(GgmlType type);

/// Parses a type name, case-insensitively ("q4_0", "Q4_K", "bf16"). Returns false if unknown.
bool ParseGgmlType(const std::string& name, GgmlType* out);

/// Bytes of one row of `ne0` elements; ne0 must be a multiple of the block size.
inline size_t GgmlRowSize(GgmlType type, int64_t ne0) {
  const GgmlTypeTraits* t = GetGgmlTypeTraits(type);
  return static_cast<size_t>(ne0 / t->block_size) * t->type_size;
}

}  // namespace herd
