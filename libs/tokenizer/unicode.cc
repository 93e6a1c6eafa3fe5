#include "libs/tokenizer/unicode.h"

#include <pthread.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

#include <unicode/unorm2.h>
#include <unicode/utf16.h>

namespace herd::tokenizer::unicode {
namespace {

constexpr uint32_t kMaxCodepoints = 0x110000;
constexpr uint32_t kOutOfRange = 0xFFFFFFFF;

uint16_t CategoryFlag(int8_t cat) {
  switch (cat) {
    case U_UNASSIGNED:
      return kUndefined;
    case U_CONTROL_CHAR:
    case U_FORMAT_CHAR:
    case U_PRIVATE_USE_CHAR:
    case U_SURROGATE:
      return kControl;
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK:
      return kAccentMark;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    case U_SPACE_SEPARATOR:
    case U_LINE_SEPARATOR:
    case U_PARAGRAPH_SEPARATOR:
      return kSeparator;
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return kPunctuation;
    case U_MATH_SYMBOL:
    case U_CURRENCY_SYMBOL:
    case U_MODIFIER_SYMBOL:
    case U_OTHER_SYMBOL:
      return kSymbol;
    default:
      return kUndefined;
  }
}

// Same construction as llama.cpp unicode_cpt_flags_array() over its generated tables.
std::vector<uint16_t> BuildFlags() {
  std::vector<uint16_t> flags(kMaxCodepoints, kUndefined);
  for (uint32_t c = 0; c < kMaxCodepoints; ++c) {
    flags[c] = CategoryFlag(static_cast<int8_t>(u_charType(static_cast<UChar32>(c))));
  }
  auto ws = [&](uint32_t c) { flags[c] |= kWhitespace; };
  for (uint32_t c = 0x09; c <= 0x0D; ++c) ws(c);
  for (uint32_t c = 0x2000; c <= 0x200A; ++c) ws(c);
  for (uint32_t c : {0x20u, 0x85u, 0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u}) {
    ws(c);
  }
  for (uint32_t c = 0; c < kMaxCodepoints; ++c) {
    const uint32_t lo = static_cast<uint32_t>(u_tolower(static_cast<UChar32>(c)));
    if (lo != c && lo < kMaxCodepoints) flags[lo] |= kLowercase;
    const uint32_t up = static_cast<uint32_t>(u_toupper(static_cast<UChar32>(c)));
    if (up != c && up < kMaxCodepoints) flags[up] |= kUppercase;
  }
  return flags;
}

const std::vector<uint16_t>& FlagsTable() {
  static const std::vector<uint16_t>* table = new std::vector<uint16_t>(BuildFlags());
  return *table;
}

struct ByteMaps {
  std::string byte_to_utf8[256];
  std::unordered_map<std::string, uint8_t> utf8_to_byte;
};

const ByteMaps& GetByteMaps() {
  static const ByteMaps* maps = [] {
    auto* m = new ByteMaps();
    bool direct[256] = {};
    for (int ch = 0x21; ch <= 0x7E; ++ch) direct[ch] = true;
    for (int ch = 0xA1; ch <= 0xAC; ++ch) direct[ch] = true;
    for (int ch = 0xAE; ch <= 0xFF; ++ch) direct[ch] = true;
    int n = 0;
    for (int ch = 0; ch < 256; ++ch) {
      const uint32_t cpt = direct[ch] ? static_cast<uint32_t>(ch) : static_cast<uint32_t>(256 + n++);
      m->byte_to_utf8[ch] = CptToUtf8(cpt);
      m->utf8_to_byte[m->byte_to_utf8[ch]] = static_cast<uint8_t>(ch);
    }
    return m;
  }();
  return *maps;
}

// llama.cpp unicode_cpt_from_utf8; returns false where it throws.
bool DecodeOne(const std::string& s, size_t* offset, uint32_t* out) {
  const size_t o = *offset;
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i])); };
  const uint32_t c0 = b(o);
  if (!(c0 & 0x80)) {
    *out = c0;
    *offset += 1;
    return true;
  }
  if (!(c0 & 0x40)) return false;
  if (!(c0 & 0x20)) {
    if (o + 1 >= s.size() || (b(o + 1) & 0xc0) != 0x80) return false;
    *out = ((c0 & 0x1f) << 6) | (b(o + 1) & 0x3f);
    *offset += 2;
    return true;
  }
  if (!(c0 & 0x10)) {
    if (o + 2 >= s.size() || (b(o + 1) & 0xc0) != 0x80 || (b(o + 2) & 0xc0) != 0x80) return false;
    *out = ((c0 & 0x0f) << 12) | ((b(o + 1) & 0x3f) << 6) | (b(o + 2) & 0x3f);
    *offset += 3;
    return true;
  }
  if (!(c0 & 0x08)) {
    if (o + 3 >= s.size() || (b(o + 1) & 0xc0) != 0x80 || (b(o + 2) & 0xc0) != 0x80 || (b(o + 3) & 0xc0) != 0x80) {
      return false;
    }
    *out = ((c0 & 0x07) << 18) | ((b(o + 1) & 0x3f) << 12) | ((b(o + 2) & 0x3f) << 6) | (b(o + 3) & 0x3f);
    *offset += 4;
    return true;
  }
  return false;
}

