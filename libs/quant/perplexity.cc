#include "libs/quant/perplexity.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/engine/engine.h"

namespace herd::quant {

absl::StatusOr<PerplexityResult> Perplexity(const model::Model& model, const tokenizer::Vocab& vocab, Backend* backend,
                                            const std::string& text, const PerplexityOptions& opt,
                                            const std::function<void(int64_t, double)>& on_chunk) {
  const int64_t n_ctx = opt.n_ctx;
  if (n_ctx < 4) return absl::InvalidArgumentError(absl::StrCat("n_ctx: must be at least 4, got ", n_ctx));
  if (opt.n_batch < 1) return absl::InvalidArgumentError(absl::StrCat("n_batch: must be >= 1, got ", opt.n_batch));
  if (opt.n_ubatch < 1) return absl::InvalidArgumentError(absl::StrCat("n_ubatch: must be >= 1, got ", opt.n_ubatch));
  // llama-perplexity main(): n_seq sequences of n_ctx share one context of n_kv cells.
  const int64_t n_seq = std::max<int64_t>(1, opt.n_batch / n_ctx);
  const int64_t n_kv = n_seq * n_ctx;
  const int64_t n_batch = std::min(opt.n_batch, n_kv);
  if (!(n_batch < n_ctx || n_batch % n_ctx == 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("n_batch: ", opt.n_batch, " must be smaller than n_ctx (", n_ctx, ") or a multiple of it"));
  }

  const std::vector<int32_t> tokens = vocab.Tokenize(text, /*add_special=*/true, /*parse_special=*/false);
  if (static_cast<int64_t>(tokens.size()) < 2 * n_ctx) {
    return absl::InvalidArgumentError(absl::StrCat("you need at least ", 2 * n_ctx,
                                                   " tokens to evaluate perplexity with a context of ", n_ctx,
                                                   "; the text has ", tokens.size(), " tokens"));
  }
  const int64_t n_chunk_max = static_cast<int64_t>(tokens.size()) / n_ctx;
  const int64_t n_chunk = opt.n_chunks < 0 ? n_chunk_max : std::min(opt.n_chunks, n_chunk_max);
  const int64_t num_batches = (n_ctx + n_batch - 1) / n_batch;
  const int64_t first = n_ctx / 2;
  const bool add_bos = vocab.add_bos();

  engine::EngineParams ep;
  ep.n_ctx = n_kv;
  ep.n_batch = std::min(opt.n_ubatch, n_batch);
  ep.kv_type = opt.kv_type;
  HERD_ASSIGN_OR_RETURN(auto eng, engine::Engine::Create(model, ep, backend));
  const int64_t n_vocab = eng->n_vocab();

  PerplexityResult res;
  res.n_tokens = static_cast<int64_t>(tokens.size());
  res.n_ctx = n_ctx;
  res.n_batch = n_batch;
  res.n_seq = n_seq;
  res.n_chunks = n_chunk;
  double nll = 0.0, nll2 = 0.0;
  int64_t count = 0;

  // Logits of the scored positions of each sequence, gathered over the batches.
  std::vector<std::vector<float>> seq_logits(static_cast<size_t>(n_seq));
  engine::Batch batch;
  for (int64_t i = 0; i < n_chunk; i += n_seq) {
    const int64_t start = i * n_ctx;
    const int64_t n_seq_batch = std::min(n_seq, n_chunk - i);
    eng->kv().Clear();
    for (auto& l : seq_logits) l.clear();
    for (int64_t j = 0; j < num_batches; ++j) {
      const int64_t batch_start = start + j * n_batch;
      const int64_t batch_size = std::min(start + n_ctx - batch_start, n_batch);
      batch.Clear();
      for (int64_t seq = 0; seq < n_seq_batch; ++seq) {
        const int64_t seq_start = batch_start + seq * n_ctx;
        for (int64_t k = 0; k < batch_size; ++k) {
          int32_t tok = tokens[static_cast<size_t>(seq_start + k)];
          if (add_bos && j == 0 && k == 0) tok = vocab.bos();  // BOS for the first batch of each chunk
          const int64_t pos = j * n_batch + k;
          batch.Add(tok, static_cast<int32_t>(pos), static_cast<int32_t>(seq), pos >= first);
        }
      }
      HERD_RETURN_IF_ERROR(eng->Decode(batch));
      // Outputs come in batch order: sequence by sequence.
      int64_t out = 0;
      for (int64_t seq = 0; seq < n_seq_batch; ++seq) {
        for (int64_t k = 0; k < batch_size; ++k) {
          if (j * n_batch + k < first) continue;
          const float* l = eng->Logits(out++);
          if (l == nullptr) return absl::InternalError("perplexity: missing logits");
          seq_logits[static_cast<size_t>(seq)].insert(seq_logits[static_cast<size_t>(seq)].end(), l, l + n_vocab);
        }
      }
    }
    for (int64_t seq = 0; seq < n_seq_batch; ++seq) {
      const std::vector<float>& all = seq_logits[static_cast<size_t>(seq)];
      const int32_t* tok = tokens.data() + start + seq * n_ctx + first;
      for (int64_t t = 0; t < n_ctx - 1 - first; ++t) {
        const float* logits = all.data() + t * n_vocab;
        float max_logit = logits[0];
        for (int64_t v = 1; v < n_vocab; ++v) max_logit = std::max(max_logit, logits[v]);
        double sum_exp = 0.0;
        for (int64_t v = 0; v < n_vocab; ++v) sum_exp += std::exp(logits[v] - max_logit);  // expf
        const int32_t target = tok[t + 1];
        const double log_softmax = logits[target] - max_logit - std::log(sum_exp);
        const double v = -log_softmax;
        nll += v;
        nll2 += v * v;
      }
      count += n_ctx - first - 1;
      res.running_ppl.push_back(std::exp(nll / static_cast<double>(count)));
      if (on_chunk) on_chunk(i + seq, res.running_ppl.back());
    }
  }
  res.count = count;
  nll2 /= static_cast<double>(count);
  nll /= static_cast<double>(count);
  res.ppl = std::exp(nll);
  nll2 -= nll * nll;
  res.ppl_err = nll2 > 0 ? std::sqrt(nll2 / static_cast<double>(count - 1)) * res.ppl : 0.0;
  return res;
}

}  // namespace herd::quant
