#include "services/gateway/text_stream.h"

#include <algorithm>

namespace herd::gateway {
namespace {

// Length of the well-formed UTF-8 character at s[i], or 0 when ill-formed/truncated.
// *subpart (if given) is the length of the maximal subpart at s[i] when ill-formed: the
// lead byte plus the continuation bytes that could still have completed it (Unicode
// ch. 3, "U+FFFD substitution of maximal subparts"; at least 1).
size_t CharLen(absl::string_view s, size_t i, size_t* subpart = nullptr) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (subpart != nullptr) *subpart = 1;
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;  // no overlongs
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  size_t k = 1;
  for (; k < n && i + k < s.size(); ++k) {
    const unsigned char lo_k = k == 1 ? lo : 0x80, hi_k = k == 1 ? hi : 0xBF;
    if (b(i + k) < lo_k || b(i + k) > hi_k) break;
  }
  if (k == n) return n;
  if (subpart != nullptr) *subpart = k;
  return 0;
}

}  // namespace

bool IsValidUtf8(absl::string_view s, size_t* bad_offset) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = CharLen(s, i);
    if (n == 0) {
      if (bad_offset != nullptr) *bad_offset = i;
      return false;
    }
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(absl::string_view s) {
  if (IsValidUtf8(s)) return std::string(s);
  std::string out;
  out.reserve(s.size() + 8);
  size_t i = 0;
  while (i < s.size()) {
    size_t subpart = 1;
    const size_t n = CharLen(s, i, &subpart);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // one per maximal subpart: an incomplete character is one
      i += subpart;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  stops_.erase(std::remove(stops_.begin(), stops_.end(), std::string()), stops_.end());
  for (const std::string& s : stops_) max_len_ = std::max(max_len_, s.size());
}

std::string StopStringMatcher::Push(absl::string_view text) {
  if (matched_) return "";
  pending_.append(text.data(), text.size());
  if (stops_.empty()) {
    std::string out;
    out.swap(pending_);
    return out;
  }
  // Earliest match (ties: the first stop string listed).
  size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos < best) {
      best = pos;
      matched_stop_ = s;
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, best);
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  const size_t max_k = std::min(pending_.size(), max_len_ - 1);
  for (size_t k = max_k; k > 0 && hold == 0; --k) {
    const absl::string_view suffix(pending_.data() + pending_.size() - k, k);
    for (const std::string& s : stops_) {
      if (s.size() > k && absl::string_view(s).substr(0, k) == suffix) {
        hold = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStringMatcher::Flush() {
  std::string out;
  if (!matched_) out.swap(pending_);
  pending_.clear();
  return out;
}

}  // namespace herd::gateway