// ---- hand-written splitters (llama.cpp unicode_regex_split_custom_gpt2 / _llama3) ----

class CustomSplit {
 public:
  CustomSplit(const std::vector<uint32_t>& cpts, std::vector<size_t>* out) : cpts_(cpts), out_(out) {}

  void Begin(size_t ini, size_t end) {
    ini_ = ini;
    end_ = end;
    prev_end_ = ini;
  }
  uint32_t Cpt(size_t pos) const { return (ini_ <= pos && pos < end_) ? cpts_[pos] : kOutOfRange; }
  uint16_t Flags(size_t pos) const { return (ini_ <= pos && pos < end_) ? CptFlags(cpts_[pos]) : 0; }
  size_t AddToken(size_t end) {
    const size_t len = end - prev_end_;
    if (len > 0) out_->push_back(len);
    prev_end_ = end;
    return len;
  }
  size_t end() const { return end_; }

 private:
  const std::vector<uint32_t>& cpts_;
  std::vector<size_t>* out_;
  size_t ini_ = 0, end_ = 0, prev_end_ = 0;
};

inline bool IsWs(uint16_t f) { return f & kWhitespace; }
inline bool IsLetter(uint16_t f) { return f & kLetter; }
inline bool IsNumber(uint16_t f) { return f & kNumber; }

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
std::vector<size_t> SplitGpt2(const std::vector<uint32_t>& cpts, const std::vector<size_t>& offsets) {
  std::vector<size_t> result;
  result.reserve(offsets.size());
  CustomSplit s(cpts, &result);
  size_t start = 0;
  for (size_t offset : offsets) {
    const size_t offset_ini = start, offset_end = start + offset;
    start = offset_end;
    s.Begin(offset_ini, offset_end);
    for (size_t pos = offset_ini; pos < offset_end;) {
      const uint32_t cpt = s.Cpt(pos);
      const uint16_t flags = s.Flags(pos);
      if (cpt == '\'' && pos + 1 < offset_end) {
        const uint32_t n1 = s.Cpt(pos + 1);
        if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
          pos += s.AddToken(pos + 2);
          continue;
        }
        if (pos + 2 < offset_end) {
          const uint32_t n2 = s.Cpt(pos + 2);
          if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
            pos += s.AddToken(pos + 3);
            continue;
          }
        }
      }
      uint16_t flags2 = (cpt == ' ' ? s.Flags(pos + 1) : flags);
      if (IsLetter(flags2)) {
        pos += (cpt == ' ');
        while (IsLetter(flags2)) flags2 = s.Flags(++pos);
        s.AddToken(pos);
        continue;
      }
      if (IsNumber(flags2)) {
        pos += (cpt == ' ');
        while (IsNumber(flags2)) flags2 = s.Flags(++pos);
        s.AddToken(pos);
        continue;
      }
      if (!(IsWs(flags2) || IsLetter(flags2) || IsNumber(flags2)) && flags2) {
        pos += (cpt == ' ');
        while (!(IsWs(flags2) || IsLetter(flags2) || IsNumber(flags2)) && flags2) {
          flags2 = s.Flags(++pos);
        }
        s.AddToken(pos);
        continue;
      }
      size_t num_ws = 0;
      while (IsWs(s.Flags(pos + num_ws))) num_ws++;
      if (num_ws > 1 && s.Cpt(pos + num_ws) != kOutOfRange) {
        pos += num_ws - 1;
        s.AddToken(pos);
        continue;
      }
      if (num_ws > 0) {
        pos += num_ws;
        s.AddToken(pos);
        continue;
      }
      s.AddToken(++pos);
    }
  }
  return result;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
