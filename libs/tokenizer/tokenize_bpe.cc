// BPE by merge rank after a regex pre-tokenizer (llama.cpp llm_tokenizer_bpe_session).
#include <algorithm>
#include <queue>
#include <string>
#include <vector>

#include "libs/tokenizer/vocab_impl.h"

namespace herd::tokenizer {
namespace {

using internal::Symbol;

struct BpeBigram {
  struct Comparator {
    bool operator()(const BpeBigram& l, const BpeBigram& r) const {
      return l.rank > r.rank || (l.rank == r.rank && l.left > r.left);
    }
  };
  int left;
  int right;
  std::string text;
  int rank;
  size_t size;
};

}  // namespace

void Vocab::Impl::BpeTokenize(const std::string& text, std::vector<int32_t>& output) const {
  const std::vector<std::string> words = splitter->Split(text, byte_encode);
  std::vector<Symbol> symbols_final;
  int final_prev_index = -1;

  for (const std::string& word : words) {
    std::priority_queue<BpeBigram, std::vector<BpeBigram>, BpeBigram::Comparator> work_queue;
    std::vector<Symbol> symbols;
    int index = 0;
    size_t offset = 0;

    if (ignore_merges && TextToToken(word) != kTokenNull) {
      symbols.push_back({-1, -1, word.c_str(), word.size()});
      offset = word.size();
    } else if (pre == Pre::kGemma4 && word.find_first_not_of('\n') == std::string::npos) {
      if (TextToToken(word) != kTokenNull) {
        symbols.push_back({-1, -1, word.c_str(), word.size()});
        offset = word.size();
      }
    }
    while (offset < word.size()) {
      Symbol sym;
      const size_t char_len = std::min(word.size() - offset, unicode::Utf8Len(word[offset]));
      sym.text = word.c_str() + offset;
      sym.n = char_len;
      offset += sym.n;
      sym.prev = index - 1;
      sym.next = offset == word.size() ? -1 : index + 1;
      index++;
      symbols.push_back(sym);
    }

    auto add_new_bigram = [&](int left, int right) {
      if (left == -1 || right == -1) return;
      std::string lt(symbols[left].text, symbols[left].n);
      std::string rt(symbols[right].text, symbols[right].n);
      const int rank = FindBpeRank(lt, rt);
      if (rank < 0) return;
      BpeBigram b;
      b.left = left;
      b.right = right;
      b.size = lt.size() + rt.size();
      b.text = std::move(lt) + rt;
      b.rank = rank;
      work_queue.push(std::move(b));
    };
    for (int i = 1; i < static_cast<int>(symbols.size()); ++i) add_new_bigram(i - 1, i);

    while (!work_queue.empty()) {
      const BpeBigram bigram = work_queue.top();
      work_queue.pop();
      Symbol& left_symbol = symbols[bigram.left];
      Symbol& right_symbol = symbols[bigram.right];
      if (left_symbol.n == 0 || right_symbol.n == 0) continue;
      const std::string lt(left_symbol.text, left_symbol.n);
      const std::string rt(right_symbol.text, right_symbol.n);
      if (lt + rt != bigram.text) continue;  // outdated
      left_symbol.n += right_symbol.n;
      right_symbol.n = 0;
      left_symbol.next = right_symbol.next;
      if (right_symbol.next >= 0) symbols[right_symbol.next].prev = bigram.left;
      add_new_bigram(left_symbol.prev, bigram.left);
      add_new_bigram(bigram.left, left_symbol.next);
    }

    // Symbols point into `word`; resolve them to tokens now (words is alive until return,
    // so keeping pointers in symbols_final is safe).
    for (Symbol& sym : symbols) {
      if (sym.n > 0) {
        sym.prev = final_prev_index;
        sym.next = -1;
        if (final_prev_index != -1) symbols_final[final_prev_index].next = static_cast<int>(symbols_final.size());
        symbols_final.push_back(sym);
        final_prev_index = static_cast<int>(symbols_final.size()) - 1;
      }
    }
  }

  if (symbols_final.empty()) return;
  for (int i = 0; i != -1; i = symbols_final[i].next) {
    const Symbol& symbol = symbols_final[i];
    if (symbol.n == 0) continue;
    const std::string str(symbol.text, symbol.n);
    const int32_t token = TextToToken(str);
    if (token == kTokenNull) {
      for (char c : str) {
        int32_t tb;
        if (byte_encode) {
          tb = TextToToken(std::string(1, c));
        } else {
          static const char* hex = "0123456789ABCDEF";
          const uint8_t ch = static_cast<uint8_t>(c);
          const char buf[7] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>', 0};
          tb = TextToToken(buf);
        }
        if (tb != kTokenNull) output.push_back(tb);
      }
    } else {
      output.push_back(token);
    }
  }
}

}  // namespace herd::tokenizer
