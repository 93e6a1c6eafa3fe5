#include "libs/tokenizer/tokenizer.h"

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/gguf/gguf.h"
#include "tests/shared_data.h"

namespace herd::tokenizer {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::Value;

#define REQUIRE_SHARED(var)            \
  const std::string var = SharedDir(); \
  if (var.empty()) GTEST_SKIP() << kSharedDirMissing

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Vocabularies are loaded once per path and shared by the tests.
const Vocab* LoadVocab(const std::string& path, std::string* error = nullptr) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Vocab>>();
  auto it = cache->find(path);
  if (it != cache->end()) return it->second.get();
  auto f = GgufFile::Open(path);
  if (!f.ok()) {
    if (error) *error = f.status().ToString();
    return nullptr;
  }
  auto v = Vocab::FromGguf(**f);
  if (!v.ok()) {
    if (error) *error = v.status().ToString();
    return nullptr;
  }
  const Vocab* raw = v->get();
  (*cache)[path] = std::move(*v);
  return raw;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      out += absl::StrCat("\\x", absl::Hex(c, absl::kZeroPad2));
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

bool IsValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char b = s[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// llama.cpp tests/test-tokenizer-0 vectors: .inp strings separated by
// "\n__ggml_vocab_test__\n", .out one line of ids per string; tokenized with
// add_special=false, parse_special=false.

struct VocabVectors {
  std::vector<std::string> inputs;
  std::vector<std::vector<int32_t>> expected;
};

bool ReadVectors(const std::string& base, VocabVectors* v, std::string* error) {
  const std::string raw = ReadFile(base + ".inp");
  const std::string out = ReadFile(base + ".out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  while (pos < raw.size()) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      v->inputs.push_back(raw.substr(pos));
      break;
    }
    v->inputs.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<int32_t> ids;
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) ids.push_back(id);
    v->expected.push_back(std::move(ids));
  }
  if (v->inputs.size() != v->expected.size()) {
    *error = absl::StrCat(base, ": ", v->inputs.size(), " inputs vs ", v->expected.size(), " outputs");
    return false;
  }
  return !v->inputs.empty();
}

const char* const kVectorVocabs[] = {"bert-bge", "deepseek-coder", "deepseek-llm", "falcon",   "gpt-2", "llama-spm",
                                     "mpt",      "phi-3",          "refact",       "starcoder"};

class VocabVectorsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectorsTest, MatchesLlamaCppIds) {
  REQUIRE_SHARED(shared);
  const std::string base = shared + "/models/vocab/ggml-vocab-" + GetParam() + ".gguf";
  std::string err;
  const Vocab* vocab = LoadVocab(base, &err);
  ASSERT_NE(vocab, nullptr) << err;
  VocabVectors v;
  ASSERT_TRUE(ReadVectors(base, &v, &err)) << err;
  int failures = 0;
  for (size_t i = 0; i < v.inputs.size(); ++i) {
    const std::vector<int32_t> got = vocab->Tokenize(v.inputs[i], /*add_special=*/false,
                                                     /*parse_special=*/false);
    if (got != v.expected[i]) ++failures;
    EXPECT_EQ(got, v.expected[i]) << GetParam() << " case " << i << ": '" << Escape(v.inputs[i])
                                  << "'\n got:  " << absl::StrJoin(got, " ")
                                  << "\n want: " << absl::StrJoin(v.expected[i], " ");
  }
  EXPECT_EQ(failures, 0) << failures << " of " << v.inputs.size() << " cases differ";
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabVectorsTest,
                         ::testing::ValuesIn(std::vector<std::string>(std::begin(kVectorVocabs),
                                                                      std::end(kVectorVocabs))),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(VocabVectors, EveryVectorFileIsCovered) {
  REQUIRE_SHARED(shared);
  const std::string dir = shared + "/models/vocab";
  std::set<std::string> covered(std::begin(kVectorVocabs), std::end(kVectorVocabs));
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  int n = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    const std::string prefix = "ggml-vocab-", suffix = ".gguf.inp";
    if (name.size() > prefix.size() + suffix.size() && name.rfind(prefix, 0) == 0 &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ++n;
      const std::string v = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
      EXPECT_TRUE(covered.count(v)) << "vocab test vectors not covered: " << name;
    }
  }
  closedir(d);
  EXPECT_EQ(n, 10);
}

