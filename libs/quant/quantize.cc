#include "libs/quant/quantize.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
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
    fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
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

using Clock = std::chrono::steady_clock;

// The options step: paths and threads checked, the type settings parsed (errors name
// the field).
absl::StatusOr<TypeOptions> ParseOptions(const std::string& src_path, const std::string& dst_path,
                                         const QuantizeOptions& options) {
  if (src_path.empty()) return absl::InvalidArgumentError("src_path: empty");
  if (dst_path.empty()) return absl::InvalidArgumentError("dst_path: empty");
  if (options.n_threads < 1 || options.n_threads > 1024) {
    return absl::InvalidArgumentError(absl::StrCat("n_threads: must be in [1, 1024], got ", options.n_threads));
  }
  TypeOptions topt;
  HERD_ASSIGN_OR_RETURN(topt.file_type, ParseFileType(options.type));
  topt.pure = options.pure;
  if (!options.output_tensor_type.empty()) {
    HERD_ASSIGN_OR_RETURN(auto t, ParseQuantType(options.output_tensor_type, "output_tensor_type"));
    topt.has_output_tensor_type = true;
    topt.output_tensor_type = t;
  }
  if (!options.token_embedding_type.empty()) {
    HERD_ASSIGN_OR_RETURN(auto t, ParseQuantType(options.token_embedding_type, "token_embedding_type"));
    topt.has_token_embedding_type = true;
    topt.token_embedding_type = t;
  }
  for (size_t i = 0; i < options.tensor_type_overrides.size(); ++i) {
    HERD_ASSIGN_OR_RETURN(auto o, ParseTensorTypeOverride(options.tensor_type_overrides[i],
                                                          absl::StrCat("tensor_type_overrides[", i, "]")));
    topt.overrides.push_back(std::move(o));
  }
  return topt;
}

// INVALID_ARGUMENT when dst_path is the source file itself (same device and inode).
absl::Status CheckNotSource(const std::string& src_path, const std::string& dst_path) {
  struct stat src_st, dst_st;
  if (::stat(src_path.c_str(), &src_st) == 0 && ::stat(dst_path.c_str(), &dst_st) == 0 &&
      src_st.st_dev == dst_st.st_dev && src_st.st_ino == dst_st.st_ino) {
    return absl::InvalidArgumentError(absl::StrCat("dst_path: '", dst_path, "' is the source file"));
  }
  return absl::OkStatus();
}

// The source bytes of all tensors; FAILED_PRECONDITION when a tensor to quantize is
// not F32, F16 or BF16 (no requantizing).
absl::StatusOr<uint64_t> CheckPlans(const std::string& src_path, const std::vector<TensorPlan>& plans) {
  uint64_t bytes_total = 0;
  for (const TensorPlan& p : plans) {
    bytes_total += p.src->nbytes;
    if (!p.quantize) continue;
    if (!IsFloatType(p.src->type)) {
      return absl::FailedPreconditionError(absl::StrCat(src_path, ": tensor '", p.src->name,
                                                        "': requantizing from type ", GgmlTypeName(p.src->type),
                                                        " is disabled (quantize from an F32, F16 or BF16 model)"));
    }
  }
  return bytes_total;
}

// Output metadata (llama_model_quantize_impl): the source's keys, then set / remove.
void SetOutputMetadata(const gguf::GgufFile& src, uint32_t ftype, gguf::GgufWriter* writer) {
  for (const gguf::KeyValue& kv : src.metadata()) writer->SetValue(kv.key, kv.value);
  // gguf_set_val_* removes an existing key and appends it: both keys end up last.
  writer->RemoveKey("general.quantization_version");
  writer->SetValue("general.quantization_version", gguf::Value::U32(kQuantizationVersion));
  writer->RemoveKey("general.file_type");
  writer->SetValue("general.file_type", gguf::Value::U32(ftype));
  writer->RemoveKey("split.no");
  writer->RemoveKey("split.count");
  writer->RemoveKey("split.tensors.count");
}

// The progress calls of one QuantizeModel run: forced ones, and within a tensor at
// most one per kProgressInterval.
class ProgressReporter {
 public:
  ProgressReporter(const std::function<void(const QuantizeProgress&)>& progress, Clock::time_point t0, int n_total,
                   uint64_t bytes_total)
      : progress_(progress), t0_(t0), n_total_(n_total), bytes_total_(bytes_total) {}

