#include "libs/chat/strings.h"

#include <algorithm>

#include "libs/chat/value.h"

namespace herd::chat::internal {

bool PyIsSpace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = DecodeUtf8(s);
  const std::u32string set = chars ? DecodeUtf8(*chars) : std::u32string();
  auto strip = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : PyIsSpace(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip(u[b])) ++b;
  if (right)
    while (e > b && strip(u[e - 1])) --e;
  return EncodeUtf8(std::u32string_view(u).substr(b, e - b));
}

namespace {

std::vector<std::string> SplitWhitespace(std::string_view s, int64_t maxsplit, bool from_right) {
  std::u32string u = DecodeUtf8(s);
  if (from_right) u = std::u32string(u.rbegin(), u.rend());
  std::vector<std::string> out;
  size_t k = 0;
  const size_t n = u.size();
  while (true) {
    while (k < n && PyIsSpace(u[k])) ++k;
    if (k >= n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      size_t e = n;
      while (e > k && PyIsSpace(u[e - 1])) --e;
      std::u32string rest = u.substr(k, e - k);
      if (from_right) rest = std::u32string(rest.rbegin(), rest.rend());
      out.push_back(EncodeUtf8(rest));
      break;
    }
    size_t e = k;
    while (e < n && !PyIsSpace(u[e])) ++e;
    std::u32string word = u.substr(k, e - k);
    if (from_right) word = std::u32string(word.rbegin(), word.rend());
    out.push_back(EncodeUtf8(word));
    k = e;
  }
  if (from_right) std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                 bool from_right) {
  if (!sep) return SplitWhitespace(s, maxsplit, from_right);
  std::vector<std::string> out;
  const std::string& d = *sep;
  if (!from_right) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t k = s.find(d, pos);
      if (k == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, k - pos));
      pos = k + d.size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < d.size()) break;
    const size_t k = s.rfind(d, end - d.size());
    if (k == std::string_view::npos) break;
    out.emplace_back(s.substr(k + d.size(), end - k - d.size()));
    end = k;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::string PyReplace(std::string_view s, std::string_view old, std::string_view rep, int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::u32string u = DecodeUtf8(s);
    int64_t done = 0;
    for (size_t k = 0; k <= u.size() && out.size() <= kMaxReplaceBytes; ++k) {
      if (count < 0 || done < count) {
        out += rep;
        ++done;
      }
      if (k < u.size()) AppendUtf8(u[k], &out);
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t k = s.find(old, pos);
    if (k == std::string_view::npos) break;
    if (out.size() > kMaxReplaceBytes) break;  // bounded; the caller reports it
    out.append(s.substr(pos, k - pos));
    out.append(rep);
    pos = k + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::vector<std::string> PySplitLines(std::string_view s) {
  const std::u32string u = DecodeUtf8(s);
  std::vector<std::string> out;
  std::u32string cur;
  for (size_t k = 0; k < u.size(); ++k) {
    const char32_t c = u[k];
    const bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      cur += c;
      continue;
    }
    if (c == '\r' && k + 1 < u.size() && u[k + 1] == '\n') ++k;
    out.push_back(EncodeUtf8(cur));
    cur.clear();
  }
  if (!cur.empty()) out.push_back(EncodeUtf8(cur));
  return out;
}

namespace {

// Simple case mapping for ASCII, Latin-1, Latin Extended-A, Greek and Cyrillic (what
// Python's str.upper/lower do for those letters; other scripts are left as they are).
char32_t UpperCp(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if ((c >= 0xe0 && c <= 0xfe && c != 0xf7)) return c - 0x20;
  if (c == 0xff) return 0x178;
  if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17f) {
    const bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (odd_lower ? (c % 2 == 0) : (c % 2 == 1)) return c - 1;
    return c;
  }
  if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2) return c - 0x20;
  if (c == 0x3c2) return 0x3a3;
  if (c >= 0x430 && c <= 0x44f) return c - 0x20;
  if (c >= 0x450 && c <= 0x45f) return c - 0x50;
  return c;
}

char32_t LowerCp(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if ((c >= 0xc0 && c <= 0xde && c != 0xd7)) return c + 0x20;
  if (c == 0x178) return 0xff;
  if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 && c != 0x17f) {
    const bool odd_lower = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e);
    if (odd_lower ? (c % 2 == 1) : (c % 2 == 0)) return c + 1;
    return c;
  }
  if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2) return c + 0x20;
  if (c >= 0x410 && c <= 0x42f) return c + 0x20;
  if (c >= 0x400 && c <= 0x40f) return c + 0x50;
  return c;
}

bool IsCased(char32_t c) { return UpperCp(c) != c || LowerCp(c) != c || c == 0xdf; }

void AppendUpper(char32_t c, std::string* out) {
  if (c == 0xdf) {  // ß -> SS
    *out += "SS";
    return;
  }
  AppendUtf8(UpperCp(c), out);
}

// Titlecase (str.title / str.capitalize): like upper, but ß -> "Ss".
void AppendTitle(char32_t c, std::string* out) {
  if (c == 0xdf) {
    *out += "Ss";
    return;
  }
  AppendUtf8(UpperCp(c), out);
}

}  // namespace

std::string PyUpper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : DecodeUtf8(s)) AppendUpper(c, &out);
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : DecodeUtf8(s)) AppendUtf8(LowerCp(c), &out);
  return out;
}

std::string PyTitle(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : DecodeUtf8(s)) {
    if (prev_cased)
      AppendUtf8(LowerCp(c), &out);
    else
      AppendTitle(c, &out);
    prev_cased = IsCased(c);
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  const std::u32string u = DecodeUtf8(s);
  std::string out;
  for (size_t k = 0; k < u.size(); ++k) {
    if (k == 0)
      AppendTitle(u[k], &out);
    else
      AppendUtf8(LowerCp(u[k]), &out);
  }
  return out;
}

int64_t CodePointIndex(std::string_view s, size_t byte_offset) {
  int64_t n = 0;
  for (size_t k = 0; k < byte_offset && k < s.size(); ++k) {
    if ((static_cast<unsigned char>(s[k]) & 0xc0) != 0x80) ++n;
  }
  return n;
}

}  // namespace herd::chat::internal
