#include "services/gateway/http_server.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "libs/base/log.h"
#include "services/gateway/embeddings.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway {
namespace {

using json = nlohmann::json;

absl::Status Bad(const std::string& msg) { return absl::InvalidArgumentError(msg); }

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

absl::Status GetNumber(const json& body, const char* key, double* out, bool* present) {
  *present = false;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return Bad(absl::StrCat(key, ": must be a number"));
  *out = it->get<double>();
  *present = true;
  return absl::OkStatus();
}

absl::Status GetInt(const json& body, const char* key, int64_t* out, bool* present) {
  *present = false;
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return absl::OkStatus();
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
  } else if (it->is_number_float() && std::isfinite(it->get<double>()) &&
             std::floor(it->get<double>()) == it->get<double>() && std::fabs(it->get<double>()) < 9e15) {
    *out = static_cast<int64_t>(it->get<double>());
  } else {
    return Bad(absl::StrCat(key, ": must be an integer"));
  }
  *present = true;
  return absl::OkStatus();
}

int32_t ClampI32(int64_t v) {
  return static_cast<int32_t>(std::max<int64_t>(std::numeric_limits<int32_t>::min(),
                                                std::min<int64_t>(std::numeric_limits<int32_t>::max(), v)));
}

const char* FinishString(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_EOS:
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_CANCELLED: return "cancelled";
    default: return nullptr;
  }
}

json UsageJson(const v1::Usage& u) {
  return json{{"prompt_tokens", u.prompt_tokens()},
              {"completion_tokens", u.completion_tokens()},
              {"total_tokens", u.prompt_tokens() + u.completion_tokens()}};
}

json TimingsJson(const v1::Usage& u) {
  return json{{"prompt_ms", u.prompt_ms()},
              {"generation_ms", u.generation_ms()},
              {"queue_ms", u.queue_ms()},
              {"total_ms", u.total_ms()},
              {"predicted_per_second",
               u.generation_ms() > 0 ? u.completion_tokens() * 1000.0 / u.generation_ms() : 0.0}};
}

// llama.cpp-style speculative statistics of the last message (empty array: none).
json SpeculativeJson(const google::protobuf::RepeatedPtrField<v1::SpeculativeStats>& stats) {
  json out = json::array();
  for (const v1::SpeculativeStats& s : stats) {
    out.push_back(json{{"type", s.type()},
                       {"calls", s.calls()},
                       {"gen_drafts", s.gen_drafts()},
                       {"acc_drafts", s.acc_drafts()},
                       {"gen_tokens", s.gen_tokens()},
                       {"acc_tokens", s.acc_tokens()},
                       {"acceptance_rate", s.gen_tokens() > 0 ? static_cast<double>(s.acc_tokens()) /
                                                                    static_cast<double>(s.gen_tokens())
                                                              : 0.0}});
  }
  return out;
}

// OpenAI completions logprobs object for the tokens of one or more messages.
struct LogprobsAcc {
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  size_t offset = 0;

  void Add(const v1::GenerateResponse& msg, const tokenizer::Vocab* vocab) {
    for (const v1::TokenLogprobs& lp : msg.logprobs()) {
      const std::string text = vocab != nullptr ? SanitizeUtf8(vocab->TokenToPiece(lp.token_id(), false)) : "";
      tokens.push_back(text);
      token_logprobs.push_back(lp.logprob());
      json top = json::object();
      for (const v1::TokenLogprob& t : lp.top()) top[t.text()] = t.logprob();
      top_logprobs.push_back(std::move(top));
      text_offset.push_back(offset);
      offset += text.size();
    }
  }
  json ToJson() const {
    return json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top_logprobs},
                {"text_offset", text_offset}};
  }
};

struct CompletionMeta {
  std::string id;
  std::string model;
  int64_t created = 0;
  bool want_logprobs = false;
  std::shared_ptr<const tokenizer::Vocab> vocab;
};

