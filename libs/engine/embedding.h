// Sentence embeddings from a generative model (llama.cpp's llama-embedding and the
// server's /v1/embeddings): pooling of the final hidden states of one sequence and the
// normalization of the pooled vector.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd::gguf {
class GgufFile;
}

namespace herd::engine {

/// How the hidden states of a sequence become one vector (llama.cpp enum
/// llama_pooling_type; `none`, per-token output, is not offered).
enum class Pooling {
  kMean,  // LLAMA_POOLING_TYPE_MEAN: mean over all tokens
  kCls,   // LLAMA_POOLING_TYPE_CLS: the first token
  kLast,  // LLAMA_POOLING_TYPE_LAST: the last token
};

/// "mean", "cls" or "last".
const char* PoolingName(Pooling p);
/// Parses "mean", "cls" or "last" (llama.cpp --pooling values). INVALID_ARGUMENT for
/// anything else, including "none" and "rank".
absl::StatusOr<Pooling> ParsePooling(absl::string_view name);

/// The pooling a model gets when the request names none (and the worker's --pooling
/// does not say). Like llama.cpp, the GGUF key `<arch>.pooling_type`
/// (llama_pooling_type values: 1 mean, 2 cls, 3 last) decides when the file has it.
/// llama.cpp's default for generative models (key absent or 0 = none) is per-token
/// output, which /v1/embeddings refuses; herd uses kMean then, the pooling llama-server
/// users usually run (`--pooling mean`) and the one sentence-embedding models most
/// often name. `arch`: general.architecture.
Pooling DefaultPooling(const gguf::GgufFile& file, const std::string& arch);

/// Normalizes `v` in place like llama.cpp's common_embd_normalize(embd_norm):
/// -1 none; 0 max absolute value scaled to the int16 range (32760); 1 taxicab (sum of
/// |x|); 2 Euclidean (the default); p > 2 the p-norm. A zero vector stays zero.
/// INVALID_ARGUMENT for embd_norm < -1.
absl::Status NormalizeEmbedding(std::vector<float>* v, int embd_norm = 2);

/// Pools `n_tokens` rows of `n_embd` hidden states (F32 [n_embd, n_tokens], row t =
/// token t) in double precision. INVALID_ARGUMENT when n_tokens < 1.
absl::StatusOr<std::vector<float>> PoolHiddenStates(const float* hidden, int64_t n_embd, int64_t n_tokens,
                                                    Pooling pooling);

}  // namespace herd::engine
