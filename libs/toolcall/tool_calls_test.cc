// Tool-call and reasoning parsing, and forced-call grammars.
//
// Golden round trips: each template family's tool-call syntax is taken from what the
// real template renders for an assistant message with tool_calls
// (../shared/reference/chat-templates/*.json, case "tool-call-roundtrip": get_weather
// with {"city": "Paris"}, rendered by Python's Jinja2): the assistant turn's text must
// parse back into exactly that call, whole and streamed in any chunking, and must be a
// sentence of the family's forced-call grammar.
#include "libs/toolcall/tool_calls.h"

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/grammar/gbnf.h"
#include "libs/grammar/matcher.h"
#include "libs/grammar/random_walk.h"
#include "libs/toolcall/forced_call.h"
#include "tests/shared_data.h"

namespace herd::toolcall {
namespace {

using json = nlohmann::json;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The message a StreamParser gives for `text` fed in chunks of `chunk` bytes (0 = whole),
// checking that the deltas add up to the final message.
Message Stream(const ParserConfig& c, const std::string& text, size_t chunk) {
  StreamParser p(c);
  Message acc;
  auto add = [&](const StreamParser::Delta& d) {
    acc.reasoning += d.reasoning;
    acc.content += d.content;
    for (const auto& [i, call] : d.calls) {
      EXPECT_EQ(i, static_cast<int>(acc.tool_calls.size()));
      acc.tool_calls.push_back(call);
    }
  };
  if (chunk == 0) chunk = text.size() + 1;
  for (size_t i = 0; i < text.size(); i += chunk) add(p.Feed(text.substr(i, chunk)));
  add(p.Finish());
  EXPECT_EQ(acc.reasoning, p.message().reasoning);
  EXPECT_EQ(acc.content, p.message().content);
  EXPECT_EQ(acc.tool_calls.size(), p.message().tool_calls.size());
  return acc;
}

// Parses whole and streamed in several chunkings; all must agree (ids aside).
Message ParseAll(const ParserConfig& c, const std::string& text) {
  const Message whole = Parse(c, text, /*partial=*/false);
  for (size_t chunk : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}}) {
    SCOPED_TRACE(testing::Message() << "chunk " << chunk);
    const Message s = Stream(c, text, chunk);
    EXPECT_EQ(s.reasoning, whole.reasoning);
    EXPECT_EQ(s.content, whole.content);
    EXPECT_EQ(s.tool_calls.size(), whole.tool_calls.size());
    for (size_t i = 0; i < std::min(s.tool_calls.size(), whole.tool_calls.size()); ++i) {
      EXPECT_EQ(s.tool_calls[i].name, whole.tool_calls[i].name);
      EXPECT_EQ(s.tool_calls[i].arguments, whole.tool_calls[i].arguments);
      EXPECT_EQ(s.tool_calls[i].id.size(), 9u);
    }
  }
  return whole;
}

json Args(const ToolCall& c) { return json::parse(c.arguments); }

struct Golden {
  const char* tmpl;
  Format format;
  const char* assistant;  // the assistant header after the user's question
  const char* end;        // the end of the assistant's turn
  bool reasoning_open;    // the generation prompt opened <think>
  bool exact_syntax;      // the render is exactly the forced grammar's spacing
};

