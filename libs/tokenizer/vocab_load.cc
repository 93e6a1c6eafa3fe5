// Vocab::Impl::Load: a vocabulary from GGUF metadata (llama.cpp llama_vocab::impl::load),
// as a sequence of named steps; plus the token-to-piece cache.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/tokenizer/vocab_impl.h"

namespace herd::tokenizer {

using internal::PreEntry;
using internal::UnescapeWhitespace;

uint8_t Vocab::Impl::TokenToByte(int32_t id) const {
  // llama.cpp: strtol(text.substr(3, 2), NULL, 16)
  const std::string& text = id_to_token[id].text;
  if (text.size() <= 3) return 0;
  const std::string buf = text.substr(3, 2);
  return static_cast<uint8_t>(std::strtol(buf.c_str(), nullptr, 16));
}

std::string Vocab::Impl::ComputePiece(int32_t id) const {
  const TokenData& td = id_to_token[id];
  const uint32_t attr = td.attr;
  constexpr uint32_t kSpecial = kAttrUnknown | kAttrControl;
  if (attr & (kSpecial | kAttrUserDefined)) return td.text;
  if (type == VocabType::kBpe) {
    if (attr & kAttrNormal) {
      if (escape_whitespaces) {
        std::string r = td.text;
        UnescapeWhitespace(r);
        return r;
      }
      // llama_decode_text
      std::string decoded;
      for (uint32_t cpt : unicode::CptsFromUtf8(td.text)) {
        const std::string utf8 = unicode::CptToUtf8(cpt);
        uint8_t b;
        if (unicode::Utf8ToByte(utf8, &b)) {
          decoded += static_cast<char>(b);
        } else {
          decoded += "[UNK_BYTE_0x";
          for (char c : utf8) {
            static const char* hx = "0123456789abcdef";
            decoded += hx[static_cast<uint8_t>(c) >> 4];
            decoded += hx[static_cast<uint8_t>(c) & 15];
          }
          decoded += td.text + "]";
        }
      }
      return decoded;
    }
  } else {
    if (attr & kAttrNormal) {
      std::string r = td.text;
      UnescapeWhitespace(r);
      return r;
    }
  }
  if (attr & kAttrByte) return std::string(1, static_cast<char>(TokenToByte(id)));
  return "";
}

absl::Status GetOptionalBool(const gguf::GgufFile& f, const char* key, bool* out) {
  if (f.Find(key) == nullptr) return absl::OkStatus();
  HERD_ASSIGN_OR_RETURN(*out, f.GetBool(key));
  return absl::OkStatus();
}

namespace {

// True when `s` equals one of `l`.
bool AnyOf(const std::string& s, std::initializer_list<const char*> l) {
  for (const char* x : l) {
    if (s == x) return true;
  }
  return false;
}

// True when `s` contains one of `subs`.
bool ContainsAny(const std::string& s, std::initializer_list<const char*> subs) {
  for (const char* x : subs) {
    if (s.find(x) != std::string::npos) return true;
  }
  return false;
}

// add_<x>_token set without its token id.
absl::Status CheckAddToken(const gguf::GgufFile& f, bool add, int32_t id, const char* add_key, const char* id_key) {
  if (add && id == kTokenNull) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", f.path(), ": ", add_key, " is true, but ", id_key, " is not set"));
  }
  return absl::OkStatus();
}

// tokenizer.ggml.scores / token_type: an array of an allowed element type, one entry per token.
absl::Status CheckPerTokenArray(const gguf::GgufFile& f, const gguf::Value* v, const char* key, bool type_ok,
                                const char* type_desc, size_t n_tokens) {
  if (v == nullptr) return absl::OkStatus();
  if (v->type() != gguf::ValueType::ARRAY || !type_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", f.path(), ": ", key, " must be an array of ", type_desc));
  }
  if (v->array_size() != n_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", f.path(), ": ", key, " has ", v->array_size(),
                                                   " entries but tokenizer.ggml.tokens has ", n_tokens,
                                                   " (one entry per token)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Vocab::Impl::Load(const gguf::GgufFile& f) {
  std::string tokenizer_pre;
  HERD_RETURN_IF_ERROR(LoadModelType(f, &tokenizer_pre));
  HERD_RETURN_IF_ERROR(ApplyPreTokenizer(f, tokenizer_pre));
  HERD_RETURN_IF_ERROR(GetOptionalBool(f, "tokenizer.ggml.add_space_prefix", &add_space_prefix));
  HERD_RETURN_IF_ERROR(LoadTokens(f));
  HERD_RETURN_IF_ERROR(BuildSplitter());
  FindNewline();  // before the special-token cache exists, as llama.cpp
  HERD_RETURN_IF_ERROR(LoadSpecialTokens(f));
  DetectSpecialTokensByText();
  BuildEog();
  BuildCaches();
  ApplyPerModelAttributes(f, tokenizer_pre);
  return absl::OkStatus();
}

// tokenizer.ggml.model -> type and default special ids; tokenizer.ggml.pre (raw).
absl::Status Vocab::Impl::LoadModelType(const gguf::GgufFile& f, std::string* tokenizer_pre) {
  {
    auto m = f.GetString("tokenizer.ggml.model");
    if (!m.ok()) {
      return absl::Status(m.status().code(), absl::StrCat("tokenizer: ", f.path(), ": ", m.status().message()));
    }
    model = *m;
  }
  if (f.Find("tokenizer.ggml.pre") != nullptr) {
    HERD_ASSIGN_OR_RETURN(*tokenizer_pre, f.GetString("tokenizer.ggml.pre"));
  }

  if (model == "llama") {
    type = VocabType::kSpm;
    bos = 1;
    eos = 2;
    unk = 0;
    sep = kTokenNull;
    pad = kTokenNull;
    mask = kTokenNull;
  } else if (model == "bert") {
    type = VocabType::kWpm;
    bos = 101;
    eos = kTokenNull;
    unk = 100;
    sep = 102;
    pad = 0;
    mask = 103;
    add_sep = true;
  } else if (model == "gpt2" || model == "gemma4") {
    type = VocabType::kBpe;
    HERD_RETURN_IF_ERROR(LoadBpeMerges(f));
    bos = 11;
    eos = 11;
    unk = kTokenNull;
    sep = kTokenNull;
    pad = kTokenNull;
    mask = kTokenNull;
    if (model == "gemma4") {
      bos = eos = kTokenNull;
      *tokenizer_pre = "gemma4";
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", f.path(), ": unsupported tokenizer.ggml.model '",
                                                   model,
                                                   "' (supported: llama (SPM), gpt2 (BPE), gemma4 (BPE), bert (WPM))"));
  }
  return absl::OkStatus();
}

// tokenizer.ggml.merges ("left right" strings) -> bpe_ranks.
absl::Status Vocab::Impl::LoadBpeMerges(const gguf::GgufFile& f) {
  const gguf::Value* merges = f.Find("tokenizer.ggml.merges");
  if (merges == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer: ", f.path(), ": missing key tokenizer.ggml.merges (required for BPE)"));
  }
  if (merges->type() != gguf::ValueType::ARRAY || merges->array_type() != gguf::ValueType::STRING) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", f.path(), ": tokenizer.ggml.merges must be an array of strings"));
  }
  const auto& words = merges->strings();
  bpe_ranks.reserve(words.size());
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& word = words[i];
    std::string first, second;
    const size_t pos = word.find(' ', 1);
    if (pos != std::string::npos) {
      first = word.substr(0, pos);
      second = word.substr(pos + 1);
    }
    bpe_ranks.emplace(std::make_pair(first, second), static_cast<int>(i));
  }
  return absl::OkStatus();
}