  // Counts `n` more source bytes done.
  void AddBytes(uint64_t n) { bytes_done_ += n; }

  // Calls `progress` with `done` tensors finished, working on `current`.
  void Report(int done, const std::string& current, bool force) {
    if (!progress_) return;
    const double now = std::chrono::duration<double>(Clock::now() - t0_).count();
    if (!force && now - last_report_ < kProgressInterval) return;
    last_report_ = now;
    QuantizeProgress pr;
    pr.tensors_done = done;
    pr.tensors_total = n_total_;
    pr.bytes_done = bytes_done_;
    pr.bytes_total = bytes_total_;
    pr.elapsed_s = now;
    pr.eta_s = bytes_done_ > 0
                   ? now * static_cast<double>(bytes_total_ - bytes_done_) / static_cast<double>(bytes_done_)
                   : -1.0;
    if (done == n_total_) pr.eta_s = 0.0;
    pr.current_tensor = current;
    progress_(pr);
  }

 private:
  const std::function<void(const QuantizeProgress&)>& progress_;
  const Clock::time_point t0_;
  const int n_total_;
  const uint64_t bytes_total_;
  uint64_t bytes_done_ = 0;
  double last_report_ = -1.0;
};

// The convert step: tensors kept as they are point into the source; tensors to
// quantize are converted chunk by chunk on a thread pool into a scratch file in
// dst_path's directory.
class Converter {
 public:
  Converter(const std::string& src_path, const std::string& dst_path, int n_threads, const std::atomic<bool>* cancel,
            ProgressReporter* progress)
      : src_path_(src_path), dst_path_(dst_path), cancel_(cancel), progress_(progress), pool_(n_threads) {}

  // Converts every planned tensor, in order.
  absl::Status Run(const std::vector<TensorPlan>& plans) {
    out_.reserve(plans.size());
    for (size_t ti = 0; ti < plans.size(); ++ti) {
      if (Cancelled(cancel_)) return CancelledError();
      HERD_RETURN_IF_ERROR(ConvertTensor(static_cast<int>(ti), plans[ti]));
    }
    return absl::OkStatus();
  }

  // Adds the converted tensors to `writer` (the scratch file mapped first).
  absl::Status AddTensors(gguf::GgufWriter* writer) {
    absl::Status s = scratch_.Map();
    if (!s.ok()) return s;
    for (const OutTensor& o : out_) {
      const void* data = o.src_data != nullptr ? o.src_data : scratch_.data() + o.scratch_offset;
      s = writer->AddTensor(o.name, o.type, o.ne, data, o.nbytes);
      if (!s.ok()) return absl::InternalError(absl::StrCat("cannot add tensor '", o.name, "': ", s.message()));
    }
    return absl::OkStatus();
  }

