// Port of llama.cpp src/llama-vocab.cpp tokenizer behaviour (see tokenizer.h): special-token
// partitioning, the per-type tokenize dispatch, the public Vocab API, detokenization and
// StreamingDetokenizer. Loading: vocab_load.cc; algorithms: tokenize_{spm,bpe,wpm}.cc;
// pre-tokenizer table: pre_tokenizers.cc.
#include "libs/tokenizer/tokenizer.h"

#include <algorithm>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/tokenizer/vocab_impl.h"

namespace herd::tokenizer {

using internal::EscapeWhitespace;
using internal::Fragment;
using internal::IsAsciiSpace;
using internal::PreTable;

// llama.cpp tokenizer_st_partition.
std::vector<Fragment> Vocab::Impl::Partition(const std::string& text, bool parse_special) const {
  std::vector<Fragment> frags;
  if (text.empty()) return frags;
  frags.push_back({false, kTokenNull, 0, text.size()});
  for (int32_t sid : special_tokens) {
    const TokenData& data = id_to_token[sid];
    if (!parse_special && (data.attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string& stext = data.text;
    std::vector<Fragment> out;
    out.reserve(frags.size() + 2);
    for (const Fragment& fr : frags) {
      if (fr.is_token) {
        out.push_back(fr);
        continue;
      }
      size_t base = fr.offset;
      size_t len = fr.length;
      for (;;) {
        const size_t match = std::string_view(text.data(), base + len).find(stext, base);
        if (match == std::string::npos) {
          if (len > 0) out.push_back({false, kTokenNull, base, len});
          break;
        }
        if (match > base) {
          size_t left_len = match - base;
          if (data.attr & kAttrLstrip) {
            while (left_len > 0 && IsAsciiSpace(text[base + left_len - 1])) left_len--;
          }
          if (left_len > 0) out.push_back({false, kTokenNull, base, left_len});
        }
        out.push_back({true, sid, 0, 0});
        if (match + stext.size() < base + len) {
          size_t r_off = match + stext.size();
          size_t r_len = len - ((match - base) + stext.size());
          if (data.attr & kAttrRstrip) {
            while (r_len > 0 && IsAsciiSpace(text[r_off])) {
              r_off++;
              r_len--;
            }
          }
          base = r_off;
          len = r_len;
          continue;
        }
        break;
      }
    }
    frags = std::move(out);
  }
  return frags;
}

std::vector<int32_t> Vocab::Impl::Tokenize(const std::string& text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  const std::vector<Fragment> frags = Partition(text, parse_special);
  switch (type) {
    case VocabType::kSpm: {
      bool is_prev_special = true;  // prefix with space if first token
      if (add_special && add_bos && bos != kTokenNull) out.push_back(bos);
      for (const Fragment& fr : frags) {
        if (!fr.is_token) {
          std::string s;
          if (add_space_prefix && is_prev_special) s = " ";
          s.append(text, fr.offset, fr.length);
          EscapeWhitespace(s);
          SpmTokenize(s, out);
          is_prev_special = false;
        } else {
          out.push_back(fr.token);
          is_prev_special = true;
        }
      }
      if (add_special && add_eos && eos != kTokenNull) out.push_back(eos);
      break;
    }
    case VocabType::kBpe: {
      if (add_special && add_bos && bos != kTokenNull) out.push_back(bos);
      for (const Fragment& fr : frags) {
        if (!fr.is_token) {
          std::string s = text.substr(fr.offset, fr.length);
          if (escape_whitespaces) EscapeWhitespace(s);
          BpeTokenize(s, out);
        } else {
          out.push_back(fr.token);
        }
      }
      if (add_special && add_eos && eos != kTokenNull) out.push_back(eos);
      break;
    }
    case VocabType::kWpm: {
      if (add_special && bos != kTokenNull) out.push_back(bos);
      for (const Fragment& fr : frags) {
        if (!fr.is_token) {
          WpmTokenize(text.substr(fr.offset, fr.length), out);
        } else {
          out.push_back(fr.token);
        }
      }
      if (add_special && sep != kTokenNull) out.push_back(sep);
      break;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------

const char* VocabTypeName(VocabType t) {
  switch (t) {
    case VocabType::kSpm:
      return "SPM";
    case VocabType::kBpe:
      return "BPE";
    case VocabType::kWpm:
      return "WPM";
  }
  return "unknown";
}

Vocab::Vocab(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Vocab::~Vocab() = default;

absl::StatusOr<std::unique_ptr<Vocab>> Vocab::FromGguf(const gguf::GgufFile& f) {
  auto impl = std::make_unique<Impl>();
  HERD_RETURN_IF_ERROR(impl->Load(f));
  return std::unique_ptr<Vocab>(new Vocab(std::move(impl)));
}

std::vector<std::string> Vocab::SupportedPreTokenizers() {
  std::vector<std::string> names;
  for (const auto& e : PreTable()) names.push_back(e.name);
  return names;
}

VocabType Vocab::type() const { return impl_->type; }
const std::string& Vocab::model_name() const { return impl_->model; }
const std::string& Vocab::pre_name() const { return impl_->pre_name; }
int32_t Vocab::n_tokens() const { return static_cast<int32_t>(impl_->id_to_token.size()); }
bool Vocab::IsValid(int32_t id) const { return impl_->Valid(id); }

absl::Status Vocab::ValidateTokens(const std::vector<int32_t>& ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!impl_->Valid(ids[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", ids[i], " at position ", i, " is out of range [0, ", n_tokens(), ")"));
    }
  }
  return absl::OkStatus();
}

int32_t Vocab::bos() const { return impl_->bos; }
int32_t Vocab::eos() const { return impl_->eos; }
int32_t Vocab::eot() const { return impl_->eot; }
int32_t Vocab::eom() const { return impl_->eom; }
int32_t Vocab::unk() const { return impl_->unk; }
int32_t Vocab::sep() const { return impl_->sep; }
int32_t Vocab::pad() const { return impl_->pad; }
int32_t Vocab::mask() const { return impl_->mask; }
int32_t Vocab::nl() const { return impl_->nl; }
int32_t Vocab::fim_pre() const { return impl_->fim_pre; }
int32_t Vocab::fim_suf() const { return impl_->fim_suf; }
int32_t Vocab::fim_mid() const { return impl_->fim_mid; }
int32_t Vocab::fim_pad() const { return impl_->fim_pad; }
int32_t Vocab::fim_rep() const { return impl_->fim_rep; }
int32_t Vocab::fim_sep() const { return impl_->fim_sep; }
bool Vocab::add_bos() const { return impl_->add_bos; }
bool Vocab::add_eos() const { return impl_->add_eos; }
bool Vocab::add_sep() const { return impl_->add_sep; }
bool Vocab::add_space_prefix() const { return impl_->add_space_prefix; }
bool Vocab::clean_spaces() const { return impl_->clean_spaces; }

bool Vocab::IsEog(int32_t id) const { return id != kTokenNull && impl_->eog.count(id) > 0; }
const std::vector<int32_t>& Vocab::eog_ids() const { return impl_->eog_vec; }
bool Vocab::IsControl(int32_t id) const { return Attr(id) & kAttrControl; }
bool Vocab::IsByte(int32_t id) const { return Attr(id) & kAttrByte; }
bool Vocab::IsUserDefined(int32_t id) const { return Attr(id) & kAttrUserDefined; }
bool Vocab::IsUnused(int32_t id) const { return Attr(id) & kAttrUnused; }
bool Vocab::IsNormal(int32_t id) const { return Attr(id) & kAttrNormal; }
bool Vocab::IsUnknown(int32_t id) const { return Attr(id) & kAttrUnknown; }

const std::string& Vocab::TokenText(int32_t id) const {
  static const std::string* empty = new std::string();
  return impl_->Valid(id) ? impl_->id_to_token[id].text : *empty;
}
float Vocab::Score(int32_t id) const { return impl_->Valid(id) ? impl_->id_to_token[id].score : 0.0f; }
uint32_t Vocab::Attr(int32_t id) const {
  return impl_->Valid(id) ? impl_->id_to_token[id].attr : static_cast<uint32_t>(kAttrUndefined);
}
TokenType Vocab::GgufTokenType(int32_t id) const {
  return impl_->Valid(id) ? impl_->id_to_token[id].gguf_type : TokenType::kUndefined;
}
int32_t Vocab::TextToToken(absl::string_view text) const { return impl_->TextToToken(std::string(text)); }

std::vector<int32_t> Vocab::Tokenize(absl::string_view text, bool add_special, bool parse_special) const {
  return impl_->Tokenize(std::string(text), add_special, parse_special);
}

std::string Vocab::TokenToPiece(int32_t id, bool special, int lstrip) const {
  if (!impl_->Valid(id)) return "";
  const uint32_t attr = impl_->id_to_token[id].attr;
  if (!special && (attr & (kAttrUnknown | kAttrControl))) return "";
  const std::string& piece = impl_->piece_cache[id];
  size_t skip = 0;
  while (static_cast<int>(skip) < lstrip && skip < piece.size() && piece[skip] == ' ') skip++;
  return piece.substr(skip);
}

std::string Vocab::Detokenize(const std::vector<int32_t>& ids, bool remove_special, bool unparse_special) const {
  const Impl& v = *impl_;
  size_t begin = 0, end = ids.size();
  bool remove_space = v.add_space_prefix;
  if (remove_special && v.add_bos && end > begin && ids[begin] == v.bos) {
    remove_space = false;
    begin++;
  }
  if (remove_special && v.add_eos && end > begin && ids[end - 1] == v.eos) end--;

  std::string text;
  for (size_t i = begin; i < end; ++i) {
    text += TokenToPiece(ids[i], unparse_special, remove_space ? 1 : 0);
    remove_space = false;
  }

  if (v.clean_spaces && !text.empty()) {
    // The three in-place passes of llama_vocab::impl::detokenize, transcribed literally
    // (they read text[i - 1] after earlier in-place writes).
    std::string& t = text;
    // first pass: " ?", " !", " .", " ,"
    const int32_t total1 = static_cast<int32_t>(t.size());
    int32_t total = total1 ? 1 : 0;
    for (int32_t i = 1; i < total1; ++i) {
      const char x = t[i];
      if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
      t[total++] = x;
    }
    // second pass: strip single apostrophe between spaces
    const int32_t total2 = total;
    total = total ? 1 : 0;
    for (int32_t i = 1; i < total2; ++i) {
      const char x = t[i];
      if (x == '\'' && i + 1 < total2 && t[i - 1] == ' ' && t[i + 1] == ' ') {
        total--;
        t[++i] = '\0';
      }
      t[total++] = x;
    }
    // third pass: apostrophe contractions
    const int32_t total3 = total;
    total = total ? 1 : 0;
    for (int32_t i = 1; i < total3; ++i) {
      const char x = t[i];
      if (t[i - 1] == ' ' && x == '\'' && i + 1 < total3) {
        const char x1 = t[i + 1];
        if (x1 == 't' || x1 == 'd') {
          // " 't", " 'd": keep
        } else if (x1 == 's' || x1 == 'm') {
          total--;
        } else if (i + 2 < total3) {
          const char x2 = t[i + 2];
          if (x1 == 'l' && x2 == 'l') {
            // " 'll": keep
          } else if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) {
            total--;
          }
        }
      }
      t[total++] = x;
    }
    t.resize(total);
  }
  return text;
}

// ---------------------------------------------------------------------------------------
// StreamingDetokenizer

StreamingDetokenizer::StreamingDetokenizer(const Vocab& vocab, bool special) : vocab_(vocab), special_(special) {}

void StreamingDetokenizer::Preserve(std::vector<int32_t> ids) {
  std::sort(ids.begin(), ids.end());
  preserved_ = std::move(ids);
}

std::string StreamingDetokenizer::Push(int32_t id) {
  const bool special = special_ || std::binary_search(preserved_.begin(), preserved_.end(), id);
  pending_ += vocab_.TokenToPiece(id, special);
  return Drain(/*at_end=*/false);
}

std::string StreamingDetokenizer::Flush() {
  std::string out = Drain(/*at_end=*/true);
  pending_.clear();
  return out;
}

std::string StreamingDetokenizer::Drain(bool at_end) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  const std::string& s = pending_;
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      out += static_cast<char>(c);
      i++;
      continue;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      need = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      out += kReplacement;  // stray continuation byte or never-valid lead byte
      i++;
      continue;
    }
    // Count how many following bytes are valid continuations.
    size_t k = 1;
    bool broken = false;
    while (k < need && i + k < s.size()) {
      const uint8_t b = static_cast<uint8_t>(s[i + k]);
      const bool ok = (k == 1) ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) {
        broken = true;
        break;
      }
      k++;
    }
    if (k == need) {
      out.append(s, i, need);
      i += need;
    } else if (broken || at_end) {
      out += kReplacement;  // maximal subpart of an ill-formed sequence -> one U+FFFD
      i += k;
    } else {
      break;  // incomplete: wait for more bytes
    }
  }
  pending_.erase(0, i);
  return out;
}

}  // namespace herd::tokenizer
