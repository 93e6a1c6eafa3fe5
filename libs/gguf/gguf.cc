// GGUF v2/v3 reader and writer. See gguf.h for the layout.
//
// Format facts follow ggml's gguf.cpp (gguf_init_from_file_impl / gguf_write_out) and
// gguf-py (GGUFReader / GGUFWriter):
//  - all integers little-endian; strings are u64 length + bytes (no terminator);
//  - an ARRAY value is u32 element type + u64 count + elements; an element of an
//    ARRAY-of-ARRAY is itself (u32 type, u64 count, elements) without a type tag
//    (gguf-py writes and reads nested arrays this way; ggml's C reader rejects them);
//  - BOOL is one byte;
//  - general.alignment is a UINT32, nonzero power of two, default 32;
//  - tensor offsets are relative to the data section, which starts at the end of the
//    tensor infos rounded up to the alignment; writers pad each tensor's data to the
//    alignment with zeros.
//
// The reader never trusts a count or length: each is checked against the bytes that
// remain before anything is reserved or read, with explicit bounds-checked
// little-endian loads.
#include "libs/gguf/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#include "libs/base/status_macros.h"

namespace herd::gguf {
namespace {

constexpr uint32_t kDefaultAlignment = 32;    // GGUF_DEFAULT_ALIGNMENT
constexpr uint32_t kMaxAlignment = 1u << 20;  // sanity bound (ours, not ggml's)
constexpr uint32_t kMaxDims = 4;              // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 16;            // nesting bound for ARRAY of ARRAY
constexpr size_t kMaxReserve = 1 << 16;       // elements reserved up front at most
constexpr char kAlignmentKey[] = "general.alignment";

// Smallest possible encodings, used to bound counts before allocating:
// a KV is key length (8) + empty key + type (4) + smallest value (1 byte);
// a tensor info is name length (8) + empty name + n_dims (4) + one dim (8) + type (4) +
// offset (8).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

// Bytes of a fixed-size value; 0 for STRING and ARRAY.
size_t ScalarSize(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::BOOL:
      return 1;
    case ValueType::UINT16:
    case ValueType::INT16:
      return 2;
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::FLOAT32:
      return 4;
    case ValueType::UINT64:
    case ValueType::INT64:
    case ValueType::FLOAT64:
      return 8;
    case ValueType::STRING:
    case ValueType::ARRAY:
      return 0;
  }
  return 0;
}

// Smallest encoding of one array element of type `t` (no type tag).
uint64_t MinElementSize(ValueType t) {
  if (t == ValueType::STRING) return 8;  // u64 length
  if (t == ValueType::ARRAY) return 12;  // u32 type + u64 count
  return ScalarSize(t);
}

bool IsIntegerType(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
    case ValueType::INT8:
    case ValueType::UINT16:
    case ValueType::INT16:
    case ValueType::UINT32:
    case ValueType::INT32:
    case ValueType::UINT64:
    case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool IsFloatType(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }
bool IsNumericType(ValueType t) { return ScalarSize(t) != 0; }  // incl. BOOL

uint64_t LoadLE(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void AppendLE(uint64_t v, size_t n, std::string* out) {
  for (size_t i = 0; i < n; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void AppendU32(uint32_t v, std::string* out) { AppendLE(v, 4, out); }
void AppendU64(uint64_t v, std::string* out) { AppendLE(v, 8, out); }
void AppendStr(absl::string_view s, std::string* out) {
  AppendU64(s.size(), out);
  out->append(s.data(), s.size());
}

double BitsToDouble(ValueType t, uint64_t bits);

// Value of a scalar of type `t` whose little-endian bits are `bits` (zero-extended).
int64_t BitsToInt(ValueType t, uint64_t bits) {
  switch (t) {
    case ValueType::UINT8:
      return static_cast<uint8_t>(bits);
    case ValueType::INT8:
      return static_cast<int8_t>(static_cast<uint8_t>(bits));
    case ValueType::UINT16:
      return static_cast<uint16_t>(bits);
    case ValueType::INT16:
      return static_cast<int16_t>(static_cast<uint16_t>(bits));
    case ValueType::UINT32:
      return static_cast<uint32_t>(bits);
    case ValueType::INT32:
      return static_cast<int32_t>(static_cast<uint32_t>(bits));
    case ValueType::UINT64:
    case ValueType::INT64:
      return static_cast<int64_t>(bits);
    case ValueType::BOOL:
      return bits != 0 ? 1 : 0;
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: {
      // Saturating, NaN -> 0 (a plain cast would be undefined out of range).
      double d = BitsToDouble(t, bits);
      if (std::isnan(d)) return 0;
      if (d >= 9.2233720368547758e18) return std::numeric_limits<int64_t>::max();
      if (d <= -9.2233720368547758e18) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(d);
    }
    default:
      return 0;
  }
}

double BitsToDouble(ValueType t, uint64_t bits) {
  if (t == ValueType::FLOAT32) {
    uint32_t b = static_cast<uint32_t>(bits);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  if (t == ValueType::FLOAT64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  if (t == ValueType::UINT64) return static_cast<double>(bits);
  return static_cast<double>(BitsToInt(t, bits));
}

// Quoted, escaped, length-limited rendering of file-supplied text for messages.
std::string Quote(absl::string_view s) {
  constexpr size_t kMax = 96;
  if (s.size() > kMax) return absl::StrCat("'", absl::CHexEscape(s.substr(0, kMax)), "...'");
  return absl::StrCat("'", absl::CHexEscape(s), "'");
}

std::string TypeDesc(const Value& v) {
  if (v.type() == ValueType::ARRAY) return absl::StrCat("array of ", ValueTypeName(v.array_type()));
  return ValueTypeName(v.type());
}

uint64_t AlignUp(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool ValidAlignmentValue(uint64_t a) { return a != 0 && (a & (a - 1)) == 0 && a <= kMaxAlignment; }

}  // namespace

const char* ValueTypeName(ValueType t) {
  switch (t) {
    case ValueType::UINT8:
      return "uint8";
    case ValueType::INT8:
      return "int8";
    case ValueType::UINT16:
      return "uint16";
    case ValueType::INT16:
      return "int16";
    case ValueType::UINT32:
      return "uint32";
    case ValueType::INT32:
      return "int32";
    case ValueType::FLOAT32:
      return "float32";
    case ValueType::BOOL:
      return "bool";
    case ValueType::STRING:
      return "string";
    case ValueType::ARRAY:
      return "array";
    case ValueType::UINT64:
      return "uint64";
    case ValueType::INT64:
      return "int64";
    case ValueType::FLOAT64:
      return "float64";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------------
// Parser: the validating reader, plus value encoding for the writer (it is the friend
// of Value that may touch the raw scalar bits).

class Parser {
 public:
  Parser(const std::string& name, const uint8_t* data, uint64_t size) : name_(name), data_(data), size_(size) {}

  absl::Status Parse(GgufFile* f);

  // Appends the encoding of `v` without its type tag (the payload of a KV, or an
  // element of an array).
  static void AppendValue(const Value& v, std::string* out);
  static uint64_t ScalarBits(const Value& v) { return v.bits_; }
  static Value MakeScalar(ValueType t, uint64_t bits) {
    Value v;
    v.type_ = t;
    v.bits_ = bits;
    return v;
  }

 private:
  absl::Status Fail(absl::string_view msg) const {
    if (ctx_.empty()) return absl::InvalidArgumentError(absl::StrCat(name_, ": ", msg));
    return absl::InvalidArgumentError(absl::StrCat(name_, ": ", ctx_, ": ", msg));
  }
  uint64_t Remaining() const { return size_ - pos_; }
  absl::Status Truncated(absl::string_view field, uint64_t need) const {
    return Fail(absl::StrCat(field, ": truncated at offset ", pos_, " (need ", need, " bytes, ", Remaining(),
                             " remain in a ", size_, "-byte file)"));
  }
  absl::Status ReadLE(absl::string_view field, size_t n, uint64_t* v) {
    if (n > Remaining()) return Truncated(field, n);
    *v = LoadLE(data_ + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  absl::Status ReadU32(absl::string_view field, uint32_t* v) {
    uint64_t x = 0;
    absl::Status s = ReadLE(field, 4, &x);
    *v = static_cast<uint32_t>(x);
    return s;
  }
  absl::Status ReadU64(absl::string_view field, uint64_t* v) { return ReadLE(field, 8, v); }
  absl::Status ReadString(absl::string_view field, int64_t index, std::string* out);
  absl::Status ReadValue(ValueType t, int depth, Value* out);
  absl::Status ParseTensorInfo(size_t index, TensorInfo* ti);

  const std::string& name_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string ctx_;  // "key 'x'", "tensor 'y'", ... prefix for messages
};

absl::Status Parser::ReadString(absl::string_view field, int64_t index, std::string* out) {
  // No message text is built unless there is an error (this runs per vocab token).
  auto what = [&]() { return index < 0 ? std::string(field) : absl::StrCat(field, " ", index); };
  if (Remaining() < 8) return Truncated(absl::StrCat(what(), " length"), 8);
  const uint64_t len = LoadLE(data_ + pos_, 8);
  pos_ += 8;
  if (len > Remaining()) {
    return Fail(
        absl::StrCat(what(), " length ", len, " exceeds the ", Remaining(), " bytes remaining at offset ", pos_));
  }
  out->assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
  pos_ += len;
  return absl::OkStatus();
}

absl::Status Parser::ReadValue(ValueType t, int depth, Value* out) {
  out->type_ = t;
  if (IsNumericType(t)) {
    return ReadLE("value", ScalarSize(t), &out->bits_);
  }
  if (t == ValueType::STRING) return ReadString("string value", -1, &out->str_);
  // ARRAY
  if (depth >= kMaxArrayDepth) {
    return Fail(absl::StrCat("arrays nested deeper than ", kMaxArrayDepth, " levels"));
  }
  uint32_t et = 0;
  HERD_RETURN_IF_ERROR(ReadU32("array element type", &et));
  if (!IsKnownValueType(et)) return Fail(absl::StrCat("unknown array element type ", et));
  const ValueType elem = static_cast<ValueType>(et);
  uint64_t n = 0;
  HERD_RETURN_IF_ERROR(ReadU64("array length", &n));
  const uint64_t min = MinElementSize(elem);
  if (n > Remaining() / min) {
    return Fail(absl::StrCat("array length ", n, " (", ValueTypeName(elem), ", at least ", min,
                             " bytes each) exceeds the ", Remaining(), " bytes remaining at offset ", pos_));
  }
  out->array_type_ = elem;
  out->array_size_ = static_cast<size_t>(n);
  if (IsNumericType(elem)) {
    const uint64_t bytes = n * min;  // <= Remaining(), no overflow
    out->raw_.assign(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(bytes));
    pos_ += bytes;
    return absl::OkStatus();
  }
  if (elem == ValueType::STRING) {
    out->strings_.reserve(static_cast<size_t>(std::min<uint64_t>(n, kMaxReserve)));
    for (uint64_t i = 0; i < n; ++i) {
      out->strings_.emplace_back();
      if (absl::Status s = ReadString("string element", static_cast<int64_t>(i), &out->strings_.back()); !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  }
  out->elements_.reserve(static_cast<size_t>(std::min<uint64_t>(n, kMaxReserve)));
  for (uint64_t i = 0; i < n; ++i) {
    out->elements_.emplace_back();
    if (absl::Status s = ReadValue(ValueType::ARRAY, depth + 1, &out->elements_.back()); !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Parser::ParseTensorInfo(size_t index, TensorInfo* ti) {
  ctx_ = absl::StrCat("tensor #", index);
  HERD_RETURN_IF_ERROR(ReadString("name", -1, &ti->name));
  ctx_ = absl::StrCat("tensor ", Quote(ti->name));
  HERD_RETURN_IF_ERROR(ReadU32("n_dims", &ti->n_dims));
  if (ti->n_dims < 1 || ti->n_dims > kMaxDims) {
    return Fail(absl::StrCat("n_dims ", ti->n_dims, " is out of range 1..", kMaxDims));
  }
  for (uint32_t d = 0; d < ti->n_dims; ++d) {
    uint64_t v = 0;
    HERD_RETURN_IF_ERROR(ReadU64(absl::StrCat("dim ", d), &v));
    if (v == 0) return Fail(absl::StrCat("dim ", d, " is 0"));
    if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Fail(absl::StrCat("dim ", d, " is ", static_cast<int64_t>(v), " (negative as int64)"));
    }
    ti->ne[d] = static_cast<int64_t>(v);
  }
  uint32_t type = 0;
  HERD_RETURN_IF_ERROR(ReadU32("type", &type));
  const GgmlTypeTraits* tr = GetGgmlTypeTraits(type);
  if (tr == nullptr) return Fail(absl::StrCat("unknown ggml type id ", type));
  ti->type = static_cast<GgmlType>(type);
  HERD_RETURN_IF_ERROR(ReadU64("offset", &ti->offset));

  // Element count and byte size must fit in int64 (ggml keeps them in int64_t/size_t).
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto dims = [ti]() { return absl::StrJoin(ti->ne, ti->ne + ti->n_dims, " x "); };
  int64_t rows = 1;  // ne[1] * ne[2] * ne[3]
  for (int d = 1; d < 4; ++d) {
    if (ti->ne[d] > kMax / rows) {
      return Fail(absl::StrCat("element count of dims ", dims(), " overflows int64"));
    }
    rows *= ti->ne[d];
  }
  if (ti->ne[0] > kMax / rows) {
    return Fail(absl::StrCat("element count of dims ", dims(), " overflows int64"));
  }
  if (ti->ne[0] % tr->block_size != 0) {
    return Fail(
        absl::StrCat("dim 0 (", ti->ne[0], ") is not a multiple of the ", tr->name, " block size ", tr->block_size));
  }
  const int64_t blocks = ti->ne[0] / tr->block_size;
  const int64_t ts = static_cast<int64_t>(tr->type_size);
  if (blocks > kMax / ts || blocks * ts > kMax / rows) {
    return Fail(absl::StrCat("byte size of ", tr->name, " dims ", dims(), " overflows int64"));
  }
  ti->nbytes = static_cast<size_t>(blocks * ts * rows);
  return absl::OkStatus();
}

absl::Status Parser::Parse(GgufFile* f) {
  f->file_size_ = size_;
  // Magic.
  if (size_ >= 4 && std::memcmp(data_, "GGUF", 4) != 0) {
    return Fail(absl::StrCat("bad magic \"",
                             absl::CHexEscape(absl::string_view(reinterpret_cast<const char*>(data_), 4)),
                             "\" (expected \"GGUF\")"));
  }
  ctx_ = "header";
  if (size_ < 4) return Truncated("magic", 4);
  pos_ = 4;
  uint32_t version = 0;
  HERD_RETURN_IF_ERROR(ReadU32("version", &version));
  if (version == 1) {
    return Fail("version 1 is not supported (GGUFv1 is obsolete; supported versions: 2, 3)");
  }
  if (version != 2 && version != 3) {
    if (version != 0 && (version & 0xffff) == 0) {
      return Fail(absl::StrCat("version ", version, " (0x", absl::Hex(version, absl::kZeroPad8),
                               ") looks byte-swapped: big-endian GGUF is not supported"));
    }
    return Fail(absl::StrCat("version ", version, " is not supported (supported versions: 2, 3)"));
  }
  f->version_ = version;
  uint64_t n_tensors = 0, n_kv = 0;
  HERD_RETURN_IF_ERROR(ReadU64("n_tensors", &n_tensors));
  HERD_RETURN_IF_ERROR(ReadU64("n_kv", &n_kv));
  {
    const uint64_t rem = Remaining();
    if (n_kv > rem / kMinKvBytes) {
      return Fail(absl::StrCat("n_kv ", n_kv, " is more than the ", rem, " remaining bytes can hold (at least ",
                               kMinKvBytes, " bytes per key/value)"));
    }
    if (n_tensors > rem / kMinTensorInfoBytes) {
      return Fail(absl::StrCat("n_tensors ", n_tensors, " is more than the ", rem,
                               " remaining bytes can hold (at least ", kMinTensorInfoBytes, " bytes per tensor info)"));
    }
    // Both products are <= rem, so the sum below cannot wrap.
    if (n_kv * kMinKvBytes > rem - n_tensors * kMinTensorInfoBytes) {
      return Fail(absl::StrCat("n_kv ", n_kv, " and n_tensors ", n_tensors, " need at least ",
                               n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes, " bytes but only ", rem,
                               " remain"));
    }
  }

  // Key/values.
  f->kv_.reserve(static_cast<size_t>(std::min<uint64_t>(n_kv, kMaxReserve)));
  absl::flat_hash_set<std::string> keys;
  for (uint64_t i = 0; i < n_kv; ++i) {
    ctx_ = absl::StrCat("key #", i);
    KeyValue kv;
    HERD_RETURN_IF_ERROR(ReadString("key", -1, &kv.key));
    ctx_ = absl::StrCat("key ", Quote(kv.key));
    if (!keys.insert(kv.key).second) return Fail("duplicate key");
    uint32_t type = 0;
    HERD_RETURN_IF_ERROR(ReadU32("value type", &type));
    if (!IsKnownValueType(type)) return Fail(absl::StrCat("unknown value type ", type));
    HERD_RETURN_IF_ERROR(ReadValue(static_cast<ValueType>(type), 0, &kv.value));
    f->kv_.push_back(std::move(kv));
  }

  // Alignment (ggml: gguf_get_val_u32 on general.alignment, must be a power of two).
  ctx_ = absl::StrCat("key '", kAlignmentKey, "'");
  f->alignment_ = kDefaultAlignment;
  if (const Value* a = f->Find(kAlignmentKey)) {
    if (a->type() != ValueType::UINT32) {
      return Fail(absl::StrCat("has type ", TypeDesc(*a), " (value ", a->DebugString(4), "), expected uint32"));
    }
    const uint64_t v = a->AsUint();
    if (v == 0) return Fail("alignment is 0 (must be a nonzero power of two)");
    if ((v & (v - 1)) != 0) return Fail(absl::StrCat("alignment ", v, " is not a power of two"));
    if (v > kMaxAlignment) {
      return Fail(absl::StrCat("alignment ", v, " exceeds the maximum ", kMaxAlignment));
    }
    f->alignment_ = static_cast<uint32_t>(v);
  }

  // Tensor infos.
  ctx_ = "header";
  if (n_tensors > Remaining() / kMinTensorInfoBytes) {
    return Fail(absl::StrCat("n_tensors ", n_tensors, " is more than the ", Remaining(),
                             " bytes after the key/values can hold (at least ", kMinTensorInfoBytes,
                             " bytes per tensor info)"));
  }
  f->tensors_.reserve(static_cast<size_t>(n_tensors));
  absl::flat_hash_set<std::string> names;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo ti;
    HERD_RETURN_IF_ERROR(ParseTensorInfo(static_cast<size_t>(i), &ti));
    if (!names.insert(ti.name).second) return Fail("duplicate tensor name");
    f->tensors_.push_back(std::move(ti));
  }

  // Data section: starts at the aligned end of the tensor infos. A file without tensors
  // may end before that (gguf-py's vocab-only files carry no padding).
  const uint64_t header_end = pos_;
  f->data_offset_ = AlignUp(header_end, f->alignment_);
  const uint64_t data_size = size_ > f->data_offset_ ? size_ - f->data_offset_ : 0;
  for (TensorInfo& ti : f->tensors_) {
    ctx_ = absl::StrCat("tensor ", Quote(ti.name));
    if (ti.offset % f->alignment_ != 0) {
      return Fail(absl::StrCat("offset ", ti.offset, " is not a multiple of the alignment ", f->alignment_));
    }
    if (ti.offset > data_size || ti.nbytes > data_size - ti.offset) {
      return Fail(absl::StrCat("data at offset ", ti.offset, " + ", ti.nbytes,
                               " bytes extends past the end of the data section (", data_size,
                               " bytes from file offset ", f->data_offset_, "; file size ", size_, ")"));
    }
    ti.data = data_ + f->data_offset_ + ti.offset;
  }
  // Overlap: sort by offset; every tensor must end before the next one starts.
  std::vector<size_t> order(f->tensors_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [f](size_t a, size_t b) { return f->tensors_[a].offset < f->tensors_[b].offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const TensorInfo& a = f->tensors_[order[i - 1]];
    const TensorInfo& b = f->tensors_[order[i]];
    if (a.offset + a.nbytes > b.offset) {
      ctx_.clear();
      return Fail(absl::StrCat("tensors ", Quote(a.name), " (offset ", a.offset, ", ", a.nbytes, " bytes) and ",
                               Quote(b.name), " (offset ", b.offset, ") overlap"));
    }
  }
  return absl::OkStatus();
}

void Parser::AppendValue(const Value& v, std::string* out) {
  if (IsNumericType(v.type_)) {
    AppendLE(v.bits_, ScalarSize(v.type_), out);
    return;
  }
  if (v.type_ == ValueType::STRING) {
    AppendStr(v.str_, out);
    return;
  }
  AppendU32(static_cast<uint32_t>(v.array_type_), out);
  if (v.array_type_ == ValueType::STRING) {
    AppendU64(v.strings_.size(), out);
    for (const std::string& s : v.strings_) AppendStr(s, out);
  } else if (v.array_type_ == ValueType::ARRAY) {
    AppendU64(v.elements_.size(), out);
    for (const Value& e : v.elements_) AppendValue(e, out);
  } else {
    AppendU64(v.raw_.size() / ScalarSize(v.array_type_), out);
    out->append(v.raw_);
  }
}

// ---------------------------------------------------------------------------------
// Value

namespace {
Value ScalarValue(ValueType t, uint64_t bits) { return Parser::MakeScalar(t, bits); }
}  // namespace

Value Value::U8(uint8_t v) { return ScalarValue(ValueType::UINT8, v); }
Value Value::I8(int8_t v) { return ScalarValue(ValueType::INT8, static_cast<uint8_t>(v)); }
Value Value::U16(uint16_t v) { return ScalarValue(ValueType::UINT16, v); }
Value Value::I16(int16_t v) { return ScalarValue(ValueType::INT16, static_cast<uint16_t>(v)); }
Value Value::U32(uint32_t v) { return ScalarValue(ValueType::UINT32, v); }
Value Value::I32(int32_t v) { return ScalarValue(ValueType::INT32, static_cast<uint32_t>(v)); }
Value Value::U64(uint64_t v) { return ScalarValue(ValueType::UINT64, v); }
Value Value::I64(int64_t v) { return ScalarValue(ValueType::INT64, static_cast<uint64_t>(v)); }
Value Value::F32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return ScalarValue(ValueType::FLOAT32, b);
}
Value Value::F64(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return ScalarValue(ValueType::FLOAT64, b);
}
Value Value::Bool(bool v) { return ScalarValue(ValueType::BOOL, v ? 1 : 0); }

Value Value::String(std::string v) {
  Value r;
  r.type_ = ValueType::STRING;
  r.str_ = std::move(v);
  return r;
}

Value Value::StringArray(std::vector<std::string> v) {
  Value r;
  r.type_ = ValueType::ARRAY;
  r.array_type_ = ValueType::STRING;
  r.array_size_ = v.size();
  r.strings_ = std::move(v);
  return r;
}

Value Value::F32Array(const std::vector<float>& v) {
  std::string raw;
  raw.reserve(v.size() * 4);
  for (float x : v) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    AppendLE(b, 4, &raw);
  }
  return NumericArray(ValueType::FLOAT32, std::move(raw), v.size());
}

Value Value::I32Array(const std::vector<int32_t>& v) {
  std::string raw;
  raw.reserve(v.size() * 4);
  for (int32_t x : v) AppendLE(static_cast<uint32_t>(x), 4, &raw);
  return NumericArray(ValueType::INT32, std::move(raw), v.size());
}

Value Value::NumericArray(ValueType elem, std::string raw_le_bytes, size_t n) {
  Value r;
  r.type_ = ValueType::ARRAY;
  r.array_type_ = elem;
  if (!IsNumericType(elem)) return r;  // precondition violated: empty array
  r.array_size_ = n;
  r.raw_ = std::move(raw_le_bytes);
  r.raw_.resize(n * ScalarSize(elem), '\0');  // keep size consistent with n
  return r;
}

Value Value::NestedArray(ValueType elem, std::vector<Value> elems) {
  Value r;
  r.type_ = ValueType::ARRAY;
  r.array_type_ = elem;
  r.array_size_ = elems.size();
  if (elem == ValueType::ARRAY) {
    r.elements_ = std::move(elems);
    // Keep the encoding well-formed: a non-array element becomes an empty array.
    for (Value& e : r.elements_) {
      if (e.type_ != ValueType::ARRAY) e = NumericArray(ValueType::UINT8, "", 0);
    }
  } else if (elem == ValueType::STRING) {
    for (const Value& e : elems) r.strings_.push_back(e.AsString());
  } else {
    const size_t sz = ScalarSize(elem);
    for (const Value& e : elems) {
      uint64_t bits = e.bits_;
      if (e.type_ != elem) {  // convert to the element type
        if (elem == ValueType::FLOAT32)
          bits = F32(static_cast<float>(e.AsDouble())).bits_;
        else if (elem == ValueType::FLOAT64)
          bits = F64(e.AsDouble()).bits_;
        else if (elem == ValueType::BOOL)
          bits = e.AsBool() ? 1 : 0;
        else
          bits = static_cast<uint64_t>(e.is_float() ? BitsToInt(e.type_, e.bits_) : e.AsInt());
      }
      AppendLE(bits, sz, &r.raw_);
    }
  }
  return r;
}

bool Value::is_integer() const { return IsIntegerType(type_); }
bool Value::is_float() const { return IsFloatType(type_); }

int64_t Value::AsInt() const { return IsNumericType(type_) ? BitsToInt(type_, bits_) : 0; }

uint64_t Value::AsUint() const {
  if (type_ == ValueType::UINT64) return bits_;
  return static_cast<uint64_t>(AsInt());
}

double Value::AsDouble() const { return IsNumericType(type_) ? BitsToDouble(type_, bits_) : 0.0; }

bool Value::AsBool() const {
  if (type_ == ValueType::BOOL) return bits_ != 0;
  return IsNumericType(type_) && AsDouble() != 0.0;
}

const std::string& Value::AsString() const {
  static const std::string* const kEmpty = new std::string();
  return type_ == ValueType::STRING ? str_ : *kEmpty;
}

int64_t Value::IntAt(size_t i) const {
  if (type_ != ValueType::ARRAY || !IsNumericType(array_type_) || i >= array_size_) return 0;
  const size_t sz = ScalarSize(array_type_);
  return BitsToInt(array_type_, LoadLE(reinterpret_cast<const uint8_t*>(raw_.data()) + i * sz, sz));
}

double Value::DoubleAt(size_t i) const {
  if (type_ != ValueType::ARRAY || !IsNumericType(array_type_) || i >= array_size_) return 0;
  const size_t sz = ScalarSize(array_type_);
  return BitsToDouble(array_type_, LoadLE(reinterpret_cast<const uint8_t*>(raw_.data()) + i * sz, sz));
}

namespace {
std::string ScalarString(ValueType t, uint64_t bits) {
  if (t == ValueType::BOOL) return bits != 0 ? "true" : "false";
  if (IsFloatType(t)) return absl::StrCat(BitsToDouble(t, bits));
  if (t == ValueType::UINT64) return absl::StrCat(bits);
  return absl::StrCat(BitsToInt(t, bits));
}
std::string StringForDebug(const std::string& s) {
  constexpr size_t kMax = 64;
  if (s.size() > kMax) return absl::StrCat("\"", absl::CHexEscape(s.substr(0, kMax)), "...\"");
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}
}  // namespace

std::string Value::DebugString(size_t max_elems) const {
  if (IsNumericType(type_)) return ScalarString(type_, bits_);
  if (type_ == ValueType::STRING) return StringForDebug(str_);
  std::string out = absl::StrCat(ValueTypeName(array_type_), "[", array_size_, "] [");
  const size_t n = std::min(array_size_, max_elems);
  for (size_t i = 0; i < n; ++i) {
    if (i > 0) out += ", ";
    if (array_type_ == ValueType::STRING) {
      out += StringForDebug(strings_[i]);
    } else if (array_type_ == ValueType::ARRAY) {
      out += elements_[i].DebugString(max_elems);
    } else {
      const size_t sz = ScalarSize(array_type_);
      out += ScalarString(array_type_, LoadLE(reinterpret_cast<const uint8_t*>(raw_.data()) + i * sz, sz));
    }
  }
  if (array_size_ > n) out += n > 0 ? ", ..." : "...";
  out += "]";
  return out;
}

// ---------------------------------------------------------------------------------
// GgufFile

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  HERD_ASSIGN_OR_RETURN(MappedFile m, MappedFile::Open(path));
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->map_ = std::move(m);
  Parser p(f->path_, f->map_.data(), f->map_.size());
  HERD_RETURN_IF_ERROR(p.Parse(f.get()));
  return f;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string bytes, const std::string& name) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = name;
  f->owned_ = std::move(bytes);
  Parser p(f->path_, reinterpret_cast<const uint8_t*>(f->owned_.data()), f->owned_.size());
  HERD_RETURN_IF_ERROR(p.Parse(f.get()));
  return f;
}

const Value* GgufFile::Find(absl::string_view key) const {
  for (const KeyValue& kv : kv_) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

const TensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  for (const TensorInfo& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace {
absl::Status KeyNotFound(const std::string& path, absl::string_view key) {
  return absl::NotFoundError(absl::StrCat(path, ": key ", Quote(key), " not found"));
}
absl::Status WrongType(const std::string& path, absl::string_view key, const Value& v, absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": key ", Quote(key), " has type ", TypeDesc(v), ", expected ", expected));
}
absl::Status OutOfRange(const std::string& path, absl::string_view key, absl::string_view value,
                        absl::string_view range) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": key ", Quote(key), " value ", value, " is out of range for ", range));
}
}  // namespace

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return KeyNotFound(path_, key);
  if (v->type() != ValueType::STRING) return WrongType(path_, key, *v, "string");
  return v->AsString();
}

absl::StatusOr<uint32_t> GgufFile::GetUint32(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return KeyNotFound(path_, key);
  if (!v->is_integer()) return WrongType(path_, key, *v, "an integer");
  if (v->type() == ValueType::UINT64) {
    if (v->AsUint() > std::numeric_limits<uint32_t>::max()) {
      return OutOfRange(path_, key, v->DebugString(), "uint32");
    }
    return static_cast<uint32_t>(v->AsUint());
  }
  const int64_t x = v->AsInt();
  if (x < 0 || x > static_cast<int64_t>(std::numeric_limits<uint32_t>::max())) {
    return OutOfRange(path_, key, v->DebugString(), "uint32");
  }
  return static_cast<uint32_t>(x);
}

absl::StatusOr<int64_t> GgufFile::GetInt(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return KeyNotFound(path_, key);
  if (!v->is_integer()) return WrongType(path_, key, *v, "an integer");
  if (v->type() == ValueType::UINT64 && v->AsUint() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return OutOfRange(path_, key, v->DebugString(), "int64");
  }
  return v->AsInt();
}

absl::StatusOr<float> GgufFile::GetFloat(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return KeyNotFound(path_, key);
  if (!v->is_float()) return WrongType(path_, key, *v, "float32 or float64");
  return static_cast<float>(v->AsDouble());
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return KeyNotFound(path_, key);
  if (v->type() != ValueType::BOOL) return WrongType(path_, key, *v, "bool");
  return v->AsBool();
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return KeyNotFound(path_, key);
  if (v->type() != ValueType::ARRAY || v->array_type() != ValueType::STRING) {
    return WrongType(path_, key, *v, "array of string");
  }
  return v->strings();
}

absl::StatusOr<std::vector<float>> GgufFile::GetFloatArray(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return KeyNotFound(path_, key);
  if (v->type() != ValueType::ARRAY || !IsFloatType(v->array_type())) {
    return WrongType(path_, key, *v, "array of float32 or float64");
  }
  std::vector<float> out(v->array_size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(v->DoubleAt(i));
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(absl::string_view key) const {
  const Value* v = Find(key);
  if (v == nullptr) return KeyNotFound(path_, key);
  if (v->type() != ValueType::ARRAY || !IsIntegerType(v->array_type())) {
    return WrongType(path_, key, *v, "array of an integer type");
  }
  std::vector<int64_t> out(v->array_size());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = v->IntAt(i);
    if (v->array_type() == ValueType::UINT64 && out[i] < 0) {
      return OutOfRange(path_, key, absl::StrCat(static_cast<uint64_t>(out[i]), " (element ", i, ")"), "int64");
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------
// GgufWriter

GgufWriter GgufWriter::FromFile(const GgufFile& f) {
  GgufWriter w(f.version());
  w.alignment_ = f.alignment();
  w.kv_ = f.metadata();
  w.tensors_.reserve(f.tensors().size());
  for (const TensorInfo& t : f.tensors()) {
    w.tensors_.push_back(PendingTensor{t.name, t.type, std::vector<int64_t>(t.ne, t.ne + t.n_dims), t.data, t.nbytes});
  }
  // gguf-py's vocab-only files (no tensors) end right after the key/values, without
  // padding to the alignment; ggml's writer pads. Keep whichever the file did.
  w.pad_header_without_tensors_ = !(f.tensors().empty() && f.file_size() < f.data_offset());
  return w;
}

void GgufWriter::SetValue(const std::string& key, Value v) {
  if (key == kAlignmentKey && v.type() == ValueType::UINT32 && ValidAlignmentValue(v.AsUint())) {
    alignment_ = static_cast<uint32_t>(v.AsUint());
  }
  for (KeyValue& kv : kv_) {
    if (kv.key == key) {
      kv.value = std::move(v);
      return;
    }
  }
  kv_.push_back(KeyValue{key, std::move(v)});
}

void GgufWriter::RemoveKey(const std::string& key) {
  kv_.erase(std::remove_if(kv_.begin(), kv_.end(), [&key](const KeyValue& kv) { return kv.key == key; }), kv_.end());
  if (key == kAlignmentKey) alignment_ = kDefaultAlignment;
}

namespace {
absl::Status CheckTensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, const void* data,
                         size_t nbytes) {
  auto fail = [&name](absl::string_view msg) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(name), ": ", msg));
  };
  const GgmlTypeTraits* tr = GetGgmlTypeTraits(type);
  if (tr == nullptr) return fail(absl::StrCat("unknown ggml type id ", static_cast<uint32_t>(type)));
  if (ne.empty() || ne.size() > kMaxDims) {
    return fail(absl::StrCat("n_dims ", ne.size(), " is out of range 1..", kMaxDims));
  }
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  int64_t n = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    if (ne[d] <= 0) return fail(absl::StrCat("dim ", d, " is ", ne[d]));
    if (ne[d] > kMax / n) return fail("element count overflows int64");
    n *= ne[d];
  }
  if (ne[0] % tr->block_size != 0) {
    return fail(
        absl::StrCat("dim 0 (", ne[0], ") is not a multiple of the ", tr->name, " block size ", tr->block_size));
  }
  const int64_t rows = n / ne[0];
  const int64_t blocks = ne[0] / tr->block_size;
  const int64_t ts = static_cast<int64_t>(tr->type_size);
  if (blocks > kMax / ts || blocks * ts > kMax / rows) return fail("byte size overflows int64");
  const uint64_t want = static_cast<uint64_t>(blocks * ts * rows);
  if (nbytes != want) {
    return fail(absl::StrCat("nbytes ", nbytes, " does not match the ", want, " bytes of ", tr->name, " [",
                             absl::StrJoin(ne, ", "), "]"));
  }
  if (data == nullptr) return fail("data is null");
  return absl::OkStatus();
}
}  // namespace

absl::Status GgufWriter::AddTensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne,
                                   const void* data, size_t nbytes) {
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(name), ": duplicate name"));
    }
  }
  HERD_RETURN_IF_ERROR(CheckTensor(name, type, ne, data, nbytes));
  tensors_.push_back(PendingTensor{name, type, ne, data, nbytes});
  return absl::OkStatus();
}

absl::Status GgufWriter::ReplaceTensor(const std::string& name, GgmlType type, const void* data, size_t nbytes) {
  for (PendingTensor& t : tensors_) {
    if (t.name != name) continue;
    HERD_RETURN_IF_ERROR(CheckTensor(name, type, t.ne, data, nbytes));
    t.type = type;
    t.data = data;
    t.nbytes = nbytes;
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("tensor ", Quote(name), ": not found"));
}

std::string GgufWriter::HeaderBytes() const {
  std::string out = "GGUF";
  AppendU32(version_, &out);
  AppendU64(tensors_.size(), &out);
  AppendU64(kv_.size(), &out);
  for (const KeyValue& kv : kv_) {
    AppendStr(kv.key, &out);
    AppendU32(static_cast<uint32_t>(kv.value.type()), &out);
    Parser::AppendValue(kv.value, &out);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    AppendStr(t.name, &out);
    AppendU32(static_cast<uint32_t>(t.ne.size()), &out);
    for (int64_t d : t.ne) AppendU64(static_cast<uint64_t>(d), &out);
    AppendU32(static_cast<uint32_t>(t.type), &out);
    AppendU64(offset, &out);
    offset += AlignUp(t.nbytes, alignment_);
  }
  if (!tensors_.empty() || pad_header_without_tensors_) {
    out.resize(AlignUp(out.size(), alignment_), '\0');
  }
  return out;
}

std::string GgufWriter::WriteToString() const {
  std::string out = HeaderBytes();
  for (const PendingTensor& t : tensors_) {
    out.append(static_cast<const char*>(t.data), t.nbytes);
    out.resize(AlignUp(out.size(), alignment_), '\0');
  }
  return out;
}

namespace {
absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int e = errno;
  std::string msg = absl::StrCat("cannot ", what, " ", path, ": ", std::strerror(e));
  if (e == ENOENT) return absl::NotFoundError(msg);
  if (e == EACCES || e == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}
}  // namespace

absl::Status GgufWriter::WriteFile(const std::string& path) const { return Write(path, nullptr); }

absl::Status GgufWriter::WriteFileStreaming(const std::string& path, const TensorFiller& fill) const {
  if (!fill) return absl::InvalidArgumentError(absl::StrCat(path, ": WriteFileStreaming without a filler"));
  return Write(path, &fill);
}

absl::Status GgufWriter::Write(const std::string& path, const TensorFiller* fill) const {
  if (version_ != 2 && version_ != 3) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": GGUF version ", version_, " cannot be written (2 or 3)"));
  }
  for (const KeyValue& kv : kv_) {
    if (kv.key != kAlignmentKey) continue;
    if (kv.value.type() != ValueType::UINT32 || !ValidAlignmentValue(kv.value.AsUint())) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": key '", kAlignmentKey,
                                                     "' must be a uint32 power of two <= ", kMaxAlignment, ", got ",
                                                     TypeDesc(kv.value), " ", kv.value.DebugString(4)));
    }
  }
  const std::string header = HeaderBytes();

  // Stream into a unique temp file in the same directory, fsync, rename.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter++);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", tmp);
  auto fail = [&](absl::string_view what) {
    absl::Status s = ErrnoError(what, tmp);
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  if (!WriteAll(fd, header.data(), header.size())) return fail("write");
  static const char kZeros[kMaxAlignment] = {};
  std::vector<uint8_t> filled;  // WriteFileStreaming: the current tensor's bytes
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const PendingTensor& t = tensors_[i];
    const void* data = t.data;
    if (fill != nullptr) {
      filled.resize(t.nbytes);
      if (absl::Status s = (*fill)(i, filled.data()); !s.ok()) {
        ::close(fd);
        ::unlink(tmp.c_str());
        return s;
      }
      data = filled.data();
    }
    if (!WriteAll(fd, data, t.nbytes)) return fail("write");
    const size_t pad = AlignUp(t.nbytes, alignment_) - t.nbytes;
    if (pad > 0 && !WriteAll(fd, kZeros, pad)) return fail("write");
  }
  if (::fsync(fd) != 0) return fail("fsync");
  if (::close(fd) != 0) {
    absl::Status s = ErrnoError("close", tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = ErrnoError("rename to " + path, tmp);
    ::unlink(tmp.c_str());
    return s;
  }
  // Make the rename durable (best effort).
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

}  // namespace herd::gguf