// Per-type defaults; for BPE, the pre-tokenizer entry and its flags.
absl::Status Vocab::Impl::ApplyPreTokenizer(const gguf::GgufFile& f, const std::string& tokenizer_pre) {
  if (type == VocabType::kBpe) {
    add_space_prefix = false;
    escape_whitespaces = false;
    clean_spaces = true;
    pre_name = tokenizer_pre.empty() ? "default" : tokenizer_pre;
    const PreEntry* entry = internal::FindPre(pre_name);
    if (entry == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", f.path(),
                                                     ": unsupported pre-tokenizer tokenizer.ggml.pre='", pre_name,
                                                     "' (supported: ", internal::SupportedPreNames(), ")"));
    }
    pre = entry->pre;
    if (entry->flags & internal::kNoCleanSpaces) clean_spaces = false;
    if (entry->flags & internal::kIgnoreMerges) ignore_merges = true;
    if (entry->flags & internal::kPreAddBos) add_bos = true;
    if (entry->flags & internal::kEscapeWs) escape_whitespaces = true;
    if (entry->flags & internal::kBosNull) bos = kTokenNull;
    if (entry->flags & internal::kPreAddSep) add_sep = true;
    byte_encode = !(pre == Pre::kGemma4 || pre == Pre::kSarvam);
  } else if (type == VocabType::kSpm) {
    pre_name = "default";
    add_space_prefix = true;
    clean_spaces = false;
    add_bos = true;
    add_eos = false;
  } else {  // WPM
    pre_name = "default";
    add_space_prefix = false;
    clean_spaces = true;
    add_bos = true;
    add_eos = false;
    add_sep = true;
  }
  return absl::OkStatus();
}