// Detokenize(Tokenize(s)) == s for lossless vocabularies (SPM with byte fallback, and
// byte-level BPE without clean_up_tokenization_spaces).
TEST(VocabVectors, RoundTripsLosslessVocabs) {
  REQUIRE_SHARED(shared);
  for (const char* name : {"llama-spm", "phi-3", "deepseek-coder", "deepseek-llm"}) {
    const std::string base = absl::StrCat(shared, "/models/vocab/ggml-vocab-", name, ".gguf");
    std::string err;
    const Vocab* vocab = LoadVocab(base, &err);
    ASSERT_NE(vocab, nullptr) << err;
    VocabVectors v;
    ASSERT_TRUE(ReadVectors(base, &v, &err)) << err;
    for (const std::string& s : v.inputs) {
      const auto ids = vocab->Tokenize(s, false, false);
      EXPECT_EQ(vocab->Detokenize(ids), s) << name << ": '" << Escape(s) << "'";
      // With BOS added and removed again: llama.cpp then keeps the SPM prefix space
      // (remove_space = false once a BOS was removed).
      const std::string lead = (vocab->add_space_prefix() && !s.empty()) ? " " : "";
      EXPECT_EQ(vocab->Detokenize(vocab->Tokenize(s, true, false), /*remove_special=*/true), lead + s)
          << name << ": '" << Escape(s) << "'";
      // Dropping the BOS by hand round-trips exactly.
      auto with_bos = vocab->Tokenize(s, true, false);
      if (!with_bos.empty() && with_bos[0] == vocab->bos()) with_bos.erase(with_bos.begin());
      EXPECT_EQ(vocab->Detokenize(with_bos), s) << name << ": '" << Escape(s) << "'";
    }
  }
}

// ---------------------------------------------------------------------------------------
// Reference JSONs (llama.cpp runs): prompt -> prompt_ids, output_ids -> output text.

std::string HexDecode(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  }
  return out;
}

TEST(Reference, StoriesOnceUponATime) {
  REQUIRE_SHARED(shared);
  std::string err;
  const Vocab* vocab = LoadVocab(shared + "/models/stories260K.gguf", &err);
  ASSERT_NE(vocab, nullptr) << err;
  EXPECT_EQ(vocab->type(), VocabType::kSpm);
  EXPECT_EQ(vocab->n_tokens(), 512);
  EXPECT_EQ(vocab->bos(), 1);
  EXPECT_EQ(vocab->eos(), 2);
  EXPECT_EQ(vocab->sep(), kTokenNull);  // 0xFFFFFFFF in the file: ignored, as llama.cpp
  EXPECT_TRUE(vocab->add_bos());
  EXPECT_FALSE(vocab->add_eos());
  const std::vector<int32_t> want = {1, 403, 407, 261, 378};
  EXPECT_EQ(vocab->Tokenize("Once upon a time", true, false), want);
  EXPECT_EQ(vocab->Tokenize("Once upon a time", true, true), want);
  EXPECT_EQ(vocab->Detokenize({403, 407, 261, 378}), "Once upon a time");  // prefix space stripped
  // llama.cpp: removing the BOS disables the prefix-space strip; a kept BOS renders empty
  // and still consumes the strip.
  EXPECT_EQ(vocab->Detokenize(want, /*remove_special=*/true), " Once upon a time");
  EXPECT_EQ(vocab->Detokenize(want), " Once upon a time");
  EXPECT_EQ(vocab->Detokenize(want, false, /*unparse_special=*/true), "<s> Once upon a time");
  EXPECT_EQ(vocab->Tokenize("", true, false), std::vector<int32_t>{1});
  EXPECT_TRUE(vocab->Tokenize("", false, false).empty());
  EXPECT_TRUE(vocab->IsEog(2));
  EXPECT_FALSE(vocab->IsEog(1));
  EXPECT_EQ(vocab->nl(), 13);  // <0x0A>
}

