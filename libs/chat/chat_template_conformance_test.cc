// Conformance of libs/chat against Python Jinja2 3.1 (transformers' chat-template
// environment): $HERD_SHARED/reference/chat-templates holds 56 real models' templates
// (NAME.jinja) and NAME.json with 8 conversations each and what Jinja2 rendered
// (`rendered`) or that it raised (`error`). Every render must be equal byte for byte,
// and every error case must fail with Jinja2's message. Skips when the shared data is absent.
#include <dirent.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/chat/chat_template.h"
#include "tests/shared_data.h"

namespace herd::chat {
namespace {

// 2026-01-15 10:30:00 UTC, the time the oracle fixed strftime_now to.
constexpr int64_t kOracleNow = 1768473000;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<std::string> TemplateNames(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n.size() > 6 && n.substr(n.size() - 6) == ".jinja") names.push_back(n.substr(0, n.size() - 6));
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A short description of where two strings first differ, with context.
std::string Diff(const std::string& want, const std::string& got) {
  size_t k = 0;
  while (k < want.size() && k < got.size() && want[k] == got[k]) ++k;
  const size_t from = k > 60 ? k - 60 : 0;
  auto show = [&](const std::string& s) {
    nlohmann::json j = s.substr(from, std::min<size_t>(s.size() - std::min(from, s.size()), 160));
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  std::ostringstream os;
  os << "first difference at byte " << k << " (want " << want.size() << " bytes, got " << got.size()
     << ")\n  want: " << show(want) << "\n  got:  " << show(got);
  return os.str();
}

TEST(ChatTemplateConformance, AllReferenceTemplates) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string dir = shared + "/reference/chat-templates";
  const std::vector<std::string> names = TemplateNames(dir);
  if (names.empty()) GTEST_SKIP() << "no templates in " << dir;
  int total = 0, matched = 0;
  for (const auto& name : names) {
    const std::string source = ReadFile(dir + "/" + name + ".jinja");
    const auto ref = nlohmann::ordered_json::parse(ReadFile(dir + "/" + name + ".json"));
    auto tmpl = ChatTemplate::Parse(source);
    for (const auto& c : ref["cases"]) {
      ++total;
      const std::string id = name + "/" + c["id"].get<std::string>();
      if (!tmpl.ok()) {
        ADD_FAILURE() << id << ": parse failed: " << tmpl.status();
        continue;
      }
      ChatTemplateInputs in;
      in.messages = c["messages"];
      if (c.contains("tools")) in.tools = c["tools"];
      in.add_generation_prompt = c.value("add_generation_prompt", false);
      in.bos_token = c.value("bos_token", "<s>");
      in.eos_token = c.value("eos_token", "</s>");
      in.now_unix_seconds = kOracleNow;
      auto out = tmpl->Apply(in);
      if (c.contains("error")) {
        // The oracle's error is "TypeName: message"; ours must carry the same message.
        std::string want_msg = c["error"].get<std::string>();
        if (size_t p = want_msg.find(": "); p != std::string::npos) want_msg = want_msg.substr(p + 2);
        if (out.ok()) {
          ADD_FAILURE() << id << ": Jinja2 raised " << c["error"] << " but we rendered";
        } else if (std::string(out.status().message()).find(want_msg) == std::string::npos) {
          ADD_FAILURE() << id << ": Jinja2 raised " << c["error"] << " but we failed with " << out.status();
        } else {
          ++matched;
          if (std::getenv("CHAT_CONFORMANCE_VERBOSE")) {
            std::printf("%s: Jinja2 %s | ours %s\n", id.c_str(), c["error"].dump().c_str(),
                        out.status().ToString().c_str());
          }
        }
        continue;
      }
      const std::string want = c["rendered"].get<std::string>();
      if (!out.ok()) {
        ADD_FAILURE() << id << ": render failed: " << out.status();
      } else if (*out != want) {
        ADD_FAILURE() << id << ": " << Diff(want, *out);
      } else {
        ++matched;
      }
    }
  }
  std::printf("chat templates: %d/%d cases match (%zu templates)\n", matched, total, names.size());
  EXPECT_EQ(matched, total);
}

// Every reference template with conversations it was not written for (missing and
// null fields, content parts, wrong types, odd tool calls): each render must succeed or
// fail with a Status — never crash (this test also runs under ASan + UBSan).
TEST(ChatTemplateConformance, OddInputsNeverCrash) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string dir = shared + "/reference/chat-templates";
  const char* kMessages[] = {
      R"([])",
      R"([{"role": "user"}])",
      R"([{"role": "user", "content": null}])",
      R"([{"role": "user", "content": 42}, {"role": "assistant", "content": 1.5}])",
      R"([{"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image"}]}])",
      R"([{"content": "no role"}])",
      R"([{"role": "system", "content": "s"}, {"role": "system", "content": "s2"}])",
      R"([{"role": "assistant", "content": "first"}])",
      R"([{"role": "tool", "content": "orphan tool result"}])",
      R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": null,
          "tool_calls": [{"id": "1", "type": "function",
                          "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
          {"role": "tool", "tool_call_id": "1", "content": "r"}])",
      R"([{"role": "user", "content": "q"}, {"role": "assistant",
          "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, {"b": null}]}}}]}])",
      R"({"role": "user", "content": "not a list"})",
      R"("a string")",
      R"([1, null, "x", [], {}])",
  };
  const char* kTools[] = {nullptr, R"([])", R"([{"type": "function", "function": {"name": "f"}}])",
                          R"([{"name": "bare", "parameters": {}}])", R"({"not": "a list"})"};
  const std::vector<std::string> names = TemplateNames(dir);
  if (names.empty()) GTEST_SKIP() << "no templates in " << dir;
  int renders = 0, errors = 0;
  for (const auto& name : names) {
    auto tmpl = ChatTemplate::Parse(ReadFile(dir + "/" + name + ".jinja"));
    ASSERT_TRUE(tmpl.ok()) << name << ": " << tmpl.status();
    for (const char* m : kMessages) {
      for (const char* t : kTools) {
        for (bool gen : {false, true}) {
          ChatTemplateInputs in;
          in.messages = nlohmann::ordered_json::parse(m);
          if (t) in.tools = nlohmann::ordered_json::parse(t);
          in.add_generation_prompt = gen;
          in.now_unix_seconds = kOracleNow;
          auto out = tmpl->Apply(in);
          out.ok() ? ++renders : ++errors;
        }
      }
    }
  }
  std::printf("odd inputs: %d renders, %d clean errors\n", renders, errors);
}

}  // namespace
}  // namespace herd::chat
