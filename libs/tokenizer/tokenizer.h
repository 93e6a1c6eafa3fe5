// llama.cpp-compatible tokenization and detokenization.
//
// A Vocab is built from the tokenizer.ggml.* metadata of a GGUF file and reproduces
// llama.cpp's src/llama-vocab.cpp (llama_vocab::impl::load / tokenize / token_to_piece /
// detokenize) token for token:
//   - SPM  (tokenizer.ggml.model "llama"): llm_tokenizer_spm — spaces escaped to U+2581,
//     optional space prefix, score-ordered bigram merges, <0xXX> byte fallback, resegment.
//   - BPE  (tokenizer.ggml.model "gpt2", "gemma4"): llm_tokenizer_bpe — regex
//     pre-tokenizer chosen by tokenizer.ggml.pre, GPT-2 byte-level encoding, rank-ordered
//     merges from tokenizer.ggml.merges.
//   - WPM  (tokenizer.ggml.model "bert"): llm_tokenizer_wpm — BERT normalization
//     (lowercase / strip accents), U+2581 word prefix, greedy longest match, [UNK].
// plus llama.cpp's special-token partitioning (tokenizer_st_partition), BOS/EOS/SEP
// insertion, end-of-generation detection and the clean-up passes of detokenization.
//
// Token ids are int32_t; kTokenNull (-1) means "no such token" (LLAMA_TOKEN_NULL).
// All methods of a constructed Vocab are const and thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "libs/gguf/gguf.h"

namespace herd::tokenizer {

/// "No token" (llama.cpp LLAMA_TOKEN_NULL).
inline constexpr int32_t kTokenNull = -1;

/// Tokenizer algorithm (llama.cpp `llama_vocab_type`).
enum class VocabType { kSpm, kBpe, kWpm };
/// "SPM", "BPE", "WPM".
const char* VocabTypeName(VocabType t);

/// Per-token type as stored in GGUF tokenizer.ggml.token_type (llama.cpp `llama_token_type`).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

/// Per-token attribute bits (llama.cpp `llama_token_attr`). Derived from TokenType and then
/// adjusted by llama.cpp's load-time rules (e.g. EOG-looking texts become control,
/// Phi-3 special tokens get kAttrRstrip).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

/// A loaded vocabulary with its tokenizer.
class Vocab {
 public:
  /// Builds the vocabulary from `f`'s metadata (llama.cpp llama_vocab::impl::load).
  ///
  /// Reads tokenizer.ggml.{model, pre, tokens, scores, token_type, merges,
  /// bos/eos/eot/eom/unknown/seperator/padding/mask/fim_*_token_id, add_bos_token,
  /// add_eos_token, add_sep_token, add_space_prefix, normalizer.lowercase,
  /// normalizer.strip_accents} and general.name / general.architecture, applying
  /// llama.cpp's per-model defaults when keys are absent (SPM: add_bos=true,
  /// add_space_prefix=true; BPE: add_bos=false unless the pre-tokenizer implies it; WPM:
  /// BOS/SEP around the text). Special-token ids outside the vocabulary are ignored, as
  /// llama.cpp does. `f` is not referenced after this returns.
  ///
  /// Errors: NOT_FOUND naming the key when tokenizer.ggml.model, tokenizer.ggml.tokens or
  /// (BPE) tokenizer.ggml.merges is missing; INVALID_ARGUMENT for a key of the wrong type,
  /// an unsupported model or pre-tokenizer (the message lists the supported ones), a
  /// duplicate token text, arrays shorter than the token list, or add_bos/add_eos/add_sep
  /// set without the corresponding token id.
  static absl::StatusOr<std::unique_ptr<Vocab>> FromGguf(const gguf::GgufFile& f);

  /// tokenizer.ggml.pre values FromGguf accepts for BPE vocabularies (the llama.cpp
  /// pre-tokenizers implemented here; "kimi-k2", "afmoe", "whitespace" and the hybriddna
  /// model are not).
  static std::vector<std::string> SupportedPreTokenizers();

  ~Vocab();
  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;

  VocabType type() const;
  /// tokenizer.ggml.model as stored ("llama", "gpt2", "bert", "gemma4").
  const std::string& model_name() const;
  /// Pre-tokenizer name in effect (tokenizer.ggml.pre, or "default" when absent).
  const std::string& pre_name() const;

  /// Number of tokens (size of tokenizer.ggml.tokens).
  int32_t n_tokens() const;
  /// True when 0 <= id < n_tokens().
  bool IsValid(int32_t id) const;
  /// OK when every id is valid; otherwise INVALID_ARGUMENT naming the first bad position and id.
  absl::Status ValidateTokens(const std::vector<int32_t>& ids) const;

  // Special token ids; kTokenNull when the vocabulary has none.
  int32_t bos() const;
  int32_t eos() const;
  int32_t eot() const;
  int32_t eom() const;
  int32_t unk() const;
  int32_t sep() const;
  int32_t pad() const;
  int32_t mask() const;
  /// Newline token (llama.cpp linefeed_id: SPM <0x0A>, BPE tokenize("\n")[0], WPM pad).
  int32_t nl() const;
  int32_t fim_pre() const;
  int32_t fim_suf() const;
  int32_t fim_mid() const;
  int32_t fim_pad() const;
  int32_t fim_rep() const;
  int32_t fim_sep() const;

