#include "services/gateway/embeddings.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/base/status_macros.h"
#include "libs/engine/embedding.h"
#include "services/gateway/gateway.h"
#include "services/gateway/http_server.h"
#include "services/gateway/http_util.h"
#include "services/gateway/text_stream.h"

namespace herd::gateway {
namespace {

using json = nlohmann::json;

// Inputs of one request in flight at once.
constexpr size_t kEmbedConcurrency = 8;

absl::Status Invalid(const std::string& msg) { return absl::InvalidArgumentError(msg); }

absl::Status WithPrefix(const absl::Status& s, const std::string& prefix) {
  return absl::Status(s.code(), absl::StrCat(prefix, s.message()));
}

// One input, tokenized and checked against the vocabulary and the workers' context.
absl::StatusOr<std::vector<int32_t>> InputTokens(const v1::EmbedInput& in, int i, const tokenizer::Vocab& vocab,
                                                 int64_t max_bytes, int64_t max_ctx) {
  const std::string name = absl::StrCat("inputs[", i, "]");
  std::vector<int32_t> toks;
  if (in.input_case() == v1::EmbedInput::kText) {
    if (in.text().empty()) return Invalid(absl::StrCat(name, ".text: empty"));
    if (static_cast<int64_t>(in.text().size()) > max_bytes) {
      return Invalid(absl::StrCat(name, ".text: ", in.text().size(), " bytes exceeds the limit of ", max_bytes));
    }
    size_t bad = 0;
    if (!IsValidUtf8(in.text(), &bad)) return Invalid(absl::StrCat(name, ".text: invalid UTF-8 at byte ", bad));
    // llama.cpp's server: tokenize_input_prompts(vocab, prompt, add_special=true, parse_special=true).
    toks = vocab.Tokenize(in.text(), /*add_special=*/true, /*parse_special=*/true);
    if (toks.empty()) return Invalid(absl::StrCat(name, ".text: tokenizes to no tokens"));
  } else if (in.input_case() == v1::EmbedInput::kTokens) {
    toks.assign(in.tokens().ids().begin(), in.tokens().ids().end());
    if (toks.empty()) return Invalid(absl::StrCat(name, ".tokens: empty"));
    for (size_t j = 0; j < toks.size(); ++j) {
      if (!vocab.IsValid(toks[j])) {
        return Invalid(absl::StrCat(name, ".tokens.ids[", j, "]: ", toks[j], " is outside the vocabulary [0, ",
                                    vocab.n_tokens(), ")"));
      }
    }
  } else {
    return Invalid(absl::StrCat(name, ": empty (set text or tokens)"));
  }
  if (max_ctx > 0 && static_cast<int64_t>(toks.size()) > max_ctx) {
    return Invalid(absl::StrCat(name, ": ", toks.size(),
                                " tokens exceed the context of the model's workers (n_ctx_seq ", max_ctx, ")"));
  }
  return toks;
}

// Worker.Embed on the least-loaded worker; another one after UNAVAILABLE or
// RESOURCE_EXHAUSTED (a worker going away, a full queue), up to max_attempts.
absl::StatusOr<v1::WorkerEmbedResponse> EmbedOnWorker(Gateway& gw, const std::string& model,
                                                      const std::vector<int32_t>& toks, v1::Pooling pooling,
                                                      absl::Time deadline, int i) {
  std::set<std::string> tried;
  absl::Status last;
  const int attempts = std::max(1, gw.options().max_attempts);
  for (int a = 0; a < attempts; ++a) {
    auto lease = gw.pool().Acquire(model, static_cast<int64_t>(toks.size()), tried);
    if (!lease.ok()) return last.ok() ? lease.status() : last;
    grpc::ClientContext ctx;
    if (deadline != absl::InfiniteFuture()) ctx.set_deadline(absl::ToChronoTime(deadline));
    v1::WorkerEmbedRequest wreq;
    wreq.mutable_tokens()->Add(toks.begin(), toks.end());
    wreq.set_pooling(pooling);
    v1::WorkerEmbedResponse wresp;
    const grpc::Status gs = lease->stub()->Embed(&ctx, wreq, &wresp);
    if (gs.ok()) return wresp;
    const absl::Status s = FromGrpcStatus(gs);
    const std::string addr = lease->address();
    if (absl::IsUnavailable(s)) gw.pool().ReportFailure(addr, std::string(s.message()));
    last = WithPrefix(s, absl::StrCat("inputs[", i, "]: worker ", addr, ": "));
    if (!absl::IsUnavailable(s) && !absl::IsResourceExhausted(s)) return last;
    tried.insert(addr);
  }
  return last;
}

absl::Status CheckModel(Gateway& gw, const std::string& model) {
  switch (gw.pool().GetModelState(model)) {
    case WorkerPool::ModelState::kUnknown:
      return absl::NotFoundError(absl::StrCat("model '", ShortName(model), "' not found"));
    case WorkerPool::ModelState::kNoLiveWorker:
      return absl::UnavailableError(absl::StrCat("model '", ShortName(model), "': no live worker serves it"));
    case WorkerPool::ModelState::kLive:
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::EmbedResponse> EmbedImpl(Gateway& gw, const v1::EmbedRequest& req, absl::Time deadline) {
  if (gw.draining()) return absl::UnavailableError("gateway is shutting down");
  if (req.model().empty()) return Invalid("model: required");
  if (req.inputs_size() == 0) return Invalid("inputs: at least one input is required");
  if (req.inputs_size() > kMaxEmbedInputs) {
    return Invalid(absl::StrCat("inputs: at most ", kMaxEmbedInputs, " (got ", req.inputs_size(), ")"));
  }
  if (!v1::Pooling_IsValid(req.pooling())) {
    return Invalid(absl::StrCat("pooling: ", req.pooling(), " is not a Pooling value"));
  }
  const int norm = req.has_normalize() ? req.normalize() : 2;
  if (norm < -1) return Invalid(absl::StrCat("normalize: must be >= -1 (got ", norm, ")"));
  absl::Status s = CheckModel(gw, req.model());
  if (!s.ok()) return s;
  HERD_ASSIGN_OR_RETURN(auto vocab, gw.vocabs().Get(req.model(), deadline));
  if (req.dimensions() < 0) return Invalid(absl::StrCat("dimensions: must be positive (got ", req.dimensions(), ")"));
  int64_t max_ctx = 0;
  bool matryoshka = true;  // every live worker of the model says its embeddings truncate
  for (const WorkerSnapshot& w : gw.pool().LiveWorkersFor(req.model())) {
    max_ctx = std::max(max_ctx, w.info.n_ctx_seq() > 0 ? w.info.n_ctx_seq() : w.info.n_ctx());
    matryoshka = matryoshka && w.info.matryoshka();
  }
  std::vector<std::vector<int32_t>> inputs;
  for (int i = 0; i < req.inputs_size(); ++i) {
    HERD_ASSIGN_OR_RETURN(auto t, InputTokens(req.inputs(i), i, *vocab, gw.options().max_prompt_bytes, max_ctx));
    inputs.push_back(std::move(t));
  }
  // Inputs run concurrently (each one is a separate Worker.Embed, so several workers,
  // or one worker's queue, can work on them), answers kept in input order.
  std::vector<absl::StatusOr<v1::WorkerEmbedResponse>> answers(inputs.size(), absl::UnknownError("not run"));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < inputs.size(); i = next.fetch_add(1)) {
      answers[i] = absl::Now() >= deadline
                       ? absl::StatusOr<v1::WorkerEmbedResponse>(absl::DeadlineExceededError("deadline exceeded"))
                       : EmbedOnWorker(gw, req.model(), inputs[i], req.pooling(), deadline, static_cast<int>(i));
    }
  };
  std::vector<std::thread> threads;
  const size_t n_threads = std::min<size_t>(inputs.size(), kEmbedConcurrency);
  for (size_t t = 1; t < n_threads; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  v1::EmbedResponse resp;
  resp.set_model(req.model());
  int64_t n_tokens = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const absl::StatusOr<v1::WorkerEmbedResponse>& w = answers[i];
    if (!w.ok()) return w.status();
    std::vector<float> v(w->embedding().begin(), w->embedding().end());
    const int64_t n_embd = static_cast<int64_t>(v.size());
    if (req.dimensions() > n_embd) {
      return Invalid(absl::StrCat("dimensions: ", req.dimensions(), " exceeds the model's ", n_embd, " values"));
    }
    if (req.dimensions() > 0 && req.dimensions() < n_embd) {
      if (!matryoshka) {
        return Invalid(absl::StrCat("dimensions: model '", ShortName(req.model()), "' does not support truncation ",
                                    "(its embeddings have ", n_embd,
                                    " values; only Matryoshka models, served with the worker's --matryoshka, do)"));
      }
      v.resize(static_cast<size_t>(req.dimensions()));  // the prefix, normalized below (OpenAI's semantics)
    }
    s = engine::NormalizeEmbedding(&v, norm);
    if (!s.ok()) return WithPrefix(s, "normalize: ");
    v1::Embedding* e = resp.add_data();
    e->mutable_values()->Add(v.begin(), v.end());
    e->set_n_tokens(static_cast<int32_t>(inputs[i].size()));
    resp.set_pooling(w->pooling());
    n_tokens += static_cast<int64_t>(inputs[i].size());
  }
  resp.mutable_usage()->set_prompt_tokens(static_cast<int32_t>(n_tokens));
  return resp;
}

}  // namespace

absl::StatusOr<v1::EmbedResponse> Embed(Gateway& gw, const v1::EmbedRequest& req, absl::Time deadline,
                                        const std::string& method) {
  const absl::Time t0 = absl::Now();
  const absl::Duration timeout = gw.options().request_timeout;
  if (timeout > absl::ZeroDuration()) deadline = std::min(deadline, t0 + timeout);
  absl::StatusOr<v1::EmbedResponse> r = EmbedImpl(gw, req, deadline);
  if (r.ok()) r->mutable_usage()->set_total_ms(absl::ToDoubleMilliseconds(absl::Now() - t0));
  gw.RecordRequest(method, r.status(), absl::Now() - t0);
  return r;
}

// ---- gRPC ----

grpc::Status GatewayServiceImpl::Embed(grpc::ServerContext* ctx, const v1::EmbedRequest* req, v1::EmbedResponse* resp) {
  const auto d = ctx->deadline();
  const absl::Time deadline = d >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)
                                  ? absl::InfiniteFuture()
                                  : absl::FromChrono(d);
  auto r = gateway::Embed(*gw_, *req, deadline, "Embed");
  if (!r.ok()) return ToGrpcStatus(r.status());
  resp->Swap(&*r);
  return grpc::Status::OK;
}

