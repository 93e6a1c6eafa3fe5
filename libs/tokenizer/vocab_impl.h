// Internal to libs/tokenizer: the vocabulary's state (Vocab::Impl) and what the per-algorithm
// sources share. Port of llama.cpp src/llama-vocab.cpp (see tokenizer.h).
#ifndef HERD_LIBS_TOKENIZER_VOCAB_IMPL_H_
#define HERD_LIBS_TOKENIZER_VOCAB_IMPL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"

#include "libs/gguf/gguf.h"
#include "libs/tokenizer/tokenizer.h"
#include "libs/tokenizer/unicode.h"

namespace herd::tokenizer {
namespace internal {

inline constexpr char kEscSpace[] = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

/// Replaces every occurrence of `from` in `s` with `to` (left to right, non-overlapping).
inline void ReplaceAll(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (;;) {
    const size_t next = s.find(from, pos);
    if (next == std::string::npos) break;
    out.append(s, pos, next - pos);
    out += to;
    pos = next + from.size();
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

/// ' ' -> U+2581 (SentencePiece's visible space).
inline void EscapeWhitespace(std::string& s) { ReplaceAll(s, " ", kEscSpace); }
/// U+2581 -> ' '.
inline void UnescapeWhitespace(std::string& s) { ReplaceAll(s, kEscSpace, " "); }

/// isspace() in the C locale.
inline bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

// ---------------------------------------------------------------------------------------
// Pre-tokenizers (llama.cpp llm_tokenizer_bpe constructor + the tokenizer_pre switch in
// llama_vocab::impl::load).

enum class Pre {
  kDefault,
  kLlama3,
  kJais2,
  kDeepseekLlm,
  kDeepseek3,
  kSpark25,
  kYoutu,
  kDeepseekCoder,
  kFalcon,
  kStarcoder,
  kGpt2,
  kQwen2,
  kQwen35,
  kPoro,
  kChatglm4,
  kViking,
  kTekken,
  kChameleon,
  kGpt4o,
  kGraniteEmbMulti,
  kTinyAya,
  kSuperbpe,
  kBailingmoe,
  kSeedCoder,
  kUfakzeka,
  kGrok2,
  kLaguna,
  kExaoneMoe,
  kGemma4,
  kSarvam,
  kMinicpm5,
};

/// Per-pre-tokenizer overrides of the BPE defaults (llama_vocab::impl::load).
enum PreFlag : uint32_t {
  kNoCleanSpaces = 1u << 0,
  kIgnoreMerges = 1u << 1,
  kPreAddBos = 1u << 2,
  kEscapeWs = 1u << 3,
  kBosNull = 1u << 4,
  kPreAddSep = 1u << 5,
};

/// One tokenizer.ggml.pre name: its regex set and PreFlag bits.
struct PreEntry {
  const char* name;
  Pre pre;
  uint32_t flags;
};

/// The table of known tokenizer.ggml.pre names (pre_tokenizers.cc).
const std::vector<PreEntry>& PreTable();
/// The entry named `name`, or nullptr.
const PreEntry* FindPre(const std::string& name);
/// The split regexes of a pre-tokenizer, applied in order (llm_tokenizer_bpe constructor).
std::vector<std::string> PreRegexes(Pre pre);
/// Every name in PreTable(), comma-separated (for error messages).
std::string SupportedPreNames();

/// Hash of a BPE merge pair (bpe_ranks key).
struct PairHash {
  size_t operator()(const std::pair<std::string, std::string>& p) const {
    return std::hash<std::string>{}(p.first) ^ (std::hash<std::string>{}(p.second) << 1);
  }
};

/// One vocabulary entry.
struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
  TokenType gguf_type = TokenType::kNormal;
};

/// A span of the text being merged (SPM/BPE), linked to its neighbours by index.
struct Symbol {
  int prev;
  int next;
  const char* text;
  size_t n;
};

/// A piece of the input after special-token partitioning: a token id or a text span.
struct Fragment {
  bool is_token;
  int32_t token;
  size_t offset;
  size_t length;
};

}  // namespace internal

// ---------------------------------------------------------------------------------------

struct Vocab::Impl {
  using Pre = internal::Pre;
  using TokenData = internal::TokenData;
  using Fragment = internal::Fragment;
  using PairHash = internal::PairHash;