// tokenizer.ggml.tokens, scores and token_type -> id_to_token / token_to_id.
absl::Status Vocab::Impl::LoadTokens(const gguf::GgufFile& f) {
  const gguf::Value* tokens = f.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr) {
    return absl::NotFoundError(absl::StrCat("tokenizer: ", f.path(), ": missing key tokenizer.ggml.tokens"));
  }
  if (tokens->type() != gguf::ValueType::ARRAY || tokens->array_type() != gguf::ValueType::STRING) {
    return absl::InvalidArgumentError(
        absl::StrCat("tokenizer: ", f.path(), ": tokenizer.ggml.tokens must be an array of strings"));
  }
  const size_t n_tokens = tokens->strings().size();
  if (n_tokens >= static_cast<size_t>(INT32_MAX)) {
    return absl::InvalidArgumentError("tokenizer: too many tokens");
  }

  const gguf::Value* scores = f.Find("tokenizer.ggml.scores");
  if (auto s = CheckPerTokenArray(f, scores, "tokenizer.ggml.scores",
                                  scores != nullptr && (scores->array_type() == gguf::ValueType::FLOAT32 ||
                                                        scores->array_type() == gguf::ValueType::INT32),
                                  "float32 or int32", n_tokens);
      !s.ok()) {
    return s;
  }
  const gguf::Value* toktypes = f.Find("tokenizer.ggml.token_type");
  if (auto s = CheckPerTokenArray(f, toktypes, "tokenizer.ggml.token_type",
                                  toktypes != nullptr && toktypes->array_type() == gguf::ValueType::INT32, "int32",
                                  n_tokens);
      !s.ok()) {
    return s;
  }

  id_to_token.resize(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) {
    std::string word = tokens->strings()[i];
    if (word.empty()) word = absl::StrCat("[EMPTY_", i, "]");
    auto res = token_to_id.emplace(word, static_cast<int32_t>(i));
    if (!res.second) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", f.path(), ": duplicate token in vocabulary: '",
                                                     word, "' has ids ", res.first->second, " and ", i));
    }
    max_token_len = std::max(max_token_len, static_cast<int>(word.size()));
    TokenData& td = id_to_token[i];
    td.text = std::move(word);
    if (scores != nullptr) {
      td.score = scores->array_type() == gguf::ValueType::INT32 ? static_cast<float>(scores->IntAt(i))
                                                                : static_cast<float>(scores->DoubleAt(i));
    }
    td.attr = kAttrNormal;
    td.gguf_type = TokenType::kNormal;
    if (toktypes != nullptr) {
      const int64_t t = toktypes->IntAt(i);
      td.gguf_type = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
      switch (td.gguf_type) {
        case TokenType::kUnknown:
          td.attr = kAttrUnknown;
          break;
        case TokenType::kUnused:
          td.attr = kAttrUnused;
          break;
        case TokenType::kNormal:
          td.attr = kAttrNormal;
          break;
        case TokenType::kControl:
          td.attr = kAttrControl;
          break;
        case TokenType::kUserDefined:
          td.attr = kAttrUserDefined;
          break;
        case TokenType::kByte:
          td.attr = kAttrByte;
          break;
        default:
          td.attr = kAttrUndefined;
          break;
      }
    }
  }
  return absl::OkStatus();
}

