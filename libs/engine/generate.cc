#include "libs/engine/generate.h"

#include <chrono>

#include "absl/strings/str_cat.h"

namespace herd::engine {

const char* StopReasonName(StopReason r) {
  switch (r) {
    case StopReason::kEog:
      return "eos";
    case StopReason::kLength:
      return "length";
    case StopReason::kContextFull:
      return "context_full";
  }
  return "?";
}

absl::StatusOr<GenerateResult> Generate(Engine& engine, const tokenizer::Vocab& vocab, const GenerateParams& params,
                                        const std::function<void(const std::string&)>& on_text) {
  absl::Status vs = ValidateSamplingParams(params.sampling);
  if (!vs.ok()) return vs;
  GenerateResult res;
  res.prompt_ids = params.prompt_ids.empty() ? vocab.Tokenize(params.prompt, params.add_special, params.parse_special)
                                             : params.prompt_ids;
  if (res.prompt_ids.empty()) {
    return absl::InvalidArgumentError("prompt: empty after tokenization and the vocabulary adds no BOS");
  }
  const int64_t n_prompt = static_cast<int64_t>(res.prompt_ids.size());
  // llama.cpp's server: the context holds prompt and completion, so a prompt must
  // leave room for at least one generated token.
  if (n_prompt >= engine.n_ctx()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt: ", n_prompt, " tokens do not fit in n_ctx ", engine.n_ctx(),
                                                   " (prompt + completion must fit; at most n_ctx - 1 prompt tokens)"));
  }
  engine.kv().Clear();
  auto sampler_or = Sampler::Create(params.sampling, static_cast<int32_t>(engine.n_vocab()),
                                    params.sampling.grammar.empty() ? nullptr : grammar::TokenPieces::FromVocab(vocab));
  if (!sampler_or.ok()) return sampler_or.status();
  Sampler& sampler = **sampler_or;
  for (int32_t id : res.prompt_ids) (void)sampler.Accept(id, /*accept_grammar=*/false);

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  Batch batch;
  for (int64_t i = 0; i < n_prompt; ++i) {
    batch.Add(res.prompt_ids[static_cast<size_t>(i)], static_cast<int32_t>(i), 0,
              params.all_prompt_logits || i == n_prompt - 1);
  }
  absl::Status s = engine.Decode(batch);
  if (!s.ok()) return s;
  auto t1 = Clock::now();
  res.pp_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  res.pp_tokens = n_prompt;
  const int64_t nv = engine.n_vocab();
  for (int64_t j = 0; j < engine.n_outputs(); ++j) {
    res.logits.emplace_back(engine.Logits(j), engine.Logits(j) + nv);
  }
  std::vector<float> last = res.logits.back();

  tokenizer::StreamingDetokenizer detok(vocab, /*special=*/false);
  int32_t pos = static_cast<int32_t>(n_prompt);
  const int32_t n_predict = params.n_predict < 0 ? INT32_MAX : params.n_predict;
  auto tg0 = Clock::now();
  res.stop = StopReason::kLength;
  for (int32_t i = 0; i < n_predict; ++i) {
    const int32_t id = sampler.Sample(last.data());
    if (id < 0) return absl::FailedPreconditionError("grammar: no token of the vocabulary can continue the grammar");
    absl::Status as = sampler.Accept(id);
    if (!as.ok()) return as;
    if (!params.ignore_eos && vocab.IsEog(id)) {
      res.stop = StopReason::kEog;
      break;
    }
    res.output_ids.push_back(id);
    std::string piece = detok.Push(id);
    res.text += piece;
    if (on_text && !piece.empty()) on_text(piece);
    if (i + 1 == n_predict) break;    // the last token is never evaluated
    if (pos + 1 >= engine.n_ctx()) {  // prompt + completion == n_ctx: the context is full
      res.stop = StopReason::kContextFull;
      break;
    }
    batch.Clear();
    batch.Add(id, pos++, 0, true);
    s = engine.Decode(batch);
    if (!s.ok()) return s;
    last.assign(engine.Logits(0), engine.Logits(0) + nv);
    res.logits.push_back(last);
    ++res.tg_tokens;
  }
  std::string tail = detok.Flush();
  res.text += tail;
  if (on_text && !tail.empty()) on_text(tail);
  res.tg_ms = std::chrono::duration<double, std::milli>(Clock::now() - tg0).count();
  return res;
}

}  // namespace herd::engine
