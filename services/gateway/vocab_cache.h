// Per-model vocabularies and chat templates for the gateway, fetched from the loader
// (GetModelInfo with include_vocab_gguf -> GgufFile::FromBytes -> Vocab::FromGguf, and
// the tokenizer.chat_template string) and cached for the life of the process.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

#include "libs/serving/security.h"
#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/loader.grpc.pb.h"
#include "services/gateway/chat_prompt.h"

namespace herd::gateway {

/// `name` (a model name from a request) as error messages and logs show it: whole when
/// at most `max_bytes` bytes, else its first `max_bytes` bytes (cut back to a UTF-8
/// character boundary) followed by "…", so that a huge name is never echoed whole.
std::string ShortName(absl::string_view name, size_t max_bytes = 64);

/// Thread-safe cache of tokenizers by model name. Concurrent first requests for the
/// same model share one loader call; failures are not cached (the next request asks
/// the loader again).
class VocabCache {
 public:
  /// `loader_address` "host:port"; "" = no loader (every lookup fails with
  /// FAILED_PRECONDITION unless a vocabulary was added with Add()). `security`: TLS and
  /// the cluster key for the loader channel (default plaintext).
  explicit VocabCache(const std::string& loader_address, const serving::ClientSecurity& security = {});

  /// The model's vocabulary. Errors: INVALID_ARGUMENT for an empty name; NOT_FOUND when
  /// the loader does not know the model; UNAVAILABLE (naming the loader) when it cannot
  /// be reached before `deadline`; FAILED_PRECONDITION when there is no loader or the
  /// vocabulary it sent cannot be parsed.
  absl::StatusOr<std::shared_ptr<const tokenizer::Vocab>> Get(const std::string& model, absl::Time deadline);

  /// Installs a vocabulary directly (tests, or models whose vocabulary is known locally),
  /// with the model's chat template source ("" = none: ChatML is used).
  void Add(const std::string& model, std::shared_ptr<const tokenizer::Vocab> vocab, std::string chat_template = "");

  /// A template that replaces every model's own (the gateway's --chat_template file);
  /// "" = use the models' templates. Call before serving.
  void SetChatTemplateOverride(std::string source);

  /// The model's chat template, compiled once: the override, else the GGUF's
  /// tokenizer.chat_template, else ChatML. Errors: those of Get(); INVALID_ARGUMENT when
  /// the template does not parse (naming the model and the position).
  absl::StatusOr<std::shared_ptr<const ChatTemplateInfo>> GetChatTemplate(const std::string& model,
                                                                          absl::Time deadline);
  /// Where the model's chat template comes from ("gguf", "file", "chatml"), without
  /// fetching: "" while the model's vocabulary has not been fetched.
  std::string ChatTemplateOrigin(const std::string& model);

 private:
  struct Entry {
    std::mutex fetch_mu;  // held while one thread asks the loader
    std::shared_ptr<const tokenizer::Vocab> vocab;
    std::string chat_template;                         // tokenizer.chat_template ("" = none)
    std::shared_ptr<const ChatTemplateInfo> compiled;  // made on first use
  };
  std::shared_ptr<Entry> EntryFor(const std::string& model);
  absl::Status Fetch(const std::string& model, absl::Time deadline, Entry* e);

  std::string override_template_;
  std::string loader_address_;
  std::unique_ptr<v1::Loader::Stub> stub_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
};

}  // namespace herd::gateway
