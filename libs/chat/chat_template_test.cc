// Unit tests of the chat-template interpreter: the language pieces (expressions,
// filters, tests, methods, statements, whitespace control), errors with positions, and
// limits. The expected strings of the ChatTemplateJinja tests are what Python Jinja2
// 3.1 renders in transformers' environment (ImmutableSandboxedEnvironment,
// trim_blocks, lstrip_blocks, loopcontrols, strftime_now fixed to 2026-01-15 10:30:00).
#include "libs/chat/chat_template.h"

#include <string>

#include "gtest/gtest.h"

namespace herd::chat {
namespace {

constexpr int64_t kNow = 1768473000;  // 2026-01-15 10:30:00 UTC

absl::StatusOr<std::string> Apply(std::string_view src, const std::string& ctx_json = "{}",
                                  ChatTemplateLimits limits = {}) {
  auto t = ChatTemplate::Parse(src);
  if (!t.ok()) return t.status();
  ChatTemplateInputs in;
  in.extra_context = nlohmann::ordered_json::parse(ctx_json);
  in.now_unix_seconds = kNow;
  in.limits = limits;
  return t->Apply(in);
}

std::string R(std::string_view src, const std::string& ctx_json = "{}") {
  auto r = Apply(src, ctx_json);
  if (!r.ok()) return "ERROR: " + r.status().ToString();
  return *r;
}

void ExpectError(std::string_view src, const std::string& ctx_json, const std::string& msg) {
  auto r = Apply(src, ctx_json);
  ASSERT_FALSE(r.ok()) << src << " rendered " << *r;
  EXPECT_NE(std::string(r.status().message()).find(msg), std::string::npos)
      << src << ": " << r.status() << " (want a message containing: " << msg << ")";
}
void ExpectError(std::string_view src, const std::string& msg) { ExpectError(src, "{}", msg); }

TEST(ChatTemplateJinja, Literals) {
  EXPECT_EQ(R("{{ 'a\\tb\\n' ~ \"c\\\"d\" }}"), "a\tb\nc\"d");
  EXPECT_EQ(R("{{ 'x\\u00e9\\x41' }}"), "xéA");
  EXPECT_EQ(R("{{ 1_000 }}"), "1000");
  EXPECT_EQ(R("{{ 1.0 }} {{ 1.5e3 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 1e-5 }}"),
            "1.0 1500.0 1e+20 0.30000000000000004 1e-05");
  EXPECT_EQ(R("{{ 10 / 4 }} {{ 10 // 4 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7.5 % 2 }}"),
            "2.5 2 -4 2 1024 1.5");
  EXPECT_EQ(R("{{ (1, 2) }} {{ (1,) }} {{ () }} {{ [] }} {{ {} }}"), "(1, 2) (1,) () [] {}");
  EXPECT_EQ(R("{{ {'a': [1, {'b': none}], 'c': 'it\\'s'} }}"), "{'a': [1, {'b': None}], 'c': \"it's\"}");
  EXPECT_EQ(R("{{ true }} {{ True }} {{ none }} {{ None }} {{ false }}"), "True True None None False");
  EXPECT_EQ(R("{{ 'a' 'b' }}"), "ab");
  EXPECT_EQ(R("{{ 3 * 'ab' }} {{ [1] * 3 }}"), "ababab [1, 1, 1]");
  EXPECT_EQ(R("{{ 1 + 2 * 3 - 4 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}"), "3 9 64 4");
  EXPECT_EQ(R("{{ 'x' ~ 1 ~ none ~ true }}"), "x1NoneTrue");
  EXPECT_EQ(R("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
            "True True True True True False");
  EXPECT_EQ(R("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }}"),
            "True True True True");
  EXPECT_EQ(R("{{ 1 and 'x' }} {{ 0 or 'y' }} {{ not none }} {{ [] or {} }}"), "x y True {}");
  EXPECT_EQ(R("{{ 'y' if 1 else 'n' }}{{ 'y' if 0 }}|{{ 'a' if false else 'b' if true else 'c' }}"), "y|b");
}

TEST(ChatTemplateJinja, Subscripts) {
  EXPECT_EQ(R("{{ s[0] }}{{ s[-1] }}{{ s[1:3] }}{{ s[::-1] }}{{ s[::2] }}{{ s[10:] }}|", R"json({"s": "héllo"})json"),
            "hoélolléhhlo|");
  EXPECT_EQ(
      R("{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[-2] }} {{ l.0 }} {{ l[5] }}|", R"json({"l": [1, 2, 3]})json"),
      "[2, 3] [1, 2] [3, 2, 1] 2 1 |");
  EXPECT_EQ(R("{{ d.a }} {{ d['a'] }} {{ d.missing }}|{{ d.items() | list }} {{ d.get('x', 5) }} {{ d.get('a') }} {{ "
              "d.keys() | list }} {{ d.values() | list }}",
              R"json({"d": {"a": 1, "b": 2}})json"),
            "1 1 |[('a', 1), ('b', 2)] 5 1 ['a', 'b'] [1, 2]");
  EXPECT_EQ(R("{{ m.content }}{{ m['role'] }}", R"json({"m": {"role": "user", "content": "hi"}})json"), "hiuser");
}

TEST(ChatTemplateJinja, Undefined) {
  EXPECT_EQ(R("[{{ nope }}]"), "[]");
  EXPECT_EQ(R("{{ nope is defined }} {{ nope is undefined }} {{ nope | default('d') }} {{ none | default('d') }} {{ '' "
              "| default('d', true) }}"),
            "False True d None d");
  EXPECT_EQ(R("{{ nope | length }} {% for x in nope %}x{% endfor %}{{ nope ~ 'a' }}"), "0 a");
  ExpectError("{{ nope.attr }}", "'nope' is undefined");
  ExpectError("{{ nope + 1 }}", "'nope' is undefined");
  ExpectError("{{ d.x is defined }} {{ d.x.y is defined }}", R"json({"d": {}})json",
              "'dict object' has no attribute 'x'");
  EXPECT_EQ(R("{{ nope == nope }} {{ nope is none }}"), "True False");
}

TEST(ChatTemplateJinja, Tests) {
  EXPECT_EQ(R("{{ 'a' is string }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ "
              "true is boolean }}"),
            "True True True True True True");
  EXPECT_EQ(R("{{ {} is mapping }} {{ [] is sequence }} {{ 'a' is sequence }} {{ 'a' is iterable }} {{ 1 is iterable "
              "}} {{ none is none }}"),
            "True True True True False True");
  EXPECT_EQ(R("{{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 'a' is in 'abc' }} "
              "{{ 1 is equalto 1 }} {{ 1 is eq 2 }}"),
            "True True True False True True False");
  EXPECT_EQ(R("{{ true is true }} {{ 1 is true }} {{ false is false }} {{ 'x' is not string }} {{ 'abc' is lower }} {{ "
              "'ABC' is upper }}"),
            "True False True False True True");
}

TEST(ChatTemplateJinja, Filters) {
  EXPECT_EQ(R("{{ '  hi  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'hello world' | upper }} {{ 'HeLLo' | lower }} {{ "
              "'hello wORLD-foo' | title }} {{ 'hELLO' | capitalize }}"),
            "hi|hi|HELLO WORLD hello Hello World-Foo Hello");
  EXPECT_EQ(R("{{ 'aaa' | replace('a', 'b') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ [1, 2, 3] | join(', ') }} {{ "
              "['a', 'b'] | join }}"),
            "bbb bba 1, 2, 3 ab");
  EXPECT_EQ(R("{{ [3, 1, 2] | first }} {{ [3, 1, 2] | last }} {{ 'abc' | list }} {{ 42 | string }} {{ '42' | int + 1 "
              "}} {{ 'x' | int }} {{ '3.5' | float }} {{ 3.7 | int }}"),
            "3 2 ['a', 'b', 'c'] 42 43 0 3.5 3");
  EXPECT_EQ(R("{{ -3 | abs }} {{ 2.5 | round }} {{ 3.14159 | round(2) }} {{ 3.1 | round(0, 'ceil') }} {{ {'b': 1, 'a': "
              "2} | dictsort }} {{ {'b': 1, 'a': 2} | items | list }}"),
            "3 2.0 3.14 4.0 [('a', 2), ('b', 1)] [('b', 1), ('a', 2)]");
  EXPECT_EQ(R("{{ users | selectattr('active') | map(attribute='name') | list }} {{ users | rejectattr('active') | "
              "map(attribute='name') | join(',') }} {{ users | selectattr('name', 'equalto', 'b') | list | length }}",
              R"json({"users": [{"name": "a", "active": true}, {"name": "b", "active": false}]})json"),
            "['a'] b 1");
  EXPECT_EQ(R("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('odd') | list }} {{ ['a', 'B'] | "
              "map('upper') | list }} {{ [1, 2, 2, 1] | unique | list }}"),
            "[1, 3] [2, 4] ['A', 'B'] [1, 2]");
  EXPECT_EQ(R("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2] | "
              "reverse | list }} {{ 'abc' | reverse }}"),
            "[1, 2, 3] ['A', 'b', 'c'] [3, 2, 1] [2, 1] cba");
  EXPECT_EQ(
      R("{{ items | sort(attribute='n') | map(attribute='n') | list }}", R"json({"items": [{"n": 2}, {"n": 1}]})json"),
      "[1, 2]");
  EXPECT_EQ(R("{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) "
              "}}|{{ 'x' | indent('> ', first=True) }}"),
            "a\n  b\n\n  c|  a\n  b|a\n  \n  b|> x");
  EXPECT_EQ(R("{{ 'one two, three' | wordcount }} {{ [1, 2, 3] | sum }} {{ [1, 5, 3] | max }} {{ [4, 2, 3] | min }} {{ "
              "[] | max }}| {{ [1, 2, 3, 4, 5] | batch(2) | list }}"),
            "3 6 5 2 | [[1, 2], [3, 4], [5]]");
  EXPECT_EQ(R("{{ '<a href=\"x\">' | escape }} {{ '<b>' | safe }} {{ ('<i>' | safe) + '<u>' }} {{ 'a' | center(5) }}|"),
            "&lt;a href=&#34;x&#34;&gt; <b> <i>&lt;u&gt;   a  |");
  EXPECT_EQ(R("{{ {'a': 1, 'b': [1, 2], 'c': 'é\"\\n'} | tojson }} {{ [1, 2] | tojson(indent=2) }} {{ {'b': 1, 'a': "
              "none} | tojson(sort_keys=true) }} {{ 'é' | tojson(ensure_ascii=true) }} {{ {'a': 1} | "
              "tojson(separators=(',', ':')) }} {{ 1.0 | tojson }}"),
            "{\"a\": 1, \"b\": [1, 2], \"c\": \"é\\\"\\n\"} [\n  1,\n  2\n] {\"a\": null, \"b\": 1} \"\\u00e9\" "
            "{\"a\":1} 1.0");
  EXPECT_EQ(R("{{ {'a': {}, 'b': []} | tojson(indent=2) }}"), "{\n  \"a\": {},\n  \"b\": []\n}");
  EXPECT_EQ(R("{{ 'abc' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }}"), "3 2 1");
  EXPECT_EQ(R("{{ 'x%sy%d' | format('a', 3) }}"), "xay3");
}

TEST(ChatTemplateJinja, Methods) {
  EXPECT_EQ(R("{{ '  a b  '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ 'a,b,,c'.split(',') }} "
              "{{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}"),
            "a b|axx|xxa|['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b,c'] ['a,b', 'c']");
  EXPECT_EQ(R("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'hello'.find('l') }} {{ "
              "'hello'.rfind('l') }} {{ 'hello'.find('z') }} {{ 'hello'.count('l') }}"),
            "True True 2 3 -1 2");
  EXPECT_EQ(R("{{ 'Hello World'.upper() }} {{ 'Hello World'.lower() }} {{ 'hello world'.title() }} {{ "
              "'hELLO'.capitalize() }} {{ 'aXa'.replace('a', 'b') }}"),
            "HELLO WORLD hello world Hello World Hello bXb");
  EXPECT_EQ(R("{{ '{} and {}'.format('a', 1) }} {{ '{0}{0}'.format('x') }} {{ '{name}!'.format(name='n') }} {{ "
              "'-'.join(['a', 'b']) }}"),
            "a and 1 xx n! a-b");
  EXPECT_EQ(R("{{ [1, 2, 1].count(1) }} {{ [1, 2].index(2) }} {{ 'a\\nb'.splitlines() }} {{ '12'.isdigit() }} {{ "
              "'ab'.isalpha() }}"),
            "2 1 ['a', 'b'] True True");
}

TEST(ChatTemplateJinja, Statements) {
  EXPECT_EQ(R("{% if 0 %}a{% elif 1 %}b{% else %}c{% endif %}"), "b");
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length "
              "}}{{ loop.revindex }}{{ loop.revindex0 }},{% endfor %}"),
            "10TrueFalse332,21FalseFalse321,32FalseTrue310,");
  EXPECT_EQ(
      R("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }},{% endfor %}"),
      "-2-a,1-3-b,2--a,");
  EXPECT_EQ(R("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(R("{% for x in range(10) if x is odd %}{{ x }}{% if x > 5 %}{% break %}{% endif %}{% endfor %}"), "1357");
  EXPECT_EQ(R("{% for x in range(5) %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}{% endfor %}"), "0134");
  EXPECT_EQ(R("{% for x in 'ab' %}{% for y in [1, 2] %}{{ x }}{{ y }}{{ loop.index }}{% endfor %}{{ loop.index }}{% "
              "endfor %}"),
            "a11a221b11b222");
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}"), "21");
  EXPECT_EQ(R("{% set ns = namespace(n=0, found=false) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor "
              "%}{{ ns.n }} {{ ns.found }}"),
            "3 False");
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}"), "12(1, 2)");
  EXPECT_EQ(R("{% set x %}inner {{ 1 + 1 }}{% endset %}[{{ x }}]"), "[inner 2]");
  EXPECT_EQ(R("{% set x | upper %}shout{% endset %}{{ x }}"), "SHOUT");
  EXPECT_EQ(R("{% macro m(a, b='B') %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }} {{ m(1, 2, 3) }} "
              "{{ m(1, c=4) }} {{ m(b=5, a=6) }}"),
            "1B(){} 12(3,){} 1B(){'c': 4} 65(){}");
  EXPECT_EQ(R("{% macro outer() %}[{{ caller() }}]{% endmacro %}{% call outer() %}body{% endcall %}"), "[body]");
  EXPECT_EQ(R("{% macro o(x) %}{{ caller(x * 2) }}{% endmacro %}{% call(v) o(2) %}v={{ v }}{% endcall %}"), "v=4");
  EXPECT_EQ(R("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
  EXPECT_EQ(R("{% generation %}gen{% endgeneration %}"), "gen");
  EXPECT_EQ(R("a{# comment #}b"), "ab");
  EXPECT_EQ(R("{% raw %}{{ not rendered }}{% endraw %}"), "{{ not rendered }}");
  EXPECT_EQ(R("{{ strftime_now('%Y-%m-%d %H:%M:%S %B %d %b') }}"), "2026-01-15 10:30:00 January 15 Jan");
  EXPECT_EQ(R("{{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ dict(a=1) }}"), "[0, 1, 2] [1, 4, 7] {'a': 1}");
  EXPECT_EQ(R("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ "
              "fact(5) }}"),
            "120");
}

TEST(ChatTemplateJinja, Whitespace) {
  EXPECT_EQ(R("a\n{% if true %}\nb\n{% endif %}\nc\n"), "a\nb\nc");
  EXPECT_EQ(R("a\n  {% if true %}\n  b\n  {% endif %}\nc"), "a\n  b\nc");
  EXPECT_EQ(R("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(R("x\n  {{- 'y' -}}  \nz"), "xyz");
  EXPECT_EQ(R("a\n    {# c #}\nb"), "a\nb");
  EXPECT_EQ(R("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(R("{% if true +%}\nx{% endif %}"), "\nx");
  EXPECT_EQ(R("a\r\nb\rc\n\n"), "a\nb\nc\n");
  EXPECT_EQ(R("  {% for x in [1, 2] %}\n  {{ x }}\n  {% endfor %}\n"), "  1\n  2\n");
  EXPECT_EQ(R("{{ 'a' }}\n{{ 'b' }}\n"), "a\nb");
}

TEST(ChatTemplateJinja, Errors) {
  ExpectError("{{ raise_exception('boom') }}", "boom");
  ExpectError("{{ [].append(1) }}", "access to attribute 'append' of 'list' object is unsafe.");
  ExpectError("{{ {}.update({}) }}", "access to attribute 'update' of 'dict' object is unsafe.");
  ExpectError("{{ 'a' + 1 }}", "can only concatenate str (not \"int\") to str");
  ExpectError("{{ 1 / 0 }}", "division by zero");
  EXPECT_EQ(R("{{ 'a'.__class__ }}"), "");
  ExpectError("{{ 1 | nosuchfilter }}", "No filter named 'nosuchfilter'.");
  ExpectError("{{ 1 is nosuchtest }}", "No test named 'nosuchtest'.");
  ExpectError("{{ range(1000000) | length }}",
              "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(R("{{ (1, 2) | tojson }}"), "[1, 2]");
  ExpectError("{{ [1] | map('upper') | tojson }}", "Object of type generator is not JSON serializable");
  ExpectError("{% set x = 1 %}{% set x.y = 2 %}", "cannot assign attribute on non-namespace object");
  ExpectError("{% for a, b in [1] %}{% endfor %}", "cannot unpack non-iterable int object");
  EXPECT_EQ(R("{{ none.foo }}|"), "|");
  ExpectError("{{ none.foo.bar }}", "'None' has no attribute 'foo'");
}
// Cases found by differential fuzzing against Jinja2.
TEST(ChatTemplateJinja, Fuzzed) {
  const std::string d = R"json({"d": {"a": 1, "b": [2]}})json";
  EXPECT_EQ(
      R("{{ d.items() }} {{ d.keys() }} {{ d.values() }} {{ d.items() | list }} {{ d.keys() | length }} {{ 'a' in "
        "d.keys() }}",
        d),
      "dict_items([('a', 1), ('b', [2])]) dict_keys(['a', 'b']) dict_values([1, [2]]) [('a', 1), ('b', [2])] 2 True");
  ExpectError("{{ d.items() | tojson }}", d, "Object of type dict_items is not JSON serializable");
  EXPECT_EQ(R("{{ d.keys()[0] }}", d), "");
  ExpectError("{{ d | items | tojson }}", d, "Object of type generator is not JSON serializable");
  EXPECT_EQ(R("{{ 'héllo wörld ß'.upper() }}|{{ 'ÀÉÎ ΑΒΓ абв ąČ'.lower() }}|{{ 'straße'.title() }}|{{ 'ébc' | "
              "capitalize }}|{{ 'éa-b' | title }}"),
            "HÉLLO WÖRLD SS|àéî αβγ абв ąč|Straße|Ébc|Éa-B");
  EXPECT_EQ(R("{{ {'k': 1} is lower }} {{ 1 is upper }} {{ 2.0 is even }} {{ 3.0 is odd }}"), "True False True True");
  ExpectError("{{ nope | int }}", "'nope' is undefined");
  ExpectError("{{ [{'a': 1}, {'a': 1}] | unique | list }}", "unhashable type: 'dict'");
  ExpectError("{{ x[1:] }}", R"json({"x": 5})json", "'int' object is not subscriptable");
  ExpectError("{{ d[1:] }}", R"json({"d": {"a": 1}})json", "unhashable type: 'slice'");
  ExpectError("{{ [1] in {'a': 1} }}", "unhashable type: 'list'");
  ExpectError("{{ 'abc' % 2 }}", "not all arguments converted during string formatting");
  ExpectError("{{ 1 | indent }}", "unsupported operand type(s) for +=: 'int' and 'str'");
  EXPECT_EQ(R("{{ [nope, 1] }}"), "[Undefined, 1]");
  EXPECT_EQ(R("{{ [1, 2] | map(attribute='x') | list }}"), "[Undefined, Undefined]");
  EXPECT_EQ(R("{{ 'a' ~ [1, 'b'] ~ {'c': (1,)} }}"), "a[1, 'b']{'c': (1,)}");
  EXPECT_EQ(R("{{ 'x' * -1 }}|{{ [1] * 0 }}|{{ 7 // -2 }} {{ 7 % -2 }} {{ -7.5 // 2 }} {{ 2 ** -1 }}"),
            "|[]|-4 -1 -4.0 0.5");
}

// Scoping: what a loop iteration, an if, a macro sets; macros, caller, namespaces.
TEST(ChatTemplateJinja, Scoping) {
  const std::string ctx =
      R"json({"msgs": [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "U2"}]})json";
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }},{% endfor %}{{ x }}", ctx),
            "111,111,1");
  EXPECT_EQ(R("{% set x = 1 %}{% for i in [1, 2] %}{% if i == 2 %}{{ x }}{% endif %}{% set x = 5 %}{% endfor %}", ctx),
            "1");
  EXPECT_EQ(R("{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}", ctx), "late");
  EXPECT_EQ(R("{% set g = 'early' %}{% macro m() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ m() }}", ctx), "late");
  EXPECT_EQ(R("{% macro m() %}{% set g = 'inner' %}{{ g }}{% endmacro %}{% set g = 'outer' %}{{ m() }}{{ g }}", ctx),
            "innerouter");
  EXPECT_EQ(R("{% set ns = namespace(v=0) %}{% macro inc() %}{% set ns.v = ns.v + 1 %}{% endmacro %}{{ inc() }}{{ "
              "inc() }}{{ ns.v }}",
              ctx),
            "2");
  EXPECT_EQ(R("{% for a in [1, 2] %}{% set outer = loop %}{% for b in [3] %}{{ outer.index }}{{ loop.index }}{% endfor "
              "%}{% endfor %}",
              ctx),
            "1121");
  EXPECT_EQ(R("{% set i = 'keep' %}{% for i in [1, 2] %}{% endfor %}{{ i }}", ctx), "keep");
  EXPECT_EQ(R("{% for i in [1, 2] %}{% if true %}{% set y = i %}{% endif %}{{ y }}{% endfor %}[{{ y }}]", ctx), "12[]");
  EXPECT_EQ(R("{% if true %}{% set z = 3 %}{% endif %}{{ z }}", ctx), "3");
  EXPECT_EQ(R("{% macro m(x) %}{% for i in range(x) %}{{ caller(i) }}{% endfor %}{% endmacro %}{% call(n) m(3) %}<{{ n "
              "}}>{% endcall %}",
              ctx),
            "<0><1><2>");
  EXPECT_EQ(R("{% macro t(n) %}{% if n > 0 %}{{ n }}{{ t(n - 1) }}{% endif %}{% endmacro %}{{ t(4) }}", ctx), "4321");
  EXPECT_EQ(R("{% for m in msgs %}{% set content = m.content %}{% if loop.first %}{% set sys = content %}{% endif %}{{ "
              "sys }}|{% endfor %}",
              ctx),
            "S||||");
  EXPECT_EQ(
      R("{% set loop_messages = msgs[1:] %}{% for m in loop_messages %}{{ loop.index0 }}{{ m.content }}{% endfor %}",
        ctx),
      "0U11A12U2");
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{% for y in [1, 2] %}{% if y == 2 %}{% break %}{% endif %}{{ x }}{{ y }}{% "
              "endfor %}{% if x == 2 %}{% continue %}{% endif %}!{% endfor %}",
              ctx),
            "11!2131!");
  EXPECT_EQ(R("{% set a = [1, 2] %}{% set b = a %}{{ a is sameas b }}{{ a == [1, 2] }}", ctx), "TrueTrue");
  EXPECT_EQ(R("{%- for message in msgs %}\n  {%- if message.role == 'user' %}\n    {{- '[U]' + message.content }}\n  "
              "{%- else %}\n    {{- '[A]' + message.content }}\n  {%- endif %}\n{%- endfor %}\n",
              ctx),
            "[A]S[U]U1[A]A1[U]U2");
  EXPECT_EQ(
      R("{% macro m(a, b) %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }}|{{ m(*[1, 2]) }}|{{ m(**{'a': 3, 'b': 4}) }}", ctx),
      "1-|1-2|3-4");
  EXPECT_EQ(R("{{ msgs | selectattr('role', 'eq', 'user') | map(attribute='content') | join(' / ') }}", ctx),
            "U1 / U2");
  EXPECT_EQ(R("{% for k, v in {'x': {'y': 1}}.items() %}{{ k }}{{ v.y }}{{ v['y'] }}{% endfor %}", ctx), "x11");
}

// Block scopes and for-else (found by differential fuzzing of statements).
TEST(ChatTemplateJinja, BlockScopesAndForElse) {
  EXPECT_EQ(R("{% set x = 1 %}{% filter upper %}{% set x = 2 %}{{ x }}{% endfilter %}{{ x }}"), "21");
  EXPECT_EQ(R("{% set x = 1 %}{% set y %}{% set x = 2 %}{{ x }}{% endset %}{{ x }}{{ y }}"), "12");
  EXPECT_EQ(R("{% for i in [1, 2, 3] %}{% continue %}{% else %}E{% endfor %}"), "E");
  EXPECT_EQ(R("{% for i in [1, 2, 3] %}{% if i == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}"), "");
  EXPECT_EQ(R("{% for i in [1, 2, 3] %}{% if i < 3 %}{% continue %}{% endif %}{{ i }}{% else %}E{% endfor %}"), "3");
  EXPECT_EQ(R("{% for i in [1] %}{% break %}{% else %}E{% endfor %}"), "E");
}

// ---------------------------------------------------------------- hand-written

TEST(ChatTemplate, ParseErrorsHaveLineAndColumn) {
  struct Case {
    const char* src;
    const char* want;
  };
  for (const Case& c :
       {Case{"{{ 1 + }}", "1:8: "}, Case{"a\n{% if x %}", "unexpected end of template"},
        Case{"a\nb {% endfor %}", "2:6: unknown tag 'endfor'"}, Case{"{{ 'abc }}", "1:4: unterminated string"},
        Case{"{# x", "1:1: unterminated comment"},
        Case{"{% for x in y %}{% else %}{% endif %}", "1:30: unknown tag 'endif'"},
        Case{"{{ a ? b }}", "1:6: unexpected character"}, Case{"{% include 'x' %}", "unknown tag 'include'"},
        Case{"{{ (1 }}", "1:7: unexpected '}'"}, Case{"{{ x }", "1:6: unexpected '}'"}}) {
    auto t = ChatTemplate::Parse(c.src);
    ASSERT_FALSE(t.ok()) << c.src;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(std::string(t.status().message()).find(c.want), std::string::npos) << c.src << ": " << t.status();
  }
}

TEST(ChatTemplate, RenderErrorsHaveLineAndColumn) {
  auto r = Apply("line one\n  {{ 'a' + 1 }}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(r.status().message()), "2:3: can only concatenate str (not \"int\") to str");
}

TEST(ChatTemplate, RaiseExceptionIsFailedPrecondition) {
  auto r = Apply("{% if true %}{{ raise_exception('System role not supported') }}{% endif %}");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::string(r.status().message()), "System role not supported");
}

TEST(ChatTemplate, Limits) {
  ChatTemplateLimits small;
  small.max_output_bytes = 1000;
  auto big = Apply("{% for i in range(2000) %}x{% endfor %}", "{}", small);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(std::string(big.status().message()).find("exceeds the limit of 1000 bytes"), std::string::npos);

  ChatTemplateLimits few;
  few.max_iterations = 100;
  auto loops = Apply("{% for i in range(10) %}{% for j in range(20) %}{% endfor %}{% endfor %}", "{}", few);
  ASSERT_FALSE(loops.ok());
  EXPECT_NE(std::string(loops.status().message()).find("limit of 100 loop iterations"), std::string::npos);

  auto rec = Apply("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(rec.ok());
  EXPECT_NE(std::string(rec.status().message()).find("nested deeper than 64"), std::string::npos);

  auto huge = Apply("{{ 'x' * 100000000 }}");
  ASSERT_FALSE(huge.ok());
}

TEST(ChatTemplate, DeepNestingIsAnErrorNotACrash) {
  const std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  auto t = ChatTemplate::Parse(deep);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("nested too deeply"), std::string::npos);
  std::string blocks;
  for (int i = 0; i < 1000; ++i) blocks += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::Parse(blocks).ok());
  std::string nots = "{{ ";
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_FALSE(ChatTemplate::Parse(nots + "1 }}").ok());
}

TEST(ChatTemplate, DeepRecursionThroughNestedBlocksIsAnError) {
  // A recursive macro whose body nests 50 blocks and a 50-deep expression: bounded
  // by the stack budget (and the call depth), never a stack overflow.
  std::string body, close;
  for (int i = 0; i < 50; ++i) {
    body += "{% if true %}";
    close += "{% endif %}";
  }
  std::string expr = "f(n + 1)";
  for (int i = 0; i < 50; ++i) expr = "(" + expr + " ~ '')";
  const std::string src = "{% macro f(n) %}" + body + "{{ " + expr + " }}" + close + "{% endmacro %}{{ f(0) }}";
  auto r = Apply(src);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  ChatTemplateLimits tight;
  tight.max_stack_bytes = 64 << 10;
  auto t = Apply(src, "{}", tight);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("nesting too deep"), std::string::npos) << t.status();
}

TEST(ChatTemplate, HostileTemplatesAndInputsAreBounded) {
  // A list nested 100000 deep: built, compared, printed (refused), and destroyed
  // without recursion.
  EXPECT_EQ(R("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"
              "{{ ns.l | length }}"),
            "1");
  ExpectError(
      "{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"
      "{{ ns.l }}",
      "nesting too deep");
  ExpectError(
      "{% set ns = namespace(l=[], m=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}"
      "{% set ns.m = [ns.m] %}{% endfor %}{{ ns.l < ns.m }}",
      "nesting too deep");
  // Doubling a string: refused once it is too large, not an allocation failure.
  ExpectError("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
              "too large");
  ExpectError("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
              "too large");
  ExpectError(
      "{% set ns = namespace(s='xxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s.replace('x', 'xx') %}{% endfor "
      "%}",
      "too large");
  ExpectError("{{ 'a'.center(100, 'long fill') }}", "exactly one character");
  EXPECT_EQ(R("{{ 'abc'[1::9223372036854775807] }}|{{ range(9223372036854775800, 9223372036854775807, 4) | list }}"),
            "b|[9223372036854775800, 9223372036854775804]");
  // Input nested deeper than 512 levels.
  std::string deep = "{\"x\": ";
  for (int i = 0; i < 600; ++i) deep += "[";
  for (int i = 0; i < 600; ++i) deep += "]";
  deep += "}";
  auto r = Apply("{{ x }}", deep);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("nested deeper than 512"), std::string::npos) << r.status();
}

// 10^5-10^6 levels wherever a template or its input can nest: the template source
// (a GGUF's tokenizer.chat_template), the input JSON (messages, tools), and values a
// template builds in a loop. Each is an error naming its limit, never a stack overflow.
TEST(ChatTemplate, HundredThousandDeepNestingIsAnErrorNeverACrash) {
  const std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  auto t = ChatTemplate::Parse(parens);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.status().message()).find("nested too deeply"), std::string::npos) << t.status();
  const std::string lists = "{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}";
  t = ChatTemplate::Parse(lists);
  ASSERT_FALSE(t.ok());
  std::string blocks;
  for (int i = 0; i < 100000; ++i) blocks += "{% if true %}";
  t = ChatTemplate::Parse(blocks);
  ASSERT_FALSE(t.ok());

  const std::string deep_input = "{\"x\": " + std::string(1000000, '[') + std::string(1000000, ']') + "}";
  auto r = Apply("{{ x }}", deep_input);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("nested deeper than 512"), std::string::npos) << r.status();

  // A list wrapped 10^5 times by a loop: printing it fails at the nesting limit, and the
  // value is freed without recursing.
  r = Apply(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
      "{{ ns.x | tojson }}");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("nesting too deep"), std::string::npos) << r.status();
  r = Apply(
      "{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
      "{{ ns.x }}");
  ASSERT_FALSE(r.ok());
}

