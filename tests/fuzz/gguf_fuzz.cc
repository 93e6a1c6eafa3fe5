// libFuzzer target: the GGUF reader on arbitrary bytes (tools/fuzz.sh builds and runs it).
// A file that parses must be fully readable (every key, value and tensor info) and must
// survive a write/re-read round trip with the same metadata keys and tensor names.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "libs/gguf/gguf.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "gguf_fuzz: invariant failed: %s\n", what);
    abort();
  }
}

// Touches every value (scalars, strings, arrays) so ASan sees any out-of-bounds read.
size_t Walk(const herd::gguf::Value& v) {
  size_t h = static_cast<size_t>(v.type()) + v.AsString().size() + v.DebugString().size();
  if (v.is_integer()) h += static_cast<size_t>(v.AsInt());
  if (v.type() == herd::gguf::ValueType::ARRAY) {
    h += v.array_size() + v.raw().size();
    for (const std::string& s : v.strings()) h += s.size();
    for (const herd::gguf::Value& e : v.elements()) h += Walk(e);
    for (size_t i = 0; i < v.array_size() && i < 64; ++i) h += static_cast<size_t>(v.IntAt(i));
  }
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto f = herd::gguf::GgufFile::FromBytes(std::string(reinterpret_cast<const char*>(data), size));
  if (!f.ok()) return 0;
  size_t h = 0;
  for (const auto& kv : (*f)->metadata()) h += kv.key.size() + Walk(kv.value);
  for (const auto& t : (*f)->tensors()) {
    h += t.name.size() + t.offset;
    if (t.nbytes > 0) h += t.data[0] + t.data[t.nbytes - 1];  // the data lies inside the file
  }
  if (h == 1) fprintf(stderr, " ");  // keep the walk from being optimized away

  const std::string again = herd::gguf::GgufWriter::FromFile(**f).WriteToString();
  auto g = herd::gguf::GgufFile::FromBytes(again);
  Check(g.ok(), "a file that parses re-parses after GgufWriter::FromFile + WriteToString");
  Check((*g)->metadata().size() == (*f)->metadata().size(), "same number of keys after a round trip");
  Check((*g)->tensors().size() == (*f)->tensors().size(), "same number of tensors after a round trip");
  for (size_t i = 0; i < (*f)->metadata().size(); ++i) {
    Check((*g)->metadata()[i].key == (*f)->metadata()[i].key, "same keys in the same order");
  }
  for (size_t i = 0; i < (*f)->tensors().size(); ++i) {
    Check((*g)->tensors()[i].name == (*f)->tensors()[i].name, "same tensor names in the same order");
  }
  return 0;
}