TEST(Reference, AllReferenceJsons) {
  REQUIRE_SHARED(shared);
  const std::string dir = shared + "/reference";
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr) << dir;
  std::vector<std::string> files;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0 && name[1] == '-') {
      files.push_back(name);
    }
  }
  closedir(d);
  std::sort(files.begin(), files.end());
  int checked = 0;
  for (const std::string& name : files) {
    SCOPED_TRACE(name);
    const nlohmann::json ref = nlohmann::json::parse(ReadFile(dir + "/" + name), nullptr, false);
    ASSERT_FALSE(ref.is_discarded());
    if (!ref.contains("prompt_ids") || !ref.contains("model_path")) continue;
    std::string err;
    const Vocab* vocab = LoadVocab(shared + "/" + ref["model_path"].get<std::string>(), &err);
    ASSERT_NE(vocab, nullptr) << err;
    const std::string prompt = ref["prompt"].get<std::string>();
    const auto prompt_ids = ref["prompt_ids"].get<std::vector<int32_t>>();
    const bool add_bos = ref.value("add_bos", true);
    EXPECT_EQ(vocab->Tokenize(prompt, add_bos, false), prompt_ids);
    EXPECT_EQ(vocab->Tokenize(prompt, add_bos, true), prompt_ids);
    EXPECT_EQ(vocab->Detokenize(std::vector<int32_t>(prompt_ids.begin() + (add_bos ? 1 : 0), prompt_ids.end())),
              prompt);

    // output_text_hex = concatenation of llama_token_to_piece(id, lstrip=0, special=true).
    const auto output_ids = ref["output_ids"].get<std::vector<int32_t>>();
    ASSERT_TRUE(vocab->ValidateTokens(output_ids).ok());
    std::string pieces;
    StreamingDetokenizer stream(*vocab, /*special=*/true);
    std::string streamed;
    for (int32_t id : output_ids) {
      pieces += vocab->TokenToPiece(id, /*special=*/true);
      const std::string chunk = stream.Push(id);
      EXPECT_TRUE(IsValidUtf8(chunk));
      streamed += chunk;
    }
    streamed += stream.Flush();
    EXPECT_EQ(pieces, HexDecode(ref["output_text_hex"].get<std::string>()));
    EXPECT_TRUE(IsValidUtf8(streamed));
    // output_text is the same bytes decoded with U+FFFD for ill-formed sequences.
    EXPECT_EQ(streamed, ref["output_text"].get<std::string>());
    ++checked;
  }
  EXPECT_GE(checked, 6);  // at least the A and B cases
}

// ---------------------------------------------------------------------------------------
// Specific behaviours on the shared vocabularies.

TEST(SharedVocabs, BaichuanAndGptNeoxLoad) {
  REQUIRE_SHARED(shared);
  std::string err;
  const Vocab* baichuan = LoadVocab(shared + "/models/vocab/ggml-vocab-baichuan.gguf", &err);
  ASSERT_NE(baichuan, nullptr) << err;
  EXPECT_EQ(baichuan->type(), VocabType::kSpm);
  EXPECT_EQ(baichuan->n_tokens(), 64000);
  const auto b_ids = baichuan->Tokenize("Hello world! 你好，世界 🦙", true, false);
  ASSERT_GT(b_ids.size(), 2u);
  EXPECT_EQ(b_ids[0], baichuan->bos());
  EXPECT_EQ(baichuan->Detokenize(std::vector<int32_t>(b_ids.begin() + 1, b_ids.end())),
            "Hello world! 你好，世界 🦙");

  const Vocab* neox = LoadVocab(shared + "/models/vocab/ggml-vocab-gpt-neox.gguf", &err);
  ASSERT_NE(neox, nullptr) << err;
  EXPECT_EQ(neox->type(), VocabType::kBpe);
  EXPECT_EQ(neox->pre_name(), "default");
  EXPECT_EQ(neox->n_tokens(), 50432);
  EXPECT_FALSE(neox->add_bos());
  EXPECT_TRUE(neox->IsEog(0));  // <|endoftext|>
  const auto n_ids = neox->Tokenize("Hello world", false, false);
  EXPECT_EQ(n_ids.size(), 2u);
  EXPECT_EQ(neox->Detokenize(n_ids), "Hello world");
  // Whitespace-run tokens are user-defined in NeoX and are matched even without parse_special.
  EXPECT_EQ(neox->Detokenize(neox->Tokenize("a    b", false, false)), "a    b");
}

