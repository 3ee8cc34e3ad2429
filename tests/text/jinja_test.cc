// The Jinja interpreter's pieces (text/jinja_*.h): whitespace control, loop variables,
// scopes, filters, tests, Python printing, errors naming the line, undefined values and the
// limits. The expected strings of the rendering cases are Python jinja2 3.1.6's, in
// transformers' environment (tests/text/jinja_goldens.py's make_env), rendered once.
#include "text/jinja_template.h"

#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "tests/test_support.h"

namespace cascade::text {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::string> Render(std::string_view source, std::string_view context_json = "{}") {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(source);
  if (!t.ok()) return t.status();
  absl::StatusOr<JinjaValue> context = jinja::ValueFromJson(context_json);
  if (!context.ok()) return context.status();
  std::tm now{};
  now.tm_year = 2024 - 1900;
  now.tm_mon = 6;
  now.tm_mday = 26;
  JinjaRenderOptions options;
  options.now = now;
  return t->Render(*context, options);
}

struct Case {
  const char* name;
  const char* source;
  const char* context;  // JSON.
  const char* expected;
};

// clang-format off
const Case kCases[] = {
    {"WhitespaceControl", "a  {{- ' b ' -}}  c\n{%- if true %} d {% endif -%}\n e",
     "{}",
     "a b c d e"},
    {"TrimBlocksDropsTheNewlineAfterATag", "{% if true %}\nyes\n{% endif %}\nafter",
     "{}",
     "yes\nafter"},
    {"LstripBlocksDropsIndentBeforeATag", "x\n    {% if true %}y{% endif %}\n  {{ 'z' }}",
     "{}",
     "x\ny  z"},
    {"PlusKeepsWhitespace", "x\n    {%+ if true %}y{% endif +%}\nz",
     "{}",
     "x\n    y\nz"},
    {"CommentsVanish", "a\n  {# note #}\nb{#- x -#}  c",
     "{}",
     "a\nbc"},
    {"TrailingNewlineDropped", "line\n",
     "{}",
     "line"},
    {"Raw", "{% raw %}{{ not parsed }}{% endraw %}",
     "{}",
     "{{ not parsed }}"},
    {"LoopVariables", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}",
     "{\"xs\": [\"a\", \"b\", \"c\"]}",
     "103TrueFalse3b|212FalseFalse3ac|321FalseTrue3b|"},
    {"LoopFilterAndElse", "{% for x in xs if x > 1 %}{{ x }}/{{ loop.length }} {% else %}none{% endfor %}{% for y in [] %}{% else %}empty{% endfor %}",
     "{\"xs\": [1, 2, 3]}",
     "2/2 3/2 empty"},
    {"BreakContinue", "{% for x in range(10) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{}",
     "023"},
    {"TupleUnpacking", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k, v in d|dictsort %}{{ k }}{% endfor %}",
     "{\"d\": {\"b\": 1, \"a\": 2}}",
     "b=1;a=2;ab"},
    {"LoopScopeAndNamespace", "{% set x = 0 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set x = x + 1 %}{% set ns.n = ns.n + i %}{% endfor %}{{ x }} {{ ns.n }}",
     "{}",
     "0 3"},
    {"BlockSet", "{% set greeting %}Hello {{ name }}{% endset %}[{{ greeting | upper }}]",
     "{\"name\": \"Ann\"}",
     "[HELLO ANN]"},
    {"MacroAndCaller", "{% macro tag(name, cls='x') %}<{{ name }} class={{ cls }}>{{ caller() if caller else '' }}</{{ name }}>{% endmacro %}{{ tag('a') }}{% call tag('b', cls='y') %}inner{% endcall %}",
     "{}",
     "<a class=x></a><b class=y>inner</b>"},
    {"FilterBlock", "{% filter upper %}shout {{ 'this' }}{% endfilter %}",
     "{}",
     "SHOUT THIS"},
    {"PythonPrinting", "{{ [1, 'a', none, true, 1.0, 2.5e-7, {'k': (1,)}] }} {{ 1e16 }} {{ 0.1 + 0.2 }} {{ \"it's\" }} {{ ['it\\'s', 'q\"'] }}",
     "{}",
     "[1, 'a', None, True, 1.0, 2.5e-07, {'k': (1,)}] 1e+16 0.30000000000000004 it's [\"it's\", 'q\"']"},
    {"Arithmetic", "{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 'ab' * 3 }} {{ 1 + 2.0 }} {{ 'a' ~ 1 ~ none }}",
     "{}",
     "3 -4 2 3.5 1024 ababab 3.0 a1None"},
    {"Comparisons", "{{ 1 < 2 < 3 }} {{ 'b' in 'abc' }} {{ 3 not in [1, 2] }} {{ 1 == 1.0 }} {{ {'a': 1} == {'a': 1} }} {{ not 0 and 'x' or 'y' }}",
     "{}",
     "True True True True True x"},
    {"Ternary", "{{ 'yes' if flag else 'no' }}|{{ 'only' if not flag }}|",
     "{\"flag\": false}",
     "no|only|"},
    {"Slicing", "{{ s[1:] }} {{ s[:-1] }} {{ s[::-1] }} {{ xs[1:3] }} {{ xs[-1] }} {{ s[0] }} {{ 'héllo'[1:3] }}",
     "{\"s\": \"abcd\", \"xs\": [1, 2, 3, 4]}",
     "bcd abc dcba [2, 3] 4 a él"},
    {"DictAccessByDotAndSubscript", "{{ m.role }} {{ m['content'] }} {{ m.get('missing', 'dflt') }} {{ m.missing is defined }} [{{ m.missing }}]",
     "{\"m\": {\"role\": \"user\", \"content\": \"hi\"}}",
     "user hi dflt False []"},
    {"StringMethods", "{{ '  x  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ 'a b  c'.split() }}|{{ 'k=v=w'.split('=', 1) }}|{{ 'a-b-c'.rsplit('-', 1) }}|{{ 'Hello'.startswith('He') }}|{{ 'Hello'.endswith(('x', 'lo')) }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'hello world'.title() }}|{{ 'hELLO'.capitalize() }}|{{ 'abcabc'.find('c') }}|{{ 'abcabc'.count('bc') }}|{{ '{}-{}'.format(1, 'x') }}|{{ ', '.join(['a', 'b']) }}|{{ 'xxhixx'.lstrip('x') }}|{{ 'xxhixx'.rstrip('x') }}",
     "{}",
     "x|['a', 'b', '', 'c']|['a', 'b', 'c']|['k', 'v=w']|['a-b', 'c']|True|True|bba|Hello World|Hello|2|2|1-x|a, b|hixx|xxhi"},
    {"Filters", "{{ '  t  '|trim }}|{{ xs|length }}|{{ xs|join('-') }}|{{ xs|first }}|{{ xs|last }}|{{ 'Ab'|lower }}{{ 'Ab'|upper }}|{{ '3'|int + 1 }}|{{ '2.5'|float }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ [3, 1, 2]|sort }}|{{ [1, 2, 1]|unique|list }}|{{ xs|reverse|list }}|{{ none|default('d') }}|{{ undefined_name|default('d') }}|{{ ''|default('e', true) }}|{{ 'a b c'|wordcount }}|{{ xs|count }}|{{ [1, 2, 3]|sum }}|{{ [1, 5, 2]|max }}|{{ 'x'|string }}",
     "{\"xs\": [1, 2, 3]}",
     "t|3|1-2-3|1|3|abAB|4|2.5|3|2.57|2.0|[1, 2, 3]|[1, 2]|[3, 2, 1]|None|d|e|3|3|6|5|x"},
    {"AttributeFilters", "{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ ms|rejectattr('role', 'eq', 'user')|list|length }} {{ ms|map(attribute='role')|join(',') }} {{ ms|selectattr('tool')|list }} {{ [1, 2, 3, 4]|select('even')|list }} {{ ms|sort(attribute='content')|map(attribute='content')|first }}",
     "{\"ms\": [{\"role\": \"user\", \"content\": \"b\"}, {\"role\": \"assistant\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"c\"}]}",
     "['b', 'c'] 1 user,assistant,user [] [2, 4] a"},
    {"Indent", "{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(4, true) }}|{{ 'a\\n\\nb'|indent(width='> ', blank=true) }}",
     "{}",
     "a\n  b\n\n  c|    a\n    b|a\n> \n> b"},
    {"ToJson", "{{ d|tojson }}|{{ d|tojson(indent=2) }}|{{ d|tojson(separators=(',', ':')) }}|{{ d|tojson(sort_keys=true) }}|{{ 'é\"\\n'|tojson }}|{{ 'é'|tojson(ensure_ascii=true) }}|{{ [1.0, none, true]|tojson }}|{{ {}|tojson }}",
     "{\"d\": {\"z\": [1, {\"y\": \"é\"}], \"a\": null}}",
     "{\"z\": [1, {\"y\": \"é\"}], \"a\": null}|{\n  \"z\": [\n    1,\n    {\n      \"y\": \"é\"\n    }\n  ],\n  \"a\": null\n}|{\"z\":[1,{\"y\":\"é\"}],\"a\":null}|{\"a\": null, \"z\": [1, {\"y\": \"é\"}]}|\"é\\\"\\n\"|\"\\u00e9\"|[1.0, null, true]|{}"},
    {"Tests", "{{ x is defined }}{{ y is undefined }}{{ none is none }}{{ 's' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.5 is float }}{{ true is boolean }}{{ {} is mapping }}{{ [] is iterable }}{{ 's' is sequence }}{{ range is callable }}{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 2 is in [1, 2] }}{{ 'a' is eq 'a' }}{{ 1 is ne 2 }}{{ true is true }}{{ false is false }}{{ 1 is not string }}",
     "{\"x\": 1}",
     "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue"},
    {"Escape", "{{ '<a>'|e }} {{ '<a>'|safe }} {{ 'x'|safe + '<b>' }}",
     "{}",
     "&lt;a&gt; <a> x&lt;b&gt;"},
    {"Generators", "{{ (xs|map('upper')|list) }} {{ 'yes' if ([]|select) else 'no' }} {{ none|selectattr('a')|list }}",
     "{\"xs\": [\"a\"]}",
     "['A'] yes []"},
    {"PercentFormat", "{{ '%s is %d' % ('x', 3) }} {{ '%s'|format('y') }}",
     "{}",
     "x is 3 y"},
    {"WithBlock", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]",
     "{}",
     "3[]"},
    {"StrftimeNow", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }}",
     "{}",
     "26 Jul 2024 2024-07-26"},
    {"RangeAndCycle", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {% for i in range(4) %}{{ loop.cycle('a', 'b') }}{% endfor %}",
     "{}",
     "[0, 1, 2] [1, 4, 7] abab"},
    {"DictLiteralsAndItemsFilter", "{% set d = {'k': 1, 'j': [1, 2]} %}{% for k, v in d|items %}{{ k }}:{{ v }} {% endfor %}{{ d.keys()|list }} {{ d.values()|list }} {{ dict(a=1) }}",
     "{}",
     "k:1 j:[1, 2] ['k', 'j'] [1, [1, 2]] {'a': 1}"},
    {"Unicode", "{{ s|length }} {{ s[1] }} {{ s|reverse }} {{ s|upper }}",
     "{\"s\": \"héllo🙂\"}",
     "6 é 🙂olléh HÉLLO🙂"},
    {"ForElseAfterOnlyContinues", "{% for x in [1, 2] %}{% continue %}{% else %}E{% endfor %}|{% for x in [1, 2] %}{% if x == 1 %}{% continue %}{% endif %}{% else %}E{% endfor %}|{% for x in [1] %}{% break %}{% else %}E{% endfor %}",
     "{}",
     "E||E"},
    {"GeneratorFiltersFailOnlyWhenIterated", "{{ 'yes' if s|items else 'no' }} {{ (s|items) is iterable }} {{ nope|first is defined }} {{ nope is callable }}",
     "{\"s\": \"text\"}",
     "yes True False True"},
    {"JinjaTitleIsNotPythonTitle", "{{ \"it's a-b (c) [d]\"|title }} {{ \"it's a-b\".title() }}",
     "{}",
     "It's A-B (C) [D] It'S A-B"},
    {"PercentWithListAndUndefined", "{{ 'x' % [1] }}{{ 'y' % nope }}{{ '%s' % nope }}|",
     "{}",
     "xy|"},
    {"DictViewsPrintAsPython", "{{ d.keys() }} {{ d.values()|list }} {{ d.items()|length }} {{ 'a' in d.keys() }}",
     "{\"d\": {\"a\": 1}}",
     "dict_keys(['a']) [1] 1 True"},
    {"MarkupReprAndConcat", "{{ ['x'|safe] }} {{ '<'|safe ~ '<' }}",
     "{}",
     "[Markup('x')] <<"},
    {"NegativeConstantPowerQuirk", "{{ -2 ** z }} {{ -2 ** 2 }} {{ (1 - 3) ** z }} {{ x ** 2 }} {{ -2.5 ** z }}",
     "{\"z\": 0, \"x\": -2}",
     "-1 4 -1 4 -1.0"},
    {"MacroSeesLaterTopLevelSets", "{% macro m() %}{{ z }}{% endmacro %}{% set z = 3 %}{{ m() }}",
     "{}",
     "3"},

};
// clang-format on

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class JinjaCaseTest : public ::testing::TestWithParam<Case> {};

