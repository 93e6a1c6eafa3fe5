#include "libs/quant/quantize.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/base/thread_pool.h"
#include "libs/gguf/gguf.h"
#include "libs/quant/type_rules.h"
#include "libs/tensor/quants.h"

namespace herd::quant {
namespace {

constexpr uint32_t kQuantizationVersion = 2;  // GGML_QNT_VERSION
constexpr int64_t kChunkElements = int64_t{1} << 20;
constexpr double kProgressInterval = 0.25;  // seconds between progress calls within a tensor

absl::Status ErrnoError(int err, const std::string& what) {
  const std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(msg);
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

std::string DirOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// An unnamed file in a directory (O_TMPFILE, or a created-and-unlinked one): it never
// appears in the directory listing and disappears when closed, even if the process dies.
// Data is appended with pwrite (so a full disk is an error, not a SIGBUS) and mapped
// read-only once complete.
class Scratch {
 public:
  ~Scratch() {
    if (map_ != nullptr) ::munmap(map_, size_);
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Open(const std::string& dir) {
    fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ >= 0) return absl::OkStatus();
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) {
      return ErrnoError(errno, absl::StrCat("dst_path: cannot create a scratch file in '", dir, "'"));
    }
    std::string tmpl = dir + "/.herd-quantize-XXXXXX";
    fd_ = ::mkostemp(&tmpl[0], O_CLOEXEC);
    if (fd_ < 0) return ErrnoError(errno, absl::StrCat("dst_path: cannot create a scratch file in '", dir, "'"));
    ::unlink(tmpl.c_str());
    return absl::OkStatus();
  }

  // Appends `n` bytes; returns their offset.
  absl::StatusOr<uint64_t> Append(const void* data, size_t n) {
    const uint64_t off = size_;
    const char* p = static_cast<const char*>(data);
    size_t left = n;
    uint64_t pos = off;
    while (left > 0) {
      const ssize_t w = ::pwrite(fd_, p, left, static_cast<off_t>(pos));
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, "cannot write the quantization scratch file");
      }
      p += w;
      pos += static_cast<uint64_t>(w);
      left -= static_cast<size_t>(w);
    }
    size_ += n;
    return off;
  }

  absl::Status Map() {
    if (size_ == 0) return absl::OkStatus();
    void* m = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (m == MAP_FAILED) return ErrnoError(errno, "cannot map the quantization scratch file");
    map_ = m;
    return absl::OkStatus();
  }
  const uint8_t* data() const { return static_cast<const uint8_t*>(map_); }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  void* map_ = nullptr;
};

bool IsFloatType(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

bool Cancelled(const std::atomic<bool>* cancel) { return cancel != nullptr && cancel->load(); }

absl::Status CancelledError() { return absl::CancelledError("quantization cancelled"); }

// What goes into the output for one tensor.
struct OutTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;
  const uint8_t* src_data = nullptr;  // copied unchanged from the source, or
  uint64_t scratch_offset = 0;        // converted into the scratch file
  size_t nbytes = 0;
};

}  // namespace

std::vector<std::string> SupportedFileTypes() { return FileTypeNames(); }