TEST(SharedVocabs, SpecialTokenParsing) {
  REQUIRE_SHARED(shared);
  std::string err;
  const Vocab* spm = LoadVocab(shared + "/models/vocab/ggml-vocab-llama-spm.gguf", &err);
  ASSERT_NE(spm, nullptr) << err;
  const int32_t hello = spm->Tokenize("Hello", false, false).at(0);  // "▁Hello"
  EXPECT_EQ(spm->TokenText(hello), "\xE2\x96\x81Hello");
  // parse_special: "<s>" becomes BOS and the following text gets the space prefix again.
  EXPECT_EQ(spm->Tokenize("<s>Hello</s>", false, true), (std::vector<int32_t>{1, hello, 2}));
  // Without parse_special the control texts are plain text.
  const auto plain = spm->Tokenize("<s>Hello</s>", false, false);
  EXPECT_GT(plain.size(), 3u);
  for (int32_t id : plain) EXPECT_FALSE(spm->IsControl(id));
  EXPECT_EQ(spm->Detokenize(plain), "<s>Hello</s>");
  EXPECT_EQ(spm->TokenToPiece(1, false), "");
  EXPECT_EQ(spm->TokenToPiece(1, true), "<s>");
  EXPECT_EQ(spm->TokenToPiece(hello, false), " Hello");
  EXPECT_EQ(spm->TokenToPiece(hello, false, /*lstrip=*/1), "Hello");
  EXPECT_EQ(spm->TokenToPiece(3 + 0x41, false), "A");  // <0x41>
  EXPECT_TRUE(spm->IsByte(3 + 0x41));

  const Vocab* gpt2 = LoadVocab(shared + "/models/vocab/ggml-vocab-gpt-2.gguf", &err);
  ASSERT_NE(gpt2, nullptr) << err;
  EXPECT_EQ(gpt2->Tokenize("a<|endoftext|>b", false, true), (std::vector<int32_t>{64, 50256, 65}));
  EXPECT_NE(gpt2->Tokenize("a<|endoftext|>b", false, false).size(), 3u);
  EXPECT_TRUE(gpt2->IsEog(50256));
  EXPECT_EQ(gpt2->TokenToPiece(gpt2->Tokenize(" hello", false, false).at(0), false), " hello");
  // clean_up_tokenization_spaces: " ," -> ","
  EXPECT_EQ(gpt2->Detokenize(gpt2->Tokenize("Hello , world !", false, false)), "Hello, world!");

  const Vocab* phi3 = LoadVocab(shared + "/models/vocab/ggml-vocab-phi-3.gguf", &err);
  ASSERT_NE(phi3, nullptr) << err;
  const int32_t end = phi3->TextToToken("<|end|>");
  const int32_t eot = phi3->TextToToken("<|endoftext|>");
  ASSERT_NE(end, kTokenNull);
  ASSERT_NE(eot, kTokenNull);
  EXPECT_TRUE(phi3->IsEog(end));
  EXPECT_TRUE(phi3->IsEog(eot));
  EXPECT_TRUE(phi3->IsEog(phi3->eos()));
  EXPECT_TRUE(phi3->Attr(end) & kAttrRstrip);  // Phi-3 rule: special tokens eat following spaces
  const auto with_end = phi3->Tokenize("Hi<|end|>  there", false, true);
  ASSERT_GE(with_end.size(), 3u);
  EXPECT_EQ(with_end[1], end);
  EXPECT_EQ(phi3->Detokenize(std::vector<int32_t>(with_end.begin() + 2, with_end.end())), "there");

  const Vocab* bert = LoadVocab(shared + "/models/vocab/ggml-vocab-bert-bge.gguf", &err);
  ASSERT_NE(bert, nullptr) << err;
  EXPECT_EQ(bert->type(), VocabType::kWpm);
  EXPECT_EQ(bert->Tokenize("Hello world", true, false), (std::vector<int32_t>{101, 7592, 2088, 102}));
  // WPM pieces carry their word's leading space; clean-up removes " ," and " !".
  EXPECT_EQ(bert->Detokenize(bert->Tokenize("Hello, World!", false, false)), " hello, world!");
}

// ---------------------------------------------------------------------------------------
// Streaming detokenizer.