  /// Whether Tokenize(..., add_special=true, ...) prepends BOS / appends EOS
  /// (tokenizer.ggml.add_bos_token / add_eos_token, else llama.cpp's per-model default).
  bool add_bos() const;
  bool add_eos() const;
  /// tokenizer.ggml.add_sep_token (default true for WPM). Informational: like llama.cpp,
  /// Tokenize() appends SEP for WPM vocabularies whenever add_special is set.
  bool add_sep() const;
  /// SPM: prefix a space to text at the start / after a special token.
  bool add_space_prefix() const;
  /// Whether Detokenize() applies llama.cpp's clean_up_tokenization_spaces passes.
  bool clean_spaces() const;

  /// End-of-generation token? (eos, eot, eom, FIM pad/rep/sep and texts such as
  /// "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<end_of_turn>", ...;
  /// llama.cpp special_eog_ids). False for invalid ids.
  bool IsEog(int32_t id) const;
  /// The EOG set, ascending.
  const std::vector<int32_t>& eog_ids() const;
  /// Attribute tests; false for invalid ids.
  bool IsControl(int32_t id) const;
  bool IsByte(int32_t id) const;
  bool IsUserDefined(int32_t id) const;
  bool IsUnused(int32_t id) const;
  bool IsNormal(int32_t id) const;
  bool IsUnknown(int32_t id) const;

  /// Raw token text as stored in the GGUF (U+2581 / byte-level characters not decoded);
  /// empty tokens read as "[EMPTY_<id>]" like llama.cpp. "" for invalid ids.
  const std::string& TokenText(int32_t id) const;
  /// tokenizer.ggml.scores[id] (0 when absent or invalid).
  float Score(int32_t id) const;
  /// Attribute bits (TokenAttr); kAttrUndefined for invalid ids.
  uint32_t Attr(int32_t id) const;
  /// tokenizer.ggml.token_type[id] as stored (kNormal when the array is absent,
  /// kUndefined for invalid ids).
  TokenType GgufTokenType(int32_t id) const;
  /// Exact-text lookup (llama.cpp text_to_token); kTokenNull when absent.
  int32_t TextToToken(absl::string_view text) const;

  /// Tokenizes UTF-8 `text` (llama_tokenize semantics). `add_special`: add BOS/EOS per
  /// add_bos()/add_eos() (WPM: BOS ... SEP). `parse_special`: control and unknown-type
  /// token texts in `text` are matched as single tokens; user-defined tokens are matched
  /// either way (llama.cpp tokenizer_st_partition). Invalid UTF-8 never fails: bytes that
  /// do not decode are handled as llama.cpp does (U+FFFD in BPE/WPM, byte tokens in SPM).
  std::vector<int32_t> Tokenize(absl::string_view text, bool add_special, bool parse_special) const;

  /// Bytes of one token (llama_token_to_piece). Control/unknown tokens give "" unless
  /// `special`; user-defined tokens give their text; SPM/WPM normal tokens have U+2581
  /// replaced by ' '; byte tokens <0xXX> give that raw byte; BPE normal tokens are decoded
  /// from the byte-level alphabet. Up to `lstrip` leading spaces are removed. The result
  /// may be an incomplete or invalid UTF-8 fragment. "" for invalid ids.
  std::string TokenToPiece(int32_t id, bool special, int lstrip = 0) const;

  /// Text of a token sequence (llama_detokenize). `remove_special`: drop a leading BOS
  /// (if add_bos) and trailing EOS (if add_eos). `unparse_special`: render control tokens.
  /// The first piece loses one leading space when add_space_prefix() — except, as in
  /// llama.cpp, when remove_special dropped a BOS (so SPM Detokenize(Tokenize(s, true, ..),
  /// true) is " " + s, while Detokenize(Tokenize(s, false, ..)) is s). WPM pieces keep
  /// their word's leading space. clean_spaces() vocabularies get llama.cpp's
  /// " ?" " !" " ." " ," and apostrophe clean-up passes.
  /// Invalid ids contribute nothing (check with ValidateTokens() first if that matters).
  std::string Detokenize(const std::vector<int32_t>& ids, bool remove_special = false,
                         bool unparse_special = false) const;

  struct Impl;

 private:
  explicit Vocab(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Incremental detokenizer for streaming generated tokens: concatenates
/// Vocab::TokenToPiece(id, special) (no leading-space strip, no clean-up passes — the
/// same bytes llama.cpp's generation examples print) and releases text only in whole
/// UTF-8 characters, so a character split across byte tokens (e.g. an emoji emitted as
/// four <0xXX> tokens) is held back until complete and never emitted in halves.
///
/// Output of Push() and Flush() is always valid UTF-8: a byte that cannot start or
/// continue a well-formed sequence (stray continuation byte, 0xC0/0xC1/0xF5..0xFF,
/// overlong or surrogate forms, a sequence interrupted by a new lead byte) is replaced by
/// U+FFFD ("\xEF\xBF\xBD") as soon as it is known to be invalid, and Flush() replaces an
/// incomplete trailing sequence by one U+FFFD. Invalid token ids produce no bytes.
/// Not thread-safe; the Vocab must outlive it.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Vocab& vocab, bool special);

  /// Adds one token; returns the text that became complete (possibly "").
  std::string Push(int32_t id);
  /// Returns whatever is still buffered (an incomplete sequence becomes U+FFFD) and resets.
  std::string Flush();
  /// Bytes currently held back (0..3).
  size_t pending_bytes() const { return pending_.size(); }
  /// Tokens rendered with their text even when `special` is false (llama.cpp's
  /// preserved_tokens: a chat family's tool-call and reasoning markers that are control
  /// tokens, such as Mistral's [TOOL_CALLS], must reach the output parser).
  void Preserve(std::vector<int32_t> ids);

 private:
  std::string Drain(bool at_end);

  const Vocab& vocab_;
  bool special_;
  std::vector<int32_t> preserved_;  // sorted
  std::string pending_;
};

}  // namespace herd::tokenizer
