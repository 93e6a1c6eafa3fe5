#include "libs/model/llama2c.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "libs/base/mmap.h"
#include "libs/gguf/gguf.h"
#include "tests/shared_data.h"

namespace herd::model {
namespace {

using gguf::GgufFile;

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

std::string ReadBytes(const std::string& path) {
  auto s = ReadFileToString(path);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::string();
}

std::unique_ptr<GgufFile> OpenGguf(const std::string& path) {
  auto f = GgufFile::Open(path);
  EXPECT_TRUE(f.ok()) << f.status();
  return f.ok() ? std::move(*f) : nullptr;
}

template <typename T>
void Append(std::string* out, T v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// A tiny synthetic llama2.c checkpoint: weights are 0.5 * (running index).
struct Synth {
  int32_t dim = 8, hidden = 12, layers = 2, heads = 4, kv_heads = 2, vocab = 6, seq_len = 4;
  bool shared = false;

  std::string Model(size_t* n_floats_out = nullptr) const {
    std::string b;
    for (int32_t v : {dim, hidden, layers, heads, kv_heads, shared ? vocab : -vocab, seq_len}) {
      Append(&b, v);
    }
    const int64_t kv = dim / heads * kv_heads;
    const int64_t head = dim / heads;
    int64_t n = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * dim * kv + 3 * dim * hidden) + dim +
                seq_len * head + (shared ? 0 : vocab * dim);
    for (int64_t i = 0; i < n; ++i) Append(&b, 0.5f * static_cast<float>(i));
    if (n_floats_out) *n_floats_out = static_cast<size_t>(n);
    return b;
  }
};

std::string Tokenizer(const std::vector<std::pair<float, std::string>>& toks) {
  std::string b;
  uint32_t max_len = 0;
  for (const auto& t : toks) max_len = std::max<uint32_t>(max_len, t.second.size());
  Append(&b, max_len);
  for (const auto& t : toks) {
    Append(&b, t.first);
    Append(&b, static_cast<uint32_t>(t.second.size()));
    b += t.second;
  }
  return b;
}

const std::vector<std::pair<float, std::string>> kSynthVocab = {
    {0.0f, "<unk>"}, {0.0f, "\n<s>\n"}, {0.0f, "\n</s>\n"}, {-1.0f, "<0x0A>"}, {-2.5f, " hello world"}, {-3.0f, ""}};

const float* TensorF32(const GgufFile& f, const std::string& name) {
  const gguf::TensorInfo* t = f.FindTensor(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? reinterpret_cast<const float*>(t->data) : nullptr;
}

// ---------------------------------------------------------------------------
// Synthetic inputs (no shared data needed).

TEST(Llama2cTest, SyntheticUnsharedClassifier) {
  const std::string dir = TmpDir();
  Synth s;
  size_t n_floats = 0;
  const std::string model = s.Model(&n_floats);
  WriteBytes(dir + "/synth.bin", model);
  WriteBytes(dir + "/synth_tok.bin", Tokenizer(kSynthVocab));
  const std::string out = dir + "/synth.gguf";
  ASSERT_TRUE(ConvertLlama2c(dir + "/synth.bin", dir + "/synth_tok.bin", out).ok());
  auto f = OpenGguf(out);
  ASSERT_NE(f, nullptr);

  EXPECT_EQ(*f->GetUint32("llama.embedding_length"), 8u);
  EXPECT_EQ(*f->GetUint32("llama.feed_forward_length"), 12u);
  EXPECT_EQ(*f->GetUint32("llama.block_count"), 2u);
  EXPECT_EQ(*f->GetUint32("llama.attention.head_count"), 4u);
  EXPECT_EQ(*f->GetUint32("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(*f->GetUint32("llama.rope.dimension_count"), 2u);
  EXPECT_EQ(*f->GetUint32("llama.context_length"), 2048u);
  EXPECT_FLOAT_EQ(*f->GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetString("tokenizer.ggml.model"), "llama");

  const std::vector<std::string> want_tokens = {"<unk>", "<s>", "</s>", "<0x0A>", "\xe2\x96\x81hello\xe2\x96\x81world",
                                                ""};
  EXPECT_EQ(*f->GetStringArray("tokenizer.ggml.tokens"), want_tokens);
  EXPECT_EQ(*f->GetIntArray("tokenizer.ggml.token_type"), (std::vector<int64_t>{2, 3, 3, 6, 1, 3}));
  EXPECT_EQ(*f->GetFloatArray("tokenizer.ggml.scores"), (std::vector<float>{0.0f, 0.0f, 0.0f, -1.0f, -2.5f, -3.0f}));

  // 3 + 9 per layer tensors, names/shapes in llama.cpp's order.
  ASSERT_EQ(f->tensors().size(), 3u + 9u * 2u);
  const std::vector<std::string> names = {
      "token_embd.weight",        "output_norm.weight",     "output.weight",
      "blk.0.attn_q.weight",      "blk.0.attn_k.weight",    "blk.0.attn_v.weight",
      "blk.0.attn_output.weight", "blk.0.attn_norm.weight", "blk.0.ffn_gate.weight",
      "blk.0.ffn_down.weight",    "blk.0.ffn_up.weight",    "blk.0.ffn_norm.weight"};
  for (size_t i = 0; i < names.size(); ++i) EXPECT_EQ(f->tensors()[i].name, names[i]);
  const gguf::TensorInfo* k = f->FindTensor("blk.1.attn_k.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->n_dims, 2u);
  EXPECT_EQ(k->ne[0], 8);
  EXPECT_EQ(k->ne[1], 4);  // kv_dim = 8 / 4 * 2
  const gguf::TensorInfo* down = f->FindTensor("blk.1.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->ne[0], 12);
  EXPECT_EQ(down->ne[1], 8);
  for (const auto& t : f->tensors()) EXPECT_EQ(t.type, GgmlType::F32) << t.name;

  // Data: every float of the checkpoint lands in the right tensor.
  // Offsets (in floats) in llama2.c order.
  const int64_t V = 6, D = 8, H = 12, L = 2, KV = 4;
  int64_t off = 0;
  auto expect_at = [&](const std::string& name, int64_t first) {
    const float* d = TensorF32(*f, name);
    ASSERT_NE(d, nullptr);
    EXPECT_EQ(d[0], 0.5f * first) << name;
  };
  expect_at("token_embd.weight", off);
  off += V * D;
  expect_at("blk.0.attn_norm.weight", off);
  expect_at("blk.1.attn_norm.weight", off + D);
  off += L * D;
  expect_at("blk.1.attn_q.weight", off + D * D);
  off += L * D * D;
  expect_at("blk.1.attn_k.weight", off + D * KV);
  off += L * D * KV;
  expect_at("blk.0.attn_v.weight", off);
  off += L * D * KV;
  expect_at("blk.1.attn_output.weight", off + D * D);
  off += L * D * D;
  expect_at("blk.1.ffn_norm.weight", off + D);
  off += L * D;
  expect_at("blk.1.ffn_gate.weight", off + D * H);
  off += L * D * H;
  expect_at("blk.1.ffn_down.weight", off + D * H);
  off += L * D * H;
  expect_at("blk.0.ffn_up.weight", off);
  off += L * D * H;
  expect_at("output_norm.weight", off);
  off += D;
  off += s.seq_len * (D / s.heads);  // freq_cis
  expect_at("output.weight", off);   // wcls
  EXPECT_EQ(off + V * D, static_cast<int64_t>(n_floats));
  const float* out_w = TensorF32(*f, "output.weight");
  ASSERT_NE(out_w, nullptr);
  EXPECT_EQ(out_w[V * D - 1], 0.5f * (n_floats - 1));
}

TEST(Llama2cTest, SyntheticSharedClassifierCopiesEmbedding) {
  const std::string dir = TmpDir();
  Synth s;
  s.shared = true;
  s.kv_heads = 4;  // no GQA
  WriteBytes(dir + "/shared.bin", s.Model());
  WriteBytes(dir + "/shared_tok.bin", Tokenizer(kSynthVocab));
  Llama2cConvertOptions opt;
  opt.context_length = 0;  // use seq_len
  opt.name = "synth";
  ASSERT_TRUE(ConvertLlama2c(dir + "/shared.bin", dir + "/shared_tok.bin", dir + "/shared.gguf", opt).ok());
  auto f = OpenGguf(dir + "/shared.gguf");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*f->GetUint32("llama.context_length"), 4u);
  EXPECT_EQ(*f->GetString("general.name"), "synth");
  const gguf::TensorInfo* e = f->FindTensor("token_embd.weight");
  const gguf::TensorInfo* o = f->FindTensor("output.weight");
  ASSERT_TRUE(e && o);
  ASSERT_EQ(e->nbytes, o->nbytes);
  EXPECT_EQ(std::memcmp(e->data, o->data, e->nbytes), 0);
  EXPECT_EQ(f->FindTensor("blk.0.attn_k.weight")->ne[1], 8);
}

TEST(Llama2cTest, BadHeadersAreRejected) {
  const std::string dir = TmpDir();
  WriteBytes(dir + "/hdr_tok.bin", Tokenizer(kSynthVocab));
  struct Case {
    const char* what;
    int field;
    int32_t value;
    const char* expect;
  };
  const Case cases[] = {
      {"zero dim", 0, 0, "dim = 0"},
      {"negative layers", 2, -3, "n_layers = -3"},
      {"huge hidden", 1, 0x7fffffff, "hidden_dim = 2147483647"},
      {"zero heads", 3, 0, "n_heads = 0"},
      {"heads not dividing dim", 3, 3, "not a multiple of n_heads"},
      {"kv > heads", 4, 8, "not a multiple of n_kv_heads"},
      {"kv not dividing heads", 4, 3, "not a multiple of n_kv_heads"},
      {"zero vocab", 5, 0, "vocab_size = 0"},
      {"INT_MIN vocab", 5, INT32_MIN, "vocab_size"},
      {"zero seq_len", 6, 0, "seq_len = 0"},
      {"vocab sign flipped (size mismatch)", 5, 6, "bytes but the header implies"},
  };
  Synth s;
  const std::string good = s.Model();
  for (const Case& c : cases) {
    std::string bad = good;
    std::memcpy(&bad[c.field * 4], &c.value, 4);
    WriteBytes(dir + "/hdr.bin", bad);
    const std::string out = dir + "/hdr.gguf";
    absl::Status st = ConvertLlama2c(dir + "/hdr.bin", dir + "/hdr_tok.bin", out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << c.what << ": " << st;
    EXPECT_NE(st.message().find(c.expect), std::string::npos) << c.what << ": " << st;
    EXPECT_FALSE(Exists(out)) << c.what;
  }
}

TEST(Llama2cTest, SizeMismatchesAreRejected) {
  const std::string dir = TmpDir();
  WriteBytes(dir + "/sz_tok.bin", Tokenizer(kSynthVocab));
  const std::string good = Synth().Model();
  const std::string out = dir + "/sz.gguf";
  for (size_t len : {size_t{0}, size_t{3}, size_t{27}, size_t{28}, good.size() / 2, good.size() - 1}) {
    WriteBytes(dir + "/sz.bin", good.substr(0, len));
    absl::Status st = ConvertLlama2c(dir + "/sz.bin", dir + "/sz_tok.bin", out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << len << ": " << st;
    EXPECT_FALSE(Exists(out));
  }
  WriteBytes(dir + "/sz.bin", good + "xxxx");
  absl::Status st = ConvertLlama2c(dir + "/sz.bin", dir + "/sz_tok.bin", out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("trailing"), std::string::npos) << st;
  EXPECT_FALSE(Exists(out));

  // Missing inputs.
  WriteBytes(dir + "/sz.bin", good);
  EXPECT_EQ(ConvertLlama2c(dir + "/nope.bin", dir + "/sz_tok.bin", out).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ConvertLlama2c(dir + "/sz.bin", dir + "/nope_tok.bin", out).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(Exists(out));
}

TEST(Llama2cTest, TruncatedTokenizerIsRejected) {
  const std::string dir = TmpDir();
  WriteBytes(dir + "/tt.bin", Synth().Model());
  const std::string tok = Tokenizer(kSynthVocab);
  const std::string out = dir + "/tt.gguf";
  // Cut inside the header, a score, a length, a text; and one token short.
  for (size_t len : {size_t{0}, size_t{2}, size_t{6}, size_t{10}, size_t{14},
                     tok.size() - 8 - 1 /* into the text of the second-to-last token */}) {
    WriteBytes(dir + "/tt_tok.bin", tok.substr(0, len));
    absl::Status st = ConvertLlama2c(dir + "/tt.bin", dir + "/tt_tok.bin", out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << len << ": " << st;
    EXPECT_NE(st.message().find("truncated"), std::string::npos) << st;
    EXPECT_FALSE(Exists(out));
  }
  // A huge length field does not allocate or crash.
  std::string bad = tok;
  const uint32_t huge = 0xFFFFFFF0u;
  std::memcpy(&bad[4 + 4], &huge, 4);
  WriteBytes(dir + "/tt_tok.bin", bad);
  EXPECT_EQ(ConvertLlama2c(dir + "/tt.bin", dir + "/tt_tok.bin", out).code(), absl::StatusCode::kInvalidArgument);
  // Extra tokens beyond the model's vocab are ignored (llama.cpp reads vocab_size).
  auto more = kSynthVocab;
  more.push_back({-9.0f, "extra"});
  WriteBytes(dir + "/tt_tok.bin", Tokenizer(more));
  EXPECT_TRUE(ConvertLlama2c(dir + "/tt.bin", dir + "/tt_tok.bin", out).ok());
}

TEST(Llama2cTest, VocabularyRules) {
  const std::string dir = TmpDir();
  const std::vector<std::pair<float, std::string>> toks = {
      {1.0f, "whatever"}, {2.0f, "BOS"},    {3.0f, ""},  // ids 0-2 replaced
      {4.0f, "<0xff>"},   {5.0f, "<0xZZ>"}, {6.0f, ""}, {7.0f, "  "}, {8.0f, "a b"}};
  WriteBytes(dir + "/vr_tok.bin", Tokenizer(toks));
  auto v = LoadLlama2cVocab(dir + "/vr_tok.bin", 8);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->tokens,
            (std::vector<std::string>{"<unk>", "<s>", "</s>", "<0xff>", "<0xZZ>", "", "\xe2\x96\x81\xe2\x96\x81",
                                      "a\xe2\x96\x81"
                                      "b"}));
  EXPECT_EQ(v->token_types, (std::vector<int32_t>{2, 3, 3, 6, 1, 3, 1, 1}));
  EXPECT_EQ(v->scores, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(Llama2cTest, GgufIsNotACheckpoint) {
  const std::string dir = TmpDir();
  std::string b = "GGUF";
  b.resize(64, '\0');
  WriteBytes(dir + "/g.bin", b);
  WriteBytes(dir + "/g_tok.bin", Tokenizer(kSynthVocab));
  absl::Status st = ConvertLlama2c(dir + "/g.bin", dir + "/g_tok.bin", dir + "/g.gguf");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("GGUF"), std::string::npos) << st;
}

// ---------------------------------------------------------------------------
// Real models from the shared data directory.

class Llama2cSharedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty() || !Exists(shared_ + "/models/stories260K.bin")) {
      GTEST_SKIP() << herd::kSharedDirMissing << " (need models/stories260K.bin)";
    }
    models_ = shared_ + "/models";
  }
  std::string shared_, models_;
};

TEST_F(Llama2cSharedTest, Stories260KMatchesLlamaCppConverter) {
  const std::string out = TmpDir() + "/stories260K.gguf";
  absl::Status st = ConvertLlama2c(models_ + "/stories260K.bin", models_ + "/tok512.bin", out);
  ASSERT_TRUE(st.ok()) << st;
  auto ours = OpenGguf(out);
  auto ref = OpenGguf(models_ + "/stories260K.gguf");
  ASSERT_TRUE(ours && ref);

  // Same tensors, same order, shapes, types and bytes.
  ASSERT_EQ(ours->tensors().size(), ref->tensors().size());
  ASSERT_EQ(ours->tensors().size(), 48u);
  for (size_t i = 0; i < ref->tensors().size(); ++i) {
    const auto& a = ours->tensors()[i];
    const auto& b = ref->tensors()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.type, b.type) << b.name;
    EXPECT_EQ(a.n_dims, b.n_dims) << b.name;
    for (int d = 0; d < 4; ++d) EXPECT_EQ(a.ne[d], b.ne[d]) << b.name << " dim " << d;
    ASSERT_EQ(a.nbytes, b.nbytes) << b.name;
    EXPECT_EQ(std::memcmp(a.data, b.data, a.nbytes), 0) << b.name << " bytes differ";
  }

  // Same tokenizer arrays.
  EXPECT_EQ(*ours->GetStringArray("tokenizer.ggml.tokens"), *ref->GetStringArray("tokenizer.ggml.tokens"));
  EXPECT_EQ(*ours->GetFloatArray("tokenizer.ggml.scores"), *ref->GetFloatArray("tokenizer.ggml.scores"));
  EXPECT_EQ(*ours->GetIntArray("tokenizer.ggml.token_type"), *ref->GetIntArray("tokenizer.ggml.token_type"));

  // Same metadata keys, order, types and values.
  ASSERT_EQ(ours->metadata().size(), ref->metadata().size());
  for (size_t i = 0; i < ref->metadata().size(); ++i) {
    const auto& a = ours->metadata()[i];
    const auto& b = ref->metadata()[i];
    EXPECT_EQ(a.key, b.key);
    EXPECT_EQ(a.value.type(), b.value.type()) << b.key;
    EXPECT_EQ(a.value.DebugString(), b.value.DebugString()) << b.key;
  }
}

TEST_F(Llama2cSharedTest, Stories260KWholeFileIsByteIdentical) {
  const std::string out = TmpDir() + "/stories260K_bytes.gguf";
  ASSERT_TRUE(ConvertLlama2c(models_ + "/stories260K.bin", models_ + "/tok512.bin", out).ok());
  const std::string ours = ReadBytes(out);
  const std::string ref = ReadBytes(models_ + "/stories260K.gguf");
  ASSERT_EQ(ours.size(), ref.size());
  size_t first_diff = 0;
  while (first_diff < ours.size() && ours[first_diff] == ref[first_diff]) ++first_diff;
  EXPECT_EQ(first_diff, ours.size()) << "first differing byte at offset " << first_diff;
}

TEST_F(Llama2cSharedTest, AiDreams260KConverts) {
  const std::string dir = models_ + "/aidreams260K";
  if (!Exists(dir + "/aidreams260K.bin")) GTEST_SKIP() << "no " << dir;
  const std::string out = TmpDir() + "/aidreams260K.gguf";
  absl::Status st = ConvertLlama2c(dir + "/aidreams260K.bin", dir + "/tok512.bin", out);
  ASSERT_TRUE(st.ok()) << st;
  auto f = OpenGguf(out);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*f->GetUint32("llama.block_count"), 4u);
  EXPECT_EQ(*f->GetUint32("llama.attention.head_count"), 4u);
  EXPECT_EQ(*f->GetUint32("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(*f->GetUint32("llama.embedding_length"), 64u);
  EXPECT_EQ(*f->GetUint32("llama.feed_forward_length"), 172u);
  EXPECT_EQ(*f->GetUint32("llama.rope.dimension_count"), 16u);
  EXPECT_EQ(f->tensors().size(), 3u + 9u * 4u);
  auto tokens = f->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[2], "</s>");
  // Shared classifier: output.weight is a copy of token_embd.weight.
  const gguf::TensorInfo* e = f->FindTensor("token_embd.weight");
  const gguf::TensorInfo* o = f->FindTensor("output.weight");
  ASSERT_TRUE(e && o);
  EXPECT_EQ(std::memcmp(e->data, o->data, e->nbytes), 0);
}

TEST_F(Llama2cSharedTest, TruncatedRealModelLeavesNoOutput) {
  const std::string full = ReadBytes(models_ + "/stories260K.bin");
  ASSERT_FALSE(full.empty());
  const std::string dir = TmpDir();
  WriteBytes(dir + "/trunc.bin", full.substr(0, full.size() - 1000));
  const std::string out = dir + "/trunc.gguf";
  absl::Status st = ConvertLlama2c(dir + "/trunc.bin", models_ + "/tok512.bin", out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("truncated"), std::string::npos) << st;
  EXPECT_FALSE(Exists(out));
  // No temp file left behind either.
  DIR* d = ::opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  while (dirent* ent = ::readdir(d)) {
    EXPECT_NE(std::string(ent->d_name).rfind("trunc.gguf", 0), 0u) << ent->d_name;
  }
  ::closedir(d);
}

TEST_F(Llama2cSharedTest, VocabFromGguf) {
  // llama.cpp's --copy-vocab-from-model also accepts a GGUF model.
  auto v = LoadLlama2cVocab(models_ + "/stories260K.gguf", 512);
  ASSERT_TRUE(v.ok()) << v.status();
  auto w = LoadLlama2cVocab(models_ + "/tok512.bin", 512);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(v->tokens, w->tokens);
  EXPECT_EQ(v->scores, w->scores);
  EXPECT_EQ(v->token_types, w->token_types);
  EXPECT_EQ(LoadLlama2cVocab(models_ + "/stories260K.gguf", 511).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace herd::model
