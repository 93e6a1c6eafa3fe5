// SPM (SentencePiece BPE by score; llama.cpp llm_tokenizer_spm_session).
#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <string>
#include <vector>

#include "libs/tokenizer/vocab_impl.h"

namespace herd::tokenizer {
namespace {

using internal::Symbol;

struct SpmBigram {
  struct Comparator {
    bool operator()(const SpmBigram& l, const SpmBigram& r) const {
      return (l.score < r.score) || (l.score == r.score && l.left > r.left);
    }
  };
  int left;
  int right;
  float score;
  size_t size;
};

}  // namespace

int32_t Vocab::Impl::ByteToTokenSpm(uint8_t ch) const {
  static const char* hex = "0123456789ABCDEF";
  const char buf[7] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>', 0};
  int32_t t = TextToToken(buf);
  if (t != kTokenNull) return t;
  t = TextToToken(std::string(1, static_cast<char>(ch)));
  if (t != kTokenNull) return t;
  return unk;  // llama.cpp throws (std::out_of_range) here; we degrade to <unk> (or nothing)
}

void Vocab::Impl::SpmTokenize(const std::string& text, std::vector<int32_t>& output) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  std::priority_queue<SpmBigram, std::vector<SpmBigram>, SpmBigram::Comparator> work_queue;
  std::map<std::string, std::pair<int, int>> rev_merge;

  int index = 0;
  size_t offs = 0;
  while (offs < text.size()) {
    Symbol sym;
    const size_t len = unicode::Utf8Len(text[offs]);
    sym.text = text.c_str() + offs;
    sym.n = std::min(len, text.size() - offs);
    offs += sym.n;
    sym.prev = index - 1;
    sym.next = offs == text.size() ? -1 : index + 1;
    index++;
    symbols.push_back(sym);
  }

  auto try_add_bigram = [&](int left, int right) {
    if (left == -1 || right == -1) return;
    const std::string t(symbols[left].text, symbols[left].n + symbols[right].n);
    const int32_t token = TextToToken(t);
    if (token == kTokenNull) return;
    work_queue.push({left, right, id_to_token[token].score, t.size()});
    rev_merge[t] = std::make_pair(left, right);
  };

  for (int i = 1; i < static_cast<int>(symbols.size()); ++i) try_add_bigram(i - 1, i);

  while (!work_queue.empty()) {
    const SpmBigram bigram = work_queue.top();
    work_queue.pop();
    Symbol& left_sym = symbols[bigram.left];
    Symbol& right_sym = symbols[bigram.right];
    if (left_sym.n == 0 || right_sym.n == 0 || left_sym.n + right_sym.n != bigram.size) continue;
    left_sym.n += right_sym.n;
    right_sym.n = 0;
    left_sym.next = right_sym.next;
    if (right_sym.next >= 0) symbols[right_sym.next].prev = bigram.left;
    try_add_bigram(left_sym.prev, bigram.left);
    try_add_bigram(bigram.left, left_sym.next);
  }

  std::function<void(const Symbol&, int)> resegment = [&](const Symbol& symbol, int depth) {
    const std::string t(symbol.text, symbol.n);
    const int32_t token = TextToToken(t);
    if (token != kTokenNull) {
      output.push_back(token);
      return;
    }
    auto p = rev_merge.find(t);
    if (p == rev_merge.end() || depth > 64) {
      for (size_t j = 0; j < symbol.n; ++j) {
        const int32_t id = ByteToTokenSpm(static_cast<uint8_t>(symbol.text[j]));
        if (id != kTokenNull) output.push_back(id);
      }
      return;
    }
    resegment(symbols[p->second.first], depth + 1);
    resegment(symbols[p->second.second], depth + 1);
  };
  for (int i = 0; i != -1; i = symbols[i].next) resegment(symbols[i], 0);
}

}  // namespace herd::tokenizer
