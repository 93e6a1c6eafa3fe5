// Port of llama.cpp src/llama-vocab.cpp tokenizer behaviour (see tokenizer.h).
#include "libs/tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <queue>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "libs/tokenizer/unicode.h"

namespace herd::tokenizer {
namespace {

constexpr char kEscSpace[] = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

void ReplaceAll(std::string& s, const std::string& from, const std::string& to) {
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

void EscapeWhitespace(std::string& s) { ReplaceAll(s, " ", kEscSpace); }
void UnescapeWhitespace(std::string& s) { ReplaceAll(s, kEscSpace, " "); }

bool IsAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// ---------------------------------------------------------------------------------------
// Pre-tokenizers (llama.cpp llm_tokenizer_bpe constructor + the tokenizer_pre switch in
// llama_vocab::impl::load).

enum class Pre {
  kDefault, kLlama3, kJais2, kDeepseekLlm, kDeepseek3, kSpark25, kYoutu, kDeepseekCoder,
  kFalcon, kStarcoder, kGpt2, kQwen2, kQwen35, kPoro, kChatglm4, kViking, kTekken,
  kChameleon, kGpt4o, kGraniteEmbMulti, kTinyAya, kSuperbpe, kBailingmoe, kSeedCoder,
  kUfakzeka, kGrok2, kLaguna, kExaoneMoe, kGemma4, kSarvam, kMinicpm5,
};

enum PreFlag : uint32_t {
  kNoCleanSpaces = 1u << 0,
  kIgnoreMerges = 1u << 1,
  kPreAddBos = 1u << 2,
  kEscapeWs = 1u << 3,
  kBosNull = 1u << 4,
  kPreAddSep = 1u << 5,
};

struct PreEntry {
  const char* name;
  Pre pre;
  uint32_t flags;
};

const std::vector<PreEntry>& PreTable() {
  static const auto* t = new std::vector<PreEntry>{
      {"default", Pre::kDefault, 0},
      {"minicpm5", Pre::kMinicpm5, kIgnoreMerges},
      {"llama3", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"llama-v3", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"llama-bpe", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"falcon3", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"falcon-h1", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"pixtral", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"midm-2.0", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"lfm2", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"jina-v5-nano", Pre::kLlama3, kIgnoreMerges | kPreAddBos},
      {"deepseek-llm", Pre::kDeepseekLlm, kNoCleanSpaces},
      {"deepseek-coder", Pre::kDeepseekCoder, kNoCleanSpaces},
      {"deepseek-v3", Pre::kDeepseek3, kNoCleanSpaces},
      {"spark2_5", Pre::kSpark25, kNoCleanSpaces},
      {"youtu", Pre::kYoutu, kNoCleanSpaces | kIgnoreMerges},
      {"falcon", Pre::kFalcon, 0},
      {"mpt", Pre::kGpt2, 0},
      {"starcoder", Pre::kStarcoder, 0},
      {"gpt-2", Pre::kGpt2, 0},
      {"phi-2", Pre::kGpt2, 0},
      {"jina-es", Pre::kGpt2, 0},
      {"jina-de", Pre::kGpt2, 0},
      {"gigachat", Pre::kGpt2, 0},
      {"jina-v2-es", Pre::kGpt2, 0},
      {"jina-v2-de", Pre::kGpt2, 0},
      {"a.x-4.0", Pre::kGpt2, 0},
      {"mellum", Pre::kGpt2, 0},
      {"modern-bert", Pre::kGpt2, 0},
      {"jais-2", Pre::kJais2, 0},
      {"gemma4", Pre::kGemma4, kEscapeWs},
      {"granite-embed-multi-311m", Pre::kGemma4, kEscapeWs},
      {"sarvam-moe", Pre::kSarvam, kEscapeWs | kNoCleanSpaces},
      {"jina-v1-en", Pre::kGpt2, kPreAddSep},
      {"jina-v2-code", Pre::kGpt2, kPreAddSep},
      {"roberta-bpe", Pre::kGpt2, kPreAddSep},
      {"refact", Pre::kStarcoder, 0},
      {"command-r", Pre::kStarcoder, kNoCleanSpaces},
      {"qwen2", Pre::kQwen2, kNoCleanSpaces},
      {"deepseek-r1-qwen", Pre::kQwen2, kNoCleanSpaces},
      {"kormo", Pre::kQwen2, kNoCleanSpaces},
      {"f2llmv2", Pre::kQwen2, kNoCleanSpaces},
      {"qwen35", Pre::kQwen35, kNoCleanSpaces},
      {"stablelm2", Pre::kQwen2, 0},
      {"olmo", Pre::kGpt2, 0},
      {"dbrx", Pre::kLlama3, 0},
      {"smaug-bpe", Pre::kLlama3, 0},
      {"poro-chat", Pre::kPoro, kNoCleanSpaces},
      {"glm4", Pre::kChatglm4, kBosNull},
      {"chatglm-bpe", Pre::kChatglm4, kBosNull},
      {"viking", Pre::kViking, kNoCleanSpaces},
      {"jais", Pre::kGpt2, 0},
      {"tekken", Pre::kTekken, kNoCleanSpaces | kIgnoreMerges | kPreAddBos},
      {"smollm", Pre::kStarcoder, kNoCleanSpaces},
      {"codeshell", Pre::kStarcoder, 0},
      {"bloom", Pre::kPoro, 0},
      {"gpt3-finnish", Pre::kPoro, 0},
      {"exaone", Pre::kStarcoder, 0},
      {"exaone4", Pre::kGpt2, 0},
      {"exaone-moe", Pre::kExaoneMoe, 0},
      {"chameleon", Pre::kChameleon, kPreAddBos | kNoCleanSpaces},
      {"minerva-7b", Pre::kStarcoder, 0},
      {"megrez", Pre::kQwen2, 0},
      {"gpt-4o", Pre::kGpt4o, kNoCleanSpaces},
      {"llama4", Pre::kGpt4o, kNoCleanSpaces},
      {"kanana2", Pre::kGpt4o, kNoCleanSpaces},
      {"talkie", Pre::kGpt4o, kNoCleanSpaces},
      {"granite-embed-multi-97m", Pre::kGraniteEmbMulti, kNoCleanSpaces | kIgnoreMerges},
      {"tiny_aya", Pre::kTinyAya, kNoCleanSpaces},
      {"cohere2moe", Pre::kTinyAya, kNoCleanSpaces},
      {"superbpe", Pre::kSuperbpe, kNoCleanSpaces},
      {"trillion", Pre::kGpt2, kNoCleanSpaces},
      {"granite-docling", Pre::kGpt2, kNoCleanSpaces},
      {"bailingmoe", Pre::kBailingmoe, kNoCleanSpaces},
      {"bailingmoe2", Pre::kBailingmoe, kNoCleanSpaces},
      {"llada-moe", Pre::kBailingmoe, kNoCleanSpaces},
      {"seed-coder", Pre::kSeedCoder, kNoCleanSpaces},
      {"hunyuan", Pre::kQwen2, kNoCleanSpaces},
      {"hunyuan-dense", Pre::kDeepseek3, kNoCleanSpaces},
      {"hy_v4", Pre::kDeepseek3, kNoCleanSpaces},
      {"joyai-llm", Pre::kDeepseek3, kNoCleanSpaces},
      {"ufakzeka", Pre::kUfakzeka, kNoCleanSpaces},
      {"grok-2", Pre::kGrok2, kNoCleanSpaces},
      {"laguna", Pre::kLaguna, kNoCleanSpaces},
      {"minimax-m2", Pre::kGpt4o, kNoCleanSpaces},
      {"solar-open", Pre::kQwen2, kNoCleanSpaces},
      {"mellum2", Pre::kStarcoder, 0},
  };
  return *t;
}

const char* const kRxGpt2 =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kRxLlama3 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kRxQwen2 =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kRxPoro = " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+";
const char* const kRxCjk3 = "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
// Cased-letter class of the DeepSeek LLM pre-tokenizer (exact code points, including the
// canonical singletons U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126 and U+212A).
const char* const kRxDeepseekLetters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293"
    "\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C"
    "\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5"
    "\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77"
    "\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59"
    "\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC"
    "\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107"
    "\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE"
    "\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E"
    "\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F"
    "\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2"
    "\U000118A0-\U000118DF\U0001E900-\U0001E943]+";

std::vector<std::string> PreRegexes(Pre pre) {
  switch (pre) {
    case Pre::kLlama3:
    case Pre::kChatglm4:
      return {kRxLlama3};
    case Pre::kJais2:
      return {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
              "\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s{512}(?!\\S)|"
              "\\s{256}(?!\\S)|\\s{128}(?!\\S)|\\s{64}(?!\\S)|\\s{32}(?!\\S)|\\s{16}(?!\\S)|"
              "\\s{8}(?!\\S)|\\s{4}(?!\\S)|\\s{1,2}(?!\\S)|\\s{1}"};
    case Pre::kDeepseekLlm:
      return {"[\r\n]",
              kRxDeepseekLetters,
              "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+",
              "\\s+$",
              "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
              "\\p{N}+"};
    case Pre::kDeepseek3:
      return {"\\p{N}{1,3}", kRxCjk3,
              "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
              "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kSpark25:
      return {"\\p{N}{1,3}", kRxCjk3,
              "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
              "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+|[\r\n]|\\s+(?!\\S)|\\s+",
              "\\p{N}"};
    case Pre::kYoutu:
      return {"[\uAC00-\uD7A3\u3131-\u318E]+|[\uFF01\u2026\u201C\u201D\u2018\u2019\u2014\uFF1A"
              "\uFF1B\uFF0C\u3001-\u303F\uFE30-\uFE4F]+|[\u3105-\u312F]+|"
              "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
              "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}"
              "\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n"
              "\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
              "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}"
              "\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kDeepseekCoder:
      return {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+",
              "\\p{N}"};
    case Pre::kFalcon:
      return {"[\\p{P}\\$\\+<=>\\^~\\|`]+", kRxGpt2, "[0-9][0-9][0-9]"};
    case Pre::kStarcoder:
      return {"\\p{N}", kRxGpt2};
    case Pre::kGpt2:
      return {kRxGpt2};
    case Pre::kQwen2:
    case Pre::kGrok2:
      return {kRxQwen2};
    case Pre::kQwen35:
      return {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
              "[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
              "\\s+(?!\\S)|\\s+"};
    case Pre::kPoro:
      return {kRxPoro};
    case Pre::kViking:
      return {kRxPoro, "\\p{N}"};
    case Pre::kTekken:
      return {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n"
              "\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}"
              "\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kChameleon:
      return {"<sentinel:[0-9]+>",
              "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
              "([\\t\\n]|    |  )",
              "\\p{N}",
              "[\\p{P}!-/:-@\\[-`{-~]",
              kRxGpt2};
    case Pre::kGpt4o:
      return {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|"
              "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])"
              "([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|"
              "'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
              "\\s+(?!\\S)|\\s+"};
    case Pre::kGraniteEmbMulti:
      return {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+"
              "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?"
              "((?=[\\p{L}\\p{M}])([^a-z]))+((?=[\\p{L}\\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|"
              "'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
              "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kTinyAya:
      return {"\\d{1,3}(?=(?:\\d{3})*\\b)",
              "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}"
              "\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n"
              "\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
              "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s"
              "\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kSuperbpe:
      return {"\\p{N}+", "(?=(\\d{3})+(?!\\d))"};
    case Pre::kBailingmoe:
      return {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"};
    case Pre::kSeedCoder:
      return {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
              "\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kUfakzeka:
      return {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
              "\\s+(?!\\S)|\\s+"};
    case Pre::kLaguna:
      return {"[^\\n]+|[\\n]+", kRxQwen2};
    case Pre::kExaoneMoe:
      return {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
              "(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|"
              "\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"};
    case Pre::kGemma4:
    case Pre::kSarvam:
      return {"[^\\n]+|[\\n]+"};
    case Pre::kMinicpm5:
      return {"\\p{N}{1,3}",
              "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
              "\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kDefault:
    default:
      return {"[\\p{P}\\$\\+<=>\\^~\\|]+", kRxGpt2, "\\p{N}+", "[0-9][0-9][0-9]"};
  }
}

std::string SupportedPreNames() {
  std::vector<std::string> names;
  for (const auto& e : PreTable()) names.push_back(e.name);
  return absl::StrJoin(names, ", ");
}

struct PairHash {
  size_t operator()(const std::pair<std::string, std::string>& p) const {
    return std::hash<std::string>{}(p.first) ^ (std::hash<std::string>{}(p.second) << 1);
  }
};

struct TokenData {
  std::string text;
  float score = 0.0f;
  uint32_t attr = kAttrNormal;
  TokenType gguf_type = TokenType::kNormal;
};

struct Symbol {
  int prev;
  int next;
  const char* text;
  size_t n;
};

// ---- SPM (llama.cpp llm_tokenizer_spm_session) ----
struct SpmBigram {
  struct Comparator {
    bool operator()(const SpmBigram& l, const SpmBigram& r) const {
      return (l.score < r.score) || (l.score == r.score && l.left > r.left);
    }
  };
  int left;
  int right;
  float score;
  size_t size;
};

// ---- BPE (llama.cpp llm_tokenizer_bpe_session) ----
struct BpeBigram {
  struct Comparator {
    bool operator()(const BpeBigram& l, const BpeBigram& r) const {
      return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
    }
  };
  int left;
  int right;
  std::string text;
  int rank;
  size_t size;
};

struct Fragment {
  bool is_token;
  int32_t token;
  size_t offset;
  size_t length;
};

}  // namespace

// ---------------------------------------------------------------------------------------

struct Vocab::Impl {
  VocabType type = VocabType::kSpm;
  std::string model;
  std::string pre_name;
  Pre pre = Pre::kDefault;
  bool byte_encode = true;
  int max_token_len = 0;

  int32_t bos = 1, eos = 2, eot = kTokenNull, eom = kTokenNull, unk = 0, sep = kTokenNull,
          pad = kTokenNull, mask = kTokenNull, nl = 13;
  int32_t fim_pre = kTokenNull, fim_suf = kTokenNull, fim_mid = kTokenNull,
          fim_pad = kTokenNull, fim_rep = kTokenNull, fim_sep = kTokenNull;

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
  std::vector<int32_t> special_tokens;  // cache_special_tokens (longest text first)
  std::vector<std::string> piece_cache;  // token_to_piece(id, special=true)
  std::set<int32_t> eog;
  std::vector<int32_t> eog_vec;
  std::unique_ptr<unicode::RegexSplitter> splitter;

  absl::Status Load(const gguf::GgufFile& f);

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

int32_t Vocab::Impl::ByteToTokenSpm(uint8_t ch) const {
  static const char* hex = "0123456789ABCDEF";
  const char buf[7] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>', 0};
  int32_t t = TextToToken(buf);
  if (t != kTokenNull) return t;
  t = TextToToken(std::string(1, static_cast<char>(ch)));
  if (t != kTokenNull) return t;
  return unk;  // llama.cpp throws (std::out_of_range) here; we degrade to <unk> (or nothing)
}

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

absl::Status Vocab::Impl::Load(const gguf::GgufFile& f) {
  // ---- model type ----
  {
    auto m = f.GetString("tokenizer.ggml.model");
    if (!m.ok()) {
      return absl::Status(m.status().code(),
                          absl::StrCat("tokenizer: ", f.path(), ": ", m.status().message()));
    }
    model = *m;
  }
  std::string tokenizer_pre;
  if (f.Find("tokenizer.ggml.pre") != nullptr) {
    auto p = f.GetString("tokenizer.ggml.pre");
    if (!p.ok()) return p.status();
    tokenizer_pre = *p;
  }

  if (model == "llama") {
    type = VocabType::kSpm;
    bos = 1; eos = 2; unk = 0; sep = kTokenNull; pad = kTokenNull; mask = kTokenNull;
  } else if (model == "bert") {
    type = VocabType::kWpm;
    bos = 101; eos = kTokenNull; unk = 100; sep = 102; pad = 0; mask = 103;
    add_sep = true;
  } else if (model == "gpt2" || model == "gemma4") {
    type = VocabType::kBpe;
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
    bos = 11; eos = 11; unk = kTokenNull; sep = kTokenNull; pad = kTokenNull; mask = kTokenNull;
    if (model == "gemma4") {
      bos = eos = kTokenNull;
      tokenizer_pre = "gemma4";
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "tokenizer: ", f.path(), ": unsupported tokenizer.ggml.model '", model,
        "' (supported: llama (SPM), gpt2 (BPE), gemma4 (BPE), bert (WPM))"));
  }

  if (type == VocabType::kBpe) {
    add_space_prefix = false;
    escape_whitespaces = false;
    clean_spaces = true;
    pre_name = tokenizer_pre.empty() ? "default" : tokenizer_pre;
    const PreEntry* entry = nullptr;
    for (const auto& e : PreTable()) {
      if (pre_name == e.name) {
        entry = &e;
        break;
      }
    }
    if (entry == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: ", f.path(), ": unsupported pre-tokenizer tokenizer.ggml.pre='", pre_name,
          "' (supported: ", SupportedPreNames(), ")"));
    }
    pre = entry->pre;
    if (entry->flags & kNoCleanSpaces) clean_spaces = false;
    if (entry->flags & kIgnoreMerges) ignore_merges = true;
    if (entry->flags & kPreAddBos) add_bos = true;
    if (entry->flags & kEscapeWs) escape_whitespaces = true;
    if (entry->flags & kBosNull) bos = kTokenNull;
    if (entry->flags & kPreAddSep) add_sep = true;
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

  auto get_bool = [&](const char* key, bool* out) -> absl::Status {
    if (f.Find(key) == nullptr) return absl::OkStatus();
    auto v = f.GetBool(key);
    if (!v.ok()) return v.status();
    *out = *v;
    return absl::OkStatus();
  };
  if (auto s = get_bool("tokenizer.ggml.add_space_prefix", &add_space_prefix); !s.ok()) return s;

  // ---- tokens, scores, types ----
  const gguf::Value* tokens = f.Find("tokenizer.ggml.tokens");
  if (tokens == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("tokenizer: ", f.path(), ": missing key tokenizer.ggml.tokens"));
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
  if (scores != nullptr) {
    const bool ok_type = scores->type() == gguf::ValueType::ARRAY &&
                         (scores->array_type() == gguf::ValueType::FLOAT32 ||
                          scores->array_type() == gguf::ValueType::INT32);
    if (!ok_type) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: ", f.path(), ": tokenizer.ggml.scores must be an array of float32 or int32"));
    }
    // One entry per token, exactly (llama.cpp indexes them by token id).
    if (scores->array_size() != n_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: ", f.path(), ": tokenizer.ggml.scores has ", scores->array_size(),
          " entries but tokenizer.ggml.tokens has ", n_tokens));
    }
  }
  const gguf::Value* toktypes = f.Find("tokenizer.ggml.token_type");
  if (toktypes != nullptr) {
    if (toktypes->type() != gguf::ValueType::ARRAY || toktypes->array_type() != gguf::ValueType::INT32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: ", f.path(), ": tokenizer.ggml.token_type must be an array of int32"));
    }
    if (toktypes->array_size() != n_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: ", f.path(), ": tokenizer.ggml.token_type has ", toktypes->array_size(),
          " entries but tokenizer.ggml.tokens has ", n_tokens));
    }
  }

  id_to_token.resize(n_tokens);
  for (size_t i = 0; i < n_tokens; ++i) {
    std::string word = tokens->strings()[i];
    if (word.empty()) word = absl::StrCat("[EMPTY_", i, "]");
    auto res = token_to_id.emplace(word, static_cast<int32_t>(i));
    if (!res.second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tokenizer: ", f.path(), ": duplicate token in vocabulary: '", word, "' has ids ",
          res.first->second, " and ", i));
    }
    max_token_len = std::max(max_token_len, static_cast<int>(word.size()));
    TokenData& td = id_to_token[i];
    td.text = std::move(word);
    if (scores != nullptr) {
      td.score = scores->array_type() == gguf::ValueType::INT32
                     ? static_cast<float>(scores->IntAt(i))
                     : static_cast<float>(scores->DoubleAt(i));
    }
    td.attr = kAttrNormal;
    td.gguf_type = TokenType::kNormal;
    if (toktypes != nullptr) {
      const int64_t t = toktypes->IntAt(i);
      td.gguf_type = (t >= 0 && t <= 6) ? static_cast<TokenType>(t) : TokenType::kUndefined;
      switch (td.gguf_type) {
        case TokenType::kUnknown: td.attr = kAttrUnknown; break;
        case TokenType::kUnused: td.attr = kAttrUnused; break;
        case TokenType::kNormal: td.attr = kAttrNormal; break;
        case TokenType::kControl: td.attr = kAttrControl; break;
        case TokenType::kUserDefined: td.attr = kAttrUserDefined; break;
        case TokenType::kByte: td.attr = kAttrByte; break;
        default: td.attr = kAttrUndefined; break;
      }
    }
  }

  // ---- tokenizer (pre-tokenizer regexes) ----
  if (type == VocabType::kBpe) {
    std::string err;
    splitter = unicode::RegexSplitter::Create(PreRegexes(pre), &err);
    if (splitter == nullptr) {
      return absl::InternalError(absl::StrCat("tokenizer: pre-tokenizer '", pre_name, "': ", err));
    }
  }

  // ---- newline token (computed before the special-token cache exists, as llama.cpp) ----
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

  // ---- special token ids ----
  {
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

    if (auto s = get_bool("tokenizer.ggml.add_bos_token", &add_bos); !s.ok()) return s;
    if (auto s = get_bool("tokenizer.ggml.add_eos_token", &add_eos); !s.ok()) return s;
    if (auto s = get_bool("tokenizer.ggml.add_sep_token", &add_sep); !s.ok()) return s;
    if (pre == Pre::kGemma4 && type == VocabType::kBpe && !add_bos) add_bos = true;

    auto check = [&](bool add, int32_t id, const char* add_key, const char* id_key) -> absl::Status {
      if (add && id == kTokenNull) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokenizer: ", f.path(), ": ", add_key, " is true, but ", id_key, " is not set"));
      }
      return absl::OkStatus();
    };
    if (auto s = check(add_bos, bos, "tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id"); !s.ok()) return s;
    if (auto s = check(add_eos, eos, "tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id"); !s.ok()) return s;
    if (auto s = check(add_sep, sep, "tokenizer.ggml.add_sep_token", "tokenizer.ggml.seperator_token_id"); !s.ok()) return s;

    if (auto s = get_bool("tokenizer.ggml.normalizer.lowercase", &lowercase); !s.ok()) return s;
    strip_accents = lowercase;
    if (auto s = get_bool("tokenizer.ggml.normalizer.strip_accents", &strip_accents); !s.ok()) return s;

    // Auto-detect EOT / EOM / FIM tokens by text (first match in token_to_id order wins).
    auto make_control = [&](int32_t id) { id_to_token[id].attr |= kAttrControl; };
    auto any_of = [](const std::string& s, std::initializer_list<const char*> l) {
      for (const char* x : l) if (s == x) return true;
      return false;
    };
    for (const auto& t : token_to_id) {
      const std::string& s = t.first;
      if (eot == kTokenNull &&
          any_of(s, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                     "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
                     "<end_of_utterance>"})) {
        eot = t.second;
        make_control(t.second);
      }
      if (eom == kTokenNull && s == "<|eom_id|>") {
        eom = t.second;
        make_control(t.second);
      }
      if (fim_pre == kTokenNull &&
          any_of(s, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                     "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                     "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"})) {
        fim_pre = t.second;
        make_control(t.second);
      }
      if (fim_suf == kTokenNull &&
          any_of(s, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                     "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>",
                     "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"})) {
        fim_suf = t.second;
        make_control(t.second);
      }
      if (fim_mid == kTokenNull &&
          any_of(s, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                     "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                     "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"})) {
        fim_mid = t.second;
        make_control(t.second);
      }
      if (fim_pad == kTokenNull &&
          any_of(s, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"})) {
        fim_pad = t.second;
        make_control(t.second);
      }
      if (fim_rep == kTokenNull &&
          any_of(s, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"})) {
        fim_rep = t.second;
        make_control(t.second);
      }
      if (fim_sep == kTokenNull && s == "<|file_sep|>") {
        fim_sep = t.second;
        make_control(t.second);
      }
    }

    // Control tokens whose text contains "unused" are marked unused.
    for (const auto& t : token_to_id) {
      uint32_t& attr = id_to_token[t.second].attr;
      if ((attr & kAttrControl) && !(attr & kAttrUnused) && t.first.find("unused") != std::string::npos) {
        attr |= kAttrUnused;
      }
    }

    // End-of-generation set.
    eog.clear();
    if (fim_pad != kTokenNull) eog.insert(fim_pad);
    if (fim_rep != kTokenNull) eog.insert(fim_rep);
    if (fim_sep != kTokenNull) eog.insert(fim_sep);
    for (const auto& t : token_to_id) {
      if (any_of(t.first, {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                           "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                           "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                           "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                           "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",
                           "[e~["})) {
        eog.insert(t.second);
        make_control(t.second);
      }
    }
    // gpt-oss: always render these tokens.
    for (const auto& t : token_to_id) {
      if (any_of(t.first, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})) {
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

  // ---- special tokens cache (std::sort by length, same input order as llama.cpp) ----
  for (int32_t id = 0; id < static_cast<int32_t>(n_tokens); ++id) {
    if (id_to_token[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      special_tokens.push_back(id);
    }
  }
  std::sort(special_tokens.begin(), special_tokens.end(), [&](int32_t a, int32_t b) {
    return id_to_token[a].text.size() > id_to_token[b].text.size();
  });

  // ---- token to piece cache ----
  piece_cache.resize(n_tokens);
  for (int32_t id = 0; id < static_cast<int32_t>(n_tokens); ++id) piece_cache[id] = ComputePiece(id);

  // ---- per-model token attributes ----
  {
    auto contains_any = [](const std::string& s, std::initializer_list<const char*> subs) {
      for (const char* x : subs) if (s.find(x) != std::string::npos) return true;
      return false;
    };
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

    if (contains_any(tokenizer_pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        contains_any(general_arch, {"nomic-bert-moe", "jina-bert-v3"})) {
      set_attr("<mask>", kAttrLstrip, true);
    } else if (contains_any(model_name, {"phi-3", "phi3"})) {
      for (int32_t id : special_tokens) id_to_token[id].attr |= kAttrRstrip;
      set_attr("</s>", kAttrRstrip, true);
      for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr(t, kAttrRstrip, false);
    } else if (contains_any(model_name, {"modern-bert"})) {
      set_attr("[MASK]", kAttrLstrip, true);
    }
  }
  return absl::OkStatus();
}

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

std::vector<int32_t> Vocab::Impl::Tokenize(const std::string& text, bool add_special,
                                           bool parse_special) const {
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

void Vocab::Impl::SpmTokenize(const std::string& text, std::vector<int32_t>& output) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigram::Comparator> work_queue;
  std::map<std::string, std::pair<int, int>> rev_merge;

  int index = 0;
  size_t offs = 0;
  while (offs < text.size()) {
    Symbol sym;
    const size_t len = unicode::Utf8Len(text[offs]);
    sym.text = text.c_str() + offs;
    sym.n = std::min(len, text.size() - offs);
    offs += sym.n;
    sym.prev = index - 1;
    sym.next = offs == text.size() ? -1 : index + 1;
    index++;
    symbols.push_back(sym);
  }

  auto try_add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string t(symbols[left].text, symbols[left].n + symbols[right].n);
    const int32_t token = TextToToken(t);
    if (token == kTokenNull) return;
    work_queue.push({left, right, id_to_token[token].score, t.size()});
    rev_merge[t] = std::make_pair(left, right);
  };

  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!work_queue.empty()) {
    const SpmBigram bigram = work_queue.top();
    work_queue.pop();
    Symbol& left_sym = symbols[bigram.left];
    Symbol& right_sym = symbols[bigram.right];
    if (left_sym.n == 0 || right_sym.n == 0 || left_sym.n + right_sym.n != bigram.size) continue;
    left_sym.n += right_sym.n;
    right_sym.n = 0;
    left_sym.next = right_sym.next;
    if (right_sym.next >= 0) symbols[right_sym.next].prev = bigram.left;
    try_add_bigram(left_sym.prev, bigram.left);
    try_add_bigram(bigram.left, left_sym.next);
  }

  std::function<void(const Symbol&, int)> resegment = [&](const Symbol& symbol, int depth) {
    const std::string t(symbol.text, symbol.n);
    const int32_t token = TextToToken(t);
    if (token != kTokenNull) {
      output.push_back(token);
      return;
    }
    auto p = rev_merge.find(t);
    if (p == rev_merge.end() || depth > 64) {
      for (size_t j = 0; j < symbol.n; ++j) {
        const int32_t id = ByteToTokenSpm(static_cast<uint8_t>(symbol.text[j]));
        if (id != kTokenNull) output.push_back(id);
      }
      return;
    }
    resegment(symbols[p->second.first], depth + 1);
    resegment(symbols[p->second.second], depth + 1);
  };
  for (int i = 0; i != -1; i = symbols[i].next) resegment(symbols[i], 0);
}

void Vocab::Impl::BpeTokenize(const std::string& text, std::vector<int32_t>& output) const {
  const std::vector<std::string> words = splitter->Split(text, byte_encode);
  std::vector<Symbol> symbols_final;
  int final_prev_index = -1;

  for (const std::string& word : words) {
    std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeBigram::Comparator> work_queue;
    std::vector<Symbol> symbols;
    int index = 0;
    size_t offset = 0;

    if (ignore_merges && TextToToken(word) != kTokenNull) {
      symbols.push_back({-1, -1, word.c_str(), word.size()});
      offset = word.size();
    } else if (pre == Pre::kGemma4 && word.find_first_not_of('\n') == std::string::npos) {
      if (TextToToken(word) != kTokenNull) {
        symbols.push_back({-1, -1, word.c_str(), word.size()});
        offset = word.size();
      }
    }
    while (offset < word.size()) {
      Symbol sym;
      const size_t char_len = std::min(word.size() - offset, unicode::Utf8Len(word[offset]));
      sym.text = word.c_str() + offset;
      sym.n = char_len;
      offset += sym.n;
      sym.prev = index - 1;
      sym.next = offset == word.size() ? -1 : index + 1;
      index++;
      symbols.push_back(sym);
    }

    auto add_new_bigram = [&](int left, int right) {
      if (left == -1 || right == -1) return;
      std::string lt(symbols[left].text, symbols[left].n);
      std::string rt(symbols[right].text, symbols[right].n);
      const int rank = FindBpeRank(lt, rt);
      if (rank < 0) return;
      BpeBigram b;
      b.left = left;
      b.right = right;
      b.size = lt.size() + rt.size();
      b.text = std::move(lt) + rt;
      b.rank = rank;
      work_queue.push(std::move(b));
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_new_bigram(i - 1, i);

    while (!work_queue.empty()) {
      const BpeBigram bigram = work_queue.top();
      work_queue.pop();
      Symbol& left_symbol = symbols[bigram.left];
      Symbol& right_symbol = symbols[bigram.right];
      if (left_symbol.n == 0 || right_symbol.n == 0) continue;
      const std::string lt(left_symbol.text, left_symbol.n);
      const std::string rt(right_symbol.text, right_symbol.n);
      if (lt + rt != bigram.text) continue;  // outdated
      left_symbol.n += right_symbol.n;
      right_symbol.n = 0;
      left_symbol.next = right_symbol.next;
      if (right_symbol.next >= 0) symbols[right_symbol.next].prev = bigram.left;
      add_new_bigram(left_symbol.prev, bigram.left);
      add_new_bigram(bigram.left, left_symbol.next);
    }

    // Symbols point into `word`; resolve them to tokens now (words is alive until return,
    // so keeping pointers in symbols_final is safe).
    for (Symbol& sym : symbols) {
      if (sym.n > 0) {
        sym.prev = final_prev_index;
        sym.next = -1;
        if (final_prev_index != -1) symbols_final[final_prev_index].next = static_cast<int>(symbols_final.size());
        symbols_final.push_back(sym);
        final_prev_index = static_cast<int>(symbols_final.size()) - 1;
      }
    }
  }

  if (symbols_final.empty()) return;
  for (int i = 0; i != -1; i = symbols_final[i].next) {
    const Symbol& symbol = symbols_final[i];
    if (symbol.n == 0) continue;
    const std::string str(symbol.text, symbol.n);
    const int32_t token = TextToToken(str);
    if (token == kTokenNull) {
      for (char c : str) {
        int32_t tb;
        if (byte_encode) {
          tb = TextToToken(std::string(1, c));
        } else {
          static const char* hex = "0123456789ABCDEF";
          const uint8_t ch = static_cast<uint8_t>(c);
          const char buf[7] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>', 0};
          tb = TextToToken(buf);
        }
        if (tb != kTokenNull) output.push_back(tb);
      }
    } else {
      output.push_back(token);
    }
  }
}

std::vector<std::string> Vocab::Impl::WpmPreprocess(const std::string& text) const {
  std::vector<uint32_t> cpts = unicode::CptsFromUtf8(text);
  if (strip_accents) {
    for (uint32_t& c : cpts) c = unicode::NfdFirst(c);
  }
  std::vector<std::string> words(1, "");
  for (const uint32_t cpt : cpts) {
    const uint16_t flags = unicode::CptFlags(cpt);
    if (flags & unicode::kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cpt == 0 || cpt == 0xFFFD || (flags & unicode::kControl)) continue;
    if (strip_accents && (flags & unicode::kAccentMark)) continue;
    const std::string s = unicode::CptToUtf8(lowercase ? unicode::ToLower(cpt) : cpt);
    const bool is_chinese = (cpt >= 0x04E00 && cpt <= 0x09FFF) || (cpt >= 0x03400 && cpt <= 0x04DBF) ||
                            (cpt >= 0x20000 && cpt <= 0x2A6DF) || (cpt >= 0x2A700 && cpt <= 0x2B73F) ||
                            (cpt >= 0x2B740 && cpt <= 0x2B81F) || (cpt >= 0x2B920 && cpt <= 0x2CEAF) ||
                            (cpt >= 0x0F900 && cpt <= 0x0FAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
    if ((flags & unicode::kPunctuation) || (cpt < 0x7F && (flags & unicode::kSymbol)) || is_chinese) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void Vocab::Impl::WpmTokenize(const std::string& text, std::vector<int32_t>& output) const {
  for (const std::string& word : WpmPreprocess(text)) {
    if (word.empty()) continue;
    const std::string word1 = kEscSpace + word;
    const int n = static_cast<int>(word1.size());
    const size_t current_tokens = output.size();
    for (int i = 0; i < n; ++i) {
      bool match = false;
      for (int j = std::min(n, i + max_token_len + 1); j > i; j--) {
        const int32_t id = TextToToken(word1.substr(i, j - i));
        if (id != kTokenNull) {
          output.push_back(id);
          match = true;
          i = j - 1;
          break;
        }
      }
      if (!match) {
        output.resize(current_tokens);
        break;
      }
    }
    if (current_tokens == output.size() && unk != kTokenNull) output.push_back(unk);
  }
}

// ---------------------------------------------------------------------------------------

const char* VocabTypeName(VocabType t) {
  switch (t) {
    case VocabType::kSpm: return "SPM";
    case VocabType::kBpe: return "BPE";
    case VocabType::kWpm: return "WPM";
  }
  return "unknown";
}

Vocab::Vocab(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Vocab::~Vocab() = default;

absl::StatusOr<std::unique_ptr<Vocab>> Vocab::FromGguf(const gguf::GgufFile& f) {
  auto impl = std::make_unique<Impl>();
  absl::Status s = impl->Load(f);
  if (!s.ok()) return s;
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
      return absl::InvalidArgumentError(absl::StrCat("token id ", ids[i], " at position ", i,
                                                     " is out of range [0, ", n_tokens(), ")"));
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
int32_t Vocab::TextToToken(absl::string_view text) const {
  return impl_->TextToToken(std::string(text));
}

std::vector<int32_t> Vocab::Tokenize(absl::string_view text, bool add_special,
                                     bool parse_special) const {
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

std::string Vocab::Detokenize(const std::vector<int32_t>& ids, bool remove_special,
                              bool unparse_special) const {
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

StreamingDetokenizer::StreamingDetokenizer(const Vocab& vocab, bool special)
    : vocab_(vocab), special_(special) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  pending_ += vocab_.TokenToPiece(id, special_);
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