// BPE: compile the pre-tokenizer regexes.
absl::Status Vocab::Impl::BuildSplitter() {
  if (type != VocabType::kBpe) return absl::OkStatus();
  std::string err;
  splitter = unicode::RegexSplitter::Create(internal::PreRegexes(pre), &err);
  if (splitter == nullptr) {
    return absl::InternalError(absl::StrCat("tokenizer: pre-tokenizer '", pre_name, "': ", err));
  }
  return absl::OkStatus();
}

// The newline token id (linefeed_id).
void Vocab::Impl::FindNewline() {
  if (type == VocabType::kSpm) {
    static const char* kNl = "<0x0A>";
    int32_t t = TextToToken(kNl);
    if (t == kTokenNull) t = TextToToken("\n");
    nl = t != kTokenNull ? t : pad;
  } else if (type == VocabType::kWpm) {
    nl = pad;
  } else {
    const std::vector<int32_t> ids = Tokenize("\n", false, false);
    nl = ids.empty() ? pad : ids[0];
  }
}

// Special token ids from their keys (out-of-range ids keep the default), the add_*_token
// flags and the WPM normalizer flags.
absl::Status Vocab::Impl::LoadSpecialTokens(const gguf::GgufFile& f) {
  const size_t n_tokens = id_to_token.size();
  const std::pair<const char*, int32_t*> kSpecialKeys[] = {
      {"tokenizer.ggml.bos_token_id", &bos},
      {"tokenizer.ggml.eos_token_id", &eos},
      {"tokenizer.ggml.eot_token_id", &eot},
      {"tokenizer.ggml.eom_token_id", &eom},
      {"tokenizer.ggml.unknown_token_id", &unk},
      {"tokenizer.ggml.seperator_token_id", &sep},
      {"tokenizer.ggml.padding_token_id", &pad},
      {"tokenizer.ggml.mask_token_id", &mask},
      {"tokenizer.ggml.fim_pre_token_id", &fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &fim_sep},
      // deprecated
      {"tokenizer.ggml.prefix_token_id", &fim_pre},
      {"tokenizer.ggml.suffix_token_id", &fim_suf},
      {"tokenizer.ggml.middle_token_id", &fim_mid},
  };
  for (const auto& [key, id] : kSpecialKeys) {
    if (*id >= 0 && static_cast<size_t>(*id) >= n_tokens) *id = kTokenNull;  // bad default
    const gguf::Value* v = f.Find(key);
    if (v == nullptr || !v->is_integer()) continue;
    const int64_t nv = v->AsInt();
    if (nv >= 0 && static_cast<uint64_t>(nv) < n_tokens) *id = static_cast<int32_t>(nv);
    // else: out of range (e.g. 0xFFFFFFFF) -> keep the default, as llama.cpp does
  }

  HERD_RETURN_IF_ERROR(GetOptionalBool(f, "tokenizer.ggml.add_bos_token", &add_bos));
  HERD_RETURN_IF_ERROR(GetOptionalBool(f, "tokenizer.ggml.add_eos_token", &add_eos));
  HERD_RETURN_IF_ERROR(GetOptionalBool(f, "tokenizer.ggml.add_sep_token", &add_sep));
  if (pre == Pre::kGemma4 && type == VocabType::kBpe && !add_bos) add_bos = true;

  if (auto s = CheckAddToken(f, add_bos, bos, "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"); !s.ok()) {
    return s;
  }
  if (auto s = CheckAddToken(f, add_eos, eos, "tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id"); !s.ok()) {
    return s;
  }
  if (auto s = CheckAddToken(f, add_sep, sep, "tokenizer.ggml.add_sep_token", "tokenizer.ggml.seperator_token_id");
      !s.ok()) {
    return s;
  }

  HERD_RETURN_IF_ERROR(GetOptionalBool(f, "tokenizer.ggml.normalizer.lowercase", &lowercase));
  strip_accents = lowercase;
  return GetOptionalBool(f, "tokenizer.ggml.normalizer.strip_accents", &strip_accents);
}

