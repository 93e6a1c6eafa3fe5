// Reader tests: known facts of real GGUF files from ../shared, typed getters, and every
// metadata value type through a writer/reader round trip.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/mmap.h"
#include "libs/gguf/gguf.h"
#include "tests/shared_data.h"

namespace herd::gguf {
namespace {

#define REQUIRE_SHARED(var)            \
  const std::string var = SharedDir(); \
  if (var.empty()) GTEST_SKIP() << kSharedDirMissing

bool Contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

TEST(GgufReader, Stories260K) {
  REQUIRE_SHARED(shared);
  const std::string path = shared + "/models/stories260K.gguf";
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufFile& f = **r;
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.file_size(), 1185376u);
  EXPECT_EQ(f.data_offset(), 14176u);  // tensor infos end at 14152, aligned up to 32
  EXPECT_EQ(f.metadata().size(), 19u);
  EXPECT_EQ(f.metadata()[0].key, "tokenizer.ggml.tokens");

  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetUint32("llama.embedding_length"), 64u);
  EXPECT_EQ(*f.GetInt("llama.feed_forward_length"), 172);
  EXPECT_EQ(*f.GetUint32("llama.block_count"), 5u);
  EXPECT_EQ(*f.GetUint32("llama.attention.head_count_kv"), 4u);
  EXPECT_EQ(*f.GetUint32("tokenizer.ggml.seperator_token_id"), 4294967295u);
  EXPECT_NEAR(*f.GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5f, 1e-9f);

  absl::StatusOr<std::vector<std::string>> tokens = f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ((*tokens)[0], "<unk>");
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ((*tokens)[2], "</s>");
  EXPECT_EQ(f.GetFloatArray("tokenizer.ggml.scores")->size(), 512u);
  absl::StatusOr<std::vector<int64_t>> tt = f.GetIntArray("tokenizer.ggml.token_type");
  ASSERT_TRUE(tt.ok()) << tt.status();
  ASSERT_EQ(tt->size(), 512u);
  EXPECT_EQ((*tt)[0], 2);
  EXPECT_EQ((*tt)[1], 3);

  const Value* v = f.Find("tokenizer.ggml.token_type");
  ASSERT_NE(v, nullptr);
  EXPECT_EQ(v->type(), ValueType::ARRAY);
  EXPECT_EQ(v->array_type(), ValueType::INT32);
  EXPECT_EQ(v->array_size(), 512u);
  EXPECT_EQ(v->IntAt(0), 2);
  EXPECT_EQ(v->DebugString(3), "int32[512] [2, 3, 3, ...]");
  EXPECT_EQ(f.Find("no.such.key"), nullptr);

  ASSERT_EQ(f.tensors().size(), 48u);
  size_t total = 0;
  for (const TensorInfo& t : f.tensors()) {
    EXPECT_EQ(t.type, GgmlType::F32) << t.name;
    EXPECT_EQ(t.nbytes, static_cast<size_t>(t.nelements()) * 4) << t.name;
    EXPECT_EQ(t.offset % 32, 0u) << t.name;
    total += t.nbytes;
  }
  EXPECT_EQ(total, f.file_size() - f.data_offset());
  const TensorInfo* emb = f.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->n_dims, 2u);
  EXPECT_EQ(emb->ne[0], 64);
  EXPECT_EQ(emb->ne[1], 512);
  EXPECT_EQ(emb->ne[2], 1);
  EXPECT_EQ(emb->offset, 0u);
  EXPECT_EQ(emb->nbytes, 131072u);
  const TensorInfo* last = f.FindTensor("blk.4.ffn_norm.weight");
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(last->n_dims, 1u);
  EXPECT_EQ(last->ne[0], 64);
  EXPECT_EQ(last->offset, 1170944u);
  EXPECT_EQ(f.FindTensor("nope"), nullptr);

  // Tensor data points into the mapping at data_offset + offset.
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  for (const TensorInfo* t : {emb, last}) {
    ASSERT_EQ(std::memcmp(t->data, bytes->data() + f.data_offset() + t->offset, t->nbytes), 0);
  }
  // output.weight is a copy of token_embd.weight in this file (see models/README.md).
  const TensorInfo* out = f.FindTensor("output.weight");
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(out->nbytes, emb->nbytes);
  EXPECT_EQ(std::memcmp(out->data, emb->data, emb->nbytes), 0);
}

