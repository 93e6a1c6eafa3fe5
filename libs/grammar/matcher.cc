#include "libs/grammar/matcher.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <unordered_set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/tokenizer/tokenizer.h"

namespace herd::grammar {
namespace {

using Stack = Matcher::Stack;

bool IsEndOfSequence(const Element* e) { return e->type == ElementType::kEnd || e->type == ElementType::kAlt; }

struct StackHash {
  size_t operator()(const Stack& s) const {
    size_t h = s.size();
    for (const Element* e : s) h = h * 1000003u ^ reinterpret_cast<uintptr_t>(e);
    return h;
  }
};
using StackSet = std::unordered_set<Stack, StackHash>;

// llama_grammar_match_char: (matched, position after the char class).
std::pair<bool, const Element*> MatchChar(const Element* pos, uint32_t chr) {
  bool found = false;
  const bool positive = pos->type == ElementType::kChar || pos->type == ElementType::kCharAny;
  do {
    if (pos[1].type == ElementType::kCharRngUpper) {
      found = found || (pos->value <= chr && chr <= pos[1].value);
      pos += 2;
    } else if (pos->type == ElementType::kCharAny) {
      found = true;
      pos += 1;
    } else {
      found = found || pos->value == chr;
      pos += 1;
    }
  } while (pos->type == ElementType::kCharAlt);
  return {found == positive, pos};
}

// llama_grammar_match_partial_char: can the partial sequence complete to a char here?
bool MatchPartialChar(const Element* pos, PartialUtf8 partial) {
  const bool positive = pos->type == ElementType::kChar || pos->type == ElementType::kCharAny;
  const uint32_t value = partial.value;
  const int n_remain = partial.n_remain;
  if (n_remain < 0 || (n_remain == 1 && value < 2)) return false;  // invalid or overlong
  uint32_t low = value << (n_remain * 6);
  const uint32_t high = low | ((1u << (n_remain * 6)) - 1);
  if (low == 0) {
    if (n_remain == 2) low = 1u << 11;
    if (n_remain == 3) low = 1u << 16;
  }
  do {
    if (pos[1].type == ElementType::kCharRngUpper) {
      if (pos->value <= high && low <= pos[1].value) return positive;
      pos += 2;
    } else if (pos->type == ElementType::kCharAny) {
      return true;
    } else {
      if (low <= pos->value && pos->value <= high) return positive;
      pos += 1;
    }
  } while (pos->type == ElementType::kCharAlt);
  return !positive;
}

// llama_grammar_advance_stack: expands rule references on top of `stack` until every
// resulting stack has a terminal on top (or is empty); adds them to `out` (deduplicated
// through `seen_out`). Returns false when `out` would exceed max_stacks.
bool AdvanceStack(const std::vector<Rule>& rules, Stack stack, std::vector<Stack>* out, StackSet* seen_out,
                  size_t max_stacks) {
  std::vector<Stack> todo;
  todo.push_back(std::move(stack));
  StackSet seen;
  while (!todo.empty()) {
    Stack cur = std::move(todo.back());
    todo.pop_back();
    if (!seen.insert(cur).second) continue;
    if (cur.empty()) {
      if (seen_out->insert(cur).second) out->push_back(std::move(cur));
      continue;
    }
    const Element* pos = cur.back();
    switch (pos->type) {
      case ElementType::kRuleRef: {
        const Element* sub = rules[pos->value].data();
        while (true) {
          Stack next(cur.begin(), cur.end() - 1);
          if (!IsEndOfSequence(pos + 1)) next.push_back(pos + 1);
          if (!IsEndOfSequence(sub)) next.push_back(sub);
          todo.push_back(std::move(next));
          while (!IsEndOfSequence(sub)) ++sub;
          if (sub->type != ElementType::kAlt) break;
          ++sub;
        }
        break;
      }
      case ElementType::kChar:
      case ElementType::kCharNot:
      case ElementType::kCharAny:
        if (seen_out->insert(cur).second) out->push_back(std::move(cur));
        break;
      default:  // cannot happen for a parsed grammar
        break;
    }
    if (out->size() > max_stacks || seen.size() > 16 * max_stacks) return false;
  }
  return true;
}

struct Candidate {
  size_t index;
  const uint32_t* cp;   // next code point
  const uint32_t* end;  // end of the code points
  PartialUtf8 partial;
};

// Scratch vectors of the rejection recursion, one per depth (a depth is one code point
// of the candidates), reused across calls so that a whole-vocabulary check allocates
// nothing once warm.
struct RejectScratch {
  std::deque<std::vector<Candidate>> next;  // [depth]; a deque: growing keeps references
  std::vector<Candidate>& At(size_t depth) {
    while (next.size() <= depth) next.emplace_back();
    next[depth].clear();
    return next[depth];
  }
};

// The ASCII code points a char-class position matches, as a 128-bit set (the scan tests
// most code points of JSON-like output with one bit test instead of walking the class).
struct AsciiSet {
  uint64_t w[2] = {0, 0};
  bool Has(uint32_t c) const { return (w[c >> 6] >> (c & 63)) & 1u; }
};
AsciiSet AsciiMatches(const Element* pos) {
  AsciiSet s;
  for (uint32_t c = 0; c < 128; ++c) {
    if (MatchChar(pos, c).first) s.w[c >> 6] |= uint64_t{1} << (c & 63);
  }
  return s;
}

void RejectCandidates(const std::vector<Rule>& rules, const std::vector<Stack>& stacks, std::vector<Candidate>* cands,
                      size_t max_stacks, size_t depth, RejectScratch* scratch);

// llama_grammar_reject_candidates_for_stack, in place: keeps in *cands only the
// candidates this stack rejects (in their order).
void RejectForStack(const std::vector<Rule>& rules, const Stack& stack, std::vector<Candidate>* cands,
                    size_t max_stacks, size_t depth, RejectScratch* scratch) {
  size_t n_rej = 0;
  if (stack.empty()) {
    for (const Candidate& c : *cands) {
      if (c.cp != c.end || c.partial.n_remain != 0) (*cands)[n_rej++] = c;
    }
    cands->resize(n_rej);
    return;
  }
  const Element* top = stack.back();
  const AsciiSet ascii = AsciiMatches(top);
  std::vector<Candidate>& next = scratch->At(depth);
  for (const Candidate& c : *cands) {
    if (c.cp == c.end) {
      // The token's complete code points are all matched; reject iff it ends in a partial
      // sequence that cannot satisfy this position.
      if (c.partial.n_remain != 0 && !MatchPartialChar(top, c.partial)) (*cands)[n_rej++] = c;
    } else if (*c.cp < 128 ? ascii.Has(*c.cp) : MatchChar(top, *c.cp).first) {
      next.push_back({c.index, c.cp + 1, c.end, c.partial});
    } else {
      (*cands)[n_rej++] = c;
    }
  }
  cands->resize(n_rej);
  if (next.empty()) return;
  const Element* after = MatchChar(top, 0).second;
  Stack stack_after(stack.begin(), stack.end() - 1);
  if (!IsEndOfSequence(after)) stack_after.push_back(after);
  std::vector<Stack> next_stacks;
  StackSet seen;
  AdvanceStack(rules, std::move(stack_after), &next_stacks, &seen, max_stacks);
  RejectCandidates(rules, next_stacks, &next, max_stacks, depth + 1, scratch);
  // `next` now holds the rejected ones, one code point further: the order of *cands is
  // not kept across the two groups (callers index by Candidate::index).
  for (const Candidate& c : next) cands->push_back({c.index, c.cp - 1, c.end, c.partial});
}

// llama_grammar_reject_candidates, in place: leaves in *cands the candidates no stack
// accepts.
void RejectCandidates(const std::vector<Rule>& rules, const std::vector<Stack>& stacks, std::vector<Candidate>* cands,
                      size_t max_stacks, size_t depth, RejectScratch* scratch) {
  if (cands->empty() || stacks.empty()) return;
  for (size_t i = 0; i < stacks.size() && !cands->empty(); ++i) {
    RejectForStack(rules, stacks[i], cands, max_stacks, depth, scratch);
  }
}

std::string Quoted(absl::string_view s) { return absl::StrCat("\"", absl::CHexEscape(s), "\""); }

}  // namespace

void DecodeUtf8(absl::string_view src, PartialUtf8 start, std::vector<uint32_t>* cps, PartialUtf8* end) {
  static const int kLookup[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
  size_t pos = 0;
  uint32_t value = start.value;
  int n_remain = start.n_remain;
  const size_t n0 = cps->size();
  while (pos < src.size() && n_remain > 0) {  // continue the previous sequence
    const uint8_t b = static_cast<uint8_t>(src[pos]);
    if ((b >> 6) != 2) {
      cps->resize(n0);
      *end = {0, -1};
      return;
    }
    value = (value << 6) + (b & 0x3F);
    ++pos;
    --n_remain;
  }
  if (start.n_remain > 0 && n_remain == 0) cps->push_back(value);
  while (pos < src.size()) {
    const uint8_t first = static_cast<uint8_t>(src[pos]);
    n_remain = kLookup[first >> 4] - 1;
    if (n_remain < 0) {
      cps->resize(n0);
      *end = {0, -1};
      return;
    }
    const uint8_t mask = static_cast<uint8_t>((1 << (7 - n_remain)) - 1);
    value = first & mask;
    ++pos;
    while (pos < src.size() && n_remain > 0) {
      value = (value << 6) + (static_cast<uint8_t>(src[pos]) & 0x3F);
      ++pos;
      --n_remain;
    }
    if (n_remain == 0) cps->push_back(value);
  }
  *end = {value, n_remain};
}

// ---------------------------------------------------------------------------
// TokenPieces

std::shared_ptr<const TokenPieces> TokenPieces::Create(std::vector<std::string> pieces, std::vector<bool> is_eog) {
  auto t = std::shared_ptr<TokenPieces>(new TokenPieces());
  const size_t n = std::min(pieces.size(), is_eog.size());
  pieces.resize(n);
  is_eog.resize(n);
  t->pieces_ = std::move(pieces);
  t->eog_ = std::move(is_eog);
  t->matchable_.resize(n);
  t->partial_.resize(n);
  t->offsets_.reserve(n + 1);
  t->offsets_.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    const std::string& p = t->pieces_[i];
    t->matchable_[i] = !t->eog_[i] && !p.empty() && p.find('\0') == std::string::npos;
    if (t->matchable_[i]) DecodeUtf8(p, PartialUtf8{}, &t->cps_, &t->partial_[i]);
    t->offsets_.push_back(static_cast<uint32_t>(t->cps_.size()));
  }
  return t;
}

std::shared_ptr<const TokenPieces> TokenPieces::FromVocab(const tokenizer::Vocab& vocab) {
  const int32_t n = vocab.n_tokens();
  std::vector<std::string> pieces(static_cast<size_t>(n));
  std::vector<bool> eog(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    pieces[static_cast<size_t>(id)] = vocab.TokenToPiece(id, /*special=*/false);
    eog[static_cast<size_t>(id)] = vocab.IsEog(id);
  }
  return Create(std::move(pieces), std::move(eog));
}

void TokenPieces::CodePoints(int32_t id, const uint32_t** begin, const uint32_t** end) const {
  *begin = cps_.data() + offsets_[static_cast<size_t>(id)];
  *end = cps_.data() + offsets_[static_cast<size_t>(id) + 1];
}

// ---------------------------------------------------------------------------
// Matcher

absl::StatusOr<Matcher> Matcher::Create(std::shared_ptr<const Grammar> grammar, MatcherLimits limits) {
  if (grammar == nullptr) return absl::InvalidArgumentError("grammar: null");
  Matcher m;
  m.grammar_ = std::move(grammar);
  m.limits_ = limits;
  const std::vector<Rule>& rules = m.grammar_->rules();
  const Element* pos = rules[m.grammar_->root_id()].data();
  StackSet seen;
  while (true) {
    Stack stack;
    if (!IsEndOfSequence(pos)) stack.push_back(pos);
    if (!AdvanceStack(rules, std::move(stack), &m.stacks_, &seen, limits.max_stacks)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("grammar: more than ", limits.max_stacks, " parse stacks (too ambiguous)"));
    }
    while (!IsEndOfSequence(pos)) ++pos;
    if (pos->type != ElementType::kAlt) break;
    ++pos;
  }
  return m;
}

