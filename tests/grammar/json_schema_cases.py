#!/usr/bin/env python3
"""The independent reference of grammar/json_schema.cc and grammar/regex_gbnf.cc: judges
candidate texts with Python's `jsonschema` (Draft202012Validator, format checking off as
the draft says, on only for the `format` cases whose grammars enforce it) and candidate
strings with Python's `re.fullmatch` (re.ASCII: ECMA-262's ASCII \\d \\w \\s).
tests/grammar/json_schema_test.cc and regex_gbnf_test.cc check that the generated grammars
accept exactly the valid ones.

Usage: json_schema_cases.py OUT.jsonl (through scripts/python_deps.sh). Output, JSON lines:
  {"kind": "schema", "name", "schema", "texts": [{"text", "valid", "expect"}]}
  {"kind": "regex", "name", "pattern", "texts": [{"text", "match"}]}
`valid` is jsonschema's verdict; `expect` is whether the grammar must accept the text:
`valid`, except for the texts a case lists as NARROW (valid, left out on purpose: the
grammar writes compact JSON in the schema's order, see grammar/json_schema.h) or WIDE
(invalid, accepted on purpose: oneOf is read as anyOf). The script checks that each of
those is as the case says, so a list cannot hide a mistake.

To add a case: append to SCHEMA_CASES (name, schema, texts[, narrow=[...], wide=[...],
formats=True]) or REGEX_CASES (name, pattern, strings). Candidate texts need not be JSON.
"""
import json
import os
import random
import re
import sys

# The pinned jsonschema of scripts/python_deps.sh, whatever python3 has installed.
sys.path.insert(0, os.path.join(os.environ["CASCADE_PYTHON_CACHE"], "jsonschema"))
import jsonschema  # noqa: E402

Validator = jsonschema.Draft202012Validator


def case(name, schema, texts, narrow=(), wide=(), formats=False):
    return dict(name=name, schema=schema, texts=list(texts) + list(narrow) + list(wide), narrow=set(narrow),
                wide=set(wide), formats=formats)


def ints(lo, hi):
    return [str(i) for i in range(lo, hi + 1)]


# Every integer in [-150, 1200] and the spellings around them.
INTEGER_TEXTS = ints(-150, 1200) + ["-0", "00", "01", "-01", "007", "- 1", "+1", "", "x"]


def int_case(name, schema, texts=None):
    """An integer range case over INTEGER_TEXTS; its NARROW texts are an integral float
    in range (an integer to jsonschema, not written so by the grammar)."""
    validator = Validator(schema)
    narrow = [f"{v}.0" for v in (5, -120, 1010, 1100, -3, 7) if validator.is_valid(v)][:1]
    return case(name, schema, texts or INTEGER_TEXTS, narrow=narrow)


def big_integer_texts(lo, hi, seed):
    """Random integers across every magnitude, and the bounds' neighbours."""
    rng = random.Random(seed)
    values = {lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, -1, 1}
    for digits in range(1, 17):
        for _ in range(12):
            v = rng.randrange(10 ** (digits - 1), 10**digits)
            values.update({v, -v})
    return [str(v) for v in sorted(values) if abs(v) < 10**16]


# Decimals around the bounds of the number cases: a grid of integer parts, fractions
# (among them 16-digit ones that Python's float reading rounds onto an integer) and signs.
NUMBER_TEXTS = [sign + i + f
                for sign in ("", "-")
                for i in ("0", "1", "2", "3", "4", "5", "9", "10", "99", "100", "101", "999", "1000", "999999",
                          "1000000", "1000001")
                for f in ("", ".0", ".00", ".5", ".25", ".999", ".001", ".9999999999999999", ".0000000000000001",
                          ".9999999999999", ".0000000000001")] + ["01.5", "1.", ".5", "-", "1.5.5"]
EXPONENTS = ["1e0", "5E-1", "-2e1", "1e2", "1.5e1"]


def number_case(name, schema, rounded=(), cut=()):
    """A number range case over NUMBER_TEXTS and EXPONENTS. Its NARROW texts: the valid
    ones with an exponent (a bounded number is written without one); `rounded`, decimals
    beyond a bound that float() reads as the bound itself; `cut`, fractions longer than
    the 15 significant digits kept next to a strict bound (grammar/json_schema.cc)."""
    validator = Validator(schema)
    exponents = [t for t in EXPONENTS if validator.is_valid(json.loads(t))]
    narrow = exponents + list(rounded) + list(cut)
    return case(name, schema, [t for t in NUMBER_TEXTS + EXPONENTS if t not in narrow], narrow=narrow)