TEST(GgufReader, LlamaTinyRandomF16) {
  REQUIRE_SHARED(shared);
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::Open(shared + "/models/llama-2-tiny-random.gguf");
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufFile& f = **r;
  EXPECT_EQ(*f.GetString("general.name"), "LLaMA v2");
  EXPECT_EQ(*f.GetUint32("general.file_type"), 1u);
  EXPECT_EQ(*f.GetUint32("llama.embedding_length"), 8u);
  EXPECT_EQ(*f.GetUint32("llama.context_length"), 4096u);
  absl::StatusOr<std::vector<std::string>> tokens = f.GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), 32000u);
  EXPECT_EQ((*tokens)[1], "<s>");
  EXPECT_EQ(f.GetFloatArray("tokenizer.ggml.scores")->size(), 32000u);

  ASSERT_EQ(f.tensors().size(), 12u);
  int n_f16 = 0, n_f32 = 0;
  for (const TensorInfo& t : f.tensors()) {
    if (t.type == GgmlType::F16) ++n_f16;
    if (t.type == GgmlType::F32) ++n_f32;
    const size_t elem = t.type == GgmlType::F16 ? 2 : 4;
    EXPECT_EQ(t.nbytes, static_cast<size_t>(t.nelements()) * elem) << t.name;
  }
  EXPECT_EQ(n_f16, 9);
  EXPECT_EQ(n_f32, 3);
  const TensorInfo* emb = f.FindTensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, GgmlType::F16);
  EXPECT_EQ(emb->ne[0], 8);
  EXPECT_EQ(emb->ne[1], 32000);
  EXPECT_EQ(emb->nbytes, 512000u);
  const TensorInfo* norm = f.FindTensor("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->type, GgmlType::F32);
}

TEST(GgufReader, VocabOnlyFileWithoutTrailingPadding) {
  REQUIRE_SHARED(shared);
  // gguf-py vocab-only files have no tensors and stop right after the key/values, so
  // the (empty) data section would start past the end of the file.
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::Open(shared + "/models/vocab/ggml-vocab-gpt-2.gguf");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE((*r)->tensors().empty());
  EXPECT_GT((*r)->data_offset(), (*r)->file_size());
  absl::StatusOr<std::vector<std::string>> tokens = (*r)->GetStringArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_GT(tokens->size(), 50000u);
}

TEST(GgufReader, TypedGetterErrorsNameTheKey) {
  REQUIRE_SHARED(shared);
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::Open(shared + "/models/stories260K.gguf");
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufFile& f = **r;

  absl::Status s = f.GetString("llama.embedding_length").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "'llama.embedding_length'")) << s;
  EXPECT_TRUE(Contains(std::string(s.message()), "uint32")) << s;
  EXPECT_TRUE(Contains(std::string(s.message()), "expected string")) << s;
  EXPECT_TRUE(Contains(std::string(s.message()), "stories260K.gguf")) << s;

  s = f.GetString("llama.missing_key").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(std::string(s.message()), "'llama.missing_key'")) << s;

  s = f.GetUint32("general.architecture").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "'general.architecture' has type string")) << s;

  s = f.GetFloat("llama.block_count").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "'llama.block_count'")) << s;

  s = f.GetBool("llama.block_count").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "expected bool")) << s;

  s = f.GetStringArray("tokenizer.ggml.scores").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "'tokenizer.ggml.scores' has type array of float32")) << s;

  s = f.GetIntArray("tokenizer.ggml.tokens").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "'tokenizer.ggml.tokens'")) << s;

  s = f.GetFloatArray("general.name").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "'general.name' has type string")) << s;
}

