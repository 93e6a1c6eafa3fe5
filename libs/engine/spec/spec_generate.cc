#include "libs/engine/spec/spec_generate.h"

#include <chrono>
#include <climits>
#include <random>

#include "absl/strings/str_cat.h"
#include "libs/engine/spec/rejection.h"

namespace herd::engine::spec {

absl::StatusOr<SpecGenerateResult> GenerateSpeculative(Engine& engine, const tokenizer::Vocab& vocab,
                                                       const GenerateParams& params, SpecSession* session,
                                                       const std::function<void(const std::string&)>& on_text) {
  if (absl::Status vs = ValidateSamplingParams(params.sampling); !vs.ok()) return vs;
  if (!params.sampling.grammar.empty()) {
    return absl::UnimplementedError("grammar: not supported by the single-process speculative loop (use the services)");
  }
  SpecGenerateResult out;
  GenerateResult& res = out.gen;
  res.prompt_ids = params.prompt_ids.empty()
                       ? vocab.Tokenize(params.prompt, params.add_special, params.parse_special)
                       : params.prompt_ids;
  if (res.prompt_ids.empty()) {
    return absl::InvalidArgumentError("prompt: empty after tokenization and the vocabulary adds no BOS");
  }
  const int64_t n_prompt = static_cast<int64_t>(res.prompt_ids.size());
  if (n_prompt >= engine.n_ctx()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: ", n_prompt, " tokens do not fit in n_ctx ", engine.n_ctx(),
                                                   " (prompt + completion must fit; at most n_ctx - 1 prompt tokens)"));
  }
  engine.kv().Clear();
  Sampler sampler(params.sampling, static_cast<int32_t>(engine.n_vocab()));
  for (int32_t id : res.prompt_ids) (void)sampler.Accept(id, /*accept_grammar=*/false);
  std::mt19937 rng(sampler.seed() ^ 0x5bd1e995u);  // for rejection steps of sampled drafts
  const bool greedy = params.sampling.temp <= 0.0f;

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  Batch batch;
  for (int64_t i = 0; i < n_prompt; ++i) {
    batch.Add(res.prompt_ids[static_cast<size_t>(i)], static_cast<int32_t>(i), 0, i == n_prompt - 1);
  }
  if (absl::Status s = engine.Decode(batch); !s.ok()) return s;
  res.pp_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  res.pp_tokens = n_prompt;
  session->Append(res.prompt_ids);

  tokenizer::StreamingDetokenizer detok(vocab, /*special=*/false);
  const int64_t n_predict = params.n_predict < 0 ? INT64_MAX : params.n_predict;
  const int64_t n_vocab = engine.n_vocab();
  auto tg0 = Clock::now();
  res.stop = StopReason::kLength;
  bool done = false;
  // Emits a sampled token; false when generation ends (EOG or n_predict).
  auto emit = [&](int32_t id) {
    (void)sampler.Accept(id);
    if (!params.ignore_eos && vocab.IsEog(id)) {
      res.stop = StopReason::kEog;
      return false;
    }
    res.output_ids.push_back(id);
    std::string piece = detok.Push(id);
    res.text += piece;
    if (on_text && !piece.empty()) on_text(piece);
    return static_cast<int64_t>(res.output_ids.size()) < n_predict;
  };

  if (n_predict > 0) {
    int32_t id = sampler.Sample(engine.Logits(0));
    done = !emit(id);
    int64_t n_past = n_prompt;  // KV positions filled; `id` goes to position n_past
    while (!done) {
      if (n_past + 1 >= engine.n_ctx()) {  // prompt + completion == n_ctx
        res.stop = StopReason::kContextFull;
        break;
      }
      session->Append({id});
      // Room for the draft: output left (the pass yields accepted + 1 tokens) and context
      // (after the pass, n_past + 1 + accepted cells plus the new pending token <= n_ctx).
      const int64_t room = std::min<int64_t>(n_predict - static_cast<int64_t>(res.output_ids.size()) - 1,
                                             engine.n_ctx() - n_past - 2);
      DraftResult d;
      if (room > 0) {
        auto td = Clock::now();
        d = session->Draft(static_cast<int32_t>(std::min<int64_t>(room, INT32_MAX)), greedy ? 0.0f : params.sampling.temp);
        out.draft_ms += std::chrono::duration<double, std::milli>(Clock::now() - td).count();
      }
      batch.Clear();
      batch.Add(id, static_cast<int32_t>(n_past), 0, true);
      for (size_t k = 0; k < d.tokens.size(); ++k) {
        const int32_t t = d.tokens[k];
        if (t < 0 || t >= n_vocab) {  // never expected from a checked drafter: drop the rest
          d.tokens.resize(k);
          break;
        }
        batch.Add(t, static_cast<int32_t>(n_past + 1 + static_cast<int64_t>(k)), 0, true);
      }
      if (d.probs.size() != d.tokens.size()) d.probs.clear();
      if (absl::Status s = engine.Decode(batch); !s.ok()) return s;
      ++out.target_passes;
      res.tg_tokens += static_cast<int64_t>(batch.size());

      int32_t n_acc = 0;
      int32_t next = -1;
      for (size_t i = 0; i <= d.tokens.size(); ++i) {
        const float* logits = engine.Logits(static_cast<int64_t>(i));
        int32_t y;
        if (i < d.tokens.size() && !d.probs.empty()) {
          auto step = RejectionStep(DistFromCandidates(sampler.Candidates(logits)), d.tokens[i], d.probs[i], rng);
          if (!step.ok()) return step.status();
          y = step->token;
        } else {
          y = sampler.Sample(logits);
        }
        next = y;
        if (!emit(y)) {
          done = true;
          break;
        }
        if (i < d.tokens.size() && y == d.tokens[i]) {
          ++n_acc;
          continue;
        }
        break;
      }
      session->Accept(n_acc);
      // Keep `id` and the accepted draft tokens; drop the rejected cells.
      engine.kv().SeqRemove(0, static_cast<int32_t>(n_past + 1 + n_acc), -1);
      n_past += 1 + n_acc;
      session->Append(std::vector<int32_t>(d.tokens.begin(), d.tokens.begin() + n_acc));
      id = next;
    }
  }
  std::string tail = detok.Flush();
  res.text += tail;
  if (on_text && !tail.empty()) on_text(tail);
  res.tg_ms = std::chrono::duration<double, std::milli>(Clock::now() - tg0).count();
  out.stats = session->stats();
  return out;
}

}  // namespace herd::engine::spec