absl::Status Matcher::AcceptCodePoint(uint32_t cp) {
  std::vector<Stack> next;
  StackSet seen;
  for (const Stack& stack : stacks_) {
    if (stack.empty()) continue;
    auto [ok, pos] = MatchChar(stack.back(), cp);
    if (!ok) continue;
    Stack ns(stack.begin(), stack.end() - 1);
    if (!IsEndOfSequence(pos)) ns.push_back(pos);
    if (!AdvanceStack(grammar_->rules(), std::move(ns), &next, &seen, limits_.max_stacks)) {
      return absl::ResourceExhaustedError(
          absl::StrCat("grammar: more than ", limits_.max_stacks, " parse stacks (too ambiguous)"));
    }
  }
  if (next.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: code point U+", absl::Hex(cp), " not allowed here"));
  }
  stacks_ = std::move(next);
  return absl::OkStatus();
}

absl::Status Matcher::AcceptBytes(absl::string_view bytes) {
  std::vector<uint32_t> cps;
  PartialUtf8 end;
  DecodeUtf8(bytes, partial_, &cps, &end);
  if (end.n_remain < 0) return absl::InvalidArgumentError(absl::StrCat("grammar: invalid UTF-8 in ", Quoted(bytes)));
  Matcher saved = *this;
  for (uint32_t cp : cps) {
    absl::Status st = AcceptCodePoint(cp);
    if (!st.ok()) {
      *this = std::move(saved);
      if (absl::IsResourceExhausted(st)) return st;
      return absl::InvalidArgumentError(absl::StrCat("grammar: text ", Quoted(bytes), " not allowed here"));
    }
  }
  partial_ = end;
  return absl::OkStatus();
}