absl::Status QuantizeModel(const std::string& src_path, const std::string& dst_path, const QuantizeOptions& options,
                           const std::function<void(const QuantizeProgress&)>& progress,
                           const std::atomic<bool>* cancel) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };

  // ---- options
  if (src_path.empty()) return absl::InvalidArgumentError("src_path: empty");
  if (dst_path.empty()) return absl::InvalidArgumentError("dst_path: empty");
  if (options.n_threads < 1 || options.n_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("n_threads: must be in [1, 1024], got ", options.n_threads));
  }
  TypeOptions topt;
  auto ft = ParseFileType(options.type);
  if (!ft.ok()) return ft.status();
  topt.file_type = *ft;
  topt.pure = options.pure;
  if (!options.output_tensor_type.empty()) {
    auto t = ParseQuantType(options.output_tensor_type, "output_tensor_type");
    if (!t.ok()) return t.status();
    topt.has_output_tensor_type = true;
    topt.output_tensor_type = *t;
  }
  if (!options.token_embedding_type.empty()) {
    auto t = ParseQuantType(options.token_embedding_type, "token_embedding_type");
    if (!t.ok()) return t.status();
    topt.has_token_embedding_type = true;
    topt.token_embedding_type = *t;
  }
  for (size_t i = 0; i < options.tensor_type_overrides.size(); ++i) {
    auto o = ParseTensorTypeOverride(options.tensor_type_overrides[i], absl::StrCat("tensor_type_overrides[", i, "]"));
    if (!o.ok()) return o.status();
    topt.overrides.push_back(std::move(*o));
  }
  if (Cancelled(cancel)) return CancelledError();

  // ---- source and plan
  struct stat src_st, dst_st;
  if (::stat(src_path.c_str(), &src_st) == 0 && ::stat(dst_path.c_str(), &dst_st) == 0 &&
      src_st.st_dev == dst_st.st_dev && src_st.st_ino == dst_st.st_ino) {
    return absl::InvalidArgumentError(absl::StrCat("dst_path: '", dst_path, "' is the source file"));
  }
  auto file = gguf::GgufFile::Open(src_path);
  if (!file.ok()) return file.status();
  const gguf::GgufFile& src = **file;
  auto info = ReadModelInfo(src);
  if (!info.ok()) return info.status();
  auto plans = PlanTensorTypes(src, *info, topt);
  if (!plans.ok()) return absl::Status(plans.status().code(), absl::StrCat(src_path, ": ", plans.status().message()));

  uint64_t bytes_total = 0;
  for (const TensorPlan& p : *plans) {
    bytes_total += p.src->nbytes;
    if (!p.quantize) continue;
    if (!IsFloatType(p.src->type)) {
      return absl::FailedPreconditionError(absl::StrCat(src_path, ": tensor '", p.src->name,
                                                        "': requantizing from type ", GgmlTypeName(p.src->type),
                                                        " is disabled (quantize from an F32, F16 or BF16 model)"));
    }
  }

  // ---- output metadata (llama_model_quantize_impl: copy, then set / remove keys)
  gguf::GgufWriter writer(3);
  for (const gguf::KeyValue& kv : src.metadata()) writer.SetValue(kv.key, kv.value);
  // gguf_set_val_* removes an existing key and appends it: both keys end up last.
  writer.RemoveKey("general.quantization_version");
  writer.SetValue("general.quantization_version", gguf::Value::U32(kQuantizationVersion));
  writer.RemoveKey("general.file_type");
  writer.SetValue("general.file_type", gguf::Value::U32(topt.file_type.ftype));
  writer.RemoveKey("split.no");
  writer.RemoveKey("split.count");
  writer.RemoveKey("split.tensors.count");

  // ---- convert
  Scratch scratch;
  bool scratch_open = false;
  ThreadPool pool(options.n_threads);
  std::vector<OutTensor> out;
  out.reserve(plans->size());
  uint64_t bytes_done = 0;
  double last_report = -1.0;
  const int n_total = static_cast<int>(plans->size());
  auto report = [&](int done, const std::string& current, bool force) {
    if (!progress) return;
    const double now = elapsed();
    if (!force && now - last_report < kProgressInterval) return;
    last_report = now;
    QuantizeProgress pr;
    pr.tensors_done = done;
    pr.tensors_total = n_total;
    pr.bytes_done = bytes_done;
    pr.bytes_total = bytes_total;
    pr.elapsed_s = now;
    pr.eta_s =
        bytes_done > 0 ? now * static_cast<double>(bytes_total - bytes_done) / static_cast<double>(bytes_done) : -1.0;
    if (done == n_total) pr.eta_s = 0.0;
    pr.current_tensor = current;
    progress(pr);
  };

  std::vector<uint8_t> chunk;
  for (size_t ti = 0; ti < plans->size(); ++ti) {
    const TensorPlan& p = (*plans)[ti];
    const gguf::TensorInfo& t = *p.src;
    if (Cancelled(cancel)) return CancelledError();
    report(static_cast<int>(ti), t.name, true);
    int64_t bad = -1;
    if (!ValidateRowData(t.type, t.data, t.nbytes, &bad)) {
      return absl::InvalidArgumentError(absl::StrCat(src_path, ": tensor '", t.name, "' (", GgmlTypeName(t.type),
                                                     ") has invalid data: NaN or Inf at ",
                                                     IsFloatType(t.type) ? "element " : "block ", bad));
    }
    OutTensor o;
    o.name = t.name;
    o.type = p.type;
    for (uint32_t d = 0; d < t.n_dims; ++d) o.ne.push_back(t.ne[d]);
    if (!p.quantize) {
      o.src_data = t.data;
      o.nbytes = t.nbytes;
      bytes_done += t.nbytes;
      out.push_back(std::move(o));
      continue;
    }
    if (!scratch_open) {
      absl::Status s = scratch.Open(DirOf(dst_path));
      if (!s.ok()) return s;
      scratch_open = true;
    }
    const int64_t ne0 = t.ne[0];
    const int64_t nrows = t.nelements() / ne0;
    const size_t src_row = GgmlRowSize(t.type, ne0);
    const size_t dst_row = GgmlRowSize(p.type, ne0);
    const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElements / ne0);
    o.nbytes = dst_row * static_cast<size_t>(nrows);
    bool first_chunk = true;
    for (int64_t r0 = 0; r0 < nrows; r0 += rows_per_chunk) {
      if (Cancelled(cancel)) return CancelledError();
      const int64_t nr = std::min(rows_per_chunk, nrows - r0);
      chunk.resize(dst_row * static_cast<size_t>(nr));
      pool.Run([&](int ith, int nth) {
        int64_t b, e;
        SplitRange(nr, ith, nth, &b, &e);
        std::vector<float> buf(t.type == GgmlType::F32 ? 0 : static_cast<size_t>(ne0));
        for (int64_t r = b; r < e; ++r) {
          const uint8_t* in = t.data + static_cast<size_t>(r0 + r) * src_row;
          const float* x = reinterpret_cast<const float*>(in);
          if (t.type != GgmlType::F32) {
            DequantizeRow(t.type, in, buf.data(), ne0);
            x = buf.data();
          }
          QuantizeRow(p.type, x, chunk.data() + static_cast<size_t>(r) * dst_row, ne0);
        }
      });
      if (!ValidateRowData(p.type, chunk.data(), chunk.size(), &bad)) {
        return absl::InvalidArgumentError(
            absl::StrCat(src_path, ": tensor '", t.name, "': quantized data validation failed (", GgmlTypeName(p.type),
                         " block ", static_cast<int64_t>(r0 * (ne0 / GetGgmlTypeTraits(p.type)->block_size)) + bad,
                         " has a non-finite scale: values out of F16 range)"));
      }
      auto off = scratch.Append(chunk.data(), chunk.size());
      if (!off.ok()) return off.status();
      if (first_chunk) o.scratch_offset = *off;
      first_chunk = false;
      bytes_done += src_row * static_cast<size_t>(nr);
      report(static_cast<int>(ti), t.name, false);
    }
    out.push_back(std::move(o));
  }
  if (Cancelled(cancel)) return CancelledError();

  // ---- write (temp file + fsync + rename inside GgufWriter::WriteFile)
  absl::Status s = scratch.Map();
  if (!s.ok()) return s;
  for (const OutTensor& o : out) {
    const void* data = o.src_data != nullptr ? o.src_data : scratch.data() + o.scratch_offset;
    s = writer.AddTensor(o.name, o.type, o.ne, data, o.nbytes);
    if (!s.ok()) return absl::InternalError(absl::StrCat("cannot add tensor '", o.name, "': ", s.message()));
  }
  report(n_total, "", true);  // all tensors converted; writing
  s = writer.WriteFile(dst_path);
  if (!s.ok()) return s;
  return absl::OkStatus();
}

}  // namespace herd::quant
