// GGUF v2/v3 reader (validating, mmap-backed) and writer.
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md (gguf.cpp in ggml).
// Layout: magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv key/values,
// n_tensors tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset),
// padding to general.alignment (default 32), then the data section.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "libs/base/mmap.h"
#include "libs/gguf/ggml_type.h"

namespace herd::gguf {

/// GGUF metadata value types (gguf.h `enum gguf_type`).
enum class ValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};

/// "uint8", "int32", "string", "array", ...
const char* ValueTypeName(ValueType t);

/// One metadata value: a scalar, a string, or an array of values of one type
/// (arrays of arrays are allowed by the format and supported).
class Value {
 public:
  Value() = default;

  // Constructors for the writer and tests.
  static Value U8(uint8_t v);
  static Value I8(int8_t v);
  static Value U16(uint16_t v);
  static Value I16(int16_t v);
  static Value U32(uint32_t v);
  static Value I32(int32_t v);
  static Value U64(uint64_t v);
  static Value I64(int64_t v);
  static Value F32(float v);
  static Value F64(double v);
  static Value Bool(bool v);
  static Value String(std::string v);
  static Value StringArray(std::vector<std::string> v);
  static Value F32Array(const std::vector<float>& v);
  static Value I32Array(const std::vector<int32_t>& v);
  /// A numeric array of `n` elements of scalar type `elem` (not STRING/ARRAY: that
  /// gives an empty array) given as little-endian bytes; `raw_le_bytes` is cut or
  /// zero-padded to n * element size.
  static Value NumericArray(ValueType elem, std::string raw_le_bytes, size_t n);
  /// An array of arrays (or of any values of type `elem`). Scalars of another numeric
  /// type are converted to `elem`; with elem == ARRAY a non-array element becomes an
  /// empty array, so the result always encodes consistently.
  static Value NestedArray(ValueType elem, std::vector<Value> elems);

  ValueType type() const { return type_; }
  /// Element type when type() == ARRAY.
  ValueType array_type() const { return array_type_; }
  /// Element count when type() == ARRAY (0 otherwise).
  size_t array_size() const { return array_size_; }

  bool is_integer() const;  // UINT8..INT64, BOOL excluded
  bool is_float() const;    // FLOAT32 / FLOAT64
  /// Scalar accessors; precondition: matching type() (integers convert among themselves).
  /// A mismatch never crashes: numbers convert (floats saturate to int64, NaN -> 0),
  /// AsString() of a non-string is "".
  int64_t AsInt() const;
  uint64_t AsUint() const;
  double AsDouble() const;  // any numeric scalar
  bool AsBool() const;
  const std::string& AsString() const;

  /// ARRAY of STRING elements (empty for other types).
  const std::vector<std::string>& strings() const { return strings_; }
  /// ARRAY of numeric/bool elements: raw little-endian element bytes.
  const std::string& raw() const { return raw_; }
  /// ARRAY of ARRAY elements.
  const std::vector<Value>& elements() const { return elements_; }
  /// Numeric array element i (precondition: numeric array, i < array_size(); otherwise
  /// 0). UINT64 elements above INT64_MAX wrap in IntAt.
  int64_t IntAt(size_t i) const;
  double DoubleAt(size_t i) const;

  /// Short human-readable rendering (arrays abbreviated) for `herd inspect`:
  /// 64, -1.5, true, "text" (C-escaped, long strings cut), int32[512] [2, 3, 3, ...].
  std::string DebugString(size_t max_elems = 8) const;

 private:
  ValueType type_ = ValueType::UINT8;
  ValueType array_type_ = ValueType::UINT8;
  size_t array_size_ = 0;
  uint64_t bits_ = 0;  // scalar payload (little-endian bits of the value)
  std::string str_;    // STRING scalar
  std::string raw_;    // numeric array payload
  std::vector<std::string> strings_;
  std::vector<Value> elements_;
  friend class Parser;
};

struct KeyValue {
  std::string key;
  Value value;
};

/// One tensor of the file. ne[] in ggml order (ne[0] innermost); dims >= n_dims are 1.
struct TensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;            // relative to the data section
  size_t nbytes = 0;              // bytes of data
  const uint8_t* data = nullptr;  // into the file mapping (or owned buffer)

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

/// A parsed, validated GGUF file. Tensor data stays in the mapping and is valid
/// for the lifetime of this object.
class GgufFile {
 public:
  /// Maps and validates `path`. Every structural problem — bad magic, unsupported
  /// version, counts the file cannot hold, oversize strings/arrays, bad n_dims, zero or
  /// overflowing dims/byte sizes, unknown tensor types, data outside the file,
  /// overlapping tensors, duplicate names, bad alignment — is INVALID_ARGUMENT with a
  /// message naming the file, the field and the value, e.g.
  /// "model.gguf: tensor 'blk.0.attn_q.weight': dim 1 is 0". Missing file: NOT_FOUND.
  ///
  /// Checks (format per ggml gguf.cpp; stricter where noted): magic "GGUF"; version 2 or
  /// 3 (1 is obsolete); n_kv / n_tensors no more than the remaining bytes can hold at
  /// 13 / 32 bytes minimum each; every string/array length against the remaining bytes
  /// (before any allocation); value and array element types 0..12; arrays nested at most
  /// 16 deep; no duplicate keys or tensor names; general.alignment a UINT32 power of two
  /// in 1..2^20; n_dims 1..4; each dim in 1..INT64_MAX (ggml allows 0); element count and
  /// byte size fit in int64; ne[0] a multiple of the block size; known ggml type;
  /// offset a multiple of the alignment; data inside the file; no two tensors overlap
  /// (ggml requires the exact contiguous layout; any non-overlapping aligned layout is
  /// accepted here). Tensor names longer than ggml's GGML_MAX_NAME are accepted.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  /// Same validation over an in-memory image (moved in, owned); `name` is used in messages.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string bytes, const std::string& name = "<memory>");

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  /// File offset of the data section: end of the tensor infos rounded up to
  /// alignment(). Can exceed file_size() for a file without tensors (gguf-py vocab-only
  /// files are not padded).
  uint64_t data_offset() const { return data_offset_; }
  /// Bytes.
  uint64_t file_size() const { return file_size_; }
  const std::string& path() const { return path_; }