TEST(ChatTemplate, SelfReferencingNamespaceDoesNotCrashOrLeak) {
  auto r = Apply("{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.l = [ns] %}{{ ns.l | length }}{{ ns }}");
  EXPECT_FALSE(r.ok());  // printing a self-containing value hits the nesting limit
  EXPECT_EQ(R("{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns.me.me.a }}"), "1");
}

TEST(ChatTemplate, InputsBecomeVariables) {
  auto t = ChatTemplate::Parse(
      "{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
      "{{ tools is defined }}{{ add_generation_prompt }}{{ eos_token }}{{ extra }}");
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  in.extra_context["extra"] = 7;
  EXPECT_EQ(*t->Apply(in), "<s>user:hi;FalseTrue</s>7");
  in.tools = nlohmann::json::array();
  in.add_generation_prompt = false;
  in.bos_token = "B";
  EXPECT_EQ(*t->Apply(in), "Buser:hi;TrueFalse</s>7");
  // Plain nlohmann::json values convert (assignment implicitly; push_back needs the
  // explicit conversion); their keys are already sorted.
  nlohmann::json extra_msg = {{"role", "assistant"}, {"content", "yo"}};
  in.messages.push_back(nlohmann::ordered_json(extra_msg));
  in.messages.push_back({{"role", "user"}, {"content", "x"}});
  EXPECT_EQ(*t->Apply(in), "Buser:hi;assistant:yo;user:x;TrueFalse</s>7");
  in.messages = nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])");
  ChatTemplate copy = *t;  // copyable; shares the tree
  EXPECT_EQ(copy.source(), t->source());
  EXPECT_EQ(*copy.Apply(in), "Buser:hi;TrueFalse</s>7");
}

