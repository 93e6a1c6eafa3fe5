// libFuzzer target: StreamingDetokenizer. Each input byte is a token of a tiny SPM vocab
// (256 <0xXX> byte tokens plus multi-byte words, tests/fuzz/vocab_builder.cc); pushing
// the tokens one at a time (+ Flush) must give exactly the sanitized whole text
// (gateway::SanitizeUtf8 of all pieces concatenated), always valid UTF-8, with at most 3
// bytes held back.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "libs/tokenizer/tokenizer.h"
#include "services/gateway/text_stream.h"
#include "tests/fuzz/vocab_builder.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "detokenizer_fuzz: invariant failed: %s\n", what);
    abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using herd::tokenizer::Vocab;
  static const Vocab* vocab = herd::fuzz::TinyVocab("spm").release();
  const int32_t n = vocab->n_tokens();
  herd::tokenizer::StreamingDetokenizer stream(*vocab, /*special=*/true);
  std::string streamed, whole;
  for (size_t i = 0; i < size; ++i) {
    // Bytes 0..255 -> the byte tokens (ids 3..258); with the high bit of the next byte
    // set, a pair selects any token (words, control tokens, invalid ids).
    int32_t id = 3 + data[i];
    if (i + 1 < size && (data[i] & 0xF0) == 0xF0) {
      id = static_cast<int32_t>(data[i + 1]) * 3 % (n + 4) - 2;
      ++i;
    }
    const std::string out = stream.Push(id);
    Check(herd::gateway::IsValidUtf8(out), "Push output is valid UTF-8");
    Check(stream.pending_bytes() <= 3, "at most 3 bytes held back");
    streamed += out;
    whole += vocab->TokenToPiece(id, /*special=*/true);
  }
  const std::string tail = stream.Flush();
  Check(herd::gateway::IsValidUtf8(tail), "Flush output is valid UTF-8");
  Check(stream.pending_bytes() == 0, "Flush empties the buffer");
  streamed += tail;
  Check(streamed == herd::gateway::SanitizeUtf8(whole), "streamed text == SanitizeUtf8(whole text)");
  return 0;
}
