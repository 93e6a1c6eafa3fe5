// Python str operations on UTF-8 strings (code-point aware where Python is) for the
// chat-template interpreter. Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace herd::chat::internal {

/// str.strip/lstrip/rstrip: chars nullopt = whitespace.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
/// str.split / str.rsplit: sep nullopt = runs of whitespace; maxsplit < 0 = no limit.
std::vector<std::string> PySplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit,
                                 bool from_right);
/// Results of PyReplace stop growing past this many bytes (callers check the size).
inline constexpr size_t kMaxReplaceBytes = size_t{1} << 26;
/// str.replace(old, new, count); count < 0 = all.
std::string PyReplace(std::string_view s, std::string_view old, std::string_view rep, int64_t count);
/// str.splitlines() (without keepends).
std::vector<std::string> PySplitLines(std::string_view s);
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
/// str.title(): words (runs of letters) capitalized.
std::string PyTitle(std::string_view s);
/// str.capitalize(): first character upper, the rest lower.
std::string PyCapitalize(std::string_view s);
bool PyIsSpace(char32_t c);
/// Number of code points in s[0, byte_offset).
int64_t CodePointIndex(std::string_view s, size_t byte_offset);

}  // namespace herd::chat::internal