ADDRESS = {
    "title": "Address",
    "type": "object",
    "properties": {"street": {"type": "string", "title": "Street"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
    "required": ["street", "zip"],
}

SCHEMA_CASES = [
    # --- The types --------------------------------------------------------------------
    case("string", {"type": "string"},
         ['""', '"abc"', '"a\\"b"', '"\\u00e9"', '"\\u00E9"', '"é"', '"\\ud83d\\ude00"', '"😀"', '"tab\\t"', '"\\/"',
          '"\t"', '"\\x"', '"\\u12"', '"abc', 'abc', "'abc'", "1", "null", '"\\\\"', '"\\"'],
         # No whitespace around the whole text, and no lone surrogate (strict parsers refuse it).
         narrow=['"a" ', ' "a"', '"\\ud800a"', '"\\udc00"', '"x\\ud83d"', '"\\ude00\\ud83d"']),
    case("integer", {"type": "integer"},
         ["0", "-0", "17", "-17", "0123", "1.5", '"1"', "9999999999999999", "-9999999999999999", "true", "-", "1-"],
         narrow=["1.0", "1e2", "99999999999999999"]),
    case("number", {"type": "number"},
         ["0", "-0.5", "1.25e-3", "1E+2", "1e-0", ".5", "1.", "-", "01", "1e", "1.0e10", '"1"', "-0", "2.50",
          "1.5E300", "0.0000001", "+1", "1e+", "1.e5"],
         narrow=["1.12345678901234567", "1e1000"]),
    case("boolean", {"type": "boolean"}, ["true", "false", "True", "null", "0", '"true"']),
    case("null", {"type": "null"}, ["null", "None", '""', "0", "nul"]),
    case("any-empty-schema", {},
         ['{"a":[1,{"b":null}]}', "[]", '""', "1", "true", "null", "[1,]", '{"a":1,"a":2}', '{"a" : 1}', "[1 , 2]",
          "{,}", "tru"],
         narrow=[" 1", "[1,  2]", '{\n"a":1}']),
    case("any-true-schema", True, ['{"x":[]}', "[[[]]]", '"s"', "-1.5e3", "[", "{]"]),
    case("nullable-type-list", {"type": ["string", "null"], "maxLength": 3},
         ["null", '"abc"', '"abcd"', '""', "1", "[]"]),
    case("type-list-numbers", {"type": ["integer", "number", "boolean"]}, ["1", "1.5", "true", "null", '"1"']),
    # --- enum / const -------------------------------------------------------------------
    case("enum-mixed", {"enum": ["red", 1, 2.5, True, None, {"a": [1]}, [1, "x"], "é\"\\"]},
         ['"red"', "1", "2.5", "true", "null", '{"a":[1]}', '{"a": [1]}', '{ "a" : [ 1 ] }', '[1,"x"]', '[1, "x"]',
          '"é\\"\\\\"', '"blue"', "2", "false", '{"a":[1,2]}', '{"a":[1],"b":0}', "[1]"],
         narrow=["1.0", "2.50", '"\\u0072ed"', '{"a":[1.0]}']),
    case("enum-with-type", {"type": "string", "enum": ["a", "b", 1]}, ['"a"', '"b"', "1", '"c"']),
    case("const-string", {"const": "x"}, ['"x"', '"y"', "x"]),
    case("const-object", {"const": {"k": [1, 2], "j": None}},
         ['{"k":[1,2],"j":null}', '{"k": [1, 2], "j": null}', '{"k":[1,2]}', '{"k":[2,1],"j":null}'],
         narrow=['{"j":null,"k":[1,2]}']),
    case("enum-pydantic", {"title": "Color", "enum": ["red", "green"], "type": "string", "description": "d"},
         ['"red"', '"green"', '"blue"']),
    # --- Objects --------------------------------------------------------------------------
    case("object-pydantic-person", {
        "title": "Person", "type": "object",
        "properties": {"name": {"title": "Name", "type": "string"}, "age": {"title": "Age", "type": "integer"},
                       "email": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None, "title": "Email"}},
        "required": ["name", "age"]},
        ['{"name":"Ann","age":30}', '{"name":"Ann","age":30,"email":null}', '{"name":"Ann","age":30,"email":"a@b"}',
         '{ "name" : "Ann" , "age" : 30 }', '{"name":"Ann"}', '{"name":"Ann","age":"30"}', '{"age":30}', "{}",
         '{"name":"Ann","age":30,}', '{"name":"Ann""age":30}', '{"name":"Ann","age":30,"email":1}'],
        narrow=['{"age":30,"name":"Ann"}', '{"name":"Ann","age":30,"x":1}', '{"email":null,"name":"A","age":1}']),
    case("object-all-optional-closed", {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
        "additionalProperties": False},
        ["{}", "{ }", '{"a":1}', '{"b":1}', '{"c":1}', '{"a":1,"c":1}', '{"b":1,"c":2}', '{"a":1,"b":1}',
         '{"a":1,"b":1,"c":1}', '{"d":1}', '{,"a":1}', '{"a":1,}', '{"a":1 "b":1}', '{"a":1,,"b":1}', '{"a":"1"}',
         '{"a":1,"d":2}'],
        narrow=['{"c":1,"a":1}', '{"a":1,"a":2}', "{  }"]),
    case("object-middle-required", {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "null"}},
        "required": ["b"], "additionalProperties": False},
        ['{"b":""}', '{"a":1,"b":""}', '{"b":"","c":null}', '{"a":1,"b":"x","c":null}', "{}", '{"a":1}',
         '{"a":1,"c":null}', '{"c":null}']),
    case("object-extra-schema", {
        "type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "string"}},
        ['{"a":1,"x":"s"}', '{"x":"s"}', '{"x":"s","y":"t"}', '{"a":1}', "{}", '{"x":1}', '{"a":"s"}', '{"ab":"s"}',
         '{"":"s"}', '{"a\\"":"s"}', '{"\\u0061":"s"}', '{"a":1,"x":"s","z":2}'],
        narrow=['{"a":1,"a":2}', '{"b":"s","a":1}', '{"x":"s","a":1}', '{"\\u0062":"s"}', '{"\\/":"s"}']),
    case("object-extra-true",
         {"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": True},
         ['{"id":1}', '{"id":1,"x":[1,{}]}', '{"x":null}', '{"id":"1"}', '{"i":"1"}', '{"idd":"1"}', "{}"]),
    case("object-any", {"type": "object"},
         ["{}", '{"a":[1,{"b":null}]}', '{"a":1,"a":2}', "[]", "null", '{"a"}', '{"a":}', '{1:2}']),
    case("object-required-only", {"type": "object", "required": ["k"]},
         ['{"k":1}', '{"k":1,"x":2}', '{"k":[],"kk":{}}', "{}", '{"x":1}', '{"K":1}'],
         narrow=['{"x":1,"k":2}']),
    case("object-closed-empty", {"type": "object", "additionalProperties": False}, ["{}", "{ }", '{"a":1}', "[]"]),
    case("object-property-false", {
        "type": "object", "properties": {"a": {"type": "integer"}, "secret": False}, "additionalProperties": True},
        ['{"a":1}', '{"a":1,"b":2}', '{"secret":1}', '{"a":1,"secret":2}', '{"secrets":2}', '{"secre":2}']),
    case("object-odd-keys", {
        "type": "object",
        "properties": {"é": {"type": "integer"}, "a\"b": {"type": "integer"}, "x/y~": {"type": "integer"},
                       "": {"type": "integer"}},
        "required": ["é", "a\"b"], "additionalProperties": {"type": "boolean"}},
        ['{"é":1,"a\\"b":2}', '{"é":1,"a\\"b":2,"x/y~":3,"":4}', '{"é":1,"a\\"b":2,"ü":true}',
         '{"é":1,"a\\"b":2,"":true}', '{"é":1,"a\\"b":2,"é":true}', '{"é":1,"a\\"b":2,"éé":true}', '{"é":1}',
         '{"é":1,"a\\"b":2,"x/y":true}'],
        narrow=['{"\\u00e9":1,"a\\"b":2}']),
    case("object-nested", {
        "type": "object",
        "properties": {"user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1}},
                                "required": ["id"], "additionalProperties": False},
                       "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}}},
        "required": ["user", "tags"], "additionalProperties": False},
        ['{"user":{"id":1},"tags":[]}', '{"user": {"id": 9}, "tags": ["ab", "abcd"]}', '{"user":{"id":0},"tags":[]}',
         '{"user":{"id":1},"tags":["abcde"]}', '{"user":{},"tags":[]}', '{"user":{"id":1}}']),
    # --- Arrays ----------------------------------------------------------------------------
    case("array-items-bounds", {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
         ["[1,2]", "[1, 2, 3]", "[1,2,3,4]", "[1,2,3,4,5]", "[1]", "[]", '[1,"2"]', "[ 1 , 2 ]", "[1,2,]"]),
    case("array-prefix-closed", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                                 "items": False},
         ["[]", "[1]", '[1,"a"]', '[1,"a",2]', '["a"]', '[1,2]']),
    case("array-prefix-rest", {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
                               "items": {"type": "null"}, "minItems": 1, "maxItems": 4},
         ["[]", "[1]", '[1,"a"]', '[1, "a", null, null]', '[1,"a",null,null,null]', '["a"]', '[1,"a",1]']),
    case("array-prefix-min-beyond", {"type": "array", "prefixItems": [{"const": 0}], "items": {"type": "boolean"},
                                     "minItems": 3},
         ["[0,true,false]", "[0,true,false,true]", "[0,true]", "[0]", "[1,true,true]"]),
    case("array-prefix-any-rest", {"type": "array", "prefixItems": [{"type": "boolean"}]},
         ["[]", "[true]", '[true,1,"x",{}]', "[1]"]),
    case("array-any", {"type": "array"}, ["[]", '[1,"a",[],{}]', "{}", "[,]"]),
    case("array-empty-only", {"type": "array", "maxItems": 0}, ["[]", "[ ]", "[1]"]),
    case("array-nested", {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "minItems": 1}},
         ["[]", "[[1],[2,3]]", "[[]]", "[[1],[]]", "[1]"]),
    case("array-unique-false", {"type": "array", "items": {"type": "integer"}, "uniqueItems": False},
         ["[1,1]", "[]", '["a"]']),
    # --- Strings ---------------------------------------------------------------------------
    case("string-length", {"type": "string", "minLength": 2, "maxLength": 3},
         ['""', '"a"', '"ab"', '"abc"', '"abcd"', '"\\n\\t"', '"a\\u00e9"', '"é"', '"éé"', '"ééé"', '"éééé"', '"😀😀"',
          '"\\"\\\\\\/"', '"\\ud83d\\ude00"', '"\\ud83d\\ude00\\ud83d\\ude00"', '"\\ud83d\\ude00\\ud83d\\ude00x"',
          '"\\u0041B"', '"a\\x"'],
         narrow=['"\\ud800a"', '"\\udc00\\udc00"']),
    case("string-max-zero", {"type": "string", "maxLength": 0}, ['""', '"a"', '"\\n"']),
    case("string-min-only", {"type": "string", "minLength": 1}, ['""', '"a"', '"\\u0000"', '"' + "x" * 50 + '"']),
    case("pattern-code", {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3,5}$"},
         ['"AB-123"', '"AB-12345"', '"AB-12"', '"AB-123456"', '"ab-123"', '"A-123"', '"ABC-123"', '"AB123"', "1"]),
    case("pattern-optional-group", {"type": "string", "pattern": "^(foo|ba+r)?x*$"},
         ['""', '"foo"', '"bar"', '"baaarxxx"', '"xx"', '"br"', '"fooba"', '"foox"', '"barfoo"']),
    case("pattern-quote", {"type": "string", "pattern": '^say "(hi|yo)"[^a-z]?$'},
         ['"say \\"hi\\""', '"say \\"yo\\"!"', '"say \\"yo\\"\\""', '"say \\"yo\\"\\\\"', '"say \\"yo\\"\\n"',
          '"say \\"yo\\"\\u0001"', '"say \\"yo\\"a"', '"say hi"', '"say \\"hi\\"AB"'],
         narrow=['"say \\"yo\\"\\u0041"', '"say \\u0022hi\\u0022"']),
    case("pattern-backslash", {"type": "string", "pattern": r"^[^\\]*\\[a-z]$"},
         ['"ab\\\\c"', '"\\\\c"', '"ab\\\\"', '"a\\\\b\\\\c"', '"abc"']),
    case("pattern-dot", {"type": "string", "pattern": "^a.c$"},
         ['"abc"', '"a\\tc"', '"a\\nc"', '"a\\"c"', '"aéc"', '"a😀c"', '"ac"', '"abbc"']),
    case("pattern-decimal", {"type": "string", "pattern": r"^\d+(\.\d{1,2})?$"},
         ['"12"', '"12.5"', '"12.50"', '"12.505"', '"12."', '".5"', '""'],
         narrow=['"١٢"']),  # jsonschema's \d is Unicode; ours is ECMA-262's [0-9].
    case("pattern-unanchored", {"type": "string", "pattern": "abc"},
         ['"abc"', '"ab"'],
         narrow=['"xabcx"']),  # JSON Schema searches; the grammar matches whole strings.
    # --- format (checked: the grammars enforce these four) ---------------------------------------
    case("format-date", {"type": "string", "format": "date"},
         ['"2024-02-29"', '"2023-02-29"', '"2000-02-29"', '"1900-02-29"', '"2023-04-31"', '"2023-12-31"',
          '"2023-13-01"', '"2023-00-10"', '"0000-01-01"', '"0001-01-01"', '"9999-12-31"', '"2023-1-01"',
          '"2023-01-32"', '"2023-06-30"', '"2004-02-29"', '"2100-02-29"', '"2400-02-29"', '"0004-02-29"',
          '"23-01-01"', '"2023-01-01T"'],
         formats=True),
    case("format-time", {"type": "string", "format": "time"},
         ['"12:34:56Z"', '"12:34:56z"', '"23:59:59+05:30"', '"00:00:00.123456-01:00"', '"24:00:00Z"', '"12:60:00Z"',
          '"12:34:60Z"', '"12:34:56"', '"12:34Z"', '"1:34:56Z"', '"12:34:56.Z"', '"12:34:56+24:00"'],
         formats=True),
    case("format-date-time", {"type": "string", "format": "date-time"},
         ['"2024-02-29T12:00:00Z"', '"2024-02-29t12:00:00.5z"', '"2023-02-29T12:00:00Z"', '"2024-01-01 12:00:00Z"',
          '"2024-01-01T12:00:00"', '"2024-01-01T12:00:00+01:00"'],
         formats=True),
    case("format-uuid", {"type": "string", "format": "uuid"},
         ['"123e4567-e89b-12d3-a456-426614174000"', '"123E4567-E89B-12D3-A456-426614174000"',
          '"123e4567e89b12d3a456426614174000"', '"123e4567-e89b-12d3-a456-42661417400"',
          '"123e4567-e89b-12d3-a456-42661417400g"', '"{123e4567-e89b-12d3-a456-426614174000}"'],
         formats=True),
    case("format-ignored", {"type": "string", "format": "email"}, ['"not an email"', '""', "1"]),
    case("format-on-integer", {"type": "integer", "format": "int32"}, ["1", "-5", '"1"']),
    # --- Integer ranges -------------------------------------------------------------------------
    int_case("int-range", {"type": "integer", "minimum": -17, "maximum": 1043}),
    int_case("int-0-99", {"type": "integer", "minimum": 0, "maximum": 99}),
    int_case("int-min-7", {"type": "integer", "minimum": 7}, INTEGER_TEXTS + ["9999999999999999"]),
    int_case("int-max-minus-3", {"type": "integer", "maximum": -3}, INTEGER_TEXTS + ["-9999999999999999"]),
    int_case("int-min-0", {"type": "integer", "minimum": 0}),
    int_case("int-exclusive", {"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 17}),
    int_case("int-float-bounds", {"type": "integer", "minimum": 2.5, "maximum": 99.5}),
    int_case("int-float-exclusive", {"type": "integer", "exclusiveMinimum": -2.0, "exclusiveMaximum": 100.25}),
    int_case("int-negative-both", {"type": "integer", "minimum": -150, "maximum": -100}),
    int_case("int-negative-to-zero", {"type": "integer", "minimum": -120, "maximum": 0}),
    int_case("int-single", {"type": "integer", "minimum": 5, "maximum": 5}),
    int_case("int-1000-1200", {"type": "integer", "minimum": 1000, "maximum": 1200}),
    int_case("int-max-1010", {"type": "integer", "maximum": 1010}),
    case("int-big", {"type": "integer", "minimum": -12345678, "maximum": 98765432109},
         big_integer_texts(-12345678, 98765432109, 1)),
    case("int-big-lower", {"type": "integer", "minimum": 4503599627370497},
         big_integer_texts(4503599627370497, 10**16 - 1, 2)),
    case("int-big-upper", {"type": "integer", "maximum": -70000000001},
         big_integer_texts(-(10**16 - 1), -70000000001, 3)),
    case("int-nullable-range", {"type": ["integer", "null"], "minimum": 1, "maximum": 12},
         ["null", "1", "12", "0", "13", '"1"']),
    # --- Number ranges -------------------------------------------------------------------------
    number_case("number-0-1", {"type": "number", "minimum": 0, "maximum": 1}, rounded=["1.0000000000000001"]),
    number_case("number-positive", {"type": "number", "exclusiveMinimum": 0}),
    number_case("number-exclusive", {"type": "number", "exclusiveMinimum": -3, "exclusiveMaximum": 100},
                cut=["99.0000000000000001", "-2.0000000000000001"]),
    number_case("number-float-integral-bounds", {"type": "number", "minimum": -1.0, "maximum": 2.0},
                rounded=["2.0000000000000001", "-1.0000000000000001"]),
    number_case("number-max-negative", {"type": "number", "maximum": -5}, rounded=["-4.9999999999999999"]),
    number_case("number-exclusive-max-negative", {"type": "number", "exclusiveMaximum": -5},
                cut=["-5.9999999999999999"]),
    number_case("number-large", {"type": "number", "minimum": 1000000, "exclusiveMaximum": 1000001},
                rounded=["999999.9999999999999999", "999999.9999999999999"],
                cut=["1000000.0000000000000001", "1000000.0000000000001"]),
    number_case("number-both-kinds", {"type": "number", "minimum": 1, "exclusiveMinimum": 1, "maximum": 10,
                                      "exclusiveMaximum": 11},
                rounded=["10.0000000000000001"], cut=["1.9999999999999999"]),
    number_case("number-nullable", {"type": ["number", "null"], "minimum": 0, "maximum": 100},
                rounded=["100.0000000000000001"]),
    # --- Combinators ------------------------------------------------------------------------------
    case("anyof", {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 0}]},
         ['"ab"', '"abc"', "0", "-1", "null"]),
    case("oneof-tagged", {"oneOf": [
        {"type": "object", "properties": {"kind": {"const": "a"}, "x": {"type": "integer"}},
         "required": ["kind", "x"], "additionalProperties": False},
        {"type": "object", "properties": {"kind": {"const": "b"}, "y": {"type": "string"}},
         "required": ["kind", "y"], "additionalProperties": False}], "discriminator": {"propertyName": "kind"}},
        ['{"kind":"a","x":1}', '{"kind":"b","y":"s"}', '{"kind":"a","y":"s"}', '{"kind":"c","x":1}']),
    case("oneof-overlapping", {"oneOf": [{"type": "integer"}, {"type": "number"}]},
         ["5.5", '"5"'],
         wide=["5"]),  # 5 matches both branches: oneOf fails, our anyOf reading accepts.
    case("allof-single-ref", {"$defs": {"A": ADDRESS}, "allOf": [{"$ref": "#/$defs/A"}], "description": "d"},
         ['{"street":"Main","zip":"12345"}', '{"street":"Main","zip":"1234"}', '{"street":"Main"}']),
    case("allof-merge", {"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"properties": {"b": {"type": "string"}}, "required": ["b"]},
        {"$ref": "#/$defs/C"}], "$defs": {"C": {"type": "object", "properties": {"c": {"type": "boolean"}}}}},
        ['{"a":1,"b":"x"}', '{"a":1,"b":"x","c":true}', '{"a":1}', '{"b":"x"}', '{"a":1,"b":2}'],
        narrow=['{"a":1,"b":"x","d":0}']),
    # --- $ref ---------------------------------------------------------------------------------------
    case("ref-recursive-tree", {
        "$defs": {"node": {"type": "object",
                           "properties": {"value": {"type": "integer"},
                                          "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                           "required": ["value"], "additionalProperties": False}},
        "$ref": "#/$defs/node"},
        ['{"value":1}', '{"value":1,"children":[]}', '{"value":1,"children":[{"value":2,"children":[{"value":3}]}]}',
         '{"value":1,"children":[{"children":[]}]}', '{"value":1,"children":[{"value":"x"}]}', '{"children":[]}']),
    case("ref-root-list", {
        "type": "object",
        "properties": {"head": {"type": "integer"}, "tail": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        "required": ["head", "tail"], "additionalProperties": False},
        ['{"head":1,"tail":null}', '{"head":1,"tail":{"head":2,"tail":null}}', '{"head":1,"tail":{"head":2}}',
         '{"head":1}']),
    case("ref-pydantic-order", {
        "$defs": {
            "Customer": {"properties": {"name": {"title": "Name", "type": "string"},
                                        "address": {"$ref": "#/$defs/Address"}},
                         "required": ["name", "address"], "title": "Customer", "type": "object"},
            "Address": ADDRESS,
            "Item": {"properties": {"sku": {"title": "Sku", "type": "string"},
                                    "qty": {"exclusiveMinimum": 0, "title": "Qty", "type": "integer"},
                                    "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None}},
                     "required": ["sku", "qty"], "title": "Item", "type": "object"},
            "Status": {"enum": ["new", "paid", "shipped"], "title": "Status", "type": "string"}},
        "properties": {"customer": {"$ref": "#/$defs/Customer"},
                       "items": {"items": {"$ref": "#/$defs/Item"}, "title": "Items", "type": "array", "minItems": 1},
                       "status": {"$ref": "#/$defs/Status", "default": "new"}},
        "required": ["customer", "items"], "title": "Order", "type": "object"},
        ['{"customer":{"name":"A","address":{"street":"S","zip":"12345"}},"items":[{"sku":"x","qty":1}]}',
         '{"customer": {"name": "A", "address": {"street": "S", "zip": "12345"}}, "items": [{"sku": "x", "qty": 2, '
         '"note": null}, {"sku": "y", "qty": 3, "note": "n"}], "status": "paid"}',
         '{"customer":{"name":"A","address":{"street":"S","zip":"1234"}},"items":[{"sku":"x","qty":1}]}',
         '{"customer":{"name":"A","address":{"street":"S","zip":"12345"}},"items":[]}',
         '{"customer":{"name":"A","address":{"street":"S","zip":"12345"}},"items":[{"sku":"x","qty":0}]}',
         '{"customer":{"name":"A","address":{"street":"S","zip":"12345"}},"items":[{"sku":"x","qty":1}],'
         '"status":"lost"}']),
    case("ref-definitions-draft7", {
        "definitions": {"Pet": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}},
        "type": "array", "items": {"$ref": "#/definitions/Pet"}},
        ['[{"name":"Rex"}]', "[]", "[{}]", '[{"name":1}]']),
]

REGEX_CASES = [
    ("code", r"^[A-Z]{2}-[0-9]{3,5}$", ["AB-123", "AB-12345", "AB-12", "AB-123456", "ab-123", "AB-1234x"]),
    ("optional-group", r"(foo|ba+r)?x*", ["", "foo", "bar", "baaar", "xxx", "fooxx", "br", "foobar", "barx"]),
    ("dot", r"a.c", ["abc", "a\tc", "a\nc", "aéc", "a😀c", "ac", "a\x00c"]),
    ("classes", r"[\w.-]+@[\w-]+\.[a-z]{2,}", ["a.b-c@d-e.com", "a@b.c", "@b.com", "a@b.COM", "a_b@c.de"]),
    ("negated", r"[^abc]+", ["def", "xax", "é", "\n", "", "d\\e"]),
    ("escapes", r"\d+\.\d*\s\S", ["1. x", "12.34\tx", "1.x", "1.2 \n", "١.2 x"]),
    ("non-capturing", r"(?:ab|cd){2,3}", ["abcd", "cdcdab", "ab", "abcdabcd", "abab"]),
    ("counts", r"a{,2}b{2,}c{3}", ["bbccc", "aabbbccc", "aaabbccc", "abccc", "abbcc"]),
    ("empty-alternative", r"x|", ["", "x", "xx"]),
    ("empty-branch-group", r"(|y)z", ["z", "yz", "yyz"]),
    ("class-specials", r"[\]\-^]+", ["]", "-^]", "^", "a", "\\"]),
    ("class-dash-last", r"[a-]+", ["a-a", "-", "b"]),
    ("backslash", r"\\", ["\\", "", "\\\\"]),
    ("non-ascii", r"\u00e9+|ü", ["é", "ééé", "ü", "e", "üü"]),
    ("empty", r"^$", ["", "a"]),
    ("anchored-alternatives", r"^a$|^b$", ["a", "b", "ab", ""]),
    ("optional", r"colou?r", ["color", "colour", "colouur"]),
    ("lazy", r"(a|b)*?c", ["c", "abbac", "ab"]),
    ("not-newline", r"[^\n]*", ["abc", "a\nb", ""]),
    ("hex-escapes", r"\x41\u0042[\x30-\x39]", ["AB0", "AB9", "ABa", "AB"]),
    ("quantified-literal", r"(ab)+c?", ["ab", "ababc", "abc", "aab", "c"]),
    ("braces-literal", r"a{x}", ["a{x}", "a"]),
    ("dot-star-anchors", r"^.*$", ["", "anything goes", "but\nnot this"]),
    ("controls", r"[\t\n]+|\s+", ["\t\n", " ", "\x0b", "\r\f", "x"]),
    ("named-group", r"(?P<year>\d{4})-(?P<month>\d\d)", ["2024-01", "24-01", "2024-1"]),
    ("nested-repeats", r"((a|b){2}c){1,2}", ["abc", "abcbbc", "ac", "abcabcabc"]),
    ("braces-as-python-reads-them", r"a{,}b{}c{1,2", ["aab{}c{1,2", "b{}c{1,2", "ab{}c", "a{,}b{}c{1,2"]),
    ("class-bracket-first", r"[]a]+[^]a]", ["]ab", "a]]x", "ab", "]]"]),
    # Unbounded repeats of what may match nothing: GBNF's `x*` is `r ::= x r | ""`, a
    # left-recursive rule once x is nullable (found by tests/fuzz/grammar_fuzz.cc).
    ("repeated-nullable", r"(ab|c?){2,}x(a?)*(b*c*)+",
     ["x", "abx", "ccabx", "cx", "xaaa", "xbcbc", "abcx", "ax", "xab", "xca", "abab", ""]),
    ("nested-nullable-repeats", r"((a|)+b*)*", ["", "a", "ab", "bba", "abab", "c", "ac"]),
]


# Characters the mutants insert: JSON's punctuation, escapes' letters, digits, a space.
MUTATION_ALPHABET = '"\\,:{}[] 0-9.eEuntfa"é😀\x01'


def mutants(texts, seed, per_text=8):
    """Deterministic one-character edits of `texts` (deleted, inserted, replaced)."""
    rng = random.Random(seed)
    out = []
    for text in texts:
        for _ in range(per_text):
            i = rng.randrange(len(text) + 1)
            c = rng.choice(MUTATION_ALPHABET)
            op = rng.randrange(3)
            if op == 0 and text:
                i = min(i, len(text) - 1)
                out.append(text[:i] + text[i + 1:])
            elif op == 1:
                out.append(text[:i] + c + text[i:])
            elif text:
                i = min(i, len(text) - 1)
                out.append(text[:i] + c + text[i + 1:])
    return [m for m in dict.fromkeys(out) if m not in texts]


def judge_schema(c, seed):
    validator = Validator(c["schema"], format_checker=Validator.FORMAT_CHECKER if c["formats"] else None)

    def valid(text):
        try:
            return validator.is_valid(json.loads(text))
        except ValueError:
            return False

    texts = []
    for text in c["texts"]:
        expect = is_valid = valid(text)
        if text in c["narrow"]:
            if not is_valid:
                sys.exit(f"case {c['name']}: NARROW text {text!r} is not valid")
            expect = False
        if text in c["wide"]:
            if is_valid:
                sys.exit(f"case {c['name']}: WIDE text {text!r} is valid")
            expect = True
        texts.append({"text": text, "valid": is_valid, "expect": expect})
    if not any(t["expect"] for t in texts) or all(t["expect"] for t in texts):
        sys.exit(f"case {c['name']}: needs texts on both sides")
    # The invalid mutants must be rejected; a valid one may be outside the compact form
    # (a second space), so it is not checked.
    if len(c["texts"]) < 200:
        for text in mutants(c["texts"], seed):
            if not valid(text) and text not in c["wide"]:
                texts.append({"text": text, "valid": False, "expect": False, "mutant": True})
    return {"kind": "schema", "name": c["name"], "schema": c["schema"], "texts": texts}


def judge_regex(name, pattern, strings, seed):
    compiled = re.compile(pattern, re.ASCII)
    texts = [{"text": s, "match": compiled.fullmatch(s) is not None} for s in strings + mutants(strings, seed)]
    return {"kind": "regex", "name": name, "pattern": pattern, "texts": texts}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    # rfc3339-validator gives jsonschema its time and date-time checkers; without it
    # they would accept anything and the format cases would prove nothing.
    missing = {"date", "time", "date-time", "uuid"} - set(Validator.FORMAT_CHECKER.checkers)
    if missing:
        sys.exit(f"jsonschema lacks the format checkers {sorted(missing)} (pip install rfc3339-validator)")
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        for seed, c in enumerate(SCHEMA_CASES):
            out.write(json.dumps(judge_schema(c, seed), ensure_ascii=False) + "\n")
        for seed, (name, pattern, strings) in enumerate(REGEX_CASES):
            out.write(json.dumps(judge_regex(name, pattern, strings, seed), ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
