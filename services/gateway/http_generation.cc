#include "services/gateway/http_generation.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/toolcall/tool_calls.h"
#include "services/gateway/constraints.h"
#include "services/gateway/http_util.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway::http {
namespace {

constexpr int kMaxChoices = 16;

absl::Status ParseSpeculative(const json& spec, v1::SpeculativeConfig* c) {
  if (!spec.is_object()) return Bad("speculative: must be an object");
  struct IntField {
    const char* key;
    void (v1::SpeculativeConfig::*set)(int32_t);
  };
  static const IntField kInts[] = {{"draft_max", &v1::SpeculativeConfig::set_draft_max},
                                   {"draft_min", &v1::SpeculativeConfig::set_draft_min},
                                   {"ngram_size_n", &v1::SpeculativeConfig::set_ngram_size_n},
                                   {"ngram_size_m", &v1::SpeculativeConfig::set_ngram_size_m},
                                   {"ngram_check_rate", &v1::SpeculativeConfig::set_ngram_check_rate},
                                   {"ngram_min_hits", &v1::SpeculativeConfig::set_ngram_min_hits}};
  bool has = false;
  int64_t iv = 0;
  double dv = 0;
  absl::Status s;
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    const std::string& key = it.key();
    if (key == "type") {
      if (it->is_null()) continue;
      if (!it->is_string()) return Bad("speculative.type: must be a string");
      c->set_type(it->get<std::string>());
    } else if (key == "draft_p_min") {
      if (!(s = GetNumber(spec, "draft_p_min", &dv, &has)).ok()) return Bad(absl::StrCat("speculative.", s.message()));
      if (has) c->set_draft_p_min(static_cast<float>(dv));
    } else {
      const IntField* f = nullptr;
      for (const IntField& i : kInts) {
        if (key == i.key) f = &i;
      }
      if (f == nullptr) {
        return Bad(absl::StrCat("speculative.", key,
                                ": unknown field (type, draft_max, draft_min, draft_p_min, ngram_size_n, "
                                "ngram_size_m, ngram_check_rate, ngram_min_hits)"));
      }
      if (!(s = GetInt(spec, f->key, &iv, &has)).ok()) return Bad(absl::StrCat("speculative.", s.message()));
      if (has) (c->*(f->set))(ClampI32(iv));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseSampling(const json& body, v1::SamplingParams* sp) {
  bool has = false;
  int64_t iv = 0;
  double dv = 0;
  struct FloatField {
    const char* key;
    void (v1::SamplingParams::*set)(float);
  };
  for (const FloatField& f :
       {FloatField{"temperature", &v1::SamplingParams::set_temperature},
        FloatField{"top_p", &v1::SamplingParams::set_top_p}, FloatField{"min_p", &v1::SamplingParams::set_min_p},
        FloatField{"repeat_penalty", &v1::SamplingParams::set_repeat_penalty},
        FloatField{"presence_penalty", &v1::SamplingParams::set_presence_penalty},
        FloatField{"frequency_penalty", &v1::SamplingParams::set_frequency_penalty}}) {
    HERD_RETURN_IF_ERROR(GetNumber(body, f.key, &dv, &has));
    if (has) (sp->*f.set)(static_cast<float>(dv));
  }
  HERD_RETURN_IF_ERROR(GetInt(body, "top_k", &iv, &has));
  if (has) sp->set_top_k(ClampI32(iv));
  HERD_RETURN_IF_ERROR(GetInt(body, "repeat_last_n", &iv, &has));
  if (has) sp->set_repeat_last_n(ClampI32(iv));
  HERD_RETURN_IF_ERROR(GetInt(body, "seed", &iv, &has));
  if (has && iv != -1) {
    if (iv < 0 || iv > 0xFFFFFFFFll) return Bad(absl::StrCat("seed: must be -1 or in 0..4294967295 (got ", iv, ")"));
    sp->set_seed(static_cast<uint32_t>(iv));
  }
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, v1::GenerateRequest* r) {
  auto stop = body.find("stop");
  if (stop == body.end() || stop->is_null()) return absl::OkStatus();
  if (stop->is_string()) {
    r->add_stop(stop->get<std::string>());
  } else if (stop->is_array()) {
    for (size_t i = 0; i < stop->size(); ++i) {
      if (!(*stop)[i].is_string()) return Bad(absl::StrCat("stop[", i, "]: must be a string"));
      r->add_stop((*stop)[i].get<std::string>());
    }
  } else {
    return Bad("stop: must be a string or an array of strings");
  }
  return absl::OkStatus();
}

// Text of a token as the logprobs objects show it (valid UTF-8) and its raw bytes.
struct TokenText {
  std::string text;
  json bytes = json::array();
};
TokenText PieceOf(const tokenizer::Vocab* vocab, int32_t id) {
  TokenText t;
  const std::string raw = vocab != nullptr ? vocab->TokenToPiece(id, false) : "";
  t.text = SanitizeUtf8(raw);
  for (unsigned char c : raw) t.bytes.push_back(static_cast<int>(c));
  return t;
}

// Logprobs of one choice: OpenAI completions' {tokens, token_logprobs, top_logprobs,
// text_offset} or chat's {content: [{token, logprob, bytes, top_logprobs}]}.
class LogprobsAcc {
 public:
  LogprobsAcc(ApiKind kind, const tokenizer::Vocab* vocab, int top_n) : kind_(kind), vocab_(vocab), top_n_(top_n) {
    Reset();
  }
  void Reset() {
    if (kind_ == ApiKind::kChat) {
      content_ = json::array();
    } else {
      tokens_ = json::array(), token_logprobs_ = json::array(), top_logprobs_ = json::array(),
      text_offset_ = json::array();
    }
  }
  bool empty() const { return kind_ == ApiKind::kChat ? content_.empty() : tokens_.empty(); }
  void Add(const v1::GenerateResponse& msg) {
    for (const v1::TokenLogprobs& lp : msg.logprobs()) {
      const TokenText t = PieceOf(vocab_, lp.token_id());
      if (kind_ == ApiKind::kChat) {
        json top = json::array();
        for (const v1::TokenLogprob& a : lp.top()) {
          if (static_cast<int>(top.size()) >= top_n_) break;
          const TokenText at = PieceOf(vocab_, a.token_id());
          top.push_back(json{{"token", at.text}, {"logprob", a.logprob()}, {"bytes", at.bytes}});
        }
        content_.push_back(
            json{{"token", t.text}, {"logprob", lp.logprob()}, {"bytes", t.bytes}, {"top_logprobs", top}});
      } else {
        tokens_.push_back(t.text);
        token_logprobs_.push_back(lp.logprob());
        json top = json::object();
        for (const v1::TokenLogprob& a : lp.top()) {
          if (static_cast<int>(top.size()) >= top_n_) break;
          top[a.text()] = a.logprob();
        }
        top_logprobs_.push_back(std::move(top));
        text_offset_.push_back(offset_);
        offset_ += t.text.size();
      }
    }
  }
  json ToJson() const {
    if (kind_ == ApiKind::kChat) return json{{"content", content_}};
    return json{{"tokens", tokens_},
                {"token_logprobs", token_logprobs_},
                {"top_logprobs", top_logprobs_},
                {"text_offset", text_offset_}};
  }

 private:
  ApiKind kind_;
  const tokenizer::Vocab* vocab_;
  int top_n_;
  json content_, tokens_, token_logprobs_, top_logprobs_, text_offset_;
  size_t offset_ = 0;
};

// What every chunk and response of one request shares.
struct ResponseMeta {
  ApiKind kind;
  std::string id;
  std::string model;
  int64_t created = 0;
  bool want_logprobs = false;
  int top_logprobs = 0;
  std::shared_ptr<const tokenizer::Vocab> vocab;
  /// Chat: how the output splits into reasoning, content and tool calls (the same for
  /// every choice); format kNone without reasoning = the text as it is.
  toolcall::ParserConfig parse;
  bool parsed() const { return kind == ApiKind::kChat && OutputSplitter::Parses(parse); }

  json Envelope(bool chunk) const {
    const char* object =
        kind == ApiKind::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", model}};
  }
};

json FinishJson(v1::FinishReason r) {
  const char* f = FinishString(r);
  return f != nullptr ? json(f) : json(nullptr);
}

// OpenAI's finish_reason "tool_calls": the model stopped after making calls.
json FinishJson(v1::FinishReason r, bool made_calls) {
  if (made_calls && (r == v1::FINISH_REASON_EOS || r == v1::FINISH_REASON_STOP)) return json("tool_calls");
  return FinishJson(r);
}

// One call in OpenAI's shape; `index` only in stream deltas (>= 0).
json ToolCallJson(const toolcall::ToolCall& c, int index) {
  json j = json::object();
  if (index >= 0) j["index"] = index;
  j["id"] = absl::StrCat("call_", c.id);
  j["type"] = "function";
  j["function"] = json{{"name", c.name}, {"arguments", c.arguments}};
  return j;
}

class SseChoiceSink : public GenerateSink {
 public:
  SseChoiceSink(StreamWriter* w, const ResponseMeta* meta, int index)
      : w_(w),
        meta_(meta),
        index_(index),
        lp_(meta->kind, meta->vocab.get(), meta->top_logprobs),
        split_(meta->parse, meta->parsed()) {}
  bool Write(const v1::GenerateResponse& msg) override {
    const bool finish = msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
    if (msg.has_usage()) usage_ = msg.usage();
    lp_.Reset();
    if (meta_->want_logprobs) lp_.Add(msg);
    const bool first_chat = meta_->kind == ApiKind::kChat && !sent_role_;
    const toolcall::StreamParser::Delta d = split_.Next(msg);
    if (d.empty() && !finish && lp_.empty() && !first_chat) return !w_->gone();
    const bool made_calls = split_.made_calls();
    json choice = {{"index", index_},
                   {"logprobs", meta_->want_logprobs && !lp_.empty() ? lp_.ToJson() : json(nullptr)},
                   {"finish_reason", FinishJson(msg.finish_reason(), made_calls)}};
    if (meta_->kind == ApiKind::kChat) {
      json delta = json::object();
      if (first_chat) delta["role"] = "assistant";
      if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
      if (!d.content.empty() || (first_chat && d.reasoning.empty() && d.calls.empty())) delta["content"] = d.content;
      if (!d.calls.empty()) {
        json calls = json::array();
        for (const auto& [i, c] : d.calls) calls.push_back(ToolCallJson(c, i));
        delta["tool_calls"] = std::move(calls);
      }
      choice["delta"] = std::move(delta);
      sent_role_ = true;
    } else {
      choice["text"] = d.content;
    }
    json chunk = meta_->Envelope(/*chunk=*/true);
    chunk["choices"] = json::array({choice});
    if (finish && msg.has_usage()) {
      if (meta_->kind == ApiKind::kCompletions) chunk["usage"] = UsageJson(msg.usage());
      chunk["timings"] = TimingsJson(msg.usage());
    }
    if (msg.speculative_size() > 0) chunk["speculative"] = SpeculativeJson(msg.speculative());
    return w_->Send(Dump(chunk));
  }
  bool Cancelled() override { return w_->gone(); }
  const v1::Usage& usage() const { return usage_; }

 private:
  StreamWriter* w_;
  const ResponseMeta* meta_;
  int index_;
  LogprobsAcc lp_;
  bool sent_role_ = false;
  v1::Usage usage_;
  OutputSplitter split_;
};

// Collects one whole choice for the non-streaming response.
class CollectSink : public GenerateSink {
 public:
  CollectSink(const ResponseMeta* meta, int index, std::function<bool()> client_gone)
      : meta_(meta),
        index_(index),
        client_gone_(std::move(client_gone)),
        lp_(meta->kind, meta->vocab.get(), meta->top_logprobs) {}
  // The client hung up before its (non-streamed) response: cancel the generation.
  bool Cancelled() override { return client_gone_ && client_gone_(); }
  bool Write(const v1::GenerateResponse& msg) override {
    if (meta_->want_logprobs) lp_.Add(msg);
    text_ += msg.text();
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish_ = msg.finish_reason();
    if (msg.has_usage()) usage_ = msg.usage();
    if (msg.speculative_size() > 0) speculative_ = SpeculativeJson(msg.speculative());
    return true;
  }
  json Choice() const {
    json choice = {{"index", index_},
                   {"logprobs", meta_->want_logprobs ? lp_.ToJson() : json(nullptr)},
                   {"finish_reason", FinishJson(finish_)}};
    if (meta_->kind == ApiKind::kChat && meta_->parsed()) {
      // The same parser as a stream, fed the whole text: streamed == whole.
      toolcall::StreamParser parser(meta_->parse);
      parser.Feed(text_);
      parser.Finish();
      const toolcall::Message& m = parser.message();
      json message = {{"role", "assistant"}};
      message["content"] = m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(m.content);
      if (!m.reasoning.empty()) message["reasoning_content"] = m.reasoning;
      if (!m.tool_calls.empty()) {
        json calls = json::array();
        for (const toolcall::ToolCall& c : m.tool_calls) calls.push_back(ToolCallJson(c, -1));
        message["tool_calls"] = std::move(calls);
      }
      choice["message"] = std::move(message);
      choice["finish_reason"] = FinishJson(finish_, !m.tool_calls.empty());
    } else if (meta_->kind == ApiKind::kChat) {
      choice["message"] = json{{"role", "assistant"}, {"content", text_}};
    } else {
      choice["text"] = text_;
    }
    return choice;
  }
  const v1::Usage& usage() const { return usage_; }
  const json& speculative() const { return speculative_; }

 private:
  const ResponseMeta* meta_;
  int index_;
  std::function<bool()> client_gone_;
  LogprobsAcc lp_;
  std::string text_;
  v1::FinishReason finish_ = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage_;
  json speculative_;  // null unless the last message carried statistics
};

// Usage of all choices: the prompt once, completions summed (OpenAI's convention);
// timings add up the work.
v1::Usage SumUsage(const std::vector<const v1::Usage*>& us) {
  v1::Usage sum;
  for (const v1::Usage* u : us) {
    sum.set_prompt_tokens(std::max(sum.prompt_tokens(), u->prompt_tokens()));
    sum.set_completion_tokens(sum.completion_tokens() + u->completion_tokens());
    sum.set_prompt_ms(sum.prompt_ms() + u->prompt_ms());
    sum.set_generation_ms(sum.generation_ms() + u->generation_ms());
    sum.set_queue_ms(std::max(sum.queue_ms(), u->queue_ms()));
    sum.set_total_ms(std::max(sum.total_ms(), u->total_ms()));
  }
  return sum;
}

}  // namespace

void Answer(serving::http::Responder& r, const std::function<void(HttpResponse&)>& fill) {
  HttpResponse res;
  fill(res);
  r.Send(std::move(res));
}

void ChoiceJoin::Done(int i, const absl::Status& s) {
  absl::Status first;
  {
    std::lock_guard<std::mutex> l(mu_);
    st_[static_cast<size_t>(i)] = s;
    if (--left_ > 0) return;
    for (const absl::Status& x : st_) {
      if (!x.ok()) {
        first = x;
        break;
      }
    }
  }
  fn_(first);
}

bool StreamWriter::Write(const std::string& event, const std::string& payload) {
  std::lock_guard<std::mutex> l(mu_);
  if (gone_) return false;
  const std::string ev = event.empty() ? absl::StrCat("data: ", payload, "\n\n")
                                       : absl::StrCat("event: ", event, "\ndata: ", payload, "\n\n");
  if (!ds_->Write(ev)) gone_ = true;
  return !gone_;
}

OutputSplitter::OutputSplitter(const toolcall::ParserConfig& config, bool parse) {
  if (parse) parser_ = std::make_unique<toolcall::StreamParser>(config);
}

toolcall::StreamParser::Delta OutputSplitter::Next(const v1::GenerateResponse& msg) {
  toolcall::StreamParser::Delta d;
  if (parser_ == nullptr) {
    d.content = msg.text();
    return d;
  }
  d = parser_->Feed(msg.text());
  if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
    toolcall::StreamParser::Delta rest = parser_->Finish();
    d.reasoning += rest.reasoning;
    d.content += rest.content;
    for (auto& c : rest.calls) d.calls.push_back(std::move(c));
  }
  return d;
}

const std::vector<const char*>& CommonFields() {
  static const std::vector<const char*> kFields = {"model",
                                                   "max_tokens",
                                                   "n_predict",
                                                   "temperature",
                                                   "top_p",
                                                   "top_k",
                                                   "min_p",
                                                   "repeat_penalty",
                                                   "repeat_last_n",
                                                   "presence_penalty",
                                                   "frequency_penalty",
                                                   "seed",
                                                   "stop",
                                                   "stream",
                                                   "stream_options",
                                                   "ignore_eos",
                                                   "n",
                                                   "speculative",
                                                   "grammar",
                                                   "json_schema",
                                                   "response_format",
                                                   "logit_bias"};
  return kFields;
}

absl::Status ParseCommonFields(const json& body, ApiKind kind, HttpGeneration* out) {
  v1::GenerateRequest& r = out->req;
  std::string model;
  bool has = false;
  absl::Status s = GetString(body, "model", &model, &has);
  if (!s.ok()) return s;
  if (!has) return Bad("model: required");
  r.set_model(model);

  int64_t iv = 0;
  // -1 (or absent) = until the context is full, as llama.cpp's n_predict.
  std::vector<const char*> max_keys = {"max_tokens", "n_predict"};
  if (kind == ApiKind::kChat) max_keys.push_back("max_completion_tokens");
  for (const char* key : max_keys) {
    if (!(s = GetInt(body, key, &iv, &has)).ok()) return s;
    if (has && (iv == 0 || iv < -1)) return Bad(absl::StrCat(key, ": must be -1 or at least 1 (got ", iv, ")"));
    if (has) out->max_tokens_key = key;
    if (has && iv != -1) r.set_n_predict(ClampI32(iv));
  }
  if (!(s = ParseSampling(body, r.mutable_sampling())).ok()) return s;
  if (!(s = ParseStop(body, &r)).ok()) return s;
  bool bv = false;
  if (!(s = GetBool(body, "stream", &bv, &has)).ok()) return s;
  if (has) out->stream = bv;
  auto so = body.find("stream_options");
  if (so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Bad("stream_options: must be an object");
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() != "include_usage") return Bad(absl::StrCat("stream_options.", it.key(), ": unknown field"));
    }
    if (!(s = GetBool(*so, "include_usage", &bv, &has)).ok()) return Bad(absl::StrCat("stream_options.", s.message()));
    if (has) out->include_usage = bv;
  }
  if (!(s = GetBool(body, "ignore_eos", &bv, &has)).ok()) return s;
  if (has) r.set_ignore_eos(bv);
  if (!(s = GetInt(body, "n", &iv, &has)).ok()) return s;
  if (has) {
    if (iv < 1 || iv > kMaxChoices) return Bad(absl::StrCat("n: must be in 1..", kMaxChoices, " (got ", iv, ")"));
    out->n = static_cast<int>(iv);
  }
  auto spec = body.find("speculative");
  if (spec != body.end() && !spec->is_null()) {
    if (!(s = ParseSpeculative(*spec, r.mutable_speculative())).ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ApplyConstraints(Gateway* gw, const json& body, HttpGeneration* gen) {
  if (!HasConstraints(body)) return absl::OkStatus();  // no vocabulary fetch for plain requests
  HERD_ASSIGN_OR_RETURN(auto vocab, gw->vocabs().Get(gen->req.model(), absl::Now() + absl::Seconds(10)));
  return ParseConstraints(body, *vocab, gen->req.mutable_sampling());
}

void ServeGeneration(Gateway* gw, HttpGeneration gen, ApiKind kind, const std::string& method,
                     std::shared_ptr<serving::http::Responder> out) {
  // Prepare every choice first: validation errors are answered before any output.
  std::vector<std::shared_ptr<Gateway::Generation>> choices;
  for (int i = 0; i < gen.n; ++i) {
    v1::GenerateRequest req = gen.req;
    if (i > 0 && req.sampling().has_seed())
      req.mutable_sampling()->set_seed(req.sampling().seed() + static_cast<uint32_t>(i));
    auto g = gw->Prepare(req, absl::InfiniteFuture(), method);
    if (!g.ok()) {
      Answer(*out, [&](HttpResponse& res) { SendError(res, ToClientFields(g.status(), gen.max_tokens_key)); });
      return;
    }
    choices.emplace_back(std::move(*g));
  }
  auto meta = std::make_shared<ResponseMeta>();
  static std::atomic<uint64_t> next{1};
  meta->kind = kind;
  meta->id = absl::StrCat(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-", absl::ToUnixMicros(absl::Now()), "-",
                          next.fetch_add(1));
  meta->model = gen.req.model();
  meta->created = absl::ToUnixSeconds(absl::Now());
  meta->want_logprobs = gen.req.has_logprobs() && gen.req.logprobs() > 0;
  meta->top_logprobs = gen.top_logprobs;
  meta->vocab = choices[0]->vocab;
  meta->parse = choices[0]->parse;
  const std::string max_tokens_key = gen.max_tokens_key;

  if (!gen.stream) {
    std::vector<std::shared_ptr<CollectSink>> sinks;
    for (int i = 0; i < gen.n; ++i) {
      sinks.push_back(std::make_shared<CollectSink>(meta.get(), i, [out] { return out->ClientGone(); }));
    }
    auto join = std::make_shared<ChoiceJoin>(gen.n, [out, meta, sinks, max_tokens_key](const absl::Status& st) {
      Answer(*out, [&](HttpResponse& res) {
        if (!st.ok()) {
          SendError(res, ToClientFields(st, max_tokens_key));
          return;
        }
        json body = meta->Envelope(/*chunk=*/false);
        body["choices"] = json::array();
        std::vector<const v1::Usage*> usages;
        for (const auto& s : sinks) {
          body["choices"].push_back(s->Choice());
          usages.push_back(&s->usage());
        }
        const v1::Usage sum = SumUsage(usages);
        body["usage"] = UsageJson(sum);
        body["timings"] = TimingsJson(sum);
        if (!sinks[0]->speculative().is_null()) body["speculative"] = sinks[0]->speculative();
        SendJson(res, body);
      });
    });
    for (int i = 0; i < gen.n; ++i) {
      gw->RunAsync(choices[static_cast<size_t>(i)], sinks[static_cast<size_t>(i)],
                   [join, i](absl::Status st) { join->Done(i, st); });
    }
    return;
  }
  HttpResponse head;
  head.SetHeader("Cache-Control", "no-cache");
  head.content_type = "text/event-stream";
  out->StartStream(head);
  auto ds = std::make_shared<ResponderWriter>(out);
  auto w = std::make_shared<StreamWriter>(ds.get(), [out] { return out->ClientGone(); });
  std::vector<std::shared_ptr<SseChoiceSink>> sinks;
  for (size_t i = 0; i < choices.size(); ++i) {
    sinks.push_back(std::make_shared<SseChoiceSink>(w.get(), meta.get(), static_cast<int>(i)));
  }
  const bool include_usage = gen.include_usage;
  auto join = std::make_shared<ChoiceJoin>(gen.n, [out, ds, w, meta, sinks, include_usage](const absl::Status& st) {
    if (!st.ok()) {
      w->Send(Dump(ErrorJson(st)));
    } else {
      if (include_usage) {
        std::vector<const v1::Usage*> usages;
        for (const auto& s : sinks) usages.push_back(&s->usage());
        json chunk = meta->Envelope(/*chunk=*/true);
        chunk["choices"] = json::array();
        chunk["usage"] = UsageJson(SumUsage(usages));
        w->Send(Dump(chunk));
      }
      w->Send("[DONE]");
    }
    out->End();
  });
  for (int i = 0; i < gen.n; ++i) {
    gw->RunAsync(choices[static_cast<size_t>(i)], sinks[static_cast<size_t>(i)],
                 [join, i](absl::Status st) { join->Done(i, st); });
  }
}

}  // namespace herd::gateway::http
