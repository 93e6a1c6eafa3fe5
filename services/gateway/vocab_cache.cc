#include "services/gateway/vocab_cache.h"

#include "absl/strings/str_cat.h"

#include "libs/base/log.h"
#include "libs/base/status_macros.h"
#include "libs/gguf/gguf.h"

namespace herd::gateway {

std::string ShortName(absl::string_view name, size_t max_bytes) {
  if (name.size() <= max_bytes) return std::string(name);
  size_t cut = max_bytes;
  // Do not split a multi-byte character: back off over continuation bytes (10xxxxxx).
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(name.substr(0, cut), "\xE2\x80\xA6");
}

VocabCache::VocabCache(const std::string& loader_address, const serving::ClientSecurity& security)
    : loader_address_(loader_address) {
  if (!loader_address_.empty()) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);  // vocabularies of large BPE models are tens of MB
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 200);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
    stub_ = v1::Loader::NewStub(serving::MakeChannel(loader_address_, security, args));
  }
}

void VocabCache::Add(const std::string& model, std::shared_ptr<const tokenizer::Vocab> vocab,
                     std::string chat_template) {
  std::shared_ptr<Entry> e = EntryFor(model);
  std::lock_guard<std::mutex> fl(e->fetch_mu);
  e->vocab = std::move(vocab);
  e->chat_template = std::move(chat_template);
  e->compiled = nullptr;
}

void VocabCache::SetChatTemplateOverride(std::string source) { override_template_ = std::move(source); }

std::shared_ptr<VocabCache::Entry> VocabCache::EntryFor(const std::string& model) {
  std::lock_guard<std::mutex> l(mu_);
  auto& slot = entries_[model];
  if (slot == nullptr) slot = std::make_shared<Entry>();
  return slot;
}

absl::StatusOr<std::shared_ptr<const tokenizer::Vocab>> VocabCache::Get(const std::string& model, absl::Time deadline) {
  if (model.empty()) return absl::InvalidArgumentError("model: empty");
  std::shared_ptr<Entry> e = EntryFor(model);
  std::lock_guard<std::mutex> fl(e->fetch_mu);
  if (e->vocab == nullptr) {
    HERD_RETURN_IF_ERROR(Fetch(model, deadline, e.get()));
  }
  return e->vocab;
}

absl::StatusOr<std::shared_ptr<const ChatTemplateInfo>> VocabCache::GetChatTemplate(const std::string& model,
                                                                                    absl::Time deadline) {
  if (model.empty()) return absl::InvalidArgumentError("model: empty");
  std::shared_ptr<Entry> e = EntryFor(model);
  std::lock_guard<std::mutex> fl(e->fetch_mu);
  if (e->vocab == nullptr) {
    HERD_RETURN_IF_ERROR(Fetch(model, deadline, e.get()));
  }
  if (e->compiled == nullptr) {
    auto info = MakeChatTemplateInfo(e->chat_template, override_template_);
    if (!info.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model ", ShortName(model), ": chat template: ", info.status().message()));
    }
    e->compiled = std::make_shared<const ChatTemplateInfo>(*std::move(info));
  }
  return e->compiled;
}

std::string VocabCache::ChatTemplateOrigin(const std::string& model) {
  std::shared_ptr<Entry> e;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = entries_.find(model);
    if (it == entries_.end()) return "";
    e = it->second;
  }
  // Never waits on a fetch in progress (the HTTP front calls this on its I/O thread).
  std::unique_lock<std::mutex> fl(e->fetch_mu, std::try_to_lock);
  if (!fl.owns_lock() || e->vocab == nullptr) return "";
  return ChatTemplateOriginOf(e->chat_template, override_template_);
}

absl::Status VocabCache::Fetch(const std::string& model, absl::Time deadline, Entry* e) {
  if (stub_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", ShortName(model), ": no vocabulary (the gateway runs without --loader)"));
  }
  // At least a few seconds for a large vocabulary even when the request is nearly due.
  const absl::Time call_deadline = std::max(deadline, absl::Now() + absl::Seconds(5));
  v1::GetModelInfoRequest req;
  req.set_name(model);
  req.set_include_vocab_gguf(true);
  v1::ModelInfo info;
  const absl::Time t0 = absl::Now();
  grpc::Status st;
  // A connection attempt that fails transiently (a handshake cut while the loader's
  // channel reconnects, a SETTINGS frame late on a loaded machine) is retried once,
  // waiting up to 5 s (within the call's deadline) for the channel to be ready;
  // a loader that stays down still fails within that.
  for (int attempt = 0; attempt < 2; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(
        absl::ToChronoTime(attempt == 0 ? call_deadline : std::min(call_deadline, absl::Now() + absl::Seconds(5))));
    ctx.set_wait_for_ready(attempt > 0);
    st = stub_->GetModelInfo(&ctx, req, &info);
    if (st.error_code() != grpc::StatusCode::UNAVAILABLE) break;
  }
  if (!st.ok()) {
    const std::string msg = absl::StrCat("loader ", loader_address_, ": GetModelInfo(", ShortName(model),
                                         "): ", ShortName(st.error_message(), 512));
    switch (st.error_code()) {
      case grpc::StatusCode::NOT_FOUND:
        return absl::NotFoundError(absl::StrCat("model '", ShortName(model), "' not found (", msg, ")"));
      case grpc::StatusCode::INVALID_ARGUMENT:
        return absl::InvalidArgumentError(msg);
      case grpc::StatusCode::FAILED_PRECONDITION:
        return absl::FailedPreconditionError(msg);
      default:
        return absl::UnavailableError(msg);
    }
  }
  if (info.vocab_gguf().empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("loader ", loader_address_, " sent no vocab_gguf for model ", ShortName(model)));
  }
  auto file = gguf::GgufFile::FromBytes(std::move(*info.mutable_vocab_gguf()), model + ".vocab.gguf");
  if (!file.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", ShortName(model), ": vocabulary: ", file.status().message()));
  }
  auto vocab = tokenizer::Vocab::FromGguf(**file);
  if (!vocab.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("model ", ShortName(model), ": vocabulary: ", vocab.status().message()));
  }
  std::string chat_template;
  if (const gguf::Value* v = (*file)->Find("tokenizer.chat_template");
      v != nullptr && v->type() == gguf::ValueType::STRING) {
    chat_template = v->AsString();
  }
  HERD_LOG(Info) << "vocabulary of " << model << ": " << (*vocab)->n_tokens() << " tokens ("
                 << tokenizer::VocabTypeName((*vocab)->type()) << ") from loader in "
                 << absl::ToDoubleMilliseconds(absl::Now() - t0)
                 << " ms; chat template: " << ChatTemplateOriginOf(chat_template, override_template_);
  e->vocab = std::shared_ptr<const tokenizer::Vocab>(std::move(*vocab));
  e->chat_template = std::move(chat_template);
  e->compiled = nullptr;
  return absl::OkStatus();
}

}  // namespace herd::gateway