const Golden kGolden[] = {
    {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", Format::kHermes, "<|im_start|>assistant\n", "<|im_end|>", false,
     true},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", Format::kHermes, "<|im_start|>assistant\n", "<|im_end|>", false,
     true},
    {"Qwen-Qwen2.5-7B-Instruct", Format::kHermes, "<|im_start|>assistant\n", "<|im_end|>", false, true},
    {"Qwen-Qwen3-0.6B", Format::kHermes, "<|im_start|>assistant\n", "<|im_end|>", false, true},
    {"Qwen-QwQ-32B", Format::kHermes, "<|im_start|>assistant\n", "<|im_end|>", false, true},
    {"Qwen3-Coder", Format::kQwen3Coder, "<|im_start|>assistant\n", "<|im_end|>", false, true},
    {"meta-llama-Llama-3.1-8B-Instruct", Format::kLlama3, "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|eot_id|>", false, true},
    {"meta-llama-Llama-3.2-3B-Instruct", Format::kLlama3, "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|eot_id|>", false, true},
    {"meta-llama-Llama-3.3-70B-Instruct", Format::kLlama3, "<|start_header_id|>assistant<|end_header_id|>\n\n",
     "<|eot_id|>", false, true},
    {"unsloth-mistral-Devstral-Small-2507", Format::kMistralArgs, "[/INST]", "</s>", false, true},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", Format::kDeepSeek, "<｜Assistant｜>", "<｜end▁of▁sentence｜>", false,
     true},
    {"deepseek-ai-DeepSeek-V3.1", Format::kDeepSeekV3, "<｜Assistant｜>", "<｜end▁of▁sentence｜>", false, true},
    {"GLM-4.6", Format::kGlm, "<|assistant|>", "<|observation|>", false, true},
    {"GLM-4.7-Flash", Format::kGlm, "<|assistant|>", "<|observation|>", true, false},
};

bool GrammarAccepts(const std::string& gbnf, const std::string& text) {
  auto g = grammar::Grammar::Parse(gbnf);
  if (!g.ok()) return false;
  auto m = grammar::Matcher::Create(*g);
  return m.ok() && m->AcceptBytes(text).ok() && m->CanEnd();
}

const json kWeatherTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Get the weather in a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "City name"},
   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time"}}])");

TEST(ToolCalls, GoldenRoundTripsOfRealTemplates) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const std::string dir = shared + "/reference/chat-templates/";
  for (const Golden& g : kGolden) {
    SCOPED_TRACE(g.tmpl);
    const std::string src = ReadAll(dir + g.tmpl + ".jinja");
    ASSERT_FALSE(src.empty());
    EXPECT_EQ(DetectFormat(src), g.format) << FormatName(DetectFormat(src));
    const json cases = json::parse(ReadAll(dir + g.tmpl + ".json"))["cases"];
    std::string rendered;
    for (const json& c : cases) {
      if (c["id"] == "tool-call-roundtrip") rendered = c.value("rendered", "");
    }
    ASSERT_FALSE(rendered.empty());
    const size_t q = rendered.find("Paris?");
    const size_t a = rendered.find(g.assistant, q);
    ASSERT_NE(a, std::string::npos);
    const size_t b = a + std::string(g.assistant).size();
    const size_t e = rendered.find(g.end, b);
    ASSERT_NE(e, std::string::npos);
    const std::string turn = rendered.substr(b, e - b);
    ParserConfig c{g.format, TemplateHasThinking(src), g.reasoning_open};
    const Message m = ParseAll(c, turn);
    EXPECT_EQ(m.content, "") << turn;
    EXPECT_EQ(m.reasoning, "");
    ASSERT_EQ(m.tool_calls.size(), 1u) << turn;
    EXPECT_EQ(m.tool_calls[0].name, "get_weather");
    EXPECT_EQ(Args(m.tool_calls[0]), json({{"city", "Paris"}}));
    if (g.exact_syntax) {
      // The template's own rendering of the call is a sentence of the forced grammar.
      std::string call = turn;
      const size_t think = call.find("</think>");
      if (think != std::string::npos) call = call.substr(think + 8);
      while (!call.empty() && (call.front() == '\n' || call.front() == ' ')) call.erase(0, 1);
      while (!call.empty() && (call.back() == '\n' || call.back() == ' ')) call.pop_back();
      auto gbnf = ForcedCallGrammar(g.format, kWeatherTools, "", /*parallel=*/true);
      ASSERT_TRUE(gbnf.ok()) << gbnf.status();
      EXPECT_TRUE(GrammarAccepts(*gbnf, call)) << call << "\n" << *gbnf;
    }
  }
}

