// Unicode helpers for the tokenizers: code point categories, UTF-8 <-> code points, the
// GPT-2 byte <-> unicode mapping and the regex pre-tokenizer splitter.
//
// Behaviour follows llama.cpp's src/unicode.cpp exactly (same UTF-8 decoding quirks, same
// category flags, same "collapsed" std::regex trick for \p{..} classes, same hand-written
// fast paths for the GPT-2 and LLaMA-3 regexes), so that pre-tokenization splits text at
// the same places. Category data comes from ICU (u_charType / u_tolower / NFD), which is
// what llama.cpp's generated unicode-data.cpp tables encode (UnicodeData.txt); the Unicode
// version may differ slightly (ICU 72 = Unicode 15.0).
//
// Internal to libs/tokenizer; not a stable public API.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <regex>
#include <string>
#include <vector>

namespace herd::tokenizer::unicode {

/// Code point flags (llama.cpp `unicode_cpt_flags`, same bit values).
enum CptFlag : uint16_t {
  kUndefined = 0x0001,    // Cn (unassigned)
  kNumber = 0x0002,       // \p{N}
  kLetter = 0x0004,       // \p{L}
  kSeparator = 0x0008,    // \p{Z}
  kAccentMark = 0x0010,   // \p{M}
  kPunctuation = 0x0020,  // \p{P}
  kSymbol = 0x0040,       // \p{S}
  kControl = 0x0080,      // \p{C}
  kMaskCategories = 0x00FF,
  kWhitespace = 0x0100,  // White_Space property (fixed list, as llama.cpp)
  kLowercase = 0x0200,   // is the simple-lowercase mapping of some code point
  kUppercase = 0x0400,   // is the simple-uppercase mapping of some code point
};

/// Flags of `cpt` (kUndefined for cpt >= 0x110000). Thread-safe; the table is built once.
uint16_t CptFlags(uint32_t cpt);

/// Simple lowercase mapping (UnicodeData field 13); `cpt` itself when none.
uint32_t ToLower(uint32_t cpt);

/// First code point of the NFD decomposition of `cpt` (llama.cpp unicode_cpts_normalize_nfd
/// keeps only that one, which drops combining accents of precomposed letters).
uint32_t NfdFirst(uint32_t cpt);

/// Byte length of a UTF-8 sequence from its lead byte (llama.cpp unicode_len_utf8:
/// continuation/invalid bytes count as 1).
size_t Utf8Len(char lead);

/// UTF-8 encoding of `cpt`. Code points above 0x10FFFF (possible from lax decoding of
/// F5..F7 lead bytes) are encoded as U+FFFD instead of throwing as llama.cpp does.
std::string CptToUtf8(uint32_t cpt);

/// Decodes UTF-8 like llama.cpp unicode_cpts_from_utf8: each undecodable byte becomes
/// U+FFFD; overlong forms and surrogates are NOT rejected (lax, as llama.cpp).
std::vector<uint32_t> CptsFromUtf8(const std::string& utf8);

/// GPT-2 byte-level BPE mapping: byte -> UTF-8 of its printable stand-in code point.
const std::string& ByteToUtf8(uint8_t byte);
/// Inverse of ByteToUtf8; returns false when `utf8` is not one of the 256 stand-ins.
bool Utf8ToByte(const std::string& utf8, uint8_t* byte);

/// A compiled list of pre-tokenizer regexes (llama.cpp llm_tokenizer_bpe::regex_exprs),
/// applied in sequence by Split(). Regexes with \p{..} run on the category-collapsed text
/// with std::regex; others run on code points with std::wregex; the GPT-2 and LLaMA-3
/// regexes use the hand-written splitters. Construction fails (returns nullptr and sets
/// *error) if std::regex rejects a pattern.
class RegexSplitter {
 public:
  static std::unique_ptr<RegexSplitter> Create(const std::vector<std::string>& exprs, std::string* error);
  ~RegexSplitter();

  /// llama.cpp unicode_regex_split(text, regex_exprs, byte_encode): returns the words;
  /// with byte_encode each word is mapped byte-by-byte through ByteToUtf8.
  ///
  /// libstdc++'s std::regex matcher recurses once per consumed character, so a long run
  /// of one class (e.g. 50k letters) overflows an 8 MiB stack — in llama.cpp too. Texts
  /// longer than a few KiB that need std::regex are therefore split on a helper thread
  /// whose stack is sized to the input (1 KiB per byte + 16 MiB, reserved lazily). If
  /// std::regex throws (or the thread cannot be created and the inline attempt throws),
  /// the affected chunk is left unsplit by that regex.
  std::vector<std::string> Split(const std::string& text, bool byte_encode) const;

 private:
  struct Expr;
  RegexSplitter() = default;
  std::vector<std::string> SplitImpl(const std::string& text, bool byte_encode) const;
  bool uses_std_regex_ = false;
  std::vector<std::unique_ptr<Expr>> exprs_;
  bool need_collapse_ = false;
};

}  // namespace herd::tokenizer::unicode