json Chunk(const CompletionMeta& m, const std::string& text, const json& logprobs, const char* finish) {
  json choice = {{"index", 0}, {"text", text}, {"logprobs", logprobs}, {"finish_reason", nullptr}};
  if (finish != nullptr) choice["finish_reason"] = finish;
  return json{{"id", m.id}, {"object", "text_completion"}, {"created", m.created}, {"model", m.model},
              {"choices", json::array({choice})}};
}

// Server-sent events: one "data: {...}" chunk per message with text, logprobs or the
// finish reason; Write fails once the client is gone.
class SseSink : public GenerateSink {
 public:
  SseSink(httplib::DataSink* ds, CompletionMeta* meta) : ds_(ds), meta_(meta) {}
  bool Write(const v1::GenerateResponse& msg) override {
    const char* finish = FinishString(msg.finish_reason());
    json lp = nullptr;
    if (meta_->want_logprobs && msg.logprobs_size() > 0) {
      LogprobsAcc acc;
      acc.offset = offset_;
      acc.Add(msg, meta_->vocab.get());
      lp = acc.ToJson();
    }
    offset_ += msg.text().size();
    if (msg.text().empty() && finish == nullptr && lp.is_null()) return !gone_;
    json chunk = Chunk(*meta_, msg.text(), lp, finish);
    if (msg.has_usage()) {
      chunk["usage"] = UsageJson(msg.usage());
      chunk["timings"] = TimingsJson(msg.usage());
    }
    if (msg.speculative_size() > 0) chunk["speculative"] = SpeculativeJson(msg.speculative());
    if (finish != nullptr) finished_ = true;
    return Send(Dump(chunk));
  }
  bool Cancelled() override { return gone_.load(); }
  bool Send(const std::string& payload) {
    if (gone_) return false;
    const std::string ev = absl::StrCat("data: ", payload, "\n\n");
    if (!ds_->write(ev.data(), ev.size())) gone_ = true;
    return !gone_;
  }
  bool finished() const { return finished_; }

 private:
  httplib::DataSink* ds_;
  CompletionMeta* meta_;
  std::atomic<bool> gone_{false};
  bool finished_ = false;
  size_t offset_ = 0;
};

// Collects a whole completion for the non-streaming response.
class CollectSink : public GenerateSink {
 public:
  explicit CollectSink(CompletionMeta* meta) : meta_(meta) {}
  bool Write(const v1::GenerateResponse& msg) override {
    if (meta_->want_logprobs) {
      acc_.offset = text_.size();
      acc_.Add(msg, meta_->vocab.get());
    }
    text_ += msg.text();
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish_ = msg.finish_reason();
    if (msg.has_usage()) usage_ = msg.usage();
    if (msg.speculative_size() > 0) speculative_ = SpeculativeJson(msg.speculative());
    return true;
  }
  json ToJson() const {
    json choice = {{"index", 0},
                   {"text", text_},
                   {"logprobs", meta_->want_logprobs ? acc_.ToJson() : json(nullptr)},
                   {"finish_reason", FinishString(finish_) != nullptr ? json(FinishString(finish_)) : json(nullptr)}};
    json out = {{"id", meta_->id},     {"object", "text_completion"},  {"created", meta_->created},
                {"model", meta_->model}, {"choices", json::array({choice})}, {"usage", UsageJson(usage_)},
                {"timings", TimingsJson(usage_)}};
    if (!speculative_.is_null()) out["speculative"] = speculative_;
    return out;
  }

 private:
  CompletionMeta* meta_;
  std::string text_;
  LogprobsAcc acc_;
  v1::FinishReason finish_ = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage_;
  json speculative_;  // null unless the last message carried statistics
};

void SendError(httplib::Response& res, const absl::Status& s) {
  res.status = HttpStatusFor(s.code());
  res.set_content(Dump(ErrorJson(s)), "application/json");
}

}  // namespace

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kCancelled: return 499;
    default: return 500;
  }
}