std::vector<size_t> SplitLlama3(const std::vector<uint32_t>& cpts, const std::vector<size_t>& offsets) {
  std::vector<size_t> result;
  result.reserve(offsets.size());
  CustomSplit s(cpts, &result);
  size_t start = 0;
  for (size_t offset : offsets) {
    const size_t offset_ini = start, offset_end = start + offset;
    start = offset_end;
    s.Begin(offset_ini, offset_end);
    for (size_t pos = offset_ini; pos < offset_end;) {
      const uint32_t cpt = s.Cpt(pos);
      const uint16_t flags = s.Flags(pos);
      if (cpt == '\'' && pos + 1 < offset_end) {
        const uint32_t n1 = ToLower(s.Cpt(pos + 1));
        if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
          pos += s.AddToken(pos + 2);
          continue;
        }
        if (pos + 2 < offset_end) {
          const uint32_t n2 = ToLower(s.Cpt(pos + 2));
          if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) {
            pos += s.AddToken(pos + 3);
            continue;
          }
        }
      }
      // [^\r\n\p{L}\p{N}]?\p{L}+
      if (!(cpt == '\r' || cpt == '\n' || IsNumber(flags))) {
        if (IsLetter(flags) || IsLetter(s.Flags(pos + 1))) {
          pos++;
          while (IsLetter(s.Flags(pos))) pos++;
          s.AddToken(pos);
          continue;
        }
      }
      // \p{N}{1,3}
      if (IsNumber(flags)) {
        size_t ini = pos;
        while (IsNumber(s.Flags(pos))) {
          if (++pos - ini >= 3) {
            s.AddToken(pos);
            ini = pos;
          }
        }
        s.AddToken(pos);
        continue;
      }
      // <space>?[^\s\p{L}\p{N}]+[\r\n]*  (note: llama.cpp tests flags, not flags2, here)
      uint16_t flags2 = (cpt == ' ' ? s.Flags(pos + 1) : flags);
      if (!(IsWs(flags2) || IsLetter(flags2) || IsNumber(flags2)) && flags) {
        pos += (cpt == ' ');
        while (!(IsWs(flags2) || IsLetter(flags2) || IsNumber(flags2)) && flags2) {
          flags2 = s.Flags(++pos);
        }
        uint32_t cpt2 = s.Cpt(pos);
        while (cpt2 == '\r' || cpt2 == '\n') cpt2 = s.Cpt(++pos);
        s.AddToken(pos);
        continue;
      }
      size_t num_ws = 0;
      size_t last_end_r_or_n = 0;
      while (IsWs(s.Flags(pos + num_ws))) {
        const uint32_t cpt2 = s.Cpt(pos + num_ws);
        if (cpt2 == '\r' || cpt2 == '\n') last_end_r_or_n = pos + num_ws + 1;
        num_ws++;
      }
      if (last_end_r_or_n > 0) {
        pos = last_end_r_or_n;
        s.AddToken(pos);
        continue;
      }
      if (num_ws > 1 && s.Cpt(pos + num_ws) != kOutOfRange) {
        pos += num_ws - 1;
        s.AddToken(pos);
        continue;
      }
      if (num_ws > 0) {
        pos += num_ws;
        s.AddToken(pos);
        continue;
      }
      s.AddToken(++pos);
    }
  }
  return result;
}