TEST(ToolCalls, HermesContentAroundCalls) {
  const ParserConfig c{Format::kHermes, false, false};
  Message m = ParseAll(c,
                       "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
                       "<tool_call>{\"name\": \"b\", \"arguments\": \"{\\\"y\\\": [2]}\"}</tool_call>\nDone.");
  EXPECT_EQ(m.content, "Let me check.Done.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].name, "a");
  EXPECT_EQ(Args(m.tool_calls[0]), json({{"x", 1}}));
  EXPECT_EQ(m.tool_calls[1].name, "b");
  EXPECT_EQ(Args(m.tool_calls[1]), json({{"y", {2}}}));
  // No arguments, and empty arguments.
  m = ParseAll(c,
               "<tool_call>{\"name\": \"now\"}</tool_call><tool_call>{\"name\": \"n\", \"arguments\": {}}</tool_call>");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[0].arguments, "{}");
  EXPECT_EQ(m.tool_calls[1].arguments, "{}");
}

TEST(ToolCalls, BrokenCallsStayContent) {
  const ParserConfig c{Format::kHermes, false, false};
  // Not JSON, no name, arguments not an object, never closed: the text is kept.
  for (const std::string text : {"<tool_call>{\"name\": \"a\", </tool_call>", "<tool_call>{\"x\": 1}</tool_call>",
                                 "<tool_call>{\"name\": \"a\", \"arguments\": 3}</tool_call>",
                                 "<tool_call>{\"name\": \"a\", \"arguments\": {}}"}) {
    SCOPED_TRACE(text);
    const Message m = ParseAll(c, text);
    EXPECT_TRUE(m.tool_calls.empty());
    EXPECT_EQ(m.content, text);
  }
  // A marker prefix at the end is content once the output ends.
  EXPECT_EQ(ParseAll(c, "see <tool_").content, "see <tool_");
  // 10^5-deep nesting inside a call: refused by the nesting bound, kept as text.
  const std::string deep = "<tool_call>{\"name\": \"a\", \"arguments\": " + std::string(100000, '[') + "</tool_call>";
  const Message m = Parse(c, deep, false);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content.size(), deep.size());
}

TEST(ToolCalls, Reasoning) {
  ParserConfig c{Format::kNone, true, false};
  Message m = ParseAll(c, "<think>\nLet me think.\n</think>\n\nHello.");
  EXPECT_EQ(m.reasoning, "Let me think.");
  EXPECT_EQ(m.content, "Hello.");
  m = ParseAll(c, "No thinking here.");
  EXPECT_EQ(m.reasoning, "");
  EXPECT_EQ(m.content, "No thinking here.");
  m = ParseAll(c, "<think>cut off by max_tokens");
  EXPECT_EQ(m.reasoning, "cut off by max_tokens");
  EXPECT_EQ(m.content, "");
  c.reasoning_open = true;  // the prompt ended with <think>
  m = ParseAll(c, "pondering</think>Answer");
  EXPECT_EQ(m.reasoning, "pondering");
  EXPECT_EQ(m.content, "Answer");
  // Reasoning off (--reasoning_format none): the text is content, tags and all.
  m = ParseAll(ParserConfig{Format::kNone, false, false}, "<think>a</think>b");
  EXPECT_EQ(m.content, "<think>a</think>b");
  // Reasoning, then a call.
  m = ParseAll(ParserConfig{Format::kHermes, true, false},
               "<think>need weather</think>\n<tool_call>\n{\"name\": \"w\", \"arguments\": {}}\n</tool_call>");
  EXPECT_EQ(m.reasoning, "need weather");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
}