TEST(Streaming, EmojiFromByteTokensIsNeverSplit) {
  REQUIRE_SHARED(shared);
  std::string err;
  const Vocab* vocab = LoadVocab(shared + "/models/llama-2-tiny-random.gguf", &err);
  ASSERT_NE(vocab, nullptr) << err;
  const std::string emoji = "\xF0\x9F\xA6\x99";  // U+1F999 LLAMA: not in the Llama-2 vocab
  const auto ids = vocab->Tokenize(emoji, false, false);
  // "▁" + four byte tokens <0xF0> <0x9F> <0xA6> <0x99>
  ASSERT_EQ(ids.size(), 5u);
  for (size_t i = 1; i < 5; ++i) ASSERT_TRUE(vocab->IsByte(ids[i])) << i;
  StreamingDetokenizer stream(*vocab, false);
  EXPECT_EQ(stream.Push(ids[0]), " ");
  EXPECT_EQ(stream.Push(ids[1]), "");
  EXPECT_EQ(stream.Push(ids[2]), "");
  EXPECT_EQ(stream.Push(ids[3]), "");
  EXPECT_EQ(stream.pending_bytes(), 3u);
  EXPECT_EQ(stream.Push(ids[4]), emoji);
  EXPECT_EQ(stream.pending_bytes(), 0u);
  EXPECT_EQ(stream.Flush(), "");

  // Every chunk of a long mixed stream is valid UTF-8 and the concatenation is exact.
  const std::string text =
      "Hello 🦙 world! кошка 😶‍🌫️ ✅ 我想在apple工作 ὕμνος \xF0\x9F\x9A\x80 done";
  StreamingDetokenizer s2(*vocab, false);
  std::string all;
  for (int32_t id : vocab->Tokenize(text, false, false)) {
    const std::string chunk = s2.Push(id);
    EXPECT_TRUE(IsValidUtf8(chunk)) << Escape(chunk);
    all += chunk;
  }
  all += s2.Flush();
  EXPECT_EQ(all, " " + text);
}

// Preserved tokens keep their text although control tokens are otherwise dropped
// (llama.cpp's preserved_tokens for tool-call markers).
TEST(Streaming, PreservedControlTokensKeepTheirText) {
  REQUIRE_SHARED(shared);
  std::string err;
  const Vocab* vocab = LoadVocab(shared + "/models/llama-2-tiny-random.gguf", &err);
  ASSERT_NE(vocab, nullptr) << err;
  const int32_t eos = vocab->TextToToken("</s>");
  ASSERT_GE(eos, 0);
  StreamingDetokenizer plain(*vocab, false);
  EXPECT_EQ(plain.Push(eos), "");
  StreamingDetokenizer kept(*vocab, false);
  kept.Preserve({eos});
  EXPECT_EQ(kept.Push(eos), "</s>");
  EXPECT_EQ(kept.Push(vocab->TextToToken("<s>")), "") << "only the preserved ids";
}

TEST(Streaming, InvalidBytesBecomeReplacementCharacters) {
  REQUIRE_SHARED(shared);
  std::string err;
  const Vocab* vocab = LoadVocab(shared + "/models/llama-2-tiny-random.gguf", &err);
  ASSERT_NE(vocab, nullptr) << err;
  auto byte = [&](int b) {
    return vocab->TextToToken(
        absl::StrCat("<0x", absl::AsciiStrToUpper(absl::StrCat(absl::Hex(b, absl::kZeroPad2))), ">"));
  };
  ASSERT_NE(byte(0xF0), kTokenNull);
  const int32_t a = vocab->TextToToken("a");
  ASSERT_NE(a, kTokenNull);
  const std::string fffd = "\xEF\xBF\xBD";
  StreamingDetokenizer s(*vocab, false);
  EXPECT_EQ(s.Push(byte(0xFF)), fffd);  // never valid
  EXPECT_EQ(s.Push(byte(0x80)), fffd);  // stray continuation
  EXPECT_EQ(s.Push(byte(0xE2)), "");    // incomplete: held
  EXPECT_EQ(s.Push(a), fffd + "a");     // interrupted sequence
  EXPECT_EQ(s.Push(byte(0xF0)), "");
  EXPECT_EQ(s.Push(byte(0x9F)), "");
  EXPECT_EQ(s.Flush(), fffd);  // incomplete at the end
  EXPECT_EQ(s.Push(byte(0xED)), "");
  EXPECT_EQ(s.Push(byte(0xA0)), fffd + fffd);  // surrogate range: ill-formed
  EXPECT_EQ(s.Push(-5), "");                   // invalid id: nothing
  EXPECT_EQ(s.Push(vocab->n_tokens()), "");
  EXPECT_EQ(s.Flush(), "");
}

// ---------------------------------------------------------------------------------------
// In-memory vocabularies: errors and invalid ids (no shared data needed).

