#include "services/gateway/fakes.h"

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/gguf/gguf.h"

namespace herd::gateway::testing {

bool WaitFor(const std::function<bool()>& pred, int timeout_ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

FakeWorker::FakeWorker(FakeWorkerConfig config) : config_(std::move(config)) {}

FakeWorker::~FakeWorker() { Kill(); }

absl::Status FakeWorker::Start(int port) {
  grpc::ServerBuilder b;
  int bound = 0;
  b.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), &bound);
  b.RegisterService(this);
  server_ = b.BuildAndStart();
  if (server_ == nullptr || bound == 0) return absl::UnavailableError(absl::StrCat("fake worker: cannot bind ", port));
  port_ = bound;
  return absl::OkStatus();
}

void FakeWorker::Kill() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }
}

std::string FakeWorker::address() const { return absl::StrCat("127.0.0.1:", port_); }

void FakeWorker::Update(const std::function<void(FakeWorkerConfig&)>& f) {
  std::lock_guard<std::mutex> l(mu_);
  f(config_);
}

FakeWorkerConfig FakeWorker::config() const {
  std::lock_guard<std::mutex> l(mu_);
  return config_;
}

v1::SessionStart FakeWorker::last_start() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_start_;
}

std::vector<int32_t> FakeWorker::step_requests() const {
  std::lock_guard<std::mutex> l(mu_);
  return step_requests_;
}

std::vector<std::vector<int32_t>> FakeWorker::drafts() const {
  std::lock_guard<std::mutex> l(mu_);
  return drafts_;
}

std::vector<int> FakeWorker::draft_probs_counts() const {
  std::lock_guard<std::mutex> l(mu_);
  return draft_probs_;
}

grpc::Status FakeWorker::Embed(grpc::ServerContext*, const v1::WorkerEmbedRequest* req, v1::WorkerEmbedResponse* resp) {
  embed_calls_.fetch_add(1);
  const FakeWorkerConfig c = config();
  {
    std::lock_guard<std::mutex> l(mu_);
    last_embed_ = *req;
  }
  if (c.embed_refuse != grpc::StatusCode::OK) return grpc::Status(c.embed_refuse, "fake worker: embed refused");
  if (req->tokens_size() == 0) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "tokens: empty");
  const v1::Pooling p = req->pooling() == v1::POOLING_UNSPECIFIED ? v1::POOLING_LAST : req->pooling();
  for (float v : {static_cast<float>(req->tokens_size()), static_cast<float>(req->tokens(0)),
                  static_cast<float>(req->tokens(req->tokens_size() - 1)), static_cast<float>(p)}) {
    resp->add_embedding(v);
  }
  resp->set_n_prompt_tokens(req->tokens_size());
  resp->set_pooling(p);
  return grpc::Status::OK;
}

v1::WorkerEmbedRequest FakeWorker::last_embed() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_embed_;
}

grpc::Status FakeWorker::Info(grpc::ServerContext*, const v1::WorkerInfoRequest*, v1::WorkerInfo* resp) {
  const FakeWorkerConfig c = config();
  if (c.info_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(c.info_delay_ms));
  if (c.info_fails) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "fake worker: unhealthy");
  resp->set_model(c.model);
  resp->set_architecture(c.architecture);
  resp->set_backend(c.backend);
  resp->set_n_ctx(c.n_ctx);
  resp->set_n_ctx_seq(c.n_ctx_seq);
  resp->set_n_vocab(c.n_vocab);
  resp->set_matryoshka(c.matryoshka);
  resp->set_draining(c.draining);
  resp->set_max_sequences(c.max_sequences);
  resp->set_active_sequences(c.active + active_.load());
  resp->set_queued_sequences(c.queued);
  resp->set_kv_cells_used(c.kv_cells_used);
  resp->set_kv_cells_cached(c.kv_cells_cached);
  return grpc::Status::OK;
}