absl::Status Matcher::AcceptToken(const TokenPieces& pieces, int32_t id) {
  if (id < 0 || id >= pieces.n_tokens()) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: token ", id, " outside the vocabulary"));
  }
  if (pieces.IsEog(id)) {
    if (CanEnd()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: end-of-generation token ", id, " before the grammar is complete"));
  }
  if (!pieces.Matchable(id)) {
    return absl::InvalidArgumentError(absl::StrCat("grammar: token ", id, " has no text the grammar can match"));
  }
  absl::Status st = AcceptBytes(pieces.Piece(id));
  if (!st.ok() && absl::IsInvalidArgument(st)) {
    return absl::InvalidArgumentError(
        absl::StrCat("grammar: token ", id, " (", Quoted(pieces.Piece(id)), ") not allowed here"));
  }
  return st;
}

bool Matcher::AppendStateKey(std::string* key, size_t max_bytes) const {
  auto put = [key](uint64_t v) { key->append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put((static_cast<uint64_t>(partial_.value) << 8) | static_cast<uint8_t>(partial_.n_remain));
  for (const Stack& s : stacks_) {
    if (key->size() + 8 * (s.size() + 1) > max_bytes) return false;
    put(s.size());
    for (const Element* e : s) put(reinterpret_cast<uintptr_t>(e));
  }
  return true;
}

bool Matcher::CanEnd() const {
  for (const Stack& s : stacks_) {
    if (s.empty()) return true;
  }
  return false;
}

void Matcher::CheckTokens(const TokenPieces& pieces, const int32_t* ids, size_t n, uint8_t* allowed) const {
  const bool allow_eog = CanEnd();
  thread_local RejectScratch scratch;
  thread_local std::vector<Candidate> cands;
  cands.clear();
  std::deque<std::vector<uint32_t>> decoded;  // pieces decoded from a pending partial state
  for (size_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    allowed[i] = 0;
    if (pieces.IsEog(id)) {
      allowed[i] = allow_eog ? 1 : 0;
      continue;
    }
    if (!pieces.Matchable(id)) continue;
    allowed[i] = 1;
    if (partial_.n_remain == 0) {
      const uint32_t *b, *e;
      pieces.CodePoints(id, &b, &e);
      cands.push_back({i, b, e, pieces.EndPartial(id)});
    } else {
      decoded.emplace_back();
      PartialUtf8 end;
      DecodeUtf8(pieces.Piece(id), partial_, &decoded.back(), &end);
      const std::vector<uint32_t>& v = decoded.back();
      cands.push_back({i, v.data(), v.data() + v.size(), end});
    }
  }
  RejectCandidates(grammar_->rules(), stacks_, &cands, limits_.max_stacks, 0, &scratch);
  for (const Candidate& c : cands) allowed[c.index] = 0;
}

bool Matcher::TokenAllowed(const TokenPieces& pieces, int32_t id) const {
  uint8_t ok = 0;
  CheckTokens(pieces, &id, 1, &ok);
  return ok != 0;
}

std::vector<std::pair<uint32_t, uint32_t>> Matcher::NextCodePoints() const {
  std::vector<std::pair<uint32_t, uint32_t>> r;
  for (const Stack& s : stacks_) {
    if (s.empty()) continue;
    const Element* pos = s.back();
    if (pos->type == ElementType::kCharAny) {
      r.push_back({0, 0x10FFFF});
      continue;
    }
    std::vector<std::pair<uint32_t, uint32_t>> set;
    const bool negated = pos->type == ElementType::kCharNot;
    do {
      if (pos[1].type == ElementType::kCharRngUpper) {
        if (pos->value <= pos[1].value) set.push_back({pos->value, pos[1].value});
        pos += 2;
      } else {
        set.push_back({pos->value, pos->value});
        pos += 1;
      }
    } while (pos->type == ElementType::kCharAlt);
    if (!negated) {
      r.insert(r.end(), set.begin(), set.end());
      continue;
    }
    std::sort(set.begin(), set.end());
    uint32_t next = 0;
    for (const auto& [lo, hi] : set) {
      if (lo > next) r.push_back({next, lo - 1});
      next = std::max(next, hi + 1);
    }
    if (next <= 0x10FFFF) r.push_back({next, 0x10FFFF});
  }
  std::sort(r.begin(), r.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& p : r) {
    if (!merged.empty() && p.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, p.second);
    } else {
      merged.push_back(p);
    }
  }
  return merged;
}

