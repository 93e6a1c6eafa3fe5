// llama-quantize's per-tensor type selection (llama.cpp src/llama-quant.cpp:
// tensor_allows_quantization, llama_tensor_get_type(_impl), tensor_type_fallback)
// for the file types herd supports. Used by QuantizeModel (quantize.h); exposed
// for tests and for tools that want to show a plan without quantizing.
#pragma once
#include <cstdint>
#include <regex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/gguf/ggml_type.h"
#include "libs/gguf/gguf.h"

namespace herd::quant {

/// A llama-quantize file type ("mixture").
struct FileType {
  std::string name;       // canonical name, e.g. "Q4_K_M" (aliases resolve to it)
  uint32_t ftype;         // llama_ftype, written to general.file_type (Q4_K_M = 15)
  GgmlType default_type;  // llama_ftype_get_default_type (Q4_K_M -> Q4_K)
};

/// Every name ParseFileType accepts: the canonical names (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0
/// Q2_K Q3_K_S Q3_K_M Q3_K_L Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K IQ4_NL IQ4_XS F16 BF16
/// F32), then the aliases Q3_K, Q4_K, Q5_K (for Q3_K_M, Q4_K_M, Q5_K_M).
std::vector<std::string> FileTypeNames();

/// Parses a file type as llama-quantize does: a name (case-insensitive) or the numeric
/// llama_ftype ("15"). INVALID_ARGUMENT naming the value and listing supported names.
absl::StatusOr<FileType> ParseFileType(const std::string& name);

/// Parses a ggml tensor type name (case-insensitive: "q8_0", "Q4_K", "f16") that herd can
/// quantize to (libs/tensor CanQuantize, excluding the activation-only Q8_1 / Q8_K).
/// `field` names the option in the INVALID_ARGUMENT message.
absl::StatusOr<GgmlType> ParseQuantType(const std::string& name, const std::string& field);

/// One --tensor-type PATTERN=TYPE: the pattern is lowercased and matched with
/// std::regex_search (ECMAScript) against tensor names; the first matching override wins.
struct TensorTypeOverride {
  std::string pattern;
  std::regex re;
  GgmlType type;
};
/// INVALID_ARGUMENT (naming `field`) for a missing '=', empty pattern or type, a bad
/// regex or an unsupported type.
absl::StatusOr<TensorTypeOverride> ParseTensorTypeOverride(const std::string& spec, const std::string& field);

/// The resolved quantization request.
struct TypeOptions {
  FileType file_type;
  bool pure = false;                    // --pure: no mixture rules
  bool has_output_tensor_type = false;  // --output-tensor-type
  GgmlType output_tensor_type = GgmlType::F32;
  bool has_token_embedding_type = false;  // --token-embedding-type
  GgmlType token_embedding_type = GgmlType::F32;
  std::vector<TensorTypeOverride> overrides;  // --tensor-type, in order
};

/// Hyper-parameters the rules consult (llama_hparams), from GGUF metadata.
struct ModelInfo {
  std::string arch;     // general.architecture
  int n_layer = 0;      // <arch>.block_count
  int n_head = 0;       // <arch>.attention.head_count (first element of an array)
  int n_head_kv = 0;    // <arch>.attention.head_count_kv (default n_head)
  int n_expert = 0;     // <arch>.expert_count (default 0)
  bool is_70b = false;  // llama with 80 layers and GQA (LLM_TYPE_70B)
  int n_gqa() const { return n_head_kv > 0 ? n_head / n_head_kv : 0; }
};
/// INVALID_ARGUMENT naming the missing/bad key (general.architecture, <arch>.block_count).
absl::StatusOr<ModelInfo> ReadModelInfo(const gguf::GgufFile& f);

/// The decision for one tensor.
struct TensorPlan {
  const gguf::TensorInfo* src = nullptr;  // into the source file
  GgmlType type = GgmlType::F32;          // output type
  bool quantize = false;                  // type differs from the source type
  std::string note;                       // fallback / override explanation ("" if none)
};

/// llama.cpp's output order: tensors sorted by layer number ("blk.N."; other tensors
/// first) and then by name (llama_model_loader::weight_name_comparer).
std::vector<const gguf::TensorInfo*> OrderTensors(const gguf::GgufFile& f);

/// Plans every tensor of `f` (in OrderTensors order) with llama_tensor_get_type's
/// semantics, including the counters that depend on tensor order (attn_v, ffn_down
/// layers), the fallback for row lengths that are not a multiple of the block size
/// (Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, IQ4_XS -> IQ4_NL, and
/// F16 when that still does not fit). Errors (INVALID_ARGUMENT): a requested type with
/// no fallback ("no tensor type fallback is defined for type q8_0", naming the tensor),
/// an --output-tensor-type / --token-embedding-type that does not fit the row length.
absl::StatusOr<std::vector<TensorPlan>> PlanTensorTypes(const gguf::GgufFile& f, const ModelInfo& info,
                                                        const TypeOptions& opt);

}  // namespace herd::quant