// ---- HTTP ----

namespace {

absl::Status ParseInput(const json& input, v1::EmbedRequest* req) {
  auto add_ids = [&](const json& arr, const std::string& name) -> absl::Status {
    v1::TokenIds* ids = req->add_inputs()->mutable_tokens();
    for (size_t j = 0; j < arr.size(); ++j) {
      if (!arr[j].is_number_integer()) return Invalid(absl::StrCat(name, "[", j, "]: must be an integer token id"));
      const int64_t v = arr[j].get<int64_t>();
      if (v < 0 || v > INT32_MAX) return Invalid(absl::StrCat(name, "[", j, "]: token id ", v, " out of range"));
      ids->add_ids(static_cast<int32_t>(v));
    }
    return absl::OkStatus();
  };
  if (input.is_string()) {
    req->add_inputs()->set_text(input.get<std::string>());
    return absl::OkStatus();
  }
  if (!input.is_array() || input.empty()) {
    return Invalid("input: must be a string, an array of strings, or an array of token ids (or of token-id arrays)");
  }
  if (input[0].is_number()) return add_ids(input, "input");  // one input as token ids
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string name = absl::StrCat("input[", i, "]");
    if (input[i].is_string()) {
      req->add_inputs()->set_text(input[i].get<std::string>());
    } else if (input[i].is_array()) {
      HERD_RETURN_IF_ERROR(add_ids(input[i], name));
    } else {
      return Invalid(absl::StrCat(name, ": must be a string or an array of token ids"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseOptions(const json& body, EmbeddingsHttpRequest* out) {
  if (body.contains("encoding_format")) {
    const json& f = body["encoding_format"];
    if (!f.is_string() || (f != "float" && f != "base64")) {
      return Invalid("encoding_format: must be \"float\" or \"base64\"");
    }
    out->base64 = f == "base64";
  }
  if (body.contains("pooling")) {
    if (!body["pooling"].is_string()) return Invalid("pooling: must be a string (mean, cls or last)");
    HERD_ASSIGN_OR_RETURN(auto p, engine::ParsePooling(body["pooling"].get<std::string>()));
    out->req.set_pooling(p == engine::Pooling::kMean  ? v1::POOLING_MEAN
                         : p == engine::Pooling::kCls ? v1::POOLING_CLS
                                                      : v1::POOLING_LAST);
  }
  if (body.contains("dimensions")) {
    const json& d = body["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 20)) {
      return Invalid("dimensions: must be a positive integer");
    }
    out->req.set_dimensions(static_cast<int32_t>(d.get<int64_t>()));
  }
  if (body.contains("embd_normalize")) {
    const json& n = body["embd_normalize"];
    if (!n.is_number_integer() || n.get<int64_t>() < -1 || n.get<int64_t>() > 1000) {
      return Invalid("embd_normalize: must be an integer >= -1 (-1 none, 0 max-abs, 1 taxicab, 2 euclidean, p)");
    }
    out->req.set_normalize(static_cast<int32_t>(n.get<int64_t>()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<EmbeddingsHttpRequest> ParseEmbeddingsRequest(const json& body) {
  if (!body.is_object()) return Invalid("request body: must be a JSON object");
  EmbeddingsHttpRequest out;
  if (!body.contains("model") || !body["model"].is_string() || body["model"].get<std::string>().empty()) {
    return Invalid("model: required (a string naming a served model)");
  }
  out.req.set_model(body["model"].get<std::string>());
  const char* key = body.contains("input") ? "input" : body.contains("content") ? "content" : nullptr;
  if (key == nullptr) return Invalid("input: required");
  absl::Status s = ParseInput(body[key], &out.req);
  if (!s.ok()) {
    if (std::strcmp(key, "content") == 0 && absl::StartsWith(s.message(), "input")) {
      return Invalid(absl::StrCat("content", s.message().substr(5)));
    }
    return s;
  }
  s = ParseOptions(body, &out);
  if (!s.ok()) return s;
  return out;
}

json EmbeddingsJson(const v1::EmbedResponse& resp, EmbeddingsApi api, bool base64) {
  json data = json::array();
  for (int i = 0; i < resp.data_size(); ++i) {
    const auto& vals = resp.data(i).values();
    json vec = json::array();
    if (api == EmbeddingsApi::kOpenAi && base64) {
      std::string bytes(static_cast<size_t>(vals.size()) * sizeof(float), '\0');
      if (!bytes.empty()) std::memcpy(bytes.data(), vals.data(), bytes.size());  // x86-64: little-endian
      vec = absl::Base64Escape(bytes);
    } else {
      for (float v : vals) vec.push_back(v);
    }
    if (api == EmbeddingsApi::kOpenAi) {
      data.push_back(json{{"object", "embedding"}, {"index", i}, {"embedding", vec}});
    } else {
      data.push_back(json{{"index", i}, {"embedding", json::array({vec})}});
    }
  }
  if (api == EmbeddingsApi::kLlamaCpp) return data;
  const int n = resp.usage().prompt_tokens();
  return json{{"object", "list"},
              {"data", data},
              {"model", resp.model()},
              {"usage", {{"prompt_tokens", n}, {"total_tokens", n}}}};
}

void HandleEmbeddingsHttp(Gateway* gw, const HttpRequest& hreq, HttpResponse& res) {
  const absl::Time t0 = absl::Now();
  const EmbeddingsApi api = absl::StartsWith(hreq.path, "/v1/") ? EmbeddingsApi::kOpenAi : EmbeddingsApi::kLlamaCpp;
  auto send_error = [&](const absl::Status& s) {
    res.status = HttpStatusFor(s.code());
    res.SetContent(ErrorJson(s).dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  };
  const absl::StatusOr<json> body = http::ParseJsonObject(hreq.body);
  absl::StatusOr<EmbeddingsHttpRequest> er = body.ok() ? ParseEmbeddingsRequest(*body) : body.status();
  if (!er.ok()) {
    gw->RecordRequest("http_embeddings", er.status(), absl::Now() - t0);
    send_error(er.status());
    return;
  }
  auto r = Embed(*gw, er->req, absl::InfiniteFuture(), "http_embeddings");
  if (!r.ok()) {
    send_error(r.status());
    return;
  }
  res.SetContent(EmbeddingsJson(*r, api, er->base64).dump(-1, ' ', false, json::error_handler_t::replace),
                 "application/json");
}

}  // namespace herd::gateway