json ErrorJson(const absl::Status& s) {
  const int http = HttpStatusFor(s.code());
  const char* type = "server_error";
  switch (http) {
    case 400: type = "invalid_request_error"; break;
    case 404: type = "not_found_error"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "unavailable_error"; break;
    case 504: type = "timeout_error"; break;
    default: break;
  }
  return json{{"error", {{"message", std::string(s.message())}, {"type", type}, {"code", http}}}};
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(const json& body) {
  if (!body.is_object()) return Bad("request body: must be a JSON object");
  CompletionRequest out;
  v1::GenerateRequest& r = out.req;
  auto model = body.find("model");
  if (model == body.end() || model->is_null()) return Bad("model: required");
  if (!model->is_string()) return Bad("model: must be a string");
  r.set_model(model->get<std::string>());

  auto prompt = body.find("prompt");
  if (prompt == body.end() || prompt->is_null()) return Bad("prompt: required");
  if (prompt->is_string()) {
    r.set_text(prompt->get<std::string>());
  } else if (prompt->is_array()) {
    if (prompt->size() == 1 && (*prompt)[0].is_string()) {
      r.set_text((*prompt)[0].get<std::string>());
    } else {
      v1::TokenIds* ids = r.mutable_tokens();
      for (size_t i = 0; i < prompt->size(); ++i) {
        const json& v = (*prompt)[i];
        if (v.is_string()) return Bad("prompt: only one prompt per request is supported");
        if (!v.is_number_integer()) return Bad(absl::StrCat("prompt[", i, "]: must be a token id (integer)"));
        const int64_t id = v.get<int64_t>();
        if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
          return Bad(absl::StrCat("prompt[", i, "]: token id ", id, " is out of range"));
        }
        ids->add_ids(static_cast<int32_t>(id));
      }
    }
  } else {
    return Bad("prompt: must be a string or an array of token ids");
  }

  bool has = false;
  int64_t iv = 0;
  double dv = 0;
  absl::Status s;
  for (const char* key : {"max_tokens", "n_predict"}) {
    if (!(s = GetInt(body, key, &iv, &has)).ok()) return s;
    if (has) r.set_n_predict(ClampI32(iv));
  }
  v1::SamplingParams* sp = r.mutable_sampling();
  struct FloatField {
    const char* key;
    void (v1::SamplingParams::*set)(float);
  };
  for (const FloatField& f : {FloatField{"temperature", &v1::SamplingParams::set_temperature},
                              FloatField{"top_p", &v1::SamplingParams::set_top_p},
                              FloatField{"min_p", &v1::SamplingParams::set_min_p},
                              FloatField{"repeat_penalty", &v1::SamplingParams::set_repeat_penalty},
                              FloatField{"presence_penalty", &v1::SamplingParams::set_presence_penalty},
                              FloatField{"frequency_penalty", &v1::SamplingParams::set_frequency_penalty}}) {
    if (!(s = GetNumber(body, f.key, &dv, &has)).ok()) return s;
    if (has) (sp->*f.set)(static_cast<float>(dv));
  }
  if (!(s = GetInt(body, "top_k", &iv, &has)).ok()) return s;
  if (has) sp->set_top_k(ClampI32(iv));
  if (!(s = GetInt(body, "repeat_last_n", &iv, &has)).ok()) return s;
  if (has) sp->set_repeat_last_n(ClampI32(iv));
  if (!(s = GetInt(body, "seed", &iv, &has)).ok()) return s;
  if (has && iv != -1) {
    if (iv < 0 || iv > 0xFFFFFFFFll) return Bad(absl::StrCat("seed: must be -1 or in 0..4294967295 (got ", iv, ")"));
    sp->set_seed(static_cast<uint32_t>(iv));
  }
  if (!(s = GetInt(body, "logprobs", &iv, &has)).ok()) {
    // OpenAI's chat API uses a boolean here; accept it as "1 alternative".
    auto it = body.find("logprobs");
    if (it == body.end() || !it->is_boolean()) return s;
    has = true;
    iv = it->get<bool>() ? 1 : 0;
  }
  if (has) r.set_logprobs(ClampI32(iv));

  auto stop = body.find("stop");
  if (stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      r.add_stop(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) return Bad(absl::StrCat("stop[", i, "]: must be a string"));
        r.add_stop((*stop)[i].get<std::string>());
      }
    } else {
      return Bad("stop: must be a string or an array of strings");
    }
  }
  auto stream = body.find("stream");
  if (stream != body.end() && !stream->is_null()) {
    if (!stream->is_boolean()) return Bad("stream: must be a boolean");
    out.stream = stream->get<bool>();
  }
  auto ignore_eos = body.find("ignore_eos");
  if (ignore_eos != body.end() && !ignore_eos->is_null()) {
    if (!ignore_eos->is_boolean()) return Bad("ignore_eos: must be a boolean");
    r.set_ignore_eos(ignore_eos->get<bool>());
  }
  for (const char* key : {"n", "best_of"}) {
    if (!(s = GetInt(body, key, &iv, &has)).ok()) return s;
    if (has && iv != 1) return Bad(absl::StrCat(key, ": only 1 is supported (got ", iv, ")"));
  }
  auto spec = body.find("speculative");
  if (spec != body.end() && !spec->is_null()) {
    if (!spec->is_object()) return Bad("speculative: must be an object");
    v1::SpeculativeConfig* c = r.mutable_speculative();
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
    for (auto it = spec->begin(); it != spec->end(); ++it) {
      const std::string& key = it.key();
      if (key == "type") {
        if (it->is_null()) continue;
        if (!it->is_string()) return Bad("speculative.type: must be a string");
        c->set_type(it->get<std::string>());
      } else if (key == "draft_p_min") {
        if (!(s = GetNumber(*spec, "draft_p_min", &dv, &has)).ok()) return Bad(absl::StrCat("speculative.", s.message()));
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
        if (!(s = GetInt(*spec, f->key, &iv, &has)).ok()) return Bad(absl::StrCat("speculative.", s.message()));
        if (has) (c->*(f->set))(ClampI32(iv));
      }
    }
  }
  auto echo = body.find("echo");
  if (echo != body.end() && !echo->is_null() && !(echo->is_boolean() && !echo->get<bool>())) {
    return Bad("echo: not supported");
  }
  auto suffix = body.find("suffix");
  if (suffix != body.end() && !suffix->is_null()) return Bad("suffix: not supported");
  auto bias = body.find("logit_bias");
  if (bias != body.end() && !bias->is_null() && !(bias->is_object() && bias->empty())) {
    return Bad("logit_bias: not supported");
  }
  return out;
}

