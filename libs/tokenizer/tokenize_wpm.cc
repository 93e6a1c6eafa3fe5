// WPM (BERT WordPiece: normalize, split on whitespace/punctuation, greedy longest match;
// llama.cpp llm_tokenizer_wpm_session).
#include <algorithm>
#include <string>
#include <vector>

#include "libs/tokenizer/vocab_impl.h"

namespace herd::tokenizer {

using internal::kEscSpace;

std::vector<std::string> Vocab::Impl::WpmPreprocess(const std::string& text) const {
  std::vector<uint32_t> cpts = unicode::CptsFromUtf8(text);
  if (strip_accents) {
    for (uint32_t& c : cpts) c = unicode::NfdFirst(c);
  }
  std::vector<std::string> words(1, "");
  for (const uint32_t cpt : cpts) {
    const uint16_t flags = unicode::CptFlags(cpt);
    if (flags & unicode::kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cpt == 0 || cpt == 0xFFFD || (flags & unicode::kControl)) continue;
    if (strip_accents && (flags & unicode::kAccentMark)) continue;
    const std::string s = unicode::CptToUtf8(lowercase ? unicode::ToLower(cpt) : cpt);
    const bool is_chinese = (cpt >= 0x04E00 && cpt <= 0x09FFF) || (cpt >= 0x03400 && cpt <= 0x04DBF) ||
                            (cpt >= 0x20000 && cpt <= 0x2A6DF) || (cpt >= 0x2A700 && cpt <= 0x2B73F) ||
                            (cpt >= 0x2B740 && cpt <= 0x2B81F) || (cpt >= 0x2B920 && cpt <= 0x2CEAF) ||
                            (cpt >= 0x0F900 && cpt <= 0x0FAFF) || (cpt >= 0x2F800 && cpt <= 0x2FA1F);
    if ((flags & unicode::kPunctuation) || (cpt < 0x7F && (flags & unicode::kSymbol)) || is_chinese) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = s;
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void Vocab::Impl::WpmTokenize(const std::string& text, std::vector<int32_t>& output) const {
  for (const std::string& word : WpmPreprocess(text)) {
    if (word.empty()) continue;
    const std::string word1 = kEscSpace + word;
    const int n = static_cast<int>(word1.size());
    const size_t current_tokens = output.size();
    for (int i = 0; i < n; ++i) {
      bool match = false;
      for (int j = std::min(n, i + max_token_len + 1); j > i; j--) {
        const int32_t id = TextToToken(word1.substr(i, j - i));
        if (id != kTokenNull) {
          output.push_back(id);
          match = true;
          i = j - 1;
          break;
        }
      }
      if (!match) {
        output.resize(current_tokens);
        break;
      }
    }
    if (current_tokens == output.size() && unk != kTokenNull) output.push_back(unk);
  }
}

}  // namespace herd::tokenizer