  VocabType type = VocabType::kSpm;
  std::string model;
  std::string pre_name;
  Pre pre = Pre::kDefault;
  bool byte_encode = true;
  int max_token_len = 0;

  int32_t bos = 1, eos = 2, eot = kTokenNull, eom = kTokenNull, unk = 0, sep = kTokenNull, pad = kTokenNull,
          mask = kTokenNull, nl = 13;
  int32_t fim_pre = kTokenNull, fim_suf = kTokenNull, fim_mid = kTokenNull, fim_pad = kTokenNull, fim_rep = kTokenNull,
          fim_sep = kTokenNull;

  bool add_space_prefix = false;
  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;
  bool ignore_merges = false;
  bool clean_spaces = false;
  bool escape_whitespaces = true;
  bool lowercase = true;
  bool strip_accents = true;

  // Built by emplace in id order, like llama.cpp's token_to_id, so that iteration order
  // (which decides the text-based EOT/FIM auto-detection) is the same.
  std::unordered_map<std::string, int32_t> token_to_id;
  std::vector<TokenData> id_to_token;
  std::unordered_map<std::pair<std::string, std::string>, int, PairHash> bpe_ranks;
  std::vector<int32_t> special_tokens;   // cache_special_tokens (longest text first)
  std::vector<std::string> piece_cache;  // token_to_piece(id, special=true)
  std::set<int32_t> eog;
  std::vector<int32_t> eog_vec;
  std::unique_ptr<unicode::RegexSplitter> splitter;

  // Load (vocab_load.cc) runs these steps in order.
  absl::Status Load(const gguf::GgufFile& f);
  absl::Status LoadModelType(const gguf::GgufFile& f, std::string* tokenizer_pre);
  absl::Status LoadBpeMerges(const gguf::GgufFile& f);
  absl::Status ApplyPreTokenizer(const gguf::GgufFile& f, const std::string& tokenizer_pre);
  absl::Status LoadTokens(const gguf::GgufFile& f);
  absl::Status BuildSplitter();
  void FindNewline();
  absl::Status LoadSpecialTokens(const gguf::GgufFile& f);
  void DetectSpecialTokensByText();
  void BuildEog();
  void BuildCaches();
  void ApplyPerModelAttributes(const gguf::GgufFile& f, const std::string& tokenizer_pre);

  bool Valid(int32_t id) const { return id >= 0 && id < static_cast<int32_t>(id_to_token.size()); }
  int32_t TextToToken(const std::string& text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? kTokenNull : it->second;
  }
  int32_t ByteToTokenSpm(uint8_t ch) const;
  uint8_t TokenToByte(int32_t id) const;
  std::string ComputePiece(int32_t id) const;
  int FindBpeRank(const std::string& l, const std::string& r) const {
    auto it = bpe_ranks.find(std::make_pair(l, r));
    return it == bpe_ranks.end() ? -1 : it->second;
  }

  std::vector<Fragment> Partition(const std::string& text, bool parse_special) const;
  std::vector<int32_t> Tokenize(const std::string& text, bool add_special, bool parse_special) const;
  void SpmTokenize(const std::string& text, std::vector<int32_t>& out) const;
  void BpeTokenize(const std::string& text, std::vector<int32_t>& out) const;
  void WpmTokenize(const std::string& text, std::vector<int32_t>& out) const;
  std::vector<std::string> WpmPreprocess(const std::string& text) const;
};

// Helpers shared by the loading steps (bool keys are optional; absent keeps *out).
absl::Status GetOptionalBool(const gguf::GgufFile& f, const char* key, bool* out);

}  // namespace herd::tokenizer

#endif  // HERD_LIBS_TOKENIZER_VOCAB_IMPL_H_
