// Pre-tokenizers: tokenizer.ggml.pre names, their flags and split regexes (llama.cpp
// llm_tokenizer_bpe constructor + the tokenizer_pre switch in llama_vocab::impl::load).
#include <string>
#include <vector>

#include "absl/strings/str_join.h"

#include "libs/tokenizer/vocab_impl.h"

namespace herd::tokenizer::internal {

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

const char* const kRxGpt2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
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
      return {
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
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
      return {
          "[\uAC00-\uD7A3\u3131-\u318E]+|[\uFF01\u2026\u201C\u201D\u2018\u2019\u2014\uFF1A"
          "\uFF1B\uFF0C\u3001-\u303F\uFE30-\uFE4F]+|[\u3105-\u312F]+|"
          "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+",
          "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}"
          "\\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n"
          "\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}| ?[^\\s\\p{L}"
          "\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kDeepseekCoder:
      return {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+", "\\p{N}"};
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
      return {
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
          "[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
          "\\s+(?!\\S)|\\s+"};
    case Pre::kPoro:
      return {kRxPoro};
    case Pre::kViking:
      return {kRxPoro, "\\p{N}"};
    case Pre::kTekken:
      return {
          "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n"
          "\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}"
          "\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kChameleon:
      return {"<sentinel:[0-9]+>",      "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
              "([\\t\\n]|    |  )",     "\\p{N}",
              "[\\p{P}!-/:-@\\[-`{-~]", kRxGpt2};
    case Pre::kGpt4o:
      return {
          "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|"
          "'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])"
          "([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|"
          "'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|"
          "\\s+(?!\\S)|\\s+"};
    case Pre::kGraniteEmbMulti:
      return {
          "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}\\p{M}])([^a-z]))*((?=[\\p{L}\\p{M}])([^A-Z]))+"
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
      return {
          "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
          "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"};
    case Pre::kSeedCoder:
      return {
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
          "\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case Pre::kUfakzeka:
      return {
          "[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
          "\\s+(?!\\S)|\\s+"};
    case Pre::kLaguna:
      return {"[^\\n]+|[\\n]+", kRxQwen2};
    case Pre::kExaoneMoe:
      return {
          "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
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

const PreEntry* FindPre(const std::string& name) {
  for (const auto& e : PreTable()) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

}  // namespace herd::tokenizer::internal