TEST(ToolCalls, OtherFamilies) {
  // Llama 3.x: the whole output, or after <|python_tag|>.
  Message m = ParseAll({Format::kLlama3, false, false}, " {\"name\": \"f\", \"parameters\": {\"a\": \"b\"}}");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(Args(m.tool_calls[0]), json({{"a", "b"}}));
  m = ParseAll({Format::kLlama3, false, false}, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  m = ParseAll({Format::kLlama3, false, false}, "{not a call} and text");
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "{not a call} and text");
  // Mistral Nemo: a JSON array after [TOOL_CALLS].
  m = ParseAll({Format::kMistral, false, false},
               "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}, \"id\": \"abcdefghi\"}, {\"name\": \"b\", "
               "\"arguments\": {\"k\": true}}]");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[1].name, "b");
  // Mistral Small 3.2: parallel calls.
  m = ParseAll({Format::kMistralArgs, false, false}, "[TOOL_CALLS]a[ARGS]{}[TOOL_CALLS]b[ARGS]{\"x\": 2}");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(Args(m.tool_calls[1]), json({{"x", 2}}));
  // Qwen3-Coder: typed values.
  m = ParseAll({Format::kQwen3Coder, false, false},
               "<tool_call>\n<function=f>\n<parameter=n>\n42\n</parameter>\n<parameter=s>\nhello world\n"
               "</parameter>\n<parameter=l>\n[1, 2]\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(Args(m.tool_calls[0]), json::parse(R"({"n": 42, "s": "hello world", "l": [1, 2]})"));
  // DeepSeek R1 without the closing <｜tool▁calls▁end｜> (stopped by EOS).
  m = ParseAll({Format::kDeepSeek, false, false},
               "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```"
               "<｜tool▁call▁end｜>");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  // Generic: {"tool_call": ...}, {"tool_calls": [...]}, {"response": ...}, plain text.
  m = ParseAll({Format::kGeneric, false, false}, "{\"tool_call\": {\"name\": \"f\", \"arguments\": {\"q\": 1}}}");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  m = ParseAll({Format::kGeneric, false, false},
               "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {}}, {\"name\": \"g\", \"arguments\": {}}]}");
  EXPECT_EQ(m.tool_calls.size(), 2u);
  m = ParseAll({Format::kGeneric, false, false}, "{\"response\": \"hi\"}");
  EXPECT_EQ(m.content, "hi");
  EXPECT_TRUE(m.tool_calls.empty());
  m = ParseAll({Format::kGeneric, false, false}, "Just text {x}");
  EXPECT_EQ(m.content, "Just text {x}");
  // No tools: the text as it is.
  m = ParseAll({Format::kNone, false, false}, "<tool_call>{\"name\": \"a\"}</tool_call>");
  EXPECT_EQ(m.content, "<tool_call>{\"name\": \"a\"}</tool_call>");
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(ToolCalls, ContentStreamsBeforeTheOutputEnds) {
  StreamParser p({Format::kHermes, true, false});
  EXPECT_EQ(p.Feed("<think>a").reasoning, "a");
  EXPECT_EQ(p.Feed("b</thi").reasoning, "b");
  EXPECT_EQ(p.Feed("nk>Hello ").content, "Hello");
  StreamParser::Delta d = p.Feed("world <tool_");
  EXPECT_EQ(d.content, " world");
  d = p.Feed("call>{\"name\": \"f\"}</tool_call>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].second.name, "f");
  EXPECT_TRUE(p.Finish().empty());
}

// Every family's forced grammar: random sentences parse back into valid calls.
TEST(ForcedCall, RandomSentencesAreValidCalls) {
  std::mt19937 rng(7);
  for (Format f : {Format::kGeneric, Format::kHermes, Format::kLlama3, Format::kMistral, Format::kMistralArgs,
                   Format::kQwen3Coder, Format::kGlm, Format::kDeepSeek, Format::kDeepSeekV3}) {
    for (const char* only : {"", "get_weather"}) {
      SCOPED_TRACE(testing::Message() << FormatName(f) << " only=" << only);
      auto gbnf = ForcedCallGrammar(f, kWeatherTools, only, /*parallel=*/true);
      ASSERT_TRUE(gbnf.ok()) << gbnf.status();
      auto g = grammar::Grammar::Parse(*gbnf);
      ASSERT_TRUE(g.ok()) << g.status() << "\n" << *gbnf;
      const bool xml = f == Format::kQwen3Coder || f == Format::kGlm;
      int walks = 0;
      for (int tries = 0; walks < 20 && tries < (xml ? 30 : 100); ++tries) {
        auto m = grammar::Matcher::Create(*g);
        ASSERT_TRUE(m.ok());
        auto s = grammar::RandomWalk(*m, rng, 120, 1500);
        if (!s.ok()) continue;
        // The JSON grammar allows any \uXXXX, a lone surrogate too (as llama.cpp's);
        // nlohmann refuses those, so such a sentence is not a call. Not drawn here.
        if (absl::StrContains(absl::AsciiStrToLower(*s), "\\ud")) continue;
        ++walks;
        const Message msg = Parse({f, false, false}, *s, false);
        ASSERT_FALSE(msg.tool_calls.empty()) << *s;
        EXPECT_EQ(msg.content, "") << *s;
        for (const ToolCall& call : msg.tool_calls) {
          if (*only != 0) {
            EXPECT_EQ(call.name, only);
          }
          const json args = json::parse(call.arguments, nullptr, false);
          ASSERT_TRUE(args.is_object()) << *s;
          if (call.name == "get_weather") {
            ASSERT_TRUE(args.contains("city")) << *s;
            EXPECT_TRUE(args["city"].is_string()) << *s;
          } else {
            EXPECT_EQ(call.name, "get_time");
          }
        }
      }
      // The XML families' string values are free text ([^<]*), which the walker's
      // completion heuristic rarely leaves: their sentences are checked below instead.
      if (!xml) {
        EXPECT_EQ(walks, 20);
      }
    }
  }
}

TEST(ForcedCall, XmlFamiliesSentences) {
  const std::string qwen =
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco, \"CA\"\n"
      "</parameter>\n</function>\n</tool_call>";
  const std::string glm =
      "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Köln\n(DE)</arg_value>\n"
      "</tool_call>";
  for (const auto& [f, text] : {std::pair<Format, std::string>{Format::kQwen3Coder, qwen}, {Format::kGlm, glm}}) {
    SCOPED_TRACE(FormatName(f));
    auto gbnf = ForcedCallGrammar(f, kWeatherTools, "get_weather", /*parallel=*/false);
    ASSERT_TRUE(gbnf.ok()) << gbnf.status();
    EXPECT_TRUE(GrammarAccepts(*gbnf, text)) << *gbnf;
    const Message m = Parse({f, false, false}, text, false);
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_TRUE(Args(m.tool_calls[0])["city"].is_string());
    // A value with '<', a missing required parameter, another function: refused.
    std::string lt = text;
    lt.insert(lt.find("CA") == std::string::npos ? lt.find("(DE)") : lt.find("CA"), "<");
    EXPECT_FALSE(GrammarAccepts(*gbnf, lt));
    EXPECT_FALSE(GrammarAccepts(*gbnf, f == Format::kGlm
                                           ? "<tool_call>get_weather\n</tool_call>"
                                           : "<tool_call>\n<function=get_weather>\n</function>\n</tool_call>"));
    EXPECT_FALSE(GrammarAccepts(*gbnf, f == Format::kGlm
                                           ? "<tool_call>get_time\n</tool_call>"
                                           : "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"));
  }
}

TEST(ForcedCall, Errors) {
  EXPECT_EQ(ForcedCallGrammar(Format::kHermes, kWeatherTools, "nope", true).status().message(),
            "tool_choice.function.name: 'nope' is not one of the tools");
  EXPECT_EQ(ForcedCallGrammar(Format::kHermes, json::array(), "", true).status().message(),
            "tools: required (a non-empty array)");
  EXPECT_EQ(ForcedCallGrammar(Format::kHermes, json::parse(R"([{"type":"function","function":{}}])"), "", true)
                .status()
                .message(),
            "tools[0].function.name: required");
  auto bad = ForcedCallGrammar(
      Format::kHermes,
      json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","not":{}}}}])"), "",
      true);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("tools[0].function.parameters"), std::string::npos) << bad.status();
  EXPECT_FALSE(ForcedCallGrammar(Format::kNone, kWeatherTools, "", true).ok());
}

TEST(ForcedCall, PrefixGbnfRules) {
  EXPECT_EQ(PrefixGbnfRules("root ::= a-b \"x y\" [a-z]{2,3} # c d\na-b ::= root?", "p-"),
            "p-root ::= p-a-b \"x y\" [a-z]{2,3} # c d\np-a-b ::= p-root?");
}

}  // namespace
}  // namespace herd::toolcall