TEST(ChatTemplate, KeyOrderIsKept) {
  auto t = ChatTemplate::Parse("{{ tools | tojson }}|{% for k in tools[0] %}{{ k }},{% endfor %}");
  ASSERT_TRUE(t.ok());
  ChatTemplateInputs in;
  in.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(*t->Apply(in), R"([{"type": "function", "function": {"name": "f"}}]|type,function,)");
}

TEST(ChatTemplate, StrftimeNowUsesTheRealClockByDefault) {
  auto t = ChatTemplate::Parse("{{ strftime_now('%Y') }}");
  ASSERT_TRUE(t.ok());
  auto r = t->Apply(ChatTemplateInputs{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->size(), 4u);
  EXPECT_GE(std::stoi(*r), 2025);
}

TEST(ChatTemplate, ChatMlFallback) {
  auto t = ChatTemplate::Parse(ChatMlTemplate());
  ASSERT_TRUE(t.ok()) << t.status();
  ChatTemplateInputs in;
  in.messages = nlohmann::json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  EXPECT_EQ(*t->Apply(in), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  in.add_generation_prompt = false;
  EXPECT_EQ(*t->Apply(in), "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n");
}

TEST(ChatTemplate, GarbageNeverCrashes) {
  // Fragments of template syntax in odd combinations: each must parse or fail cleanly,
  // and render or fail cleanly.
  const char* pieces[] = {"{{", "}}",    "{%",     "%}",  "{#",    "#}",   "-", "+",  "if", "for", "x",   "in", "(",
                          ")",  "[",     "]",      "{",   "}",     "'s'",  "1", ".",  "|",  "is",  "not", ",",  ":",
                          "=",  "endif", "endfor", "set", "macro", "loop", "*", "**", "~",  " ",   "\n"};
  const size_t n = sizeof(pieces) / sizeof(pieces[0]);
  uint32_t seed = 12345;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string src;
    const int len = 1 + iter % 12;
    for (int k = 0; k < len; ++k) {
      seed = seed * 1103515245u + 12345u;
      src += pieces[(seed >> 16) % n];
    }
    auto t = ChatTemplate::Parse(src);
    if (t.ok()) (void)t->Apply(ChatTemplateInputs{});
  }
}

}  // namespace
}  // namespace herd::chat
