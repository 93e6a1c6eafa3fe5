// Reads a model's vocabulary from the shared data, for tests that need a real tokenizer.
#pragma once
#include <memory>
#include <string>

#include "absl/status/statusor.h"

#include "libs/gguf/gguf.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd {

/// The vocabulary of `shared`/models/`file` (`shared` as SharedDir() gives it). Errors
/// from opening the file or reading its vocabulary.
inline absl::StatusOr<std::unique_ptr<tokenizer::Vocab>> LoadSharedVocab(const std::string& shared,
                                                                         const std::string& file = "stories260K.gguf") {
  auto f = gguf::GgufFile::Open(shared + "/models/" + file);
  if (!f.ok()) return f.status();
  return tokenizer::Vocab::FromGguf(**f);
}

}  // namespace herd