std::vector<std::string> SmallSpmTokens() {
  std::vector<std::string> t = {"<unk>", "<s>", "</s>"};
  for (int b = 0; b < 256; ++b) {
    t.push_back(absl::StrCat("<0x", absl::AsciiStrToUpper(absl::StrCat(absl::Hex(b, absl::kZeroPad2))), ">"));
  }
  for (const char* s : {"\xE2\x96\x81", "a", "b", "c",
                        "\xE2\x96\x81"
                        "a",
                        "ab",
                        "\xE2\x96\x81"
                        "ab",
                        "bc"}) {
    t.push_back(s);
  }
  return t;
}

std::string SmallSpmFile(bool with_model = true, bool with_tokens = true) {
  GgufWriter w;
  if (with_model) w.SetValue("tokenizer.ggml.model", Value::String("llama"));
  const auto tokens = SmallSpmTokens();
  if (with_tokens) w.SetValue("tokenizer.ggml.tokens", Value::StringArray(tokens));
  std::vector<float> scores(tokens.size(), 0.0f);
  std::vector<int32_t> types(tokens.size(), 1);
  types[0] = 2;
  types[1] = types[2] = 3;
  for (int b = 0; b < 256; ++b) types[3 + b] = 6;
  for (size_t i = 259; i < tokens.size(); ++i) scores[i] = -static_cast<float>(i - 259);
  scores[259 + 6] = 10.0f;  // "▁ab" preferred
  w.SetValue("tokenizer.ggml.scores", Value::F32Array(scores));
  w.SetValue("tokenizer.ggml.token_type", Value::I32Array(types));
  return w.WriteToString();
}

absl::StatusOr<std::unique_ptr<Vocab>> VocabFromBytes(const std::string& bytes) {
  auto f = GgufFile::FromBytes(bytes, "test.gguf");
  if (!f.ok()) return f.status();
  return Vocab::FromGguf(**f);
}

TEST(InMemory, SmallSpmVocab) {
  auto v = VocabFromBytes(SmallSpmFile());
  ASSERT_TRUE(v.ok()) << v.status();
  const Vocab& vocab = **v;
  EXPECT_EQ(vocab.n_tokens(), 267);
  const int32_t u_ab = vocab.TextToToken(
      "\xE2\x96\x81"
      "ab");
  const int32_t c = vocab.TextToToken("c");
  EXPECT_EQ(vocab.Tokenize("abc", true, false), (std::vector<int32_t>{1, u_ab, c}));
  // 'z' is not a token: byte fallback <0x7A>.
  EXPECT_EQ(vocab.Tokenize("z", false, false), (std::vector<int32_t>{vocab.TextToToken("\xE2\x96\x81"), 3 + 'z'}));
  EXPECT_EQ(vocab.Detokenize(vocab.Tokenize("ab zc", false, false)), "ab zc");
  EXPECT_EQ(vocab.Detokenize(vocab.Tokenize("ab zc", true, false), true), " ab zc");
}

TEST(InMemory, InvalidIdsDoNotCrash) {
  auto v = VocabFromBytes(SmallSpmFile());
  ASSERT_TRUE(v.ok()) << v.status();
  const Vocab& vocab = **v;
  for (int32_t bad : {-1, -100, 267, 1 << 30}) {
    EXPECT_FALSE(vocab.IsValid(bad));
    EXPECT_EQ(vocab.TokenToPiece(bad, true), "");
    EXPECT_EQ(vocab.TokenText(bad), "");
    EXPECT_EQ(vocab.Attr(bad), kAttrUndefined);
    EXPECT_FALSE(vocab.IsEog(bad));
    EXPECT_FALSE(vocab.IsControl(bad));
  }
  const std::vector<int32_t> ids = {1, vocab.TextToToken("a"), 999, -3};
  const absl::Status s = vocab.ValidateTokens(ids);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("999"), std::string::npos) << s;
  EXPECT_NE(s.message().find("position 2"), std::string::npos) << s;
  EXPECT_EQ(vocab.Detokenize(ids, true), "a");
  EXPECT_TRUE(vocab.ValidateTokens({0, 1, 266}).ok());
}