  const std::vector<KeyValue>& metadata() const { return kv_; }
  /// nullptr when absent.
  const Value* Find(absl::string_view key) const;

  // Typed getters. NOT_FOUND names a missing key; INVALID_ARGUMENT names the key,
  // the expected and the actual type (or the value out of range).
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  /// Any integer type whose value fits in uint32.
  absl::StatusOr<uint32_t> GetUint32(absl::string_view key) const;
  /// Any integer type whose value fits in int64.
  absl::StatusOr<int64_t> GetInt(absl::string_view key) const;
  /// FLOAT32 or FLOAT64.
  absl::StatusOr<float> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(absl::string_view key) const;
  /// Array of FLOAT32/FLOAT64.
  absl::StatusOr<std::vector<float>> GetFloatArray(absl::string_view key) const;
  /// Array of any integer type.
  absl::StatusOr<std::vector<int64_t>> GetIntArray(absl::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /// nullptr when absent.
  const TensorInfo* FindTensor(absl::string_view name) const;

 private:
  GgufFile() = default;
  friend class Parser;

  std::string path_;
  MappedFile map_;
  std::string owned_;  // FromBytes image
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  std::vector<KeyValue> kv_;
  std::vector<TensorInfo> tensors_;
};

/// Builds a GGUF file: metadata in insertion order, tensors in insertion order, each
/// tensor's data padded to the alignment (as llama.cpp's gguf writer does).
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}

  /// Copies version, alignment, all metadata and all tensors (data pointers into
  /// `f`, which must outlive the writer). Writing it again gives identical bytes for
  /// files laid out the way llama.cpp writes them (tensors contiguous in info order,
  /// each padded to the alignment with zeros): every .gguf in ../shared round-trips
  /// whole-file identically (gguf_roundtrip_test). A tensorless file keeps its choice
  /// of padding the header or not. Other layouts (gaps, out-of-order offsets, trailing
  /// bytes) are rewritten to the canonical layout with the same metadata and tensor bytes.
  static GgufWriter FromFile(const GgufFile& f);

  /// Sets or replaces `key` (keeps its position when replacing). Setting
  /// general.alignment to a UINT32 power of two <= 2^20 also changes the data alignment;
  /// any other general.alignment value is stored and written as given (the layout keeps
  /// the previous alignment; readers reject such a file, WriteFile refuses it).
  void SetValue(const std::string& key, Value v);
  void RemoveKey(const std::string& key);
  const std::vector<KeyValue>& metadata() const { return kv_; }

  /// Adds a tensor; `data` (nbytes bytes) must stay valid until Write*. Errors:
  /// INVALID_ARGUMENT for a duplicate name, bad dims, unknown type, or nbytes not
  /// matching the shape and type.
  absl::Status AddTensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, const void* data,
                         size_t nbytes);
  /// Replaces the type/data of an existing tensor (same checks as AddTensor against its
  /// shape); NOT_FOUND when there is no such tensor.
  absl::Status ReplaceTensor(const std::string& name, GgmlType type, const void* data, size_t nbytes);

  /// Writes atomically, streaming the tensor data (unique temp file in the same
  /// directory, fsync, rename, fsync of the directory); nothing is left on failure.
  /// Errors: INVALID_ARGUMENT for a version other than 2/3 or a bad general.alignment;
  /// NOT_FOUND / PERMISSION_DENIED / INTERNAL (naming the path, errno text) for I/O.
  absl::Status WriteFile(const std::string& path) const;
  /// Fills the `nbytes` bytes of tensor `index` (insertion order) at `dst`.
  using TensorFiller = std::function<absl::Status(size_t index, uint8_t* dst)>;
  /// WriteFile for files larger than memory: each tensor's bytes come from `fill`, called
  /// once per tensor in insertion order with a buffer of that tensor's size (reused, so
  /// at most the largest tensor is held), and the data pointers given to AddTensor are
  /// not read (any non-null pointer). The same bytes as WriteFile would write with data
  /// pointers to what `fill` produces. An error of `fill` is returned as it is, and
  /// nothing is left on any failure.
  absl::Status WriteFileStreaming(const std::string& path, const TensorFiller& fill) const;
  /// The whole file image: header, key/values, tensor infos, zero padding to the
  /// alignment, then each tensor's data at offsets assigned in insertion order, each
  /// followed by zero padding to the alignment (ggml gguf_write_out / gguf-py).
  std::string WriteToString() const;

 private:
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    const void* data;
    size_t nbytes;
  };
  /// Header, key/values, tensor infos (offsets assigned in order, each tensor's data
  /// padded to the alignment) and the zero padding before the data section.
  std::string HeaderBytes() const;
  /// WriteFile (fill == nullptr: the tensors' own data) or WriteFileStreaming.
  absl::Status Write(const std::string& path, const TensorFiller* fill) const;

  uint32_t version_;
  uint32_t alignment_ = 32;
  std::vector<KeyValue> kv_;
  std::vector<PendingTensor> tensors_;
  // With no tensors: pad the header to the alignment (ggml's gguf_write_out does) or
  // end right after the key/values (gguf-py vocab-only files). FromFile keeps the file's.
  bool pad_header_without_tensors_ = true;
};

}  // namespace herd::gguf
