// herd inspect MODEL [--tensor NAME [--rows A:B] [--dequant]]
//
// Without --tensor: the GGUF header, every metadata key and the tensor table.
// With --tensor: one tensor's data, one row (ne0 elements, ggml order) per line on
// stdout, for checking a file's blocks by hand against ggml's (gguf-py's
// GGUFReader + gguf.quants.dequantize, or ggml's to_float): the raw bytes in hex with
// a space between blocks, or with --dequant the values as floats that read back to the
// same float ("%.9g"), dequantized as ggml's to_float does (libs/tensor/quants.h
// DequantizeRow, bit-exact). A header line on stderr names the type, shape and rows.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "libs/gguf/ggml_type.h"
#include "libs/gguf/gguf.h"
#include "libs/tensor/quants.h"
#include "tools/herd/args.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {

void PrintTable(const gguf::GgufFile& f) {
  std::printf("file: %s\nversion: %u\nalignment: %u\nsize: %llu bytes\nmetadata: %zu keys\n", f.path().c_str(),
              f.version(), f.alignment(), static_cast<unsigned long long>(f.file_size()), f.metadata().size());
  for (const gguf::KeyValue& kv : f.metadata()) {
    std::string type = gguf::ValueTypeName(kv.value.type());
    if (kv.value.type() == gguf::ValueType::ARRAY) {
      type = absl::StrCat("array[", gguf::ValueTypeName(kv.value.array_type()), ", ", kv.value.array_size(), "]");
    }
    std::printf("  %-45s %-22s %s\n", kv.key.c_str(), type.c_str(), kv.value.DebugString().c_str());
  }
  std::printf("tensors: %zu\n", f.tensors().size());
  std::printf("  %-40s %-8s %-28s %12s %12s\n", "name", "type", "ne", "offset", "bytes");
  uint64_t total = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::string ne;
    for (uint32_t i = 0; i < t.n_dims; ++i) absl::StrAppend(&ne, i ? " x " : "", t.ne[i]);
    std::printf("  %-40s %-8s %-28s %12llu %12zu\n", t.name.c_str(), GgmlTypeName(t.type).c_str(), ne.c_str(),
                static_cast<unsigned long long>(t.offset), t.nbytes);
    total += t.nbytes;
  }
  std::printf("tensor data: %llu bytes\n", static_cast<unsigned long long>(total));
}

// "A:B" (half-open, as a Python slice; either side may be empty) against n_rows.
absl::Status ParseRows(const std::string& spec, int64_t n_rows, int64_t* a, int64_t* b) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts.size() != 2) return absl::InvalidArgumentError(absl::StrCat("--rows: \"", spec, "\" is not A:B"));
  *a = 0;
  *b = n_rows;
  if (!parts[0].empty() && !absl::SimpleAtoi(parts[0], a)) {
    return absl::InvalidArgumentError(absl::StrCat("--rows: \"", parts[0], "\" is not a row index"));
  }
  if (!parts[1].empty() && !absl::SimpleAtoi(parts[1], b)) {
    return absl::InvalidArgumentError(absl::StrCat("--rows: \"", parts[1], "\" is not a row index"));
  }
  if (*a < 0 || *b > n_rows || *a >= *b) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rows: ", *a, ":", *b, " is not a non-empty range within the tensor's ", n_rows, " rows"));
  }
  return absl::OkStatus();
}

}  // namespace