// tokenizer.ggml.scores / token_type must have exactly one entry per token: shorter and
// longer arrays are INVALID_ARGUMENT naming both lengths (the file written to disk and
// opened, as the loader and workers do).
TEST(InMemory, ScoresAndTokenTypeLengthsMustMatchTokens) {
  const std::vector<std::string> tokens = SmallSpmTokens();  // 267
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/toktype_len.gguf";
  for (const char* key : {"tokenizer.ggml.token_type", "tokenizer.ggml.scores"}) {
    for (size_t n : {tokens.size() - 1, tokens.size() + 1, size_t{1}}) {
      SCOPED_TRACE(absl::StrCat(key, " with ", n, " entries"));
      GgufWriter w;
      w.SetValue("tokenizer.ggml.model", Value::String("llama"));
      w.SetValue("tokenizer.ggml.tokens", Value::StringArray(tokens));
      if (std::string(key) == "tokenizer.ggml.scores") {
        w.SetValue(key, Value::F32Array(std::vector<float>(n, 0.0f)));
      } else {
        w.SetValue(key, Value::I32Array(std::vector<int32_t>(n, 1)));
      }
      ASSERT_TRUE(w.WriteFile(path).ok());
      auto f = GgufFile::Open(path);
      ASSERT_TRUE(f.ok()) << f.status();
      auto v = Vocab::FromGguf(**f);
      ASSERT_FALSE(v.ok());
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << v.status();
      const std::string msg(v.status().message());
      EXPECT_NE(msg.find(key), std::string::npos) << msg;
      EXPECT_NE(msg.find(absl::StrCat(" ", n, " entries")), std::string::npos) << msg;
      EXPECT_NE(msg.find(absl::StrCat("tokenizer.ggml.tokens has ", tokens.size())), std::string::npos) << msg;
    }
  }
  // Equal lengths load.
  auto ok = VocabFromBytes(SmallSpmFile());
  EXPECT_TRUE(ok.ok()) << ok.status();
}

TEST(InMemory, Errors) {
  {
    auto v = VocabFromBytes(SmallSpmFile(/*with_model=*/false));
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(v.status().message().find("tokenizer.ggml.model"), std::string::npos) << v.status();
  }
  {
    auto v = VocabFromBytes(SmallSpmFile(true, /*with_tokens=*/false));
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(v.status().message().find("tokenizer.ggml.tokens"), std::string::npos) << v.status();
  }
  {
    GgufWriter w;
    w.SetValue("tokenizer.ggml.model", Value::String("t5"));
    w.SetValue("tokenizer.ggml.tokens", Value::StringArray({"a", "b"}));
    auto v = VocabFromBytes(w.WriteToString());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("'t5'"), std::string::npos) << v.status();
    EXPECT_NE(v.status().message().find("gpt2"), std::string::npos) << v.status();
  }
  {
    GgufWriter w;
    w.SetValue("tokenizer.ggml.model", Value::String("gpt2"));
    w.SetValue("tokenizer.ggml.tokens", Value::StringArray({"a", "b", "ab"}));
    auto v = VocabFromBytes(w.WriteToString());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kNotFound);
    EXPECT_NE(v.status().message().find("tokenizer.ggml.merges"), std::string::npos) << v.status();
    w.SetValue("tokenizer.ggml.merges", Value::StringArray({"a b"}));
    w.SetValue("tokenizer.ggml.pre", Value::String("no-such-pre"));
    v = VocabFromBytes(w.WriteToString());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("no-such-pre"), std::string::npos) << v.status();
    EXPECT_NE(v.status().message().find("qwen2"), std::string::npos) << v.status();
    w.SetValue("tokenizer.ggml.pre", Value::String("qwen2"));
    v = VocabFromBytes(w.WriteToString());
    ASSERT_TRUE(v.ok()) << v.status();
    EXPECT_EQ((*v)->Tokenize("ab", false, false), std::vector<int32_t>{2});
    EXPECT_EQ((*v)->Detokenize({2, 0}), "aba");
  }
  {
    GgufWriter w;
    w.SetValue("tokenizer.ggml.model", Value::String("llama"));
    w.SetValue("tokenizer.ggml.tokens", Value::StringArray({"<unk>", "<s>", "</s>", "x", "x"}));
    auto v = VocabFromBytes(w.WriteToString());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("duplicate"), std::string::npos) << v.status();
  }
  {
    // add_bos_token without a usable BOS id.
    GgufWriter w;
    w.SetValue("tokenizer.ggml.model", Value::String("gpt2"));
    w.SetValue("tokenizer.ggml.tokens", Value::StringArray({"a", "b"}));
    w.SetValue("tokenizer.ggml.merges", Value::StringArray({"a b"}));
    w.SetValue("tokenizer.ggml.add_bos_token", Value::Bool(true));
    auto v = VocabFromBytes(w.WriteToString());
    ASSERT_FALSE(v.ok());
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("bos_token_id"), std::string::npos) << v.status();
  }
}

