#!/usr/bin/env python3
"""Renders llama.cpp's collection of real chat templates (models/templates/*.jinja in the
tree scripts/llama_cpp.sh --src unpacks) with Python's jinja2 in the environment Hugging
Face transformers renders chat templates in, over a fixed corpus of conversations: the
independent reference of text/jinja_*.cc (tests/text/jinja_golden_test.cc compares).

Then the same for RANDOM_CASES small templates drawn from a grammar of the expressions,
filters, tests, methods and statements the interpreter supports (fixed seed), over a
context of every value type: the reference for what the real templates do not reach.

Usage: jinja_goldens.py OUT.jsonl [TEMPLATES_DIR] (through scripts/python_deps.sh, which
installs the pinned jinja2). Output, JSON lines: first {"templates_dir": DIR}, then one
{"template", "case", "context", "output"} per render, or "error" (the exception's class
and message) in place of "output" where jinja2 refuses; random templates are named
"random/N" and carry their "source".

The environment is transformers' _compile_jinja_template (4.57): an
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loopcontrols and a
`generation` block that renders its body, `tojson` as json.dumps(ensure_ascii=False, ...),
and the globals raise_exception and strftime_now, here fixed at 26 Jul 2024 so that the
output is deterministic (the C++ test renders with the same date).
"""
import copy
import datetime
import glob
import json
import os
import random
import re
import subprocess
import sys

# scripts/python_deps.sh installs the pinned jinja2 into a folder of its own.
if os.environ.get("CASCADE_PYTHON_CACHE"):
    sys.path.insert(0, os.path.join(os.environ["CASCADE_PYTHON_CACHE"], "jinja"))

import jinja2  # noqa: E402
import jinja2.ext  # noqa: E402
import jinja2.nodes  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

assert jinja2.__version__ == "3.1.6", jinja2.__version__
FIXED_NOW = datetime.datetime(2024, 7, 26, 9, 5, 7)