TEST(GgufReader, MissingFileIsNotFound) {
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::Open("/nonexistent/dir/x.gguf");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(std::string(r.status().message()), "/nonexistent/dir/x.gguf"));
}

TEST(GgufReader, DirectoryIsInvalid) {
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::Open("/");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

// Every value type, written by GgufWriter and read back.
TEST(GgufReader, AllValueTypesRoundTrip) {
  GgufWriter w;
  w.SetValue("u8", Value::U8(200));
  w.SetValue("i8", Value::I8(-100));
  w.SetValue("u16", Value::U16(60000));
  w.SetValue("i16", Value::I16(-30000));
  w.SetValue("u32", Value::U32(4000000000u));
  w.SetValue("i32", Value::I32(-2000000000));
  w.SetValue("u64", Value::U64(18000000000000000000ull));
  w.SetValue("i64", Value::I64(-9000000000000000000ll));
  w.SetValue("f32", Value::F32(1.5f));
  w.SetValue("f64", Value::F64(-2.25));
  w.SetValue("bool_t", Value::Bool(true));
  w.SetValue("bool_f", Value::Bool(false));
  w.SetValue("str", Value::String("héllo\n"));
  w.SetValue("empty_str", Value::String(""));
  w.SetValue("arr_str", Value::StringArray({"a", "", "ccc"}));
  w.SetValue("arr_f32", Value::F32Array({0.5f, -1.0f}));
  w.SetValue("arr_i32", Value::I32Array({-1, 7, 2147483647}));
  w.SetValue("arr_empty", Value::I32Array({}));
  std::string u16le = {'\x01', '\x00', '\xff', '\xff'};
  w.SetValue("arr_u16", Value::NumericArray(ValueType::UINT16, u16le, 2));
  std::string u64le(8, '\xff');
  w.SetValue("arr_u64_big", Value::NumericArray(ValueType::UINT64, u64le, 1));
  w.SetValue("arr_f64", Value::NestedArray(ValueType::FLOAT64, {Value::F64(0.25), Value::F64(8)}));
  w.SetValue("arr_bool", Value::NestedArray(ValueType::BOOL, {Value::Bool(true), Value::Bool(false)}));
  w.SetValue("nested",
             Value::NestedArray(ValueType::ARRAY, {Value::I32Array({1, 2}), Value::StringArray({"x"}),
                                                   Value::NestedArray(ValueType::ARRAY, {Value::F32Array({3.0f})})}));
  const std::string img = w.WriteToString();
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::FromBytes(img, "all.gguf");
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufFile& f = **r;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_EQ(f.metadata().size(), 23u);
  EXPECT_EQ(f.metadata()[0].key, "u8");

  EXPECT_EQ(*f.GetUint32("u8"), 200u);
  EXPECT_EQ(*f.GetInt("i8"), -100);
  EXPECT_EQ(*f.GetUint32("u16"), 60000u);
  EXPECT_EQ(*f.GetInt("i16"), -30000);
  EXPECT_EQ(*f.GetUint32("u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("i32"), -2000000000);
  EXPECT_EQ(f.Find("u64")->AsUint(), 18000000000000000000ull);
  EXPECT_EQ(*f.GetInt("i64"), -9000000000000000000ll);
  EXPECT_EQ(*f.GetFloat("f32"), 1.5f);
  EXPECT_EQ(*f.GetFloat("f64"), -2.25f);
  EXPECT_EQ(f.Find("f64")->AsDouble(), -2.25);
  EXPECT_TRUE(*f.GetBool("bool_t"));
  EXPECT_FALSE(*f.GetBool("bool_f"));
  EXPECT_EQ(*f.GetString("str"), "héllo\n");
  EXPECT_EQ(*f.GetString("empty_str"), "");
  EXPECT_EQ(*f.GetStringArray("arr_str"), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(*f.GetFloatArray("arr_f32"), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(*f.GetIntArray("arr_i32"), (std::vector<int64_t>{-1, 7, 2147483647}));
  EXPECT_TRUE(f.GetIntArray("arr_empty")->empty());
  EXPECT_EQ(*f.GetIntArray("arr_u16"), (std::vector<int64_t>{1, 65535}));
  EXPECT_EQ(*f.GetFloatArray("arr_f64"), (std::vector<float>{0.25f, 8.0f}));
  EXPECT_EQ(f.Find("arr_f64")->DoubleAt(1), 8.0);
  const Value* b = f.Find("arr_bool");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->array_type(), ValueType::BOOL);
  EXPECT_EQ(b->IntAt(0), 1);
  EXPECT_EQ(b->IntAt(1), 0);

  const Value* n = f.Find("nested");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->array_type(), ValueType::ARRAY);
  ASSERT_EQ(n->array_size(), 3u);
  ASSERT_EQ(n->elements().size(), 3u);
  EXPECT_EQ(n->elements()[0].array_type(), ValueType::INT32);
  EXPECT_EQ(n->elements()[0].IntAt(1), 2);
  EXPECT_EQ(n->elements()[1].strings(), std::vector<std::string>{"x"});
  EXPECT_EQ(n->elements()[2].elements()[0].DoubleAt(0), 3.0);
  EXPECT_EQ(n->DebugString(), "array[3] [int32[2] [1, 2], string[1] [\"x\"], array[1] [float32[1] [3]]]");

  // Range errors name the key and the value.
  absl::Status s = f.GetUint32("i8").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(s.message()), "'i8' value -100 is out of range for uint32")) << s;
  s = f.GetUint32("u64").status();
  EXPECT_TRUE(Contains(std::string(s.message()), "'u64' value 18000000000000000000")) << s;
  s = f.GetInt("u64").status();
  EXPECT_TRUE(Contains(std::string(s.message()), "out of range for int64")) << s;
  s = f.GetIntArray("arr_u64_big").status();
  EXPECT_TRUE(Contains(std::string(s.message()), "'arr_u64_big' value 18446744073709551615")) << s;
  s = f.GetInt("bool_t").status();
  EXPECT_TRUE(Contains(std::string(s.message()), "'bool_t' has type bool")) << s;

  // Writing what was read gives the same bytes.
  EXPECT_EQ(GgufWriter::FromFile(f).WriteToString(), img);
}

TEST(GgufReader, ValueAccessorsAndDebugString) {
  EXPECT_EQ(Value::I8(-1).AsInt(), -1);
  EXPECT_EQ(Value::I8(-1).AsUint(), static_cast<uint64_t>(-1));
  EXPECT_EQ(Value::U32(7).AsDouble(), 7.0);
  EXPECT_TRUE(Value::U8(3).is_integer());
  EXPECT_FALSE(Value::Bool(true).is_integer());
  EXPECT_TRUE(Value::F32(1).is_float());
  EXPECT_EQ(Value::F32(2.5f).AsInt(), 2);
  EXPECT_EQ(Value::F64(1e300).AsInt(), INT64_MAX);  // saturates, no UB
  EXPECT_EQ(Value::F64(NAN).AsInt(), 0);
  EXPECT_EQ(Value::U32(5).AsString(), "");  // wrong type: empty, no crash
  EXPECT_EQ(Value::String("ab").DebugString(), "\"ab\"");
  EXPECT_EQ(Value::Bool(false).DebugString(), "false");
  EXPECT_EQ(Value::StringArray({"a", "b", "c"}).DebugString(2), "string[3] [\"a\", \"b\", ...]");
  EXPECT_EQ(Value::I32Array({}).DebugString(), "int32[0] []");
  EXPECT_EQ(Value::I32Array({1}).IntAt(5), 0);  // out of range: 0, no crash
  EXPECT_STREQ(ValueTypeName(ValueType::FLOAT64), "float64");
  EXPECT_STREQ(ValueTypeName(static_cast<ValueType>(99)), "unknown");
  // NumericArray keeps its byte size consistent with n.
  Value v = Value::NumericArray(ValueType::INT16, "\x01", 2);
  EXPECT_EQ(v.raw().size(), 4u);
  EXPECT_EQ(v.IntAt(0), 1);
}

}  // namespace
}  // namespace herd::gguf