// ---------------------------------------------------------------------------------------
// Robustness.

// std::regex recurses per matched character; long runs must not overflow the stack.
TEST(Robustness, LongInputsDoNotCrash) {
  REQUIRE_SHARED(shared);
  const size_t len = 100000;  // an 8 MiB stack overflows at ~40k chars without the helper thread
  for (const char* name :
       {"deepseek-coder", "deepseek-llm", "falcon", "gpt-2", "llama-spm", "bert-bge", "mpt", "starcoder"}) {
    std::string err;
    const Vocab* v = LoadVocab(absl::StrCat(shared, "/models/vocab/ggml-vocab-", name, ".gguf"), &err);
    ASSERT_NE(v, nullptr) << err;
    for (const std::string& s :
         {std::string(len, 'a'), std::string(len, '!'), std::string(len, ' '), std::string(len, '7')}) {
      const auto ids = v->Tokenize(s, false, false);
      EXPECT_FALSE(s[0] != ' ' && ids.empty()) << name;
      if (v->type() != VocabType::kWpm && !v->clean_spaces()) {
        EXPECT_EQ(v->Detokenize(ids).size(), len) << name;
      }
    }
  }
}

// Every supported pre-tokenizer compiles and splits (short and long, multi-script) text;
// byte-level BPE over a vocabulary holding all 256 byte symbols must round-trip exactly.
TEST(Robustness, EveryPreTokenizerWorks) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) {
    // The 256 GPT-2 byte symbols (printable stand-ins), as in every byte-level vocab.
    int cp = b;
    if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
      static int n = 0;
      cp = 256 + n++;
    }
    std::string u;
    if (cp < 0x80) {
      u += static_cast<char>(cp);
    } else {
      u += static_cast<char>(0xC0 | (cp >> 6));
      u += static_cast<char>(0x80 | (cp & 0x3F));
    }
    tokens.push_back(u);
  }
  tokens.push_back("\xE2\x96\x81");  // for the escape-whitespace (gemma4-style) pre-tokenizers
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(absl::StrCat("<0x", absl::AsciiStrToUpper(absl::StrCat(absl::Hex(b, absl::kZeroPad2))), ">"));
  }
  std::vector<int32_t> types(tokens.size(), 1);
  for (size_t i = 257; i < tokens.size(); ++i) types[i] = 6;
  const std::string text =
      "Hello, y'all! How ARE you 😁 ?我想在apple工作1314151天～ нещо на Български 12345 "
      "\t\n  ὕμνος ÄÖÜ  (x) [y] {z} 'll 'S";
  // > 4 KiB: exercises the big-stack helper thread of the regex splitter.
  const std::string long_text = std::string(3000, 'x') + " " + std::string(3000, '!') + "\n" + std::string(3000, '9') +
                                std::string(3000, ' ') + "end";
  for (const std::string& pre : Vocab::SupportedPreTokenizers()) {
    SCOPED_TRACE(pre);
    GgufWriter w;
    w.SetValue("tokenizer.ggml.model", Value::String("gpt2"));
    w.SetValue("tokenizer.ggml.pre", Value::String(pre));
    w.SetValue("tokenizer.ggml.tokens", Value::StringArray(tokens));
    w.SetValue("tokenizer.ggml.token_type", Value::I32Array(types));
    w.SetValue("tokenizer.ggml.merges", Value::StringArray({"a b"}));
    w.SetValue("tokenizer.ggml.bos_token_id", Value::U32(0));
    w.SetValue("tokenizer.ggml.seperator_token_id", Value::U32(1));
    auto v = VocabFromBytes(w.WriteToString());
    ASSERT_TRUE(v.ok()) << v.status();
    for (const std::string* t : {&text, &long_text}) {
      const auto ids = (*v)->Tokenize(*t, false, false);
      ASSERT_FALSE(ids.empty());
      if (!(*v)->clean_spaces()) {
        EXPECT_EQ((*v)->Detokenize(ids), *t);
      }
    }
  }
}

}  // namespace
}  // namespace herd::tokenizer