TEST_P(JinjaCaseTest, RendersAsJinja2) {
  const Case& c = GetParam();
  absl::StatusOr<std::string> got = Render(c.source, c.context);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, c.expected);
}

INSTANTIATE_TEST_SUITE_P(Jinja, JinjaCaseTest, ::testing::ValuesIn(kCases),
                         [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// The message of a failed render or parse ("" when it succeeded).
std::string Error(std::string_view source, std::string_view context_json = "{}") {
  absl::StatusOr<std::string> got = Render(source, context_json);
  return got.ok() ? "" : testing::StatusMessage(got.status());
}

TEST(JinjaErrorTest, RaiseExceptionNamesTheLine) {
  EXPECT_EQ(Error("a\n{% if true %}\n  {{ raise_exception('System role not supported') }}\n{% endif %}"),
            "template line 3: System role not supported");
}

TEST(JinjaErrorTest, SyntaxErrorsNameTheLine) {
  EXPECT_THAT(Error("ok\n{% if x %}\nno end"),
              HasSubstr("template line 3: TemplateSyntaxError: Unexpected end of template"));
  EXPECT_THAT(Error("\n\n{{ 1 + }}"), HasSubstr("template line 3:"));
  EXPECT_THAT(Error("{% frobnicate %}"), HasSubstr("Encountered unknown tag 'frobnicate'"));
  EXPECT_THAT(Error("{{ 'open"), HasSubstr("template line 1:"));
  EXPECT_THAT(Error("{# never closed"), HasSubstr("Missing end of comment tag"));
  EXPECT_THAT(Error("{{ x }"), HasSubstr("template line 1:"));
}

TEST(JinjaErrorTest, UndefinedFollowsJinja2) {
  // Printing, testing, iterating and defaulting an undefined value are fine...
  EXPECT_EQ(*Render("[{{ nope }}]{{ nope is defined }}{% for x in nope %}x{% endfor %}{{ nope|default('d') }}"),
            "[]Falsed");
  // ... its attributes, calls and arithmetic are errors, as is a missing key's attribute.
  EXPECT_EQ(Error("\n{{ nope.attr }}"), "template line 2: UndefinedError: 'nope' is undefined");
  EXPECT_EQ(Error("{{ m.a.b }}", R"({"m": {}})"),
            "template line 1: UndefinedError: 'dict object' has no attribute 'a'");
  EXPECT_THAT(Error("{{ nope() }}"), HasSubstr("'nope' is undefined"));
  EXPECT_THAT(Error("{{ nope + 1 }}"), HasSubstr("'nope' is undefined"));
}

TEST(JinjaErrorTest, TypeErrorsAndUnknownFilters) {
  EXPECT_THAT(Error("{{ 'a' + 1 }}"), HasSubstr("TypeError: can only concatenate str"));
  EXPECT_THAT(Error("{{ 1 / 0 }}"), HasSubstr("ZeroDivisionError"));
  EXPECT_THAT(Error("\n{{ x|from_json }}"),
              HasSubstr("template line 2: TemplateRuntimeError: No filter named 'from_json'"));
  EXPECT_THAT(Error("{{ 1 is frob }}"), HasSubstr("No test named 'frob'"));
  EXPECT_THAT(Error("{{ {'a': 1}|items|length }}"), HasSubstr("has no len()"));
}

// transformers renders in an ImmutableSandboxedEnvironment: mutating a list or dict fails.
TEST(JinjaErrorTest, SandboxRefusesMutation) {
  EXPECT_EQ(Error("{% set xs = [] %}{% set _ = xs.append(1) %}"),
            "template line 1: SecurityError: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_THAT(Error("{% set d = {} %}{{ d.update({'a': 1}) }}"), HasSubstr("SecurityError"));
  EXPECT_THAT(Error("{{ range(1000000)|length }}"), HasSubstr("Range too big"));
}

TEST(JinjaErrorTest, LimitsStopRunawayTemplates) {
  EXPECT_THAT(Error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), HasSubstr("nested deeper than"));
  absl::StatusOr<JinjaTemplate> spin =
      JinjaTemplate::Parse("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}");
  ASSERT_TRUE(spin.ok());
  JinjaRenderOptions few_steps;
  few_steps.max_steps = 1'000'000;
  absl::StatusOr<std::string> spun = spin->Render(*jinja::ValueFromJson("{}"), few_steps);
  EXPECT_EQ(spun.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(testing::StatusMessage(spun.status()), HasSubstr("runs too long"));
  EXPECT_THAT(Error("{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}"),
              HasSubstr("output too large"));
  EXPECT_THAT(Error("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}"),
              HasSubstr("nested too deeply"));
  std::string deep;
  for (int i = 0; i < 300; ++i) deep = "{% if true %}" + deep + "{% endif %}";
  EXPECT_THAT(Error(deep), HasSubstr("nested too deeply"));
  EXPECT_THAT(Error("{{ " + std::string(1000, '[') + std::string(1000, ']') + " }}"), HasSubstr("nested too deeply"));
  EXPECT_THAT(Error("{{ 'x' * 100000000000 }}"), HasSubstr("too long"));
  EXPECT_THAT(Error("{{ 'x'|center(10 ** 12) }}"), HasSubstr("width too large"));
  // Python's ints are unbounded; ours refuse to wrap rather than print a wrong number.
  EXPECT_THAT(Error("{{ 2 ** 64 }}"), HasSubstr("OverflowError"));
  EXPECT_THAT(Error("{{ 9223372036854775807 + 1 }}"), HasSubstr("OverflowError"));
  EXPECT_THAT(Error("{{ 1e300|int }}"), HasSubstr("OverflowError"));
  EXPECT_EQ(Render("{{ 2 ** 62 }} {{ -9223372036854775807 - 1 }}").value_or("error"),
            "4611686018427387904 -9223372036854775808");
  // A list nested 100000 deep is built, printed (cut at depth 200) and freed without
  // overflowing the stack; a namespace holding itself is freed too (ASan would see a leak).
  EXPECT_EQ(Render("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"
                   "{{ (ns.x|string)[:3] }}{{ ns.x == ns.x }}")
                .value_or("error"),
            "[[[False");
  EXPECT_EQ(Render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}").value_or("error"),
            "True");
  EXPECT_THAT(Error("{% set ns = namespace(x=[]) %}{% for i in range(300) %}{% set ns.x = [ns.x] %}{% endfor %}"
                    "{{ ns.x|tojson }}"),
              HasSubstr("nesting too deep"));
}

TEST(JinjaValueTest, FromJsonKeepsOrderAndTypes) {
  absl::StatusOr<JinjaValue> v = jinja::ValueFromJson(R"({"b": 1, "a": [1.0, 2, "s", null, true], "c": {}})");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(jinja::Str(*v), "{'b': 1, 'a': [1.0, 2, 's', None, True], 'c': {}}");
  EXPECT_EQ(*jinja::ToJson(*v), R"({"b": 1, "a": [1.0, 2, "s", null, true], "c": {}})");
  EXPECT_FALSE(jinja::ValueFromJson("{bad").ok());
}

TEST(JinjaValueTest, FloatsPrintAsPython) {
  EXPECT_EQ(jinja::FloatRepr(1.0), "1.0");
  EXPECT_EQ(jinja::FloatRepr(0.1), "0.1");
  EXPECT_EQ(jinja::FloatRepr(1e16), "1e+16");
  EXPECT_EQ(jinja::FloatRepr(1234567890123456.0), "1234567890123456.0");
  EXPECT_EQ(jinja::FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(jinja::FloatRepr(0.00001), "1e-05");
  EXPECT_EQ(jinja::FloatRepr(-2.5e-300), "-2.5e-300");
  EXPECT_EQ(jinja::FloatRepr(123.456), "123.456");
}

TEST(JinjaTemplateTest, ParsedOnceRenderedManyTimes) {
  absl::StatusOr<JinjaTemplate> t =
      JinjaTemplate::Parse("{{ bos_token }}{% for m in messages %}<{{ m.role }}>{% endfor %}");
  ASSERT_TRUE(t.ok());
  for (const char* role : {"user", "assistant"}) {
    absl::StatusOr<JinjaValue> context =
        jinja::ValueFromJson(std::string(R"({"bos_token": "<s>", "messages": [{"role": ")") + role + "\"}]}");
    ASSERT_TRUE(context.ok());
    EXPECT_EQ(*t->Render(*context), std::string("<s><") + role + ">");
  }
  EXPECT_FALSE(t->Render(JinjaValue(1)).ok());  // The context must be a dict.
}

// One parsed template, one context, several threads rendering at once (the header's
// promise; run under TSan to check the sharing).
TEST(JinjaTemplateTest, RendersOnManyThreadsAtOnce) {
  absl::StatusOr<JinjaTemplate> t = JinjaTemplate::Parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ loop.index }}:{{ "
      "m.content|upper }}"
      "{{ m|tojson }};{% endfor %}{{ ns.n }}");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<JinjaValue> context =
      jinja::ValueFromJson(R"({"messages": [{"content": "a", "x": [1, {"y": 2}]}, {"content": "b"}]})");
  ASSERT_TRUE(context.ok());
  const std::string want = *t->Render(*context);
  std::vector<std::thread> threads;
  std::vector<std::string> got(4);
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) got[i] = t->Render(*context).value_or("error");
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::string& g : got) EXPECT_EQ(g, want);
  EXPECT_EQ(want, R"(1:A{"content": "a", "x": [1, {"y": 2}]};2:B{"content": "b"};2)");
}

}  // namespace
}  // namespace cascade::text
