// Corrupt-file catalogue: a small valid image is made with GgufWriter, then single
// fields are patched (or the image truncated). Every variant must give
// INVALID_ARGUMENT naming the file, the field and the value — never a crash, a hang, an
// out-of-bounds read (run under --config=asan) or a huge allocation.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/base/mmap.h"
#include "libs/gguf/gguf.h"

namespace herd::gguf {
namespace {

constexpr char kName[] = "corrupt.gguf";

std::string Lp(const std::string& s) {  // GGUF string: u64 length + bytes
  std::string o;
  for (int i = 0; i < 8; ++i) o.push_back(static_cast<char>((s.size() >> (8 * i)) & 0xff));
  return o + s;
}

void SetLE(std::string* img, size_t off, uint64_t v, int n) {
  ASSERT_LE(off + n, img->size());
  for (int i = 0; i < n; ++i) (*img)[off + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void SetU32(std::string* img, size_t off, uint32_t v) { SetLE(img, off, v, 4); }
void SetU64(std::string* img, size_t off, uint64_t v) { SetLE(img, off, v, 8); }
uint64_t GetLE(const std::string& img, size_t off, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(img.at(off + i))} << (8 * i);
  return v;
}

// Offset of the value type (u32) that follows `key` in the image.
size_t ValueTypePos(const std::string& img, const std::string& key) {
  const size_t p = img.find(Lp(key));
  EXPECT_NE(p, std::string::npos) << key;
  return p == std::string::npos ? 0 : p + 8 + key.size();
}

struct TensorFields {
  size_t n_dims;  // u32
  size_t ne;      // u64 ne[0]; ne[d] at ne + 8 * d
  size_t type;    // u32
  size_t offset;  // u64
};
TensorFields Tensor(const std::string& img, const std::string& name) {
  const size_t p = img.find(Lp(name));
  EXPECT_NE(p, std::string::npos) << name;
  if (p == std::string::npos) return {0, 0, 0, 0};
  const size_t nd = p + 8 + name.size();
  const size_t n = GetLE(img, nd, 4);
  return {nd, nd + 4, nd + 4 + 8 * n, nd + 8 + 8 * n};
}

// Tensor payloads (static: the writer keeps pointers).
const float kA[8] = {1, 2, 3, 4, 5, 6, 7, 8};
const uint8_t kB[36] = {1};
const uint16_t kC[3] = {0x3c00, 0x4000, 0x4200};
const float kD[8] = {-1, -2, -3, -4, -5, -6, -7, -8};

GgufWriter BaselineWriter() {
  GgufWriter w;
  w.SetValue("general.architecture", Value::String("llama"));
  w.SetValue("k.u8", Value::U8(1));
  w.SetValue("k.i8", Value::I8(-1));
  w.SetValue("k.u16", Value::U16(2));
  w.SetValue("k.i16", Value::I16(-2));
  w.SetValue("k.u32", Value::U32(3));
  w.SetValue("k.i32", Value::I32(-3));
  w.SetValue("k.f32", Value::F32(0.5f));
  w.SetValue("k.bool", Value::Bool(true));
  w.SetValue("k.u64", Value::U64(4));
  w.SetValue("k.i64", Value::I64(-4));
  w.SetValue("k.f64", Value::F64(0.25));
  w.SetValue("k.str", Value::String("hello"));
  w.SetValue("k.arr_i32", Value::I32Array({1, 2, 3}));
  w.SetValue("k.arr_str", Value::StringArray({"a", "bc"}));
  w.SetValue("k.nested", Value::NestedArray(ValueType::ARRAY, {Value::I32Array({1}), Value::StringArray({"x"})}));
  EXPECT_TRUE(w.AddTensor("tensor_a", GgmlType::F32, {4, 2}, kA, sizeof(kA)).ok());
  EXPECT_TRUE(w.AddTensor("tensor_b", GgmlType::Q4_0, {32, 2}, kB, sizeof(kB)).ok());
  EXPECT_TRUE(w.AddTensor("tensor_d", GgmlType::F32, {4, 1, 1, 2}, kD, sizeof(kD)).ok());
  // Last, and not a multiple of 32 bytes: the file ends with 26 bytes of padding.
  EXPECT_TRUE(w.AddTensor("tensor_c", GgmlType::F16, {3}, kC, sizeof(kC)).ok());
  return w;
}

std::string Baseline() { return BaselineWriter().WriteToString(); }

// "OK" when the image parses; otherwise the message, after checking code and prefix.
std::string Parse(std::string img) {
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::FromBytes(std::move(img), kName);
  if (r.ok()) return "OK";
  const std::string msg(r.status().message());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << msg;
  EXPECT_EQ(msg.rfind(std::string(kName) + ": ", 0), 0u) << "message must start with the file: " << msg;
  return msg;
}

#define EXPECT_CORRUPT(img, substr)                                     \
  do {                                                                  \
    const std::string m_ = Parse(img);                                  \
    EXPECT_NE(m_, "OK") << "expected failure containing: " << (substr); \
    EXPECT_NE(m_.find(substr), std::string::npos) << "message: " << m_; \
  } while (0)

TEST(GgufCorrupt, BaselineIsValid) {
  const std::string img = Baseline();
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::FromBytes(img, kName);
  ASSERT_TRUE(r.ok()) << r.status();
  const GgufFile& f = **r;
  EXPECT_EQ(f.metadata().size(), 16u);
  ASSERT_EQ(f.tensors().size(), 4u);
  EXPECT_EQ(f.tensors()[1].nbytes, 36u);
  EXPECT_EQ(f.tensors()[2].offset, 96u);
  EXPECT_EQ(f.tensors()[3].offset, 128u);
  EXPECT_EQ(f.file_size(), f.data_offset() + 160);
  EXPECT_EQ(*f.GetString("k.str"), "hello");
  EXPECT_EQ(*f.GetInt("k.i8"), -1);
  // Sanity of the patch helpers.
  EXPECT_EQ(GetLE(img, Tensor(img, "tensor_d").ne + 24, 8), 2u);
  EXPECT_EQ(GetLE(img, Tensor(img, "tensor_c").offset, 8), 128u);
  EXPECT_EQ(GetLE(img, ValueTypePos(img, "k.arr_i32"), 4), 9u);
}

TEST(GgufCorrupt, TruncatedAtEveryOffset) {
  const std::string img = Baseline();
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::FromBytes(img, kName);
  ASSERT_TRUE(r.ok());
  // Everything up to the last byte of tensor data is needed.
  const size_t data_end = (*r)->data_offset() + 128 + sizeof(kC);
  for (size_t len = 0; len < data_end; ++len) {
    SCOPED_TRACE(len);
    EXPECT_NE(Parse(img.substr(0, len)), "OK");
  }
  // The zero padding after the last tensor is not.
  for (size_t len = data_end; len <= img.size(); ++len) EXPECT_EQ(Parse(img.substr(0, len)), "OK");
  EXPECT_CORRUPT("", "magic: truncated at offset 0");
  EXPECT_CORRUPT(img.substr(0, 6), "version: truncated at offset 4");
  EXPECT_CORRUPT(img.substr(0, 20), "n_kv: truncated at offset 16");
  EXPECT_CORRUPT(img.substr(0, data_end - 1), "tensor 'tensor_c': data at offset 128 + 6 bytes extends past the end");
}

TEST(GgufCorrupt, BadMagic) {
  std::string img = Baseline();
  img[3] = 'X';
  EXPECT_CORRUPT(img, "bad magic \"GGUX\"");
  EXPECT_CORRUPT(
      "\x7f"
      "ELF",
      "bad magic");
}

TEST(GgufCorrupt, UnsupportedVersion) {
  std::string img = Baseline();
  SetU32(&img, 4, 1);
  EXPECT_CORRUPT(img, "header: version 1 is not supported");
  SetU32(&img, 4, 4);
  EXPECT_CORRUPT(img, "header: version 4 is not supported");
  SetU32(&img, 4, 0);
  EXPECT_CORRUPT(img, "version 0 is not supported");
  SetU32(&img, 4, 0x03000000);
  EXPECT_CORRUPT(img, "byte-swapped");
  SetU32(&img, 4, 2);  // v2 has the v3 layout
  EXPECT_EQ(Parse(img), "OK");
  EXPECT_CORRUPT(GgufWriter(4).WriteToString(), "version 4");
}

TEST(GgufCorrupt, CountsLargerThanTheFile) {
  std::string img = Baseline();
  std::string t = img;
  SetU64(&t, 8, uint64_t{1} << 40);
  EXPECT_CORRUPT(t, "header: n_tensors 1099511627776 is more than the");
  SetU64(&t, 8, ~uint64_t{0});
  EXPECT_CORRUPT(t, "n_tensors 18446744073709551615");
  std::string k = img;
  SetU64(&k, 16, uint64_t{1} << 40);
  EXPECT_CORRUPT(k, "header: n_kv 1099511627776 is more than the");
  SetU64(&k, 16, ~uint64_t{0});
  EXPECT_CORRUPT(k, "n_kv 18446744073709551615");
  // Each fits alone, but not both together.
  std::string both = img;
  const uint64_t rem = img.size() - 24;
  SetU64(&both, 8, rem / 32);
  SetU64(&both, 16, rem / 13);
  EXPECT_CORRUPT(both, "need at least");
  // One more than present: the parser runs into the following bytes and stops there.
  std::string kv1 = img;
  SetU64(&kv1, 16, 17);
  EXPECT_NE(Parse(kv1), "OK");
  std::string t1 = img;
  SetU64(&t1, 8, 5);
  EXPECT_NE(Parse(t1), "OK");
}

TEST(GgufCorrupt, HugeKeyStringAndArrayLengths) {
  const std::string img = Baseline();
  std::string k = img;
  SetU64(&k, 24, uint64_t{1} << 48);  // first key's length
  EXPECT_CORRUPT(k, "key #0: key length 281474976710656 exceeds the");

  std::string s = img;
  SetU64(&s, ValueTypePos(img, "general.architecture") + 4, uint64_t{1} << 48);
  EXPECT_CORRUPT(s, "key 'general.architecture': string value length 281474976710656 exceeds");

  std::string a = img;
  SetU64(&a, ValueTypePos(img, "k.arr_i32") + 8, uint64_t{1} << 40);
  EXPECT_CORRUPT(a, "key 'k.arr_i32': array length 1099511627776 (int32, at least 4 bytes each)");
  SetU64(&a, ValueTypePos(img, "k.arr_i32") + 8, ~uint64_t{0});
  EXPECT_CORRUPT(a, "array length 18446744073709551615");

  std::string as = img;
  SetU64(&as, ValueTypePos(img, "k.arr_str") + 8, uint64_t{1} << 40);
  EXPECT_CORRUPT(as, "key 'k.arr_str': array length 1099511627776 (string");
  // Second string element's length.
  std::string as2 = img;
  SetU64(&as2, ValueTypePos(img, "k.arr_str") + 16 + 8 + 1, uint64_t{1} << 40);
  EXPECT_CORRUPT(as2, "key 'k.arr_str': string element 1 length 1099511627776 exceeds");

  std::string n = img;
  SetU64(&n, ValueTypePos(img, "k.nested") + 8, uint64_t{1} << 40);
  EXPECT_CORRUPT(n, "key 'k.nested': array length 1099511627776 (array");
  // Inner array count.
  std::string n2 = img;
  SetU64(&n2, ValueTypePos(img, "k.nested") + 16 + 4, uint64_t{1} << 40);
  EXPECT_CORRUPT(n2, "key 'k.nested': array length 1099511627776 (int32");
}

TEST(GgufCorrupt, UnknownValueTypes) {
  const std::string img = Baseline();
  std::string t = img;
  SetU32(&t, ValueTypePos(img, "k.u8"), 13);
  EXPECT_CORRUPT(t, "key 'k.u8': unknown value type 13");
  std::string e = img;
  SetU32(&e, ValueTypePos(img, "k.arr_i32") + 4, 99);
  EXPECT_CORRUPT(e, "key 'k.arr_i32': unknown array element type 99");
  std::string n = img;
  SetU32(&n, ValueTypePos(img, "k.nested") + 16, 0xffffffff);
  EXPECT_CORRUPT(n, "key 'k.nested': unknown array element type 4294967295");
}

TEST(GgufCorrupt, ArraysNestedTooDeep) {
  Value v = Value::I32Array({1});
  for (int i = 0; i < 40; ++i) v = Value::NestedArray(ValueType::ARRAY, {v});
  GgufWriter w;
  w.SetValue("deep", v);
  EXPECT_CORRUPT(w.WriteToString(), "key 'deep': arrays nested deeper than 16");
  // 16 levels are fine.
  Value ok = Value::I32Array({1});
  for (int i = 0; i < 15; ++i) ok = Value::NestedArray(ValueType::ARRAY, {ok});
  GgufWriter w2;
  w2.SetValue("deep", ok);
  EXPECT_EQ(Parse(w2.WriteToString()), "OK");
}

// A file whose one key nests 10^5 arrays (hand-written bytes: GGUF v3, no tensors,
// ARRAY of ARRAY ... of one INT32): refused at level 17, without recursing 10^5 deep.
TEST(GgufCorrupt, ArraysNestedHundredThousandDeep) {
  auto u32 = [](std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [](std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); };
  std::string img = "GGUF";
  u32(&img, 3);
  u64(&img, 0);  // tensors
  u64(&img, 1);  // keys
  u64(&img, 4);
  img += "deep";
  u32(&img, 9);  // ARRAY
  for (int i = 0; i < 100000; ++i) {
    u32(&img, 9);  // element type ARRAY
    u64(&img, 1);  // one element
  }
  u32(&img, 5);  // INT32
  u64(&img, 1);
  u32(&img, 7);
  EXPECT_CORRUPT(img, "key 'deep': arrays nested deeper than 16");
}

TEST(GgufCorrupt, DuplicateKeysAndTensorNames) {
  const std::string img = Baseline();
  std::string k = img;
  const size_t p = k.find(Lp("k.i8"));
  ASSERT_NE(p, std::string::npos);
  k.replace(p + 8, 4, "k.u8");
  EXPECT_CORRUPT(k, "key 'k.u8': duplicate key");

  std::string t = img;
  const size_t q = t.find(Lp("tensor_b"));
  ASSERT_NE(q, std::string::npos);
  t.replace(q + 8, 8, "tensor_a");
  EXPECT_CORRUPT(t, "tensor 'tensor_a': duplicate tensor name");
}

TEST(GgufCorrupt, BadDims) {
  const std::string img = Baseline();
  const TensorFields a = Tensor(img, "tensor_a");
  std::string z = img;
  SetU64(&z, a.ne + 8, 0);
  EXPECT_CORRUPT(z, "corrupt.gguf: tensor 'tensor_a': dim 1 is 0");
  std::string neg = img;
  SetU64(&neg, a.ne, static_cast<uint64_t>(int64_t{-4}));
  EXPECT_CORRUPT(neg, "tensor 'tensor_a': dim 0 is -4 (negative");

  std::string nd0 = img;
  SetU32(&nd0, a.n_dims, 0);
  EXPECT_CORRUPT(nd0, "tensor 'tensor_a': n_dims 0 is out of range 1..4");
  std::string nd5 = img;
  SetU32(&nd5, a.n_dims, 5);
  EXPECT_CORRUPT(nd5, "tensor 'tensor_a': n_dims 5 is out of range 1..4");
  std::string ndbig = img;
  SetU32(&ndbig, a.n_dims, 0xffffffff);
  EXPECT_CORRUPT(ndbig, "n_dims 4294967295");

  // Element count overflows int64: 2^32 * 2^32.
  const TensorFields d = Tensor(img, "tensor_d");
  std::string ov = img;
  SetU64(&ov, d.ne, uint64_t{1} << 32);
  SetU64(&ov, d.ne + 8, uint64_t{1} << 32);
  EXPECT_CORRUPT(ov,
                 "tensor 'tensor_d': element count of dims 4294967296 x 4294967296 x 1 x 2 "
                 "overflows int64");
  // Each dim alone fits, the product of the last three overflows.
  std::string ov2 = img;
  SetU64(&ov2, d.ne + 8, uint64_t{1} << 31);
  SetU64(&ov2, d.ne + 16, uint64_t{1} << 31);
  SetU64(&ov2, d.ne + 24, uint64_t{1} << 31);
  EXPECT_CORRUPT(ov2, "element count");
  // Element count fits (2^61), byte size (2^63 for f32) does not.
  std::string by = img;
  SetU64(&by, d.ne, uint64_t{1} << 60);
  EXPECT_CORRUPT(by,
                 "tensor 'tensor_d': byte size of f32 dims 1152921504606846976 x 1 x 1 x 2 "
                 "overflows int64");
  // q8_K stores 292 bytes per 256 elements: 8.1e18 elements fit in int64, their bytes do not.
  std::string k8 = img;
  SetU32(&k8, d.type, static_cast<uint32_t>(GgmlType::Q8_K));
  SetU64(&k8, d.ne, 8100000000000000000ull);  // a multiple of 256
  SetU64(&k8, d.ne + 24, 1);
  EXPECT_CORRUPT(k8,
                 "tensor 'tensor_d': byte size of q8_K dims 8100000000000000000 x 1 x 1 x 1 "
                 "overflows int64");
  // q4_0: 2^62 elements fit in int64 (and so do their bytes), but not in the file.
  const TensorFields b = Tensor(img, "tensor_b");
  std::string big = img;
  SetU64(&big, b.ne, uint64_t{1} << 61);
  EXPECT_CORRUPT(big, "tensor 'tensor_b': data at offset 32 + 2594073385365405696 bytes extends");

  std::string blk = img;
  SetU64(&blk, b.ne, 33);
  EXPECT_CORRUPT(blk, "tensor 'tensor_b': dim 0 (33) is not a multiple of the q4_0 block size 32");
}

TEST(GgufCorrupt, UnknownTensorType) {
  const std::string img = Baseline();
  const TensorFields a = Tensor(img, "tensor_a");
  for (uint32_t bad : {4u, 5u, 31u, 40u, 1000u, 0xffffffffu}) {
    std::string t = img;
    SetU32(&t, a.type, bad);
    EXPECT_CORRUPT(t, "tensor 'tensor_a': unknown ggml type id " + std::to_string(bad));
  }
}

TEST(GgufCorrupt, OffsetsAndSizes) {
  const std::string img = Baseline();
  const TensorFields c = Tensor(img, "tensor_c");
  std::string past = img;
  SetU64(&past, c.offset, uint64_t{1} << 40);
  EXPECT_CORRUPT(past,
                 "tensor 'tensor_c': data at offset 1099511627776 + 6 bytes extends past "
                 "the end of the data section (160 bytes");
  SetU64(&past, c.offset, ~uint64_t{31});  // aligned, near 2^64: no wrap-around
  EXPECT_CORRUPT(past, "tensor 'tensor_c': data at offset 18446744073709551584");
  std::string just = img;
  SetU64(&just, c.offset, 160);  // starts exactly at the end
  EXPECT_CORRUPT(just, "extends past the end");

  std::string size = img;
  SetU64(&size, c.ne, 3000);
  EXPECT_CORRUPT(size, "tensor 'tensor_c': data at offset 128 + 6000 bytes extends past");

  std::string mis = img;
  SetU64(&mis, Tensor(img, "tensor_b").offset, 36);
  EXPECT_CORRUPT(mis, "tensor 'tensor_b': offset 36 is not a multiple of the alignment 32");
}

TEST(GgufCorrupt, OverlappingTensors) {
  const std::string img = Baseline();
  std::string same = img;
  SetU64(&same, Tensor(img, "tensor_b").offset, 0);
  EXPECT_CORRUPT(same, "tensors 'tensor_a' (offset 0, 32 bytes) and 'tensor_b' (offset 0) overlap");
  // tensor_a grows from 32 to 48 bytes into tensor_b at 32.
  std::string grow = img;
  SetU64(&grow, Tensor(img, "tensor_a").ne + 8, 3);
  EXPECT_CORRUPT(grow, "tensors 'tensor_a' (offset 0, 48 bytes) and 'tensor_b' (offset 32) overlap");
  // Order in the file does not matter: tensor_c placed inside tensor_b.
  std::string inside = img;
  SetU64(&inside, Tensor(img, "tensor_c").offset, 64);
  EXPECT_CORRUPT(inside, "'tensor_b' (offset 32, 36 bytes) and 'tensor_c' (offset 64) overlap");
}

TEST(GgufCorrupt, BadAlignment) {
  struct Case {
    Value v;
    std::string msg;
  };
  const std::vector<Case> cases = {
      {Value::U32(0), "key 'general.alignment': alignment is 0"},
      {Value::U32(3), "key 'general.alignment': alignment 3 is not a power of two"},
      {Value::U32(48), "alignment 48 is not a power of two"},
      {Value::U32(1u << 24), "alignment 16777216 exceeds the maximum 1048576"},
      {Value::U32(0x80000000u), "alignment 2147483648 exceeds the maximum"},
      {Value::U64(uint64_t{1} << 40),
       "key 'general.alignment': has type uint64 (value 1099511627776), expected uint32"},
      {Value::U64(32), "has type uint64 (value 32), expected uint32"},
      {Value::I32(32), "has type int32"},
      {Value::String("32"), "has type string"},
      {Value::I32Array({32}), "has type array of int32"},
  };
  for (const Case& c : cases) {
    GgufWriter w = BaselineWriter();
    w.SetValue("general.alignment", c.v);  // invalid: written as given, layout stays 32
    EXPECT_CORRUPT(w.WriteToString(), c.msg);
  }
  // A valid non-default alignment, and an offset that is 32- but not 64-aligned.
  GgufWriter w = BaselineWriter();
  w.SetValue("general.alignment", Value::U32(64));
  std::string img = w.WriteToString();
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::FromBytes(img, kName);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->alignment(), 64u);
  EXPECT_EQ((*r)->data_offset() % 64, 0u);
  EXPECT_EQ((*r)->tensors()[1].offset, 64u);
  SetU64(&img, Tensor(img, "tensor_b").offset, 96 + 64);
  EXPECT_CORRUPT(img, "offset 160 is not a multiple of the alignment 64");
}

TEST(GgufCorrupt, OpenNamesThePath) {
  std::string img = Baseline();
  SetU64(&img, Tensor(img, "tensor_a").ne + 8, 0);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/model.gguf";
  ASSERT_TRUE(WriteFileAtomic(path, img.data(), img.size()).ok());
  absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), path + ": tensor 'tensor_a': dim 1 is 0");
  // An empty file.
  ASSERT_TRUE(WriteFileAtomic(path, "", 0).ok());
  r = GgufFile::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GgufCorrupt, NonPrintableNamesAreEscaped) {
  std::string img = Baseline();
  const size_t p = img.find(Lp("tensor_a"));
  ASSERT_NE(p, std::string::npos);
  img[p + 8] = '\x01';
  SetU64(&img,
         Tensor(img,
                "\x01"
                "ensor_a")
             .ne,
         0);
  // absl::CHexEscape: "\x01" and then 'e' escaped too, as a hex digit.
  EXPECT_CORRUPT(img, "tensor '\\x01\\x65nsor_a': dim 0 is 0");
}