 private:
  // Tensor `ti` of the plan: its source data checked, then kept or quantized.
  absl::Status ConvertTensor(int ti, const TensorPlan& p) {
    const gguf::TensorInfo& t = *p.src;
    progress_->Report(ti, t.name, true);
    int64_t bad = -1;
    if (!ValidateRowData(t.type, t.data, t.nbytes, &bad)) {
      return absl::InvalidArgumentError(absl::StrCat(src_path_, ": tensor '", t.name, "' (", GgmlTypeName(t.type),
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
      progress_->AddBytes(t.nbytes);
      out_.push_back(std::move(o));
      return absl::OkStatus();
    }
    if (!scratch_open_) {
      HERD_RETURN_IF_ERROR(scratch_.Open(DirOf(dst_path_)));
      scratch_open_ = true;
    }
    HERD_RETURN_IF_ERROR(QuantizeTensor(ti, p, &o));
    out_.push_back(std::move(o));
    return absl::OkStatus();
  }

  // Quantizes tensor `ti` to p.type chunk by chunk, each chunk checked and appended
  // to the scratch file.
  absl::Status QuantizeTensor(int ti, const TensorPlan& p, OutTensor* o) {
    const gguf::TensorInfo& t = *p.src;
    const int64_t ne0 = t.ne[0];
    const int64_t nrows = t.nelements() / ne0;
    const size_t src_row = GgmlRowSize(t.type, ne0);
    const size_t dst_row = GgmlRowSize(p.type, ne0);
    const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElements / ne0);
    o->nbytes = dst_row * static_cast<size_t>(nrows);
    bool first_chunk = true;
    for (int64_t r0 = 0; r0 < nrows; r0 += rows_per_chunk) {
      if (Cancelled(cancel_)) return CancelledError();
      const int64_t nr = std::min(rows_per_chunk, nrows - r0);
      QuantizeRows(t, p.type, r0, nr);
      int64_t bad = -1;
      if (!ValidateRowData(p.type, chunk_.data(), chunk_.size(), &bad)) {
        return absl::InvalidArgumentError(
            absl::StrCat(src_path_, ": tensor '", t.name, "': quantized data validation failed (", GgmlTypeName(p.type),
                         " block ", static_cast<int64_t>(r0 * (ne0 / GetGgmlTypeTraits(p.type)->block_size)) + bad,
                         " has a non-finite scale: values out of F16 range)"));
      }
      HERD_ASSIGN_OR_RETURN(auto off, scratch_.Append(chunk_.data(), chunk_.size()));
      if (first_chunk) o->scratch_offset = off;
      first_chunk = false;
      progress_->AddBytes(src_row * static_cast<size_t>(nr));
      progress_->Report(ti, t.name, false);
    }
    return absl::OkStatus();
  }

  // Rows [r0, r0 + nr) of `t` quantized to `type` into chunk_, on the pool (non-F32
  // sources widened to F32 first).
  void QuantizeRows(const gguf::TensorInfo& t, GgmlType type, int64_t r0, int64_t nr) {
    const int64_t ne0 = t.ne[0];
    const size_t src_row = GgmlRowSize(t.type, ne0);
    const size_t dst_row = GgmlRowSize(type, ne0);
    chunk_.resize(dst_row * static_cast<size_t>(nr));
    pool_.Run([&](int ith, int nth) {
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
        QuantizeRow(type, x, chunk_.data() + static_cast<size_t>(r) * dst_row, ne0);
      }
    });
  }

  const std::string& src_path_;
  const std::string& dst_path_;
  const std::atomic<bool>* cancel_;
  ProgressReporter* progress_;
  Scratch scratch_;
  bool scratch_open_ = false;
  ThreadPool pool_;
  std::vector<OutTensor> out_;
  std::vector<uint8_t> chunk_;  // one chunk of quantized rows
};

}  // namespace

std::vector<std::string> SupportedFileTypes() { return FileTypeNames(); }

absl::Status QuantizeModel(const std::string& src_path, const std::string& dst_path, const QuantizeOptions& options,
                           const std::function<void(const QuantizeProgress&)>& progress,
                           const std::atomic<bool>* cancel) {
  const Clock::time_point t0 = Clock::now();
  // ---- options
  HERD_ASSIGN_OR_RETURN(auto topt, ParseOptions(src_path, dst_path, options));
  if (Cancelled(cancel)) return CancelledError();

  // ---- source and plan
  HERD_RETURN_IF_ERROR(CheckNotSource(src_path, dst_path));
  HERD_ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(src_path));
  const gguf::GgufFile& src = *file;
  HERD_ASSIGN_OR_RETURN(auto info, ReadModelInfo(src));
  auto plans = PlanTensorTypes(src, info, topt);
  if (!plans.ok()) return absl::Status(plans.status().code(), absl::StrCat(src_path, ": ", plans.status().message()));
  HERD_ASSIGN_OR_RETURN(auto bytes_total, CheckPlans(src_path, *plans));

  // ---- output metadata, then convert
  gguf::GgufWriter writer(3);
  SetOutputMetadata(src, topt.file_type.ftype, &writer);
  const int n_total = static_cast<int>(plans->size());
  ProgressReporter reporter(progress, t0, n_total, bytes_total);
  Converter converter(src_path, dst_path, options.n_threads, cancel, &reporter);
  HERD_RETURN_IF_ERROR(converter.Run(*plans));
  if (Cancelled(cancel)) return CancelledError();

  // ---- write (temp file + fsync + rename inside GgufWriter::WriteFile)
  HERD_RETURN_IF_ERROR(converter.AddTensors(&writer));
  reporter.Report(n_total, "", true);  // all tensors converted; writing
  return writer.WriteFile(dst_path);
}

}  // namespace herd::quant
