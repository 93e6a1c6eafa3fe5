#include "tests/fuzz/vocab_builder.h"

#include <cstdio>
#include <cstdlib>

#include "libs/tokenizer/unicode.h"

namespace herd::fuzz {
namespace {

// GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100+.
std::string ByteToUnicode(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  if (printable) return tokenizer::unicode::CptToUtf8(static_cast<uint32_t>(b));
  int n = 0;
  for (int c = 0; c < b; ++c) {
    const bool p = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
    if (!p) ++n;
  }
  return tokenizer::unicode::CptToUtf8(static_cast<uint32_t>(256 + n));
}

}  // namespace

std::string TinyVocabGguf(const std::string& kind) {
  gguf::GgufWriter w;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;  // 1 normal, 2 unknown, 3 control, 6 byte
  auto add = [&](const std::string& t, float score, int32_t type) {
    tokens.push_back(t);
    scores.push_back(score);
    types.push_back(type);
  };
  const std::vector<std::string> words = {"the",
                                          "he",
                                          "ll",
                                          "llo",
                                          "hello",
                                          "wor",
                                          "world",
                                          "ing",
                                          "er",
                                          "an",
                                          "\xC3\xA9",
                                          "\xE2\x82\xAC",
                                          "\xF0\x9F\x98\x80",
                                          "<|im_end|>",
                                          "<|fim_prefix|>",
                                          "[e~["};
  if (kind == "spm") {
    w.SetValue("tokenizer.ggml.model", gguf::Value::String("llama"));
    add("<unk>", 0, 2);
    add("<s>", 0, 3);
    add("</s>", 0, 3);
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      snprintf(buf, sizeof(buf), "<0x%02X>", b);
      add(buf, 0, 6);
    }
    const char* esc = "\xE2\x96\x81";
    add(esc, -1, 1);
    float s = -2;
    for (const std::string& word : words) {
      add(word, s, word[0] == '<' || word[0] == '[' ? 3 : 1);
      add(esc + word, s - 0.5f, 1);
      s -= 1;
    }
  } else if (kind == "bpe") {
    w.SetValue("tokenizer.ggml.model", gguf::Value::String("gpt2"));
    w.SetValue("tokenizer.ggml.pre", gguf::Value::String("llama3"));
    for (int b = 0; b < 256; ++b) add(ByteToUnicode(b), 0, 1);
    const std::string sp = ByteToUnicode(' ');
    std::vector<std::string> merges = {"h e", "l l",  "he ll", "hell o", sp + " t", "t h", "th e",
                                       "w o", "wo r", "i n",   "in g",   "e r",     "a n", sp + " h"};
    for (const std::string& m : merges) {
      std::string t = m;
      t.erase(t.find(' '), 1);
      bool dup = false;
      for (const std::string& x : tokens) dup = dup || x == t;
      if (!dup) add(t, 0, 1);
    }
    add("<|begin_of_text|>", 0, 3);
    add("<|im_end|>", 0, 3);
    add("<|fim_prefix|>", 0, 3);
    w.SetValue("tokenizer.ggml.merges", gguf::Value::StringArray(merges));
    w.SetValue("tokenizer.ggml.bos_token_id", gguf::Value::U32(static_cast<uint32_t>(tokens.size() - 3)));
  } else {  // wpm
    w.SetValue("tokenizer.ggml.model", gguf::Value::String("bert"));
    add("[PAD]", 0, 3);
    add("[UNK]", 0, 2);
    add("[CLS]", 0, 3);
    add("[SEP]", 0, 3);
    add("[MASK]", 0, 3);
    for (int c = 0x21; c < 0x7F; ++c) {
      add(std::string("\xE2\x96\x81") + static_cast<char>(c), 0, 1);
      add(std::string(1, static_cast<char>(c)), 0, 1);
    }
    for (const std::string& word : words) {
      if (word[0] == '<' || word[0] == '[' || word.size() < 2) continue;
      add("\xE2\x96\x81" + word, 0, 1);
    }
    w.SetValue("tokenizer.ggml.unknown_token_id", gguf::Value::U32(1));
    w.SetValue("tokenizer.ggml.bos_token_id", gguf::Value::U32(2));
    w.SetValue("tokenizer.ggml.seperator_token_id", gguf::Value::U32(3));
    w.SetValue("tokenizer.ggml.padding_token_id", gguf::Value::U32(0));
  }
  w.SetValue("tokenizer.ggml.tokens", gguf::Value::StringArray(tokens));
  w.SetValue("tokenizer.ggml.scores", gguf::Value::F32Array(scores));
  w.SetValue("tokenizer.ggml.token_type", gguf::Value::I32Array(types));
  return w.WriteToString();
}

std::unique_ptr<tokenizer::Vocab> TinyVocab(const std::string& kind) {
  auto f = gguf::GgufFile::FromBytes(TinyVocabGguf(kind));
  if (!f.ok()) {
    fprintf(stderr, "TinyVocab(%s): %s\n", kind.c_str(), f.status().ToString().c_str());
    abort();
  }
  auto v = tokenizer::Vocab::FromGguf(**f);
  if (!v.ok()) {
    fprintf(stderr, "TinyVocab(%s): %s\n", kind.c_str(), v.status().ToString().c_str());
    abort();
  }
  return std::move(*v);
}

}  // namespace herd::fuzz