// Random byte corruption of the header region: any outcome but a crash (or a sanitizer
// report) is acceptable.
TEST(GgufCorrupt, RandomByteFlipsNeverCrash) {
  const std::string img = Baseline();
  absl::StatusOr<std::unique_ptr<GgufFile>> base = GgufFile::FromBytes(img, kName);
  ASSERT_TRUE(base.ok());
  const size_t header = (*base)->data_offset();
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int ok = 0, bad = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string t = img;
    const int flips = 1 + static_cast<int>(next() % 4);
    for (int i = 0; i < flips; ++i) {
      const size_t pos = next() % header;
      const uint64_t r = next();
      // Mix of bit flips and "interesting" bytes (0, 0xff, 0x80).
      const char interesting[] = {0, '\xff', '\x80', 1};
      t[pos] = (r & 1) ? static_cast<char>(t[pos] ^ (1 << ((r >> 1) % 8))) : interesting[(r >> 1) % 4];
    }
    if (next() % 4 == 0) t.resize(next() % (t.size() + 1));
    absl::StatusOr<std::unique_ptr<GgufFile>> r = GgufFile::FromBytes(t, kName);
    if (r.ok()) {
      ++ok;
      // Whatever parsed must be self-consistent.
      for (const TensorInfo& ti : (*r)->tensors()) {
        ASSERT_LE((*r)->data_offset() + ti.offset + ti.nbytes, (*r)->file_size());
      }
    } else {
      ++bad;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    }
  }
  EXPECT_GT(bad, 0);
  EXPECT_EQ(ok + bad, 4000);
}

}  // namespace
}  // namespace herd::gguf
