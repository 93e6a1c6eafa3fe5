// herd chat-template (-m MODEL.gguf | --chat-template FILE) --messages FILE.json
//                    [--tools FILE.json] [--add-generation-prompt]
// Renders a conversation with a model's chat template (libs/chat: Jinja2 with Hugging
// Face apply_chat_template semantics) and prints the prompt to stdout, without an
// added newline. With -m the template is the GGUF's tokenizer.chat_template and
// bos_token/eos_token are the vocabulary's BOS/EOS token texts; a model without a
// template falls back to ChatML (a note on stderr). The messages file holds an
// OpenAI-style message list, or a request object with "messages" (and "tools").
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

#include "libs/base/json_nesting.h"
#include "libs/base/mmap.h"
#include "libs/base/status_macros.h"
#include "libs/chat/chat_template.h"
#include "libs/gguf/gguf.h"
#include "libs/tokenizer/tokenizer.h"
#include "tools/herd/args.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {

absl::StatusOr<nlohmann::ordered_json> ReadJson(const std::string& path) {
  HERD_ASSIGN_OR_RETURN(auto text, ReadFileToString(path));
  HERD_RETURN_IF_ERROR(CheckJsonNesting(text, path));
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid JSON"));
  return j;
}

// Token text of a special token: from the vocabulary when it loads, else straight from
// tokenizer.ggml.tokens[tokenizer.ggml.<which>_token_id]; "" when the model has none.
std::string SpecialToken(const gguf::GgufFile& f, const tokenizer::Vocab* vocab, bool bos) {
  if (vocab) {
    const int32_t id = bos ? vocab->bos() : vocab->eos();
    return id == tokenizer::kTokenNull ? "" : vocab->TokenText(id);
  }
  auto id = f.GetInt(bos ? "tokenizer.ggml.bos_token_id" : "tokenizer.ggml.eos_token_id");
  auto tokens = f.GetStringArray("tokenizer.ggml.tokens");
  if (!id.ok() || !tokens.ok() || *id < 0 || *id >= static_cast<int64_t>(tokens->size())) return "";
  return (*tokens)[*id];
}

// Fills the template source and special tokens from a GGUF model.
absl::Status FromModel(const std::string& path, std::string* source, chat::ChatTemplateInputs* in) {
  HERD_ASSIGN_OR_RETURN(auto file, gguf::GgufFile::Open(path));
  const gguf::GgufFile& f = *file;
  auto tmpl = f.GetString("tokenizer.chat_template");
  if (tmpl.ok()) {
    *source = *tmpl;
  } else if (absl::IsNotFound(tmpl.status())) {
    std::fprintf(stderr, "herd: note: %s has no tokenizer.chat_template; using ChatML\n", path.c_str());
    *source = std::string(chat::ChatMlTemplate());
  } else {
    return tmpl.status();
  }
  auto vocab = tokenizer::Vocab::FromGguf(f);
  const tokenizer::Vocab* v = vocab.ok() ? vocab->get() : nullptr;
  in->bos_token = SpecialToken(f, v, true);
  in->eos_token = SpecialToken(f, v, false);
  return absl::OkStatus();
}

}  // namespace

int CmdChatTemplate(int argc, char** argv) {
  static const std::vector<FlagSpec> specs = {
      {{"-m", "--model"}, true, "GGUF model: its tokenizer.chat_template and BOS/EOS tokens", ""},
      {{"--chat-template"}, true, "Jinja template file (bos_token <s>, eos_token </s>)", ""},
      {{"--messages"}, true, "JSON file: [{role, content, ...}] or {\"messages\": [...], \"tools\": [...]}", ""},
      {{"--tools"}, true, "JSON file: OpenAI tool list (defines the template's `tools`)", ""},
      {{"--add-generation-prompt"}, false, "end with the assistant turn's opening", ""},
  };
  const std::string usage =
      "usage: herd chat-template (-m MODEL.gguf | --chat-template FILE) --messages FILE.json "
      "[--tools FILE.json] [--add-generation-prompt]\n" +
      Args::Usage(specs);
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help") {
      std::fputs(usage.c_str(), stdout);
      return 0;
    }
  }
  auto args = Args::Parse(specs, argc, argv, 2);
  auto usage_error = [&](const std::string& msg) { return UsageError(msg, usage); };
  if (!args.ok()) return usage_error(std::string(args.status().message()));
  if (args->Has("-m") == args->Has("--chat-template")) {
    return usage_error("chat-template: give one of -m MODEL or --chat-template FILE");
  }
  if (!args->Has("--messages")) return usage_error("chat-template: --messages FILE is required");

  chat::ChatTemplateInputs in;
  in.add_generation_prompt = args->Has("--add-generation-prompt");
  std::string source;
  if (args->Has("-m")) {
    if (auto st = FromModel(args->Get("-m"), &source, &in); !st.ok()) return Fail(st);
  } else {
    auto text = ReadFileToString(args->Get("--chat-template"));
    if (!text.ok()) return Fail(text.status());
    source = *std::move(text);
  }
  auto messages = ReadJson(args->Get("--messages"));
  if (!messages.ok()) return Fail(messages.status());
  if (messages->is_object() && messages->contains("messages")) {
    if (messages->contains("tools")) in.tools = (*messages)["tools"];
    in.messages = (*messages)["messages"];
  } else {
    in.messages = *std::move(messages);
  }
  if (!in.messages.is_array()) return Fail(absl::InvalidArgumentError("--messages: expected a JSON list of messages"));
  if (args->Has("--tools")) {
    auto tools = ReadJson(args->Get("--tools"));
    if (!tools.ok()) return Fail(tools.status());
    in.tools = *std::move(tools);
  }
  auto tmpl = chat::ChatTemplate::Parse(source);
  if (!tmpl.ok()) return Fail(absl::InvalidArgumentError(absl::StrCat("chat template: ", tmpl.status().message())));
  auto out = tmpl->Apply(in);
  if (!out.ok()) return Fail(absl::InvalidArgumentError(absl::StrCat("chat template: ", out.status().message())));
  std::fwrite(out->data(), 1, out->size(), stdout);
  return 0;
}

}  // namespace herd::cli