grpc::Status FakeWorker::Session(grpc::ServerContext* ctx,
                                 grpc::ServerReaderWriter<v1::SessionResponse, v1::SessionRequest>* stream) {
  v1::SessionRequest req;
  if (!stream->Read(&req)) return grpc::Status::OK;
  if (!req.has_start()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "Step before Start");
  const FakeWorkerConfig c = config();
  {
    std::lock_guard<std::mutex> l(mu_);
    last_start_ = req.start();
  }
  ++started_;
  if (c.refuse != grpc::StatusCode::OK) return grpc::Status(c.refuse, "fake worker refused the session");
  const v1::SessionStart start = req.start();
  for (int i = 0; i < start.prompt_size(); ++i) {
    if (start.prompt(i) < 0 || start.prompt(i) >= c.n_vocab) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("prompt[", i, "]: bad token"));
    }
  }
  ++active_;
  struct Dec {
    std::atomic<int>* a;
    ~Dec() { --*a; }
  } dec{&active_};
  v1::SessionResponse started;
  started.mutable_started()->set_n_prompt(start.prompt_size());
  started.mutable_started()->set_queue_ms(0.25);
  if (!stream->Write(started)) {
    ++cancelled_;
    return grpc::Status::OK;
  }
  size_t produced = 0;
  bool ended = false;  // EOS or context full
  while (stream->Read(&req)) {
    if (req.has_cancel()) {
      ++cancelled_;
      return grpc::Status::OK;
    }
    if (!req.has_step()) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "expected Step");
    {
      std::lock_guard<std::mutex> l(mu_);
      step_requests_.push_back(req.step().n_steps());
      drafts_.emplace_back(req.step().draft().begin(), req.step().draft().end());
      draft_probs_.push_back(req.step().draft_probs_size());
    }
    if (req.step().draft_size() > 0 && req.step().n_steps() > 1) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "step.n_steps: must be 0 or 1 with a draft");
    }
    if (req.step().draft_probs_size() != 0 && req.step().draft_probs_size() != req.step().draft_size()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "step.draft_probs: one per draft token");
    }
    for (int i = 0; i < req.step().draft_size(); ++i) {
      if (req.step().draft(i) < 0 || req.step().draft(i) >= c.n_vocab) {
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("step.draft[", i, "]: bad token"));
      }
    }
    // The token of forward pass `k` (0-based) and whether it is the EOS.
    auto token_at = [&c](size_t k, bool* is_eos) {
      *is_eos = false;
      if (k < c.script.size()) return c.script[k];
      if (c.eos_after_script || c.script.empty()) {
        *is_eos = true;
        return c.eos_id;
      }
      return c.script[k % c.script.size()];
    };
    const int n = std::max(1, req.step().n_steps());
    bool eos = false;  // an EOS result drops the rest of this Step (worker.proto)
    for (int i = 0; i < n && !ended && !eos; ++i) {
      if (c.token_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(c.token_delay_ms));
      if (ctx->IsCancelled()) {
        ++cancelled_;
        return grpc::Status::CANCELLED;
      }
      v1::SessionResponse resp;
      v1::StepResult* sr = resp.mutable_step();
      // A draft is verified against the script: accepted while it matches (never past
      // the context), then one more token.
      int32_t n_acc = 0;
      for (int d = 0; d < req.step().draft_size(); ++d) {
        bool is_eos = false;
        const int32_t want = token_at(produced, &is_eos);
        if (is_eos || want != req.step().draft(d) ||
            static_cast<int64_t>(start.prompt_size() + produced + 1) >= c.n_ctx_seq) {
          break;
        }
        sr->add_tokens(want);
        ++produced;
        ++n_acc;
      }
      sr->set_n_accepted(n_acc);
      bool is_eos = false;
      const int32_t tok = token_at(produced, &is_eos);
      if (is_eos) {
        sr->set_eos(true);
        eos = true;
      }
      ++produced;
      sr->add_tokens(tok);
      if (static_cast<int64_t>(start.prompt_size() + produced) >= c.n_ctx_seq) {
        sr->set_context_full(true);
        ended = true;
      }
      if (start.logprobs() > 0) {
        v1::TokenLogprobs* lp = sr->add_logprobs();
        lp->set_token_id(tok);
        lp->set_logprob(-0.5f);
        for (int k = 0; k < start.logprobs(); ++k) {
          v1::TokenLogprob* t = lp->add_top();
          t->set_token_id(k == 0 ? tok : 300 + k);
          t->set_logprob(-0.5f - k);
        }
      }
      sr->set_prompt_ms(1.5);
      sr->set_generation_ms(0.5 * static_cast<double>(produced));
      if (!stream->Write(resp)) {
        ++cancelled_;
        return grpc::Status::CANCELLED;
      }
      ++steps_;
    }
  }
  // The client closed its side (or cancelled) before we ended the sequence.
  if (!ended || ctx->IsCancelled()) ++cancelled_;
  return grpc::Status::OK;
}

FakeLoader::~FakeLoader() { Kill(); }

absl::Status FakeLoader::AddModelFromFile(const std::string& model, const std::string& gguf_path) {
  HERD_ASSIGN_OR_RETURN(auto f, gguf::GgufFile::Open(gguf_path));
  gguf::GgufWriter w(f->version());
  for (const gguf::KeyValue& kv : f->metadata()) w.SetValue(kv.key, kv.value);
  std::lock_guard<std::mutex> l(mu_);
  vocab_[model] = w.WriteToString();
  return absl::OkStatus();
}

absl::Status FakeLoader::Start(int port) {
  grpc::ServerBuilder b;
  int bound = 0;
  b.AddListeningPort(absl::StrCat("127.0.0.1:", port), grpc::InsecureServerCredentials(), &bound);
  b.RegisterService(this);
  server_ = b.BuildAndStart();
  if (server_ == nullptr || bound == 0) return absl::UnavailableError("fake loader: cannot bind");
  port_ = bound;
  return absl::OkStatus();
}

void FakeLoader::Kill() {
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }
}

std::string FakeLoader::address() const { return absl::StrCat("127.0.0.1:", port_); }

grpc::Status FakeLoader::ListModels(grpc::ServerContext*, const v1::LoaderListModelsRequest*,
                                    v1::LoaderListModelsResponse* resp) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [name, bytes] : vocab_) {
    v1::StoredModel* m = resp->add_models();
    m->set_name(name);
    m->set_size_bytes(bytes.size());
    m->set_architecture("llama");
  }
  return grpc::Status::OK;
}

grpc::Status FakeLoader::GetModelInfo(grpc::ServerContext*, const v1::GetModelInfoRequest* req, v1::ModelInfo* resp) {
  ++calls_;
  std::lock_guard<std::mutex> l(mu_);
  auto it = vocab_.find(req->name());
  if (it == vocab_.end())
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "model " + req->name() + " not in the store");
  resp->set_name(req->name());
  resp->set_file_size(it->second.size());
  if (req->include_vocab_gguf()) resp->set_vocab_gguf(it->second);
  return grpc::Status::OK;
}

}  // namespace herd::gateway::testing
