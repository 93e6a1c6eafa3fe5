// Unit tests of the chat-template interpreter's language pieces.
#include "libs/chat/chat_template.h"

#include "gtest/gtest.h"

namespace herd::chat {
namespace {

std::string Render(std::string_view src, nlohmann::ordered_json ctx = nlohmann::ordered_json::object()) {
  auto t = ChatTemplate::Parse(src);
  if (!t.ok()) return "PARSE ERROR: " + std::string(t.status().message());
  ChatTemplateInputs in;
  in.extra_context = std::move(ctx);
  in.now_unix_seconds = 1768473000;
  auto r = t->Apply(in);
  if (!r.ok()) return "ERROR: " + std::string(r.status().message());
  return *r;
}

TEST(ChatTemplate, Smoke) {
  EXPECT_EQ(Render("Hello {{ 'world' }}!"), "Hello world!");
}

}  // namespace
}  // namespace herd::chat
