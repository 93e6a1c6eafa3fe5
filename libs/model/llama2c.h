// Conversion of Karpathy's llama2.c checkpoints (+ tokenizer.bin) to GGUF.
//
// Behaves like llama.cpp's examples/convert-llama2c-to-ggml
// (convert-llama2c-to-ggml.cpp): same metadata keys and values in the same order,
// same tensor names, shapes and order, all F32, the same vocabulary rules. For
// stories260K.bin + tok512.bin the output is byte-identical to the published
// ggml-org stories260K.gguf.
//
// llama2.c checkpoint (run.c, "legacy" export): a header of 7 native (little-endian)
// int32 — dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
// vocab_size < 0 means the classifier is NOT shared with the token embedding — then
// f32 weights, row-major, in this order:
//   token_embedding [vocab][dim], rms_att [L][dim], wq [L][dim][dim],
//   wk [L][kv_dim][dim], wv [L][kv_dim][dim], wo [L][dim][dim], rms_ffn [L][dim],
//   w1 [L][hidden][dim], w2 [L][dim][hidden], w3 [L][hidden][dim], rms_final [dim],
//   freq_cis_real + freq_cis_imag [seq_len][head_size/2] each (skipped),
//   wcls [vocab][dim] (only if unshared),
// with kv_dim = dim * n_kv_heads / n_heads and head_size = dim / n_heads. The file
// must end exactly there (llama.cpp checks that it read to the end).
//
// tokenizer.bin (llama2.c tokenizer.py export): u32 max_token_length, then per
// token: f32 score, u32 len, len bytes of text.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace herd::model {

/// The llama2.c checkpoint header, validated.
struct Llama2cConfig {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;         // absolute value of the header field
  bool shared_classifier = true;  // header vocab_size > 0
  int32_t seq_len = 0;

  int32_t head_size() const { return dim / n_heads; }
  int32_t kv_dim() const { return dim / n_heads * n_kv_heads; }
  /// Exact size in bytes of a checkpoint file with this header.
  uint64_t ExpectedFileBytes() const;
};

/// Parses and validates the 28-byte header of a llama2.c checkpoint image of
/// `file_size` bytes. INVALID_ARGUMENT (naming `name`, the field and the value) for
/// a short file, non-positive or inconsistent values (dim % n_heads, n_heads %
/// n_kv_heads, n_kv_heads > n_heads), sizes that overflow, or a file size that is
/// not exactly ExpectedFileBytes() (truncated or trailing data).
absl::StatusOr<Llama2cConfig> ParseLlama2cHeader(const void* data, uint64_t file_size, const std::string& name);

/// llama.cpp token types (llama_token_type / LLAMA_TOKEN_TYPE_*).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

/// A vocabulary as written to tokenizer.ggml.{tokens,scores,token_type}.
struct Llama2cVocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> token_types;  // TokenType values
};

/// Loads `n_vocab` tokens like load_vocab() in convert-llama2c-to-ggml.cpp.
/// A GGUF file (magic "GGUF") is read from its tokenizer.ggml.* arrays (model must
/// be "llama" and the size must equal n_vocab). Otherwise it is a llama2.c
/// tokenizer.bin: id 0 becomes "<unk>" (UNKNOWN), 1 "<s>" and 2 "</s>" (CONTROL)
/// whatever their text (llama2.c stores "\n<s>\n", "\n</s>\n"); an empty text is
/// CONTROL; a text matching sscanf "<0x%02hhX>" is BYTE; everything else NORMAL; then
/// every ' ' becomes U+2581 "▁" (llama_escape_whitespaces). Scores are copied.
/// Trailing bytes after the n_vocab-th token are ignored (as llama.cpp does).
/// Errors: NOT_FOUND for a missing file; INVALID_ARGUMENT naming the file and the
/// token index for a truncated file or a GGUF vocabulary that does not fit.
absl::StatusOr<Llama2cVocab> LoadLlama2cVocab(const std::string& path, int32_t n_vocab);

/// Knobs the llama.cpp converter hard-codes (defaults = its output for the
/// published stories260K.gguf).
struct Llama2cConvertOptions {
  /// llama.context_length. llama.cpp writes a fixed value, not the checkpoint's
  /// seq_len: 2048 in the build that produced the published tinyllamas GGUFs
  /// (current sources write 128). Set to config.seq_len for the trained length;
  /// 0 = use the checkpoint's seq_len.
  uint32_t context_length = 2048;
  /// general.name (llama.cpp writes "llama").
  std::string name = "llama";
};

/// Converts a llama2.c checkpoint + tokenizer (tokenizer.bin or a GGUF to copy the
/// vocabulary from) to a GGUF v3 file at `out_gguf`.
///
/// Metadata, in llama.cpp's order: tokenizer.ggml.tokens / scores / token_type,
/// tokenizer.ggml.model "llama", general.architecture "llama", general.name,
/// tokenizer.ggml.unknown_token_id 0, bos_token_id 1, eos_token_id 2,
/// seperator_token_id and padding_token_id 0xFFFFFFFF (u32 -1; sic "seperator"),
/// llama.context_length, embedding_length (dim), feed_forward_length (hidden_dim),
/// attention.head_count, attention.head_count_kv, block_count,
/// rope.dimension_count = min(64, dim / n_heads) (llama.cpp's n_rotmax cap),
/// attention.layer_norm_rms_epsilon 1e-5 (f32). All integers u32.
///
/// Tensors (F32, ggml order ne0 = input dim, data copied unchanged):
/// token_embd.weight [dim, vocab], output_norm.weight [dim], output.weight
/// [dim, vocab] (a copy of token_embd when the classifier is shared), then per layer
/// N: blk.N.attn_q [dim, dim], attn_k [dim, kv_dim], attn_v [dim, kv_dim],
/// attn_output [dim, dim], attn_norm [dim], ffn_gate (w1) [dim, hidden],
/// ffn_down (w2) [hidden, dim], ffn_up (w3) [dim, hidden], ffn_norm [dim].
///
/// Errors: NOT_FOUND for a missing input; INVALID_ARGUMENT (see ParseLlama2cHeader,
/// LoadLlama2cVocab) for bad inputs; write errors from the GGUF writer. The output
/// is written atomically: on any error no file is created or changed.
absl::Status ConvertLlama2c(const std::string& model_bin, const std::string& tokenizer_bin, const std::string& out_gguf,
                            const Llama2cConvertOptions& options);
absl::Status ConvertLlama2c(const std::string& model_bin, const std::string& tokenizer_bin,
                            const std::string& out_gguf);

}  // namespace herd::model
