// Writes the seed corpora of tests/fuzz/corpus/ (run once by hand; the outputs are
// committed). Build: see tests/fuzz/README.md.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "libs/engine/spec/ngram_cache.h"
#include "libs/gguf/gguf.h"
#include "tests/fuzz/vocab_builder.h"

namespace {

void Write(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary) << bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string root = argc > 1 ? argv[1] : "tests/fuzz/corpus";
  using herd::gguf::GgufWriter;
  using herd::gguf::Value;
  using herd::gguf::ValueType;
  // GGUF: the tiny vocabularies and a file with every value kind and two tensors.
  for (const char* kind : {"spm", "bpe", "wpm"}) {
    Write(root + "/gguf_fuzz", std::string("vocab_") + kind + ".gguf", herd::fuzz::TinyVocabGguf(kind));
  }
  {
    GgufWriter w;
    w.SetValue("general.architecture", Value::String("llama"));
    w.SetValue("general.alignment", Value::U32(64));
    w.SetValue("u8", Value::U8(7));
    w.SetValue("i16", Value::I16(-3));
    w.SetValue("u64", Value::U64(1ull << 40));
    w.SetValue("f64", Value::F64(0.5));
    w.SetValue("b", Value::Bool(true));
    w.SetValue("ints", Value::I32Array({1, 2, 3}));
    w.SetValue("floats", Value::F32Array({1.5f, -2.0f}));
    w.SetValue("nested", Value::NestedArray(ValueType::ARRAY, {Value::I32Array({1}), Value::StringArray({"a", "b"})}));
    static const float f32[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    static const uint8_t q8[34] = {0x00, 0x3c, 1, 2, 3};
    if (!w.AddTensor("a.weight", herd::GgmlType::F32, {4, 2}, f32, sizeof(f32)).ok()) return 1;
    if (!w.AddTensor("b.weight", herd::GgmlType::Q8_0, {32}, q8, sizeof(q8)).ok()) return 1;
    Write(root + "/gguf_fuzz", "tensors.gguf", w.WriteToString());
  }
  // Tokenizer: first byte = mode (bits 0-1 vocab spm/bpe/wpm, bit 2 add_special, bit 3
  // parse_special), then the text.
  const std::vector<std::string> texts = {"Hello world",
                                          " hello  world\n\n",
                                          "the ending, er, an ingot",
                                          "caf\xC3\xA9 \xE2\x82\xAC 10",
                                          "\xF0\x9F\x98\x80 emoji",
                                          "<|im_end|> <|fim_prefix|>x",
                                          "[e~[ [UNK] [MASK]",
                                          "'s 't 're 123456 \t\r\n",
                                          "\xE4\xBD\xA0\xE5\xA5\xBD",
                                          "\xFF\xFE bad \xC3"};
  int n = 0;
  for (const std::string& t : texts) {
    for (char mode : {0, 1, 2, 12, 13, 14}) {
      Write(root + "/tokenizer_fuzz", "text_" + std::to_string(n++), std::string(1, mode) + t);
    }
  }
  // Detokenizer: bytes are byte tokens; 0xF? + a byte selects any token.
  const std::vector<std::string> bytes = {"hello",
                                          "\xE2\x82\xAC\xF0\x9F\x98\x80",
                                          "\xE2\x82",
                                          "\xC0\x80\xED\xA0\x80",
                                          "\xF4\x90\x80\x80",
                                          "\xF0\x01\xF0\x02"
                                          "ab",
                                          "\xF0\x9F\x98"};
  n = 0;
  for (const std::string& b : bytes) Write(root + "/detokenizer_fuzz", "bytes_" + std::to_string(n++), b);
  // n-gram caches: built from token sequences with NgramCacheUpdate.
  namespace spec = herd::engine::spec;
  const std::vector<std::vector<int32_t>> seqs = {{1, 2, 3, 1, 2, 3, 1, 2, 4}, {5, 5, 5, 5, 5}, {7}, {}};
  n = 0;
  for (const auto& s : seqs) {
    spec::NgramCache c;
    spec::NgramCacheUpdate(&c, 1, 4, s, static_cast<int64_t>(s.size()));
    Write(root + "/ngram_cache_fuzz", "cache_" + std::to_string(n++), spec::NgramCacheSerialize(c));
  }
  Write(root + "/ngram_cache_fuzz", "static_2gram",
        spec::NgramCacheSerialize(spec::NgramCacheCreateStatic({1, 2, 3, 2, 3})));
  return 0;
}