// Auto-detect EOT / EOM / FIM tokens by text (first match in token_to_id order wins) and
// mark them control; control tokens whose text contains "unused" are marked unused.
void Vocab::Impl::DetectSpecialTokensByText() {
  auto make_control = [&](int32_t id) { id_to_token[id].attr |= kAttrControl; };
  for (const auto& t : token_to_id) {
    const std::string& s = t.first;
    if (eot == kTokenNull && AnyOf(s, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                       "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                       "<\xEF\xBD\x9C"
                                       "end\xE2\x96\x81"
                                       "of\xE2\x96\x81"
                                       "sentence\xEF\xBD\x9C>",
                                       "<end_of_utterance>"})) {
      eot = t.second;
      make_control(t.second);
    }
    if (eom == kTokenNull && s == "<|eom_id|>") {
      eom = t.second;
      make_control(t.second);
    }
    if (fim_pre == kTokenNull && AnyOf(s, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                           "<\xEF\xBD\x9C"
                                           "fim\xE2\x96\x81"
                                           "begin\xEF\xBD\x9C>",
                                           "<PRE>", "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"})) {
      fim_pre = t.second;
      make_control(t.second);
    }
    if (fim_suf == kTokenNull && AnyOf(s, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                           "<\xEF\xBD\x9C"
                                           "fim\xE2\x96\x81"
                                           "hole\xEF\xBD\x9C>",
                                           "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"})) {
      fim_suf = t.second;
      make_control(t.second);
    }
    if (fim_mid == kTokenNull && AnyOf(s, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                           "<\xEF\xBD\x9C"
                                           "fim\xE2\x96\x81"
                                           "end\xEF\xBD\x9C>",
                                           "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"})) {
      fim_mid = t.second;
      make_control(t.second);
    }
    if (fim_pad == kTokenNull && AnyOf(s, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"})) {
      fim_pad = t.second;
      make_control(t.second);
    }
    if (fim_rep == kTokenNull && AnyOf(s, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"})) {
      fim_rep = t.second;
      make_control(t.second);
    }
    if (fim_sep == kTokenNull && s == "<|file_sep|>") {
      fim_sep = t.second;
      make_control(t.second);
    }
  }

  for (const auto& t : token_to_id) {
    uint32_t& attr = id_to_token[t.second].attr;
    if ((attr & kAttrControl) && !(attr & kAttrUnused) && t.first.find("unused") != std::string::npos) {
      attr |= kAttrUnused;
    }
  }
}

