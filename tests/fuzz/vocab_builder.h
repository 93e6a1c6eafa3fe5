// Tiny vocabularies built in code for the tokenizer fuzz targets (no ../shared at run
// time): an SPM vocab with the 256 <0xXX> byte tokens, a BPE vocab with byte-level
// tokens and a few merges, and a WPM (BERT) vocab.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "libs/gguf/gguf.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd::fuzz {

/// The GGUF image of a vocab-only file; kind is "spm", "bpe" or "wpm".
std::string TinyVocabGguf(const std::string& kind);

/// The vocabulary of TinyVocabGguf(kind) (aborts if it does not load: a fuzz target bug).
std::unique_ptr<tokenizer::Vocab> TinyVocab(const std::string& kind);

}  // namespace herd::fuzz