template <typename CharT>
std::vector<size_t> SplitStl(const std::basic_string<CharT>& text, const std::basic_regex<CharT>& expr,
                             const std::vector<size_t>& offsets) {
  std::vector<size_t> result;
  result.reserve(offsets.size());
  size_t start = 0;
  for (size_t offset : offsets) {
    const size_t mark = result.size();
    try {
      std::regex_iterator<const CharT*> it(text.data() + start, text.data() + start + offset, expr);
      std::regex_iterator<const CharT*> end;
      int64_t start_idx = 0;
      for (; it != end; ++it) {
        const auto& match = *it;
        if (match.position() > start_idx) result.push_back(match.position() - start_idx);
        result.push_back(match.length());
        start_idx = match.position() + match.length();
      }
      if (start_idx < static_cast<int64_t>(offset)) result.push_back(offset - start_idx);
    } catch (const std::exception&) {
      // std::regex gave up (e.g. error_complexity): keep this chunk unsplit.
      result.resize(mark);
      result.push_back(offset);
    }
    start += offset;
  }
  return result;
}

// \p{..} names llama.cpp understands and the category they collapse to.
const std::map<std::string, uint16_t>& UcatEnum() {
  static const auto* m = new std::map<std::string, uint16_t>{
      {"\\p{N}", kNumber},  {"\\p{L}", kLetter},  {"\\p{P}", kPunctuation}, {"\\p{M}", kAccentMark},
      {"\\p{S}", kSymbol},  {"\\p{Lu}", kLetter}, {"\\p{Ll}", kLetter},     {"\\p{Lt}", kLetter},
      {"\\p{Lm}", kLetter}, {"\\p{Lo}", kLetter},
  };
  return *m;
}

// Single byte standing for a non-ASCII code point of that category in the collapsed text.
char CollapsedByte(uint16_t category) {
  switch (category) {
    case kNumber:
      return static_cast<char>(0xD1);
    case kLetter:
      return static_cast<char>(0xD2);
    case kPunctuation:
      return static_cast<char>(0xD3);
    case kAccentMark:
      return static_cast<char>(0xD4);
    case kSymbol:
      return static_cast<char>(0xD5);
    default:
      return 0;
  }
}

// ASCII members of each category, as a bracket-expression body (llama.cpp k_ucat_map).
const char* CollapsedAscii(uint16_t category) {
  switch (category) {
    case kNumber:
      return "0-9";
    case kLetter:
      return "A-Za-z";
    case kPunctuation:
      return "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}";
    case kAccentMark:
      return "";
    case kSymbol:
      return "\\$\\+<->^`\\|";
    default:
      return "";
  }
}

bool UsesCategories(const std::string& expr) {
  for (const auto& kv : UcatEnum()) {
    if (expr.find(kv.first) != std::string::npos) return true;
  }
  return false;
}

// llama.cpp's rewrite of a regex with \p{..} into one over the collapsed text.
bool CollapseRegex(const std::string& re, std::string* out, std::string* error) {
  for (uint32_t c : CptsFromUtf8(re)) {
    if (c >= 128) {
      *error = "regex includes both unicode categories and non-ASCII characters: " + re;
      return false;
    }
  }
  std::string r;
  bool inside = false;
  for (size_t i = 0; i < re.size(); ++i) {
    if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
      r += '[';
      inside = true;
      continue;
    }
    if (inside && re[i] == ']' && re[i - 1] != '\\') {
      r += ']';
      inside = false;
      continue;
    }
    if (re[i] == '\\' && i + 3 < re.size() && re[i + 1] == 'p' && re[i + 2] == '{') {
      const size_t close = re.find('}', i + 3);
      if (close != std::string::npos && close <= i + 10) {
        const std::string pat = re.substr(i, close - i + 1);
        auto it = UcatEnum().find(pat);
        if (it != UcatEnum().end()) {
          if (!inside) r += '[';
          r += CollapsedByte(it->second);
          r += CollapsedAscii(it->second);
          if (!inside) r += ']';
          i = close;
          continue;
        }
      }
    }
    r += re[i];
  }
  *out = std::move(r);
  return true;
}

const char* const kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3RegexA =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kLlama3RegexB =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace

uint16_t CptFlags(uint32_t cpt) {
  const auto& t = FlagsTable();
  return cpt < t.size() ? t[cpt] : static_cast<uint16_t>(kUndefined);
}

uint32_t ToLower(uint32_t cpt) {
  if (cpt >= kMaxCodepoints) return cpt;
  return static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cpt)));
}

