// herd chat-template: template from a GGUF (tokenizer.chat_template, BOS/EOS from its
// vocabulary), the ChatML fallback, template files, request-object messages, errors.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "libs/gguf/gguf.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string WriteText(const std::string& name, const std::string& text) {
  const std::string path = TempPath(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A vocabulary-only GGUF: four tokens, BOS 1, EOS 2, and optionally a chat template.
std::string WriteModel(const std::string& name, const std::string& chat_template) {
  gguf::GgufWriter w;
  w.SetValue("general.architecture", gguf::Value::String("llama"));
  w.SetValue("tokenizer.ggml.model", gguf::Value::String("llama"));
  w.SetValue("tokenizer.ggml.tokens", gguf::Value::StringArray({"<unk>", "<s>", "</s>", "a"}));
  w.SetValue("tokenizer.ggml.scores", gguf::Value::F32Array({0, 0, 0, 0}));
  w.SetValue("tokenizer.ggml.token_type", gguf::Value::I32Array({2, 3, 3, 1}));
  w.SetValue("tokenizer.ggml.bos_token_id", gguf::Value::U32(1));
  w.SetValue("tokenizer.ggml.eos_token_id", gguf::Value::U32(2));
  if (!chat_template.empty()) w.SetValue("tokenizer.chat_template", gguf::Value::String(chat_template));
  const std::string path = TempPath(name);
  EXPECT_TRUE(w.WriteFile(path).ok());
  return path;
}

struct Result {
  int rc;
  std::string out;
};

Result RunCmd(std::vector<std::string> args) {
  args.insert(args.begin(), {"herd", "chat-template"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  const int rc = CmdChatTemplate(static_cast<int>(argv.size()), argv.data());
  std::fflush(stdout);
  return {rc, testing::internal::GetCapturedStdout()};
}

TEST(CmdChatTemplate, TemplateAndSpecialTokensFromGguf) {
  const std::string model =
      WriteModel("with_template.gguf",
                 "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}"
                 "{% if add_generation_prompt %}[assistant]{% endif %}");
  const std::string msgs = WriteText("m1.json", R"([{"role": "user", "content": "hi"}])");
  Result r = RunCmd({"-m", model, "--messages", msgs, "--add-generation-prompt"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "<s>[user]hi</s>[assistant]");
  r = RunCmd({"-m", model, "--messages", msgs});
  EXPECT_EQ(r.out, "<s>[user]hi</s>");
}

TEST(CmdChatTemplate, ChatMlWhenTheModelHasNoTemplate) {
  const std::string model = WriteModel("no_template.gguf", "");
  const std::string msgs = WriteText("m2.json", R"([{"role": "user", "content": "hi"}])");
  Result r = RunCmd({"-m", model, "--messages", msgs, "--add-generation-prompt"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(CmdChatTemplate, TemplateFileToolsAndRequestObjects) {
  const std::string tmpl =
      WriteText("t.jinja", "{{ bos_token }}{{ tools | tojson }}{% for m in messages %}|{{ m.content }}{% endfor %}");
  const std::string msgs = WriteText("m3.json", R"([{"role": "user", "content": "q"}])");
  const std::string tools = WriteText("tools.json", R"([{"type": "function", "function": {"name": "f"}}])");
  Result r = RunCmd({"--chat-template", tmpl, "--messages", msgs, "--tools", tools});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, R"(<s>[{"type": "function", "function": {"name": "f"}}]|q)");
  const std::string req =
      WriteText("req.json", R"({"messages": [{"role": "user", "content": "r"}], "tools": [{"type": "x"}]})");
  r = RunCmd({"--chat-template", tmpl, "--messages", req});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, R"(<s>[{"type": "x"}]|r)");
}

TEST(CmdChatTemplate, Errors) {
  const std::string msgs = WriteText("m4.json", R"([{"role": "system", "content": "s"}])");
  EXPECT_EQ(RunCmd({"--messages", msgs}).rc, 2);                                     // no template
  EXPECT_EQ(RunCmd({"--chat-template", "x", "-m", "y", "--messages", msgs}).rc, 2);  // both
  const std::string tmpl = WriteText("t2.jinja", "x");
  EXPECT_EQ(RunCmd({"--chat-template", tmpl}).rc, 2);  // no messages
  const std::string raising = WriteText("t3.jinja", "{{ raise_exception('System role not supported') }}");
  EXPECT_EQ(RunCmd({"--chat-template", raising, "--messages", msgs}).rc, 1);
  const std::string broken = WriteText("t4.jinja", "{% if %}");
  EXPECT_EQ(RunCmd({"--chat-template", broken, "--messages", msgs}).rc, 1);
  const std::string bad_json = WriteText("bad.json", "[{");
  EXPECT_EQ(RunCmd({"--chat-template", tmpl, "--messages", bad_json}).rc, 1);
  EXPECT_EQ(RunCmd({"--chat-template", tmpl, "--messages", TempPath("missing.json")}).rc, 1);
}

}  // namespace
}  // namespace herd::cli