HttpFrontEnd::HttpFrontEnd(Gateway* gateway, HttpOptions opts)
    : gw_(gateway), opts_(opts), http_(std::make_unique<httplib::Server>()) {
  const size_t threads = static_cast<size_t>(std::max(1, opts_.threads));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(opts_.max_body_bytes);
  http_->set_read_timeout(60, 0);
  http_->set_write_timeout(60, 0);

  // Errors httplib produces itself (404 for unknown paths, 413 for oversized bodies,
  // 400 for malformed HTTP) get an OpenAI-style JSON body too.
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = absl::StrCat("HTTP ", res.status);
    const char* type = res.status >= 500 ? "server_error" : "invalid_request_error";
    if (res.status == 404) {
      msg = absl::StrCat("no such endpoint: ", req.method, " ", req.path);
      type = "not_found_error";
    } else if (res.status == 413) {
      msg = absl::StrCat("request body: larger than ", opts_.max_body_bytes, " bytes");
    }
    res.set_content(Dump(json{{"error", {{"message", msg}, {"type", type}, {"code", res.status}}}}),
                    "application/json");
  });

  http_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });

  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const absl::Time t0 = absl::Now();
    json data = json::array();
    const v1::ListModelsResponse models = gw_->ListModels();
    for (const v1::ModelCard& c : models.models()) {
      json backends = json::array();
      for (const std::string& b : c.backends()) backends.push_back(b);
      data.push_back(json{{"id", c.name()},
                          {"object", "model"},
                          {"created", 0},
                          {"owned_by", "herd"},
                          {"architecture", c.architecture()},
                          {"n_ctx", c.n_ctx()},
                          {"n_vocab", c.n_vocab()},
                          {"workers", c.workers()},
                          {"backends", backends}});
    }
    res.set_content(Dump(json{{"object", "list"}, {"data", data}}), "application/json");
    gw_->RecordRequest("http_models", absl::OkStatus(), absl::Now() - t0);
  });

  // Embeddings (services/gateway/embeddings.h): /v1/embeddings in OpenAI's shape,
  // /embedding and /embeddings in llama.cpp's.
  http_->Post(R"(/(v1/)?embeddings?)",
              [this](const httplib::Request& q, httplib::Response& r) { HandleEmbeddingsHttp(gw_, q, r); });

  http_->Post("/v1/completions", [this](const httplib::Request& hreq, httplib::Response& res) {
    const absl::Time t0 = absl::Now();
    json body = json::parse(hreq.body, nullptr, /*allow_exceptions=*/false);
    absl::StatusOr<CompletionRequest> cr =
        body.is_discarded() ? absl::StatusOr<CompletionRequest>(Bad("request body: invalid JSON"))
                            : ParseCompletionRequest(body);
    if (!cr.ok()) {
      gw_->RecordRequest("http_completions", cr.status(), absl::Now() - t0);
      SendError(res, cr.status());
      return;
    }
    auto gen = gw_->Prepare(cr->req, absl::InfiniteFuture(), "http_completions");
    if (!gen.ok()) {
      SendError(res, gen.status());
      return;
    }
    auto meta = std::make_shared<CompletionMeta>();
    static std::atomic<uint64_t> next{1};
    meta->id = absl::StrCat("cmpl-", absl::ToUnixMicros(absl::Now()), "-", next.fetch_add(1));
    meta->model = cr->req.model();
    meta->created = absl::ToUnixSeconds(absl::Now());
    meta->want_logprobs = cr->req.has_logprobs() && cr->req.logprobs() > 0;
    if (meta->want_logprobs) {
      auto v = gw_->vocabs().Get(meta->model, absl::Now() + absl::Seconds(10));
      if (v.ok()) meta->vocab = *v;
    }
    if (!cr->stream) {
      CollectSink sink(meta.get());
      absl::Status st = gw_->Run(**gen, &sink);
      if (!st.ok()) {
        SendError(res, st);
        return;
      }
      res.set_content(Dump(sink.ToJson()), "application/json");
      return;
    }
    std::shared_ptr<Gateway::Generation> g(std::move(*gen));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, g, meta](size_t, httplib::DataSink& ds) {
      SseSink sink(&ds, meta.get());
      absl::Status st = gw_->Run(*g, &sink);
      if (!st.ok()) {
        sink.Send(Dump(ErrorJson(st)));
      } else {
        sink.Send("[DONE]");
      }
      ds.done();
      return true;
    });
  });
}

HttpFrontEnd::~HttpFrontEnd() { Stop(); }

absl::StatusOr<int> HttpFrontEnd::Start(const std::string& host, int port) {
  int bound = port;
  if (port == 0) {
    bound = http_->bind_to_any_port(host);
    if (bound < 0) return absl::UnavailableError(absl::StrCat("http: cannot bind ", host, ":0"));
  } else if (!http_->bind_to_port(host, port)) {
    return absl::UnavailableError(absl::StrCat("http: cannot bind ", host, ":", port));
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  // httplib's stop() is a no-op until the listener runs: wait for it, so that a Stop()
  // right after Start() cannot leave the thread listening forever.
  const absl::Time end = absl::Now() + absl::Seconds(10);
  while (!http_->is_running() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(1));
  return bound;
}

void HttpFrontEnd::Stop() {
  if (thread_.joinable()) {
    const absl::Time end = absl::Now() + absl::Seconds(10);  // see Start()
    while (!http_->is_running() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(1));
    http_->stop();
    thread_.join();
  }
}

}  // namespace herd::gateway
