#include "libs/chat/strings.h"

#include <algorithm>

#include "libs/chat/value.h"

namespace herd::chat::internal {

bool PyIsSpace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 ||
         c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 ||
         c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string u = DecodeUtf8(s);
  const std::u32string set = chars ? DecodeUtf8(*chars) : std::u32string();
  auto strip = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : PyIsSpace(c); };
  size_t b = 0, e = u.size();
  if (left) while (b < e && strip(u[b])) ++b;
  if (right) while (e > b && strip(u[e - 1])) --e;
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

std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep,
                                 int64_t maxsplit, bool from_right) {
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
    for (size_t k = 0; k <= u.size(); ++k) {
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
    const bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
                     c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
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

std::string PyUpper(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return out;
}

std::string PyLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  }
  return out;
}

namespace {
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
}  // namespace

std::string PyTitle(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    if (IsAsciiAlpha(c)) {
      c = prev_cased ? PyLower(std::string(1, c))[0] : PyUpper(std::string(1, c))[0];
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}

std::string PyCapitalize(std::string_view s) {
  std::string out = PyLower(s);
  if (!out.empty()) out[0] = PyUpper(out.substr(0, 1))[0];
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