class Generation(jinja2.ext.Extension):
    """transformers' AssistantTracker without the tracking: {% generation %} renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. \"Paris\"."},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "description": "Forecast days."},
            },
            "required": ["city"],
        },
    },
}, {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}]

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
CHAT = [
    {"role": "user", "content": "Hello! Who are you?"},
    {"role": "assistant", "content": "I am an assistant. How can I help?"},
    {"role": "user", "content": "Tell me a joke about \"quotes\", 'apostrophes' and émojis 🙂.\nTwo lines."},
]


def tool_turns(arguments_as_string):
    args = {"city": "Paris", "unit": "celsius"}
    return [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call12345", "type": "function",
            "function": {"name": "get_weather",
                         "arguments": json.dumps(args) if arguments_as_string else args}}]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather",
         "content": "{\"temperature\": 21, \"sky\": \"clear\"}"},
        {"role": "assistant", "content": "It is 21 °C and clear in Paris."},
        {"role": "user", "content": "Thanks!"},
    ]


def cases():
    base = {"bos_token": "<s>", "eos_token": "</s>"}
    yield "chat", {**base, "messages": [SYSTEM] + CHAT, "add_generation_prompt": True}
    yield "chat_no_prompt", {**base, "messages": [SYSTEM] + CHAT[:2], "add_generation_prompt": False}
    yield "user_only", {**base, "messages": CHAT[:1], "add_generation_prompt": True}
    for thinking in (True, False):
        yield f"thinking_{str(thinking).lower()}", {
            **base, "messages": [SYSTEM, CHAT[0],
                                 {"role": "assistant", "content": "<think>Greeting.</think>I am an assistant.",
                                  "reasoning_content": "Greeting."}, CHAT[2]],
            "add_generation_prompt": True, "enable_thinking": thinking}
    for as_string in (False, True):
        name = "tools_string_args" if as_string else "tools_dict_args"
        yield name, {**base, "messages": [SYSTEM] + tool_turns(as_string), "tools": TOOLS,
                     "add_generation_prompt": True}
    yield "tools_no_system", {**base, "messages": tool_turns(False)[:1], "tools": TOOLS,
                              "add_generation_prompt": True}
    yield "tools_unused", {**base, "messages": [SYSTEM] + CHAT, "tools": TOOLS, "add_generation_prompt": True}
    # Two calls in one turn, content null as the OpenAI API sends it, and their two results.
    yield "parallel_tool_calls", {**base, "messages": [SYSTEM, {"role": "user", "content": "Weather and news?"}, {
        "role": "assistant", "content": None, "tool_calls": [
            {"id": "call12345", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}},
            {"id": "call67890", "type": "function", "function": {"name": "search", "arguments": {"query": "news"}}}]},
        {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call67890", "name": "search", "content": "[]"}],
        "tools": TOOLS, "add_generation_prompt": True}
    # Content as a list of parts (OpenAI's multimodal shape, text only).
    yield "content_parts", {**base, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Describe this."},
                                     {"type": "text", "text": "Then summarise."}]}],
        "add_generation_prompt": True}
    # Earlier assistant turns with their reasoning, the conversation going on.
    yield "reasoning_history", {**base, "messages": [
        SYSTEM, CHAT[0],
        {"role": "assistant", "content": "I am an assistant.", "reasoning_content": "They greet me."},
        {"role": "user", "content": "And what can you do?"},
        {"role": "assistant", "content": "Many things.", "reasoning_content": "List skills."},
        {"role": "user", "content": "Great."}], "add_generation_prompt": True}
    yield "final_assistant", {**base, "messages": CHAT[:2], "add_generation_prompt": False}


# ---- Random templates ----
RANDOM_CASES = 2000
RANDOM_CONTEXT = {
    "s": "Hello, World", "u": "héllo wörld 🙂", "e": "", "n": 3, "f": 2.5, "neg": -7, "z": 0, "t": True, "no": None,
    "xs": [3, 1, 2], "ws": ["b", "A", "c", "a"], "d": {"b": 1, "a": "x", "c": [1, 2]},
    "ms": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "x": 1},
           {"role": "user", "content": [{"type": "text", "text": "p"}]}],
    "js": "{\"a\": 1}", "sp": "  a  b \n c  ", "big": -12345678901, "tiny": 1e-7, "fl": [1.5, 2.0, 0.1]}
LEAVES = ["s", "u", "e", "n", "f", "neg", "z", "t", "no", "xs", "ws", "d", "ms", "js", "sp", "big", "tiny", "fl",
          "nope", "1", "0", "-2", "3.0", "0.5", "'a'", "'x\\ny'", "\"q'\"", "''", "true", "none", "[]", "[1, 'a']",
          "{'k': 'v'}", "(1, 2)", "(1,)", "ms[0]", "d.a", "d['c']", "xs[-1]", "ms[1].content", "d.missing",
          "ms[0].role"]
FILTERS = ["trim", "length", "count", "upper", "lower", "title", "capitalize", "string", "list", "first", "last",
           "tojson", "tojson(indent=2)", "tojson(sort_keys=true)", "join(', ')", "join", "default('D')",
           "default('D', true)", "items", "dictsort", "sort", "sort(reverse=true)", "unique", "reverse", "int", "float",
           "abs", "round", "round(1)", "wordcount", "safe", "e", "indent(2)", "indent(2, true)", "map('upper')",
           "map(attribute='role')", "selectattr('role', 'equalto', 'user')", "rejectattr('content')", "select('odd')",
           "reject('none')", "batch(2)", "min", "max", "sum", "replace('l', 'L')", "center(9)", "string|length",
           "list|length", "d"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "boolean", "mapping", "iterable",
         "sequence", "true", "false", "callable", "odd", "even", "divisibleby 2", "equalto 3", "eq 'a'", "ne 1",
         "in xs", "in 'abc'", "lower", "upper", "escaped", "sameas none", "gt 1", "lt 2"]
METHODS = ["strip()", "lstrip('H')", "rstrip('d')", "split()", "split(',')", "split(' ', 1)", "rsplit(' ', 1)",
           "startswith('He')", "endswith(('x', 'd'))", "replace('o', '0')", "upper()", "lower()", "title()",
           "capitalize()", "find('o')", "rfind('o')", "count('l')", "format(1, 'b')", "join(['1', '2'])",
           "splitlines()", "isdigit()", "isalpha()", "items()", "keys()", "values()", "get('a')", "get('q', 0)",
           "index(1)", "append(1)", "pop()", "update({})", "copy()"]
OPERATORS = ["+", "-", "*", "/", "//", "%", "**", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]


class RandomTemplates:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def expr(self, depth=0):
        r, c = self.r.random(), self.r.choice
        if depth > 2 or r < 0.25:
            return c(LEAVES)
        if r < 0.4:
            return f"{self.expr(depth + 1)}|{c(FILTERS)}"
        if r < 0.5:
            return f"({self.expr(depth + 1)} is {c(['', 'not '])}{c(TESTS)})"
        if r < 0.6:
            return f"{c(LEAVES)}.{c(METHODS)}"
        if r < 0.75:
            return f"({self.expr(depth + 1)} {c(OPERATORS)} {self.expr(depth + 1)})"
        if r < 0.8:
            return f"({self.expr(depth + 1)} if {self.expr(depth + 1)} else {self.expr(depth + 1)})"
        if r < 0.85:
            return (f"{c(['s', 'u', 'xs', 'ws', 'fl'])}[{c(['', '1', '-1', '-2'])}:{c(['', '2', '-1', '10'])}"
                    f"{c(['', ':2', ':-1'])}]")
        if r < 0.9:
            return f"not {self.expr(depth + 1)}"
        if r < 0.95:
            return f"[{self.expr(depth + 1)}, {self.expr(depth + 1)}]"
        return f"{{'k': {self.expr(depth + 1)}}}"

    def statement(self, depth):
        r, c = self.r.random(), self.r.choice
        a, b = c(["", "-"]), c(["", "-"])
        lead = c(["", "  ", "\n", "\n  ", " x "])
        if depth > 2 or r < 0.35:
            return f"{lead}{{{{{a} {self.expr()} {b}}}}}"
        if r < 0.5:
            return (f"{lead}{{%{a} if {self.expr()} {b}%}}{self.body(depth + 1)}{lead}{{%{c(['', '-'])} else "
                    f"{c(['', '-'])}%}}{self.body(depth + 1)}{lead}{{%{c(['', '-'])} endif {c(['', '-'])}%}}")
        if r < 0.65:
            iterable = c(["xs", "ws", "ms", "d", "s", "d.items()", "range(3)", "nope", "d|dictsort"])
            target = "k, v" if iterable in ("d.items()", "d|dictsort") else "x"
            condition = c(["", " if loop is defined", f" if {self.expr()}"]) if target == "x" else ""
            inner = c(["{{ loop.index }}", "{{ loop.first }}{{ loop.last }}",
                       "{{ x }}" if target == "x" else "{{ k }}={{ v }}", "{{ loop.previtem }}",
                       "{{ loop.revindex0 }}/{{ loop.length }}", "{% if loop.index > 1 %}{% break %}{% endif %}",
                       "{% continue %}"])
            return (f"{lead}{{%{a} for {target} in {iterable}{condition} {b}%}}{inner}{self.body(depth + 1)}"
                    "{% else %}E{% endfor %}")
        if r < 0.8:
            return f"{lead}{{%{a} set y = {self.expr()} {b}%}}{lead}{{{{ y }}}}"
        if r < 0.84:
            return (f"{lead}{{% set ns = namespace(c=0) %}}{{% for i in xs %}}{{% set ns.c = ns.c + i %}}"
                    "{% endfor %}{{ ns.c }}")
        if r < 0.88:
            return (f"{lead}{{% macro m(p, q='Q') %}}[{{{{ p }}}}|{{{{ q }}}}]{{% endmacro %}}{{{{ m({self.expr()}) }}}}"
                    f"{{{{ m(1, q={self.expr()}) }}}}")
        # Layouts: indented tags on their own lines (lstrip_blocks, trim_blocks), comments,
        # block set, filter and call blocks, raw.
        return c([
            f"{lead}{{#{a} note {b}#}}\n    {{{{ {self.expr()} }}}}  \n",
            f"\n    {{%{a} set y %}}\n  {self.expr()} {{{{ {self.expr()} }}}}\n    {{% endset {b}%}}\n[{{{{ y }}}}]",
            f"\n  {{%{a} filter upper {b}%}}\n    {{{{ {self.expr()} }}}}\n  {{% endfilter %}}\n",
            f"{{% macro w() %}}({{{{ caller() }}}}){{% endmacro %}}\n  {{%{a} call w() {b}%}}  {{{{ {self.expr()} }}}}"
            "\n  {% endcall %}",
            f"\n\t{{%{a} raw {b}%}} {{{{ x }}}}\n {{%- endraw %}}\n",
            f"\n  {{%{a} if {self.expr()} {b}%}}\n    yes\n  {{%- elif {self.expr()} +%}}\n    elif\n  {{% else %}}"
            "\n    no\n  {% endif %}\n",
            f"\n{{%{a} for x in xs {b}%}}\n    {{{{- x }}}},\n    {{% if loop.last %}}last{{% endif %}}\n{{% endfor %}}",
        ])

    def body(self, depth):
        return "".join(self.statement(depth) for _ in range(self.r.randint(0, 2)))

    def template(self):
        return self.body(0) + self.r.choice(["", "\n", "\n\n  "])


# Python prints a generator with its address ("<generator object sync_do_map at 0x7f...>"),
# which no template can rely on: compared as "<generator object>" (in the case it has).
ADDRESS = re.compile(r"<(\w+) (object)( \w+)? at 0x[0-9a-f]+>", re.IGNORECASE)


def templates_dir():
    if len(sys.argv) > 2:
        return sys.argv[2]
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "llama_cpp.sh")
    src = subprocess.run([script, "--src"], capture_output=True, text=True, check=True).stdout.strip()
    return os.path.join(src, "models", "templates")


def main():
    directory = templates_dir()
    paths = sorted(glob.glob(os.path.join(directory, "*.jinja")))
    assert paths, f"no templates in {directory}"
    env = make_env()
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        out.write(json.dumps({"templates_dir": directory}) + "\n")
        for path in paths:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            try:
                template, compile_error = env.from_string(source), None
            except jinja2.TemplateError as e:
                template, compile_error = None, f"{type(e).__name__}: {e}"
            for case, context in cases():
                record = {"template": os.path.basename(path), "case": case, "context": context}
                if compile_error:
                    record["error"] = compile_error
                else:
                    try:
                        record["output"] = template.render(**context)
                    except Exception as e:  # Type errors and the like are goldens too.
                        record["error"] = f"{type(e).__name__}: {e}"
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
        # Exploring beyond the committed corpus: JINJA_RANDOM_SEED=N JINJA_RANDOM_CASES=M.
        generator = RandomTemplates(seed=int(os.environ.get("JINJA_RANDOM_SEED", "20240726")))
        for i in range(int(os.environ.get("JINJA_RANDOM_CASES", RANDOM_CASES))):
            source = generator.template()
            record = {"template": f"random/{i:04d}", "case": "random", "source": source,
                      "context": RANDOM_CONTEXT}
            try:  # A copy: a failing filter can leave a list it was given extended (indent).
                record["output"] = ADDRESS.sub(r"<\1 \2>", env.from_string(source).render(
                    **copy.deepcopy(RANDOM_CONTEXT)))
            except Exception as e:
                record["error"] = f"{type(e).__name__}: {e}"
            out.write(json.dumps(record, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