// The end-of-generation set (eog / eog_vec), with llama.cpp's per-vocabulary exceptions.
void Vocab::Impl::BuildEog() {
  auto make_control = [&](int32_t id) { id_to_token[id].attr |= kAttrControl; };
  eog.clear();
  if (fim_pad != kTokenNull) eog.insert(fim_pad);
  if (fim_rep != kTokenNull) eog.insert(fim_rep);
  if (fim_sep != kTokenNull) eog.insert(fim_sep);
  for (const auto& t : token_to_id) {
    if (AnyOf(t.first, {"<|eot_id|>",
                        "<|im_end|>",
                        "<|end|>",
                        "<|return|>",
                        "<|call|>",
                        "<|flush|>",
                        "<|calls|>",
                        "<end_of_turn>",
                        "<|endoftext|>",
                        "</s>",
                        "<|eom_id|>",
                        "<EOT>",
                        "_<EOT>",
                        "[EOT]",
                        "[EOS]",
                        "<|end_of_text|>",
                        "<end_of_utterance>",
                        "<eos>",
                        "<turn|>",
                        "<|tool_response>",
                        "<\xEF\xBD\x9C"
                        "end\xE2\x96\x81"
                        "of\xE2\x96\x81"
                        "sentence\xEF\xBD\x9C>",
                        "[e~["})) {
      eog.insert(t.second);
      make_control(t.second);
    }
  }
  // gpt-oss: always render these tokens.
  for (const auto& t : token_to_id) {
    if (AnyOf(t.first, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
      id_to_token[t.second].attr = kAttrUserDefined;
    }
  }
  if (eos != kTokenNull) eog.insert(eos);
  if (eot != kTokenNull) eog.insert(eot);
  if (eom != kTokenNull) eog.insert(eom);

  // o200k_harmony / solar-open: "<|end|>" is not EOG when "<|return|>"+"<|call|>" (or
  // "<|calls|>"+"<|flush|>") exist.
  {
    bool has_return = false, has_call = false, has_end = false, has_flush = false;
    int32_t end_id = kTokenNull;
    for (int32_t tid : eog) {
      if (!Valid(tid)) continue;
      const std::string& text = id_to_token[tid].text;
      if (text == "<|return|>") {
        has_return = true;
      } else if (text == "<|call|>" || text == "<|calls|>") {
        has_call = true;
      } else if (text == "<|flush|>") {
        has_flush = true;
      } else if (text == "<|end|>") {
        has_end = true;
        end_id = tid;
      }
    }
    if ((has_return && has_call && has_end) || (has_call && has_flush && has_end)) {
      eog.erase(end_id);
      id_to_token[end_id].attr = kAttrUserDefined;
    }
  }
  // gemma4 / paddleocr: "</s>" is not EOG when "<|tool_response>" exists.
  {
    bool has_tool_response = false, has_s = false;
    int32_t s_id = kTokenNull;
    for (int32_t tid : eog) {
      if (!Valid(tid)) continue;
      const std::string& text = id_to_token[tid].text;
      if (text == "<|tool_response>") {
        has_tool_response = true;
      } else if (text == "</s>") {
        has_s = true;
        s_id = tid;
      }
    }
    if (has_tool_response && has_s) {
      eog.erase(s_id);
      id_to_token[s_id].attr = kAttrNormal;
    }
  }
  eog_vec.assign(eog.begin(), eog.end());
}

// The special-token cache (std::sort by length, same input order as llama.cpp) and the
// token-to-piece cache.
void Vocab::Impl::BuildCaches() {
  const int32_t n_tokens = static_cast<int32_t>(id_to_token.size());
  for (int32_t id = 0; id < n_tokens; ++id) {
    if (id_to_token[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_tokens.push_back(id);
    }
  }
  std::sort(special_tokens.begin(), special_tokens.end(),
            [&](int32_t a, int32_t b) { return id_to_token[a].text.size() > id_to_token[b].text.size(); });

  piece_cache.resize(n_tokens);
  for (int32_t id = 0; id < n_tokens; ++id) piece_cache[id] = ComputePiece(id);
}

// Per-model token attributes (lstrip/rstrip) keyed on the pre-tokenizer, architecture or name.
void Vocab::Impl::ApplyPerModelAttributes(const gguf::GgufFile& f, const std::string& tokenizer_pre) {
  auto set_attr = [&](const std::string& text, uint32_t a, bool value) {
    auto it = token_to_id.find(text);
    if (it == token_to_id.end()) return;  // llama.cpp would throw (token_to_id.at)
    uint32_t& cur = id_to_token[it->second].attr;
    cur = value ? (cur | a) : (cur & ~a);
  };
  std::string model_name, general_arch;
  if (f.Find("general.name") != nullptr) {
    auto v = f.GetString("general.name");
    if (v.ok()) model_name = *v;
  }
  if (f.Find("general.architecture") != nullptr) {
    auto v = f.GetString("general.architecture");
    if (v.ok()) general_arch = *v;
  }
  for (char& c : model_name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));

  if (ContainsAny(tokenizer_pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      ContainsAny(general_arch, {"nomic-bert-moe", "jina-bert-v3"})) {
    set_attr("<mask>", kAttrLstrip, true);
  } else if (ContainsAny(model_name, {"phi-3", "phi3"})) {
    for (int32_t id : special_tokens) id_to_token[id].attr |= kAttrRstrip;
    set_attr("</s>", kAttrRstrip, true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
  } else if (ContainsAny(model_name, {"modern-bert"})) {
    set_attr("[MASK]", kAttrLstrip, true);
  }
}
}  // namespace herd::tokenizer