uint32_t NfdFirst(uint32_t cpt) {
  if (cpt < 0xC0 || cpt >= kMaxCodepoints) return cpt;  // nothing below U+00C0 decomposes
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* nfd = unorm2_getNFDInstance(&status);
  if (U_FAILURE(status)) return cpt;
  UChar src[2];
  int32_t n = 0;
  UBool err = false;
  U16_APPEND(src, n, 2, static_cast<UChar32>(cpt), err);
  if (err) return cpt;
  UChar dst[32];
  const int32_t len = unorm2_normalize(nfd, src, n, dst, 32, &status);
  if (U_FAILURE(status) || len <= 0) return cpt;
  UChar32 first;
  int32_t i = 0;
  U16_NEXT(dst, i, len, first);
  return static_cast<uint32_t>(first);
}

size_t Utf8Len(char lead) {
  static const size_t lookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[static_cast<uint8_t>(lead) >> 4];
}

std::string CptToUtf8(uint32_t cpt) {
  std::string r;
  if (cpt <= 0x7f) {
    r.push_back(static_cast<char>(cpt));
  } else if (cpt <= 0x7ff) {
    r.push_back(static_cast<char>(0xc0 | ((cpt >> 6) & 0x1f)));
    r.push_back(static_cast<char>(0x80 | (cpt & 0x3f)));
  } else if (cpt <= 0xffff) {
    r.push_back(static_cast<char>(0xe0 | ((cpt >> 12) & 0x0f)));
    r.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3f)));
    r.push_back(static_cast<char>(0x80 | (cpt & 0x3f)));
  } else if (cpt <= 0x10ffff) {
    r.push_back(static_cast<char>(0xf0 | ((cpt >> 18) & 0x07)));
    r.push_back(static_cast<char>(0x80 | ((cpt >> 12) & 0x3f)));
    r.push_back(static_cast<char>(0x80 | ((cpt >> 6) & 0x3f)));
    r.push_back(static_cast<char>(0x80 | (cpt & 0x3f)));
  } else {
    r = "\xEF\xBF\xBD";
  }
  return r;
}

std::vector<uint32_t> CptsFromUtf8(const std::string& utf8) {
  std::vector<uint32_t> result;
  result.reserve(utf8.size());
  size_t offset = 0;
  while (offset < utf8.size()) {
    uint32_t c;
    if (DecodeOne(utf8, &offset, &c)) {
      result.push_back(c);
    } else {
      ++offset;
      result.push_back(0xFFFD);
    }
  }
  return result;
}

const std::string& ByteToUtf8(uint8_t byte) { return GetByteMaps().byte_to_utf8[byte]; }

bool Utf8ToByte(const std::string& utf8, uint8_t* byte) {
  const auto& m = GetByteMaps().utf8_to_byte;
  auto it = m.find(utf8);
  if (it == m.end()) return false;
  *byte = it->second;
  return true;
}

// ---- RegexSplitter ----

struct RegexSplitter::Expr {
  enum Kind { kGpt2, kLlama3, kCollapsed, kWide } kind;
  std::regex narrow;
  std::wregex wide;
};

RegexSplitter::~RegexSplitter() = default;

std::unique_ptr<RegexSplitter> RegexSplitter::Create(const std::vector<std::string>& exprs, std::string* error) {
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  // llama.cpp: non-MSVC builds compile with optimize | nosubs (ECMAScript grammar).
  constexpr auto kFlags = std::regex_constants::optimize | std::regex_constants::nosubs;
  for (const std::string& re : exprs) {
    auto e = std::make_unique<Expr>();
    if (UsesCategories(re)) s->need_collapse_ = true;
    try {
      if (re == kGpt2Regex) {
        e->kind = Expr::kGpt2;
      } else if (re == kLlama3RegexA || re == kLlama3RegexB) {
        e->kind = Expr::kLlama3;
      } else if (UsesCategories(re)) {
        s->uses_std_regex_ = true;
        e->kind = Expr::kCollapsed;
        std::string collapsed;
        if (!CollapseRegex(re, &collapsed, error)) return nullptr;
        e->narrow = std::regex(collapsed, kFlags);
      } else {
        s->uses_std_regex_ = true;
        e->kind = Expr::kWide;
        const std::vector<uint32_t> cpts = CptsFromUtf8(re);
        e->wide = std::wregex(std::wstring(cpts.begin(), cpts.end()), kFlags);
      }
    } catch (const std::regex_error& ex) {
      *error = "failed to compile pre-tokenizer regex '" + re + "': " + ex.what();
      return nullptr;
    }
    s->exprs_.push_back(std::move(e));
  }
  return s;
}

