// Text helpers of the gateway's output stream: UTF-8 validation and stop strings
// matched across token boundaries.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace herd::gateway {

/// True when `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
/// nothing above U+10FFFF). On false, *bad_offset (if given) is the byte offset of the
/// first byte that does not start or continue a well-formed character.
bool IsValidUtf8(absl::string_view s, size_t* bad_offset = nullptr);

/// `s` with every ill-formed byte sequence replaced by U+FFFD (valid input is returned
/// unchanged): one U+FFFD per maximal subpart (Unicode ch. 3; what Python's
/// decode(errors="replace") and llama-server do), so an incomplete character such as
/// "\xE2\x82" is one U+FFFD and a stray byte is one. Used for text that must go into a
/// proto3 string or JSON.
std::string SanitizeUtf8(absl::string_view s);

/// Finds stop strings in streamed text. Text pushed in pieces (one per token, say) is
/// released only when it can no longer be the beginning of a stop string, so a stop
/// string split across tokens ("a" + "b" for stop "ab") is found and never partly
/// emitted. On a match, the released text ends just before the match and everything
/// after it is dropped.
///
/// Stop strings must be non-empty valid UTF-8 and pushed text valid UTF-8; the held-back
/// part then always starts on a character boundary, so released text is valid UTF-8.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  /// Appends `text`; returns the text that is now safe to emit (possibly ""). After a
  /// match, returns the text before the match once, then "" for any later Push.
  std::string Push(absl::string_view text);
  /// End of the stream: returns the held-back text ("" after a match).
  std::string Flush();

  /// Whether a stop string matched, and which one.
  bool matched() const { return matched_; }
  const std::string& matched_stop() const { return matched_stop_; }
  /// Bytes currently held back.
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::vector<std::string> stops_;
  size_t max_len_ = 0;
  std::string pending_;
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace herd::gateway