size_t Matcher::MinStackDepth() const {
  size_t best = static_cast<size_t>(-1);
  for (const Stack& s : stacks_) best = std::min(best, s.size());
  return best;
}

namespace {

size_t StackElements(const Matcher& m, size_t* n_stacks) {
  *n_stacks = m.n_stacks();
  return m.total_stack_elements();
}

absl::Status TooCostly(const std::string& what, size_t limit, int step) {
  return absl::InvalidArgumentError(absl::StrCat(
      "grammar: too costly to match: more than ", limit, " ", what, " after ", step,
      " characters (an ambiguous grammar: alternatives or repetitions that can match the same text many ways; "
      "factor common prefixes, bound nested repetitions)"));
}

}  // namespace

absl::Status CheckMatchCost(const std::shared_ptr<const Grammar>& grammar, const MatchCostLimits& limits,
                            MatchCost* cost) {
  MatchCost local;
  MatchCost& c = cost != nullptr ? *cost : local;
  c = MatchCost{};
  MatcherLimits ml;
  ml.max_stacks = limits.max_stacks;
  auto created = Matcher::Create(grammar, ml);
  if (!created.ok()) {
    if (absl::IsResourceExhausted(created.status())) return TooCostly("parse stacks", limits.max_stacks, 0);
    return created.status();
  }
  Matcher m = *std::move(created);
  auto measure = [&](const Matcher& x, int step) -> absl::Status {
    size_t stacks = 0;
    const size_t elems = StackElements(x, &stacks);
    c.max_stacks = std::max(c.max_stacks, stacks);
    c.max_stack_elements = std::max(c.max_stack_elements, elems);
    if (elems > limits.max_stack_elements) return TooCostly("parse stack elements", limits.max_stack_elements, step);
    return absl::OkStatus();
  };
  HERD_RETURN_IF_ERROR(measure(m, 0));
  for (int step = 1; step <= limits.probe_steps; ++step) {
    const std::vector<std::pair<uint32_t, uint32_t>> next = m.NextCodePoints();
    if (next.empty()) break;
    // Candidates spread over the allowed ranges: each range's first code point, then
    // its last, up to probe_branch of them.
    std::vector<uint32_t> cands;
    const size_t branch = static_cast<size_t>(std::max(1, limits.probe_branch));
    for (size_t pass = 0; pass < 2 && cands.size() < branch; ++pass) {
      const size_t stride = std::max<size_t>(1, next.size() / branch);
      for (size_t i = 0; i < next.size() && cands.size() < branch; i += stride) {
        const uint32_t cp = pass == 0 ? next[i].first : next[i].second;
        if (pass == 1 && next[i].first == next[i].second) continue;
        cands.push_back(cp);
      }
    }
    std::optional<Matcher> best;
    size_t best_elems = 0;
    for (uint32_t cp : cands) {
      Matcher trial = m;
      absl::Status s = trial.AcceptCodePoint(cp);
      if (absl::IsResourceExhausted(s)) return TooCostly("parse stacks", limits.max_stacks, step);
      if (!s.ok()) continue;
      HERD_RETURN_IF_ERROR(measure(trial, step));
      size_t stacks = 0;
      const size_t elems = StackElements(trial, &stacks);
      if (!best.has_value() || elems > best_elems) {
        best_elems = elems;
        best = std::move(trial);
      }
    }
    if (!best.has_value()) break;
    m = *std::move(best);
    c.steps = step;
  }
  return absl::OkStatus();
}

}  // namespace herd::grammar