int CmdInspect(int argc, char** argv) {
  static const std::vector<FlagSpec> specs = {
      {{"--tensor"}, true, "print this tensor's data, one row (ne0 elements) per line", ""},
      {{"--rows"}, true, "A:B: rows A to B-1 of --tensor (either side may be left out: 5:, :8)", ""},
      {{"--dequant"}, false, "print --tensor's values as floats (ggml's to_float) instead of raw block bytes", ""},
      {{"-h", "--help"}, false, "show this help", ""},
  };
  const std::string usage =
      "usage: herd inspect MODEL.gguf [--tensor NAME [--rows A:B] [--dequant]]\n"
      "  prints the GGUF header, every metadata key and the tensor table; with --tensor, that\n"
      "  tensor's rows (raw block bytes in hex, blocks separated by spaces, or dequantized floats)\n" +
      Args::Usage(specs);
  int exit_status = 0;
  auto args = ParseCommand(specs, argc, argv, usage, &exit_status);
  if (!args) return exit_status;
  if (args->positional().size() != 1) return UsageError("inspect: give exactly one MODEL", usage);
  if (!args->Has("--tensor") && (args->Has("--rows") || args->Has("--dequant"))) {
    return UsageError("--rows and --dequant need --tensor", usage);
  }
  auto file = gguf::GgufFile::Open(args->positional()[0]);
  if (!file.ok()) return Fail(file.status());
  const gguf::GgufFile& f = **file;
  if (!args->Has("--tensor")) {
    PrintTable(f);
    return 0;
  }

  const std::string name = args->Get("--tensor");
  const gguf::TensorInfo* t = nullptr;
  for (const gguf::TensorInfo& ti : f.tensors()) {
    if (ti.name == name) t = &ti;
  }
  if (t == nullptr) {
    return Fail(
        absl::NotFoundError(absl::StrCat(f.path(), ": no tensor named '", name, "' (herd inspect MODEL lists them)")));
  }
  const GgmlTypeTraits* traits = GetGgmlTypeTraits(t->type);
  const bool dequant = args->Has("--dequant");
  if (dequant && !CanDequantize(t->type)) {
    return Fail(absl::UnimplementedError(
        absl::StrCat("tensor '", name, "': --dequant does not handle type ", GgmlTypeName(t->type))));
  }
  const int64_t ne0 = t->ne[0];
  const int64_t n_rows = t->nelements() / ne0;
  const size_t row_bytes = GgmlRowSize(t->type, ne0);
  int64_t a = 0, b = n_rows;
  if (args->Has("--rows")) {
    if (absl::Status s = ParseRows(args->Get("--rows"), n_rows, &a, &b); !s.ok()) {
      return UsageError(std::string(s.message()), usage);
    }
  }
  std::string ne;
  for (uint32_t i = 0; i < t->n_dims; ++i) absl::StrAppend(&ne, i ? " x " : "", t->ne[i]);
  std::fprintf(stderr,
               "tensor %s: type %s, ne %s, %zu bytes per row (blocks: %" PRId64 " x %" PRId64
               " elements), rows %" PRId64 ":%" PRId64 " of %" PRId64 "%s\n",
               name.c_str(), GgmlTypeName(t->type).c_str(), ne.c_str(), row_bytes, ne0 / traits->block_size,
               traits->block_size, a, b, n_rows, dequant ? ", dequantized" : ", raw bytes");

  std::vector<float> values(static_cast<size_t>(ne0));
  std::string line;
  for (int64_t r = a; r < b; ++r) {
    const uint8_t* row = t->data + static_cast<size_t>(r) * row_bytes;
    line.clear();
    if (dequant) {
      DequantizeRow(t->type, row, values.data(), ne0);
      char buf[32];
      for (int64_t i = 0; i < ne0; ++i) {
        std::snprintf(buf, sizeof(buf), "%s%.9g", i ? " " : "", static_cast<double>(values[static_cast<size_t>(i)]));
        line += buf;
      }
    } else {
      static const char kHex[] = "0123456789abcdef";
      for (size_t i = 0; i < row_bytes; ++i) {
        if (i > 0 && i % traits->type_size == 0) line += ' ';
        line += kHex[row[i] >> 4];
        line += kHex[row[i] & 15];
      }
    }
    line += '\n';
    if (std::fwrite(line.data(), 1, line.size(), stdout) != line.size()) {
      return Fail(absl::UnavailableError("inspect: writing to stdout failed"));
    }
  }
  return 0;
}

}  // namespace herd::cli