namespace {
struct SplitJob {
  const RegexSplitter* self;
  const std::string* text;
  bool byte_encode;
  std::vector<std::string> (RegexSplitter::*fn)(const std::string&, bool) const;
  std::vector<std::string> out;
};
void* RunSplitJob(void* arg) {
  auto* job = static_cast<SplitJob*>(arg);
  job->out = (job->self->*(job->fn))(*job->text, job->byte_encode);
  return nullptr;
}
}  // namespace

std::vector<std::string> RegexSplitter::Split(const std::string& text, bool byte_encode) const {
  constexpr size_t kInlineLimit = 4096;  // bytes; ~1 MiB of matcher stack at worst
  if (!uses_std_regex_ || text.size() <= kInlineLimit) return SplitImpl(text, byte_encode);
  constexpr size_t kMiB = size_t{1} << 20;
  const size_t stack = std::min<size_t>(16 * kMiB + text.size() * 1024, size_t{64} << 30);
  SplitJob job{this, &text, byte_encode, &RegexSplitter::SplitImpl, {}};
  // Retry with smaller stacks if the system refuses a large reservation.
  for (size_t sz = stack; sz >= 64 * kMiB || sz == stack; sz /= 2) {
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0) break;
    pthread_t th;
    const bool ok = pthread_attr_setstacksize(&attr, sz) == 0 && pthread_create(&th, &attr, &RunSplitJob, &job) == 0;
    pthread_attr_destroy(&attr);
    if (ok) {
      pthread_join(th, nullptr);
      return std::move(job.out);
    }
  }
  return SplitImpl(text, byte_encode);
}

std::vector<std::string> RegexSplitter::SplitImpl(const std::string& text, bool byte_encode) const {
  const std::vector<uint32_t> cpts = CptsFromUtf8(text);

  std::string collapsed;
  if (need_collapse_) {
    collapsed.resize(cpts.size());
    for (size_t i = 0; i < cpts.size(); ++i) {
      if (cpts[i] < 128) {
        collapsed[i] = static_cast<char>(cpts[i]);
        continue;
      }
      const uint16_t f = CptFlags(cpts[i]);
      if (f & kWhitespace) {
        collapsed[i] = 0x0B;  // std::regex \s does not match non-ASCII whitespace
      } else {
        const char b = CollapsedByte(f & kMaskCategories);
        collapsed[i] = b ? b : static_cast<char>(0xD0);
      }
    }
  }

  std::vector<size_t> offsets = {cpts.size()};
  for (const auto& e : exprs_) {
    switch (e->kind) {
      case Expr::kGpt2:
        offsets = SplitGpt2(cpts, offsets);
        break;
      case Expr::kLlama3:
        offsets = SplitLlama3(cpts, offsets);
        break;
      case Expr::kCollapsed:
        offsets = SplitStl<char>(collapsed, e->narrow, offsets);
        break;
      case Expr::kWide: {
        std::wstring wtext(cpts.begin(), cpts.end());
        for (auto& wc : wtext) {
          if (static_cast<uint32_t>(wc) > 0x7F && (CptFlags(static_cast<uint32_t>(wc)) & kWhitespace)) {
            wc = 0x0B;
          }
        }
        offsets = SplitStl<wchar_t>(wtext, e->wide, offsets);
        break;
      }
    }
  }

  std::vector<std::string> words;
  words.reserve(offsets.size());
  size_t start = 0;
  for (size_t offset : offsets) {
    std::string w;
    for (size_t i = start; i < start + offset; ++i) w += CptToUtf8(cpts[i]);
    start += offset;
    if (byte_encode) {
      std::string enc;
      for (char c : w) enc += ByteToUtf8(static_cast<uint8_t>(c));
      w = std::move(enc);
    }
    words.push_back(std::move(w));
  }
  return words;
}

}  // namespace herd::tokenizer::unicode
