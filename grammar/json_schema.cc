// JSON Schema to GBNF (grammar/json_schema.h). A schema becomes rules by recursion over
// its subschemas: a rule per property, item and branch, named for where it is
// (`root-address-street`), a rule per `$ref` target (`def-Address`), so that recursive
// schemas become recursive rules, and shared rules for the generic JSON values (`value`,
// `string`, `number`, ...). Identical rule bodies are written once.
//
// Learned from llama.cpp's common/json-schema-to-grammar.cpp (the object layout "one rule
// per position, before and after something was emitted"), written anew for the keywords
// Python's `jsonschema` Draft 2020-12 checks. Bounded integers and numbers, and the GBNF
// expression builders, are in grammar/json_numbers.cc.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/str_cat.h"
#include "grammar/grammar.h"
#include "grammar/json_numbers.h"

namespace cascade::grammar {
namespace {

constexpr int kMaxSchemaDepth = 100;  // Schemas inside schemas (and $refs followed).

using Json = nlohmann::ordered_json;

// GBNF's limit on a repetition count (grammar/gbnf.cc), for lengths and item counts.
constexpr int64_t kMaxCount = 10000;

// The shared rules, written when used (with what they use).
struct Primitive {
  const char* name;
  const char* body;
  std::vector<const char*> uses;
};

const std::vector<Primitive>& Primitives() {
  static const auto* primitives = new std::vector<Primitive>{
      {"value",
       "object | array | string | number | boolean | null",
       {"object", "array", "string", "number", "boolean", "null"}},
      {"object", R"("{" ws ( member ( ws "," ws member )* ws )? "}")", {"ws", "member"}},
      {"member", R"(string ws ":" ws value)", {"string", "ws", "value"}},
      {"array", R"("[" ws ( value ( ws "," ws value )* ws )? "]")", {"ws", "value"}},
      {"string", R"("\"" char* "\"")", {"char"}},
      // A character of a JSON string: itself or an escape, a surrogate escape only as half
      // of a pair. RFC 8259 (section 8.2) leaves a lone surrogate's meaning open and strict
      // parsers refuse it (nlohmann, serde_json), so no text this grammar allows has one.
      // A pair is one repetition of `char`, as minLength and maxLength count it (Python's
      // len, in code points).
      {"char",
       R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}) | "u" [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}))",
       {}},
      // A character of an extra member's key: one spelling per character (no \/ or \u),
      // so that excluding the declared keys' spellings excludes the keys.
      {"key-char", R"([^"\\\x00-\x1F] | "\\" ["\\bfnrt])", {}},
      {"integer", R"("-"? ("0" | [1-9] [0-9]{0,15}))", {}},
      {"number", R"(integer ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?)", {"integer"}},
      {"boolean", R"("true" | "false")", {}},
      {"null", R"("null")", {}},
      {"ws", R"(" "?)", {}},
      // `format` as jsonschema's checkers read it: date by date.fromisoformat (years
      // 0001-9999, the days of each month, 29 February in leap years), time and
      // date-time by rfc3339_validator (an offset required, `t` and `z` in either case),
      // uuid by uuid.UUID with the hyphens in place.
      {"date",
       R"(date-year "-" date-month-day | date-leap-year "-02-29")",
       {"date-year", "date-month-day", "date-leap-year"}},
      {"date-year", R"("000" [1-9] | "00" [1-9] [0-9] | "0" [1-9] [0-9]{2} | [1-9] [0-9]{3})", {}},
      {"date-month-day",
       R"(("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8]))",
       {}},
      {"date-leap-year",
       R"([0-9]{2} ("0" [48] | [2468] [048] | [13579] [26]) | ("0" [48] | [2468] [048] | [13579] [26]) "00")",
       {}},
      {"time",
       R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,9})? ([Zz] | [-+] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))",
       {}},
      {"date-time", R"(date [Tt] time)", {"date", "time"}},
      {"uuid", R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})", {}},
  };
  return *primitives;
}

// Keywords that do not validate (annotations), skipped wherever they stand. `format` is
// one too in 2020-12 unless format checking is on: strings honour the four formats above
// and ignore the others. `strict` and `discriminator` are OpenAI's and OpenAPI's noise
// that validators ignore.
const std::set<std::string>& Annotations() {
  static const auto* keys = new std::set<std::string>{"title", "description", "examples",   "default",      "$schema",
                                                      "$id",   "$comment",    "deprecated", "readOnly",     "writeOnly",
                                                      "$defs", "definitions", "strict",     "discriminator"};
  return *keys;
}

// The validation keywords the converter honours, by the type they constrain: the type
// of `key`, or nullptr for the others.
const char* KeywordType(const std::string& key) {
  static const auto* groups = new std::vector<std::pair<const char*, std::set<std::string>>>{
      {"object", {"properties", "required", "additionalProperties"}},
      {"array", {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}},
      {"string", {"minLength", "maxLength", "pattern", "format"}},
      {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}},
  };
  for (const auto& [type, keys] : *groups) {
    if (keys.count(key)) return type;
  }
  return nullptr;
}

bool IsStructural(const std::string& key) {
  return key == "type" || key == "enum" || key == "const" || key == "$ref" || key == "anyOf" || key == "oneOf" ||
         key == "allOf";
}

std::string PointerToken(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Child(const std::string& pointer, const std::string& key) { return pointer + "/" + PointerToken(key); }

absl::Status Refuse(const std::string& pointer, std::string_view what) {
  return absl::InvalidArgumentError(StrCat(pointer.empty() ? "(root)" : pointer, ": ", what));
}

// A rule name's part for `text`: GBNF names are [a-zA-Z0-9-]+.
std::string NamePart(std::string_view text) {
  std::string out;
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (ok) {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "x" : out;
}

// --- The converter ----------------------------------------------------------------------------

// One conversion. Single use.
class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  absl::StatusOr<std::string> Run() {
    refs_["#"] = {"root", 0, true};
    const size_t root = Reserve("root");
    CASCADE_ASSIGN_OR_RETURN(rules_[root].second, Body(root_, "", "root"));
    refs_["#"].open = false;
    std::string out;
    for (const auto& [name, body] : rules_) StrAppend(&out, name, " ::= ", body, "\n");
    for (const Primitive& p : Primitives()) {
      if (used_.count(p.name)) StrAppend(&out, p.name, " ::= ", p.body, "\n");
    }
    return out;
  }

 private:
  struct RefRule {
    std::string name;
    int depth = 0;      // depth_ when its body began.
    bool open = false;  // Its body is being built.
  };

  // --- Rules ---
  std::string Use(const std::string& name) {
    if (used_.insert(name).second) {
      for (const Primitive& p : Primitives()) {
        if (p.name != name) continue;
        for (const char* dep : p.uses) Use(dep);
      }
    }
    return name;
  }

  std::string UniqueName(const std::string& wanted) {
    std::string name = wanted;
    for (int n = 2; taken_.count(name) || IsPrimitive(name); ++n) name = StrCat(wanted, "-", n);
    taken_.insert(name);
    return name;
  }

  static bool IsPrimitive(const std::string& name) {
    return std::any_of(Primitives().begin(), Primitives().end(), [&](const Primitive& p) { return name == p.name; });
  }

  size_t Reserve(const std::string& wanted) {
    rules_.emplace_back(UniqueName(wanted), "");
    return rules_.size() - 1;
  }

  // A symbol for `body`: itself when it is one, else a rule named for `wanted` (or the
  // rule that already has this body).
  std::string Rule(const std::string& wanted, const std::string& body) {
    if (IsSymbol(body)) return body;
    auto it = by_body_.find(body);
    if (it != by_body_.end()) return it->second;
    const std::string name = UniqueName(wanted);
    rules_.emplace_back(name, body);
    by_body_.emplace(body, name);
    return name;
  }

  // --- Schemas ---
  // A symbol for the texts valid under `schema` (at `pointer`), named for `name`.
  absl::StatusOr<std::string> Visit(const Json& schema, const std::string& pointer, const std::string& name) {
    CASCADE_ASSIGN_OR_RETURN(std::string body, Body(schema, pointer, name));
    return Rule(name, body);
  }

  // Visit for a value inside an object or array: input is consumed before it, so a
  // `$ref` back to an enclosing schema is no left recursion.
  absl::StatusOr<std::string> VisitInside(const Json& schema, const std::string& pointer, const std::string& name) {
    ++depth_;
    absl::StatusOr<std::string> out = Visit(schema, pointer, name);
    --depth_;
    return out;
  }

  absl::StatusOr<std::string> Body(const Json& schema, const std::string& pointer, const std::string& name) {
    // The converter recurses per nested schema (and per $ref it follows): a bound keeps a
    // hostile schema off the stack's end.
    if (body_depth_ >= kMaxSchemaDepth) return Refuse(pointer, "schemas nested deeper than 100 are not supported");
    ++body_depth_;
    absl::StatusOr<std::string> body = BodyOf(schema, pointer, name);
    --body_depth_;
    return body;
  }

  absl::StatusOr<std::string> BodyOf(const Json& schema, const std::string& pointer, const std::string& name) {
    if (schema.is_boolean()) {
      if (schema.get<bool>()) return Use("value");
      return Refuse(pointer, "the schema false: nothing validates");
    }
    if (!schema.is_object()) return Refuse(pointer, "a schema must be an object or a boolean");
    CASCADE_RETURN_IF_ERROR(CheckKeywords(schema, pointer));
    if (schema.contains("$ref")) return RefBody(schema, pointer);
    if (schema.contains("enum") || schema.contains("const")) return EnumBody(schema, pointer);
    if (schema.contains("anyOf") || schema.contains("oneOf")) return AnyOfBody(schema, pointer, name);
    if (schema.contains("allOf")) return AllOfBody(schema, pointer, name);
    CASCADE_ASSIGN_OR_RETURN(std::vector<std::string> types, Types(schema, pointer));
    if (types.empty()) return Use("value");
    if (types.size() == 1) return TypedBody(schema, pointer, name, types[0]);
    std::vector<std::string> alts;
    for (const std::string& type : types) {
      CASCADE_ASSIGN_OR_RETURN(std::string body, TypedBody(schema, pointer, name + "-" + type, type));
      alts.push_back(Rule(name + "-" + type, body));
    }
    return Alt(alts);
  }

  // Every keyword is an annotation or one the converter honours; a nested `$id` would
  // move the base of `$ref`s under it.
  absl::Status CheckKeywords(const Json& schema, const std::string& pointer) const {
    for (const auto& [key, value] : schema.items()) {
      if (key == "$id" && &schema != &root_) return Refuse(Child(pointer, key), "a nested $id is not supported");
      if (key == "uniqueItems" && value == Json(false)) continue;  // The default.
      if (Annotations().count(key) || IsStructural(key) || KeywordType(key) != nullptr) continue;
      return Refuse(Child(pointer, key), "not supported");
    }
    if (schema.contains("uniqueItems") && schema["uniqueItems"] != Json(false)) {
      return Refuse(Child(pointer, "uniqueItems"), "not supported");
    }
    return absl::OkStatus();
  }

  // The validation keywords of `schema` other than `except`.
  static std::vector<std::string> ValidationKeys(const Json& schema, std::initializer_list<const char*> except) {
    std::vector<std::string> out;
    for (const auto& item : schema.items()) {
      const std::string& key = item.key();  // Not a structured binding: clang's lambdas cannot capture one.
      if (Annotations().count(key)) continue;
      if (std::any_of(except.begin(), except.end(), [&](const char* e) { return key == e; })) continue;
      out.push_back(key);
    }
    return out;
  }

  // `$ref` into this document (`#`, `#/$defs/Name`, any `#/json/pointer`): a rule per
  // target, so that recursive schemas are recursive rules.
  absl::StatusOr<std::string> RefBody(const Json& schema, const std::string& pointer) {
    const std::vector<std::string> siblings = ValidationKeys(schema, {"$ref"});
    if (!siblings.empty()) return Refuse(Child(pointer, siblings[0]), "next to $ref is not supported");
    const Json& ref = schema["$ref"];
    if (!ref.is_string()) return Refuse(Child(pointer, "$ref"), "must be a string");
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#') {
      return Refuse(Child(pointer, "$ref"),
                    StrCat("'", target, "': only references into this schema (#...) are supported"));
    }
    if (auto it = refs_.find(target); it != refs_.end()) {
      if (it->second.open && it->second.depth == depth_) {
        return Refuse(Child(pointer, "$ref"), StrCat("'", target, "' refers back to itself before any input"));
      }
      return it->second.name;
    }
    CASCADE_ASSIGN_OR_RETURN(std::string target_pointer, DecodeFragment(target, pointer));
    const Json* resolved = nullptr;
    try {
      resolved = &root_.at(Json::json_pointer(target_pointer));
    } catch (const nlohmann::json::exception&) {
      return Refuse(Child(pointer, "$ref"), StrCat("'", target, "' does not resolve"));
    }
    const size_t rule = Reserve(RefName(target_pointer));
    // A copy: the body adds rules, and `rules_` growing would move a reference's string.
    const std::string rule_name = rules_[rule].first;
    refs_[target] = {rule_name, depth_, true};
    CASCADE_ASSIGN_OR_RETURN(std::string body, Body(*resolved, target_pointer, rule_name));
    rules_[rule].second = body;
    by_body_.emplace(body, rule_name);
    refs_[target].open = false;
    return rule_name;
  }

  // A URI fragment's JSON pointer: percent-decoded.
  static absl::StatusOr<std::string> DecodeFragment(const std::string& target, const std::string& pointer) {
    std::string out;
    for (size_t i = 1; i < target.size(); ++i) {
      if (target[i] == '%' && i + 2 < target.size() && std::isxdigit(static_cast<unsigned char>(target[i + 1])) &&
          std::isxdigit(static_cast<unsigned char>(target[i + 2]))) {
        out += static_cast<char>(std::stoi(target.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out += target[i];
      }
    }
    if (!out.empty() && out[0] != '/') {
      return Refuse(Child(pointer, "$ref"), StrCat("'", target, "': anchors ($anchor) are not supported"));
    }
    return out;
  }

  static std::string RefName(const std::string& pointer) {
    for (const char* prefix : {"/$defs/", "/definitions/"}) {
      const std::string p = prefix;
      if (pointer.rfind(p, 0) == 0 && pointer.find('/', p.size()) == std::string::npos) {
        return "def-" + NamePart(pointer.substr(p.size()));
      }
    }
    return "ref-" + NamePart(pointer);
  }

  // `enum` / `const`: the values (of the schema's `type`, if it has one), each as its
  // compact serialization with optional spaces between its tokens.
  absl::StatusOr<std::string> EnumBody(const Json& schema, const std::string& pointer) {
    const std::vector<std::string> others = ValidationKeys(schema, {"enum", "const", "type"});
    if (!others.empty()) return Refuse(Child(pointer, others[0]), "next to enum or const is not supported");
    if (schema.contains("enum") && schema.contains("const"))
      return Refuse(Child(pointer, "const"), "next to enum is not supported");
    Json values = Json::array();
    std::string where = Child(pointer, "const");
    if (schema.contains("const")) {
      values.push_back(schema["const"]);
    } else {
      where = Child(pointer, "enum");
      if (!schema["enum"].is_array()) return Refuse(where, "must be an array");
      values = schema["enum"];
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      CASCADE_ASSIGN_OR_RETURN(types, Types(schema, pointer));
    }
    std::vector<std::string> alts;
    for (const Json& v : values) {
      if (!types.empty() &&
          std::none_of(types.begin(), types.end(), [&](const std::string& t) { return HasType(v, t); })) {
        continue;
      }
      CASCADE_ASSIGN_OR_RETURN(std::string text, ValueGbnf(v, where));
      if (std::find(alts.begin(), alts.end(), text) == alts.end()) alts.push_back(text);
    }
    if (alts.empty()) return Refuse(where, "no value is of the schema's type: nothing validates");
    return Alt(alts);
  }

  static bool HasType(const Json& v, const std::string& type) {
    if (type == "null") return v.is_null();
    if (type == "boolean") return v.is_boolean();
    if (type == "string") return v.is_string();
    if (type == "array") return v.is_array();
    if (type == "object") return v.is_object();
    if (type == "number") return v.is_number();
    // jsonschema's integers include the floats with no fraction (1.0).
    return v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
  }

  // One JSON value: its compact serialization, with `ws` between the tokens.
  absl::StatusOr<std::string> ValueGbnf(const Json& v, const std::string& where) {
    if (v.is_object() || v.is_array()) {
      const bool object = v.is_object();
      std::string out = GbnfLiteral(object ? "{" : "[") + " " + Use("ws");
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) out += " ws \",\" ws";
        first = false;
        if (object) {
          CASCADE_ASSIGN_OR_RETURN(std::string k, ValueGbnf(Json(key), where));
          StrAppend(&out, " ", k, " ws \":\" ws");
        }
        CASCADE_ASSIGN_OR_RETURN(std::string value, ValueGbnf(item, where));
        StrAppend(&out, " ", value);
      }
      return StrCat(out, first ? " " : " ws ", GbnfLiteral(object ? "}" : "]"));
    }
    try {
      return GbnfLiteral(v.dump());
    } catch (const nlohmann::json::exception& e) {
      return Refuse(where, StrCat("a value that cannot be written as JSON: ", e.what()));
    }
  }

  // `anyOf`, and `oneOf` read as `anyOf`: exact when no text matches two branches (the
  // usual case: branches of different types, or objects told apart by a `const` tag);
  // else the grammar also derives the texts that match several branches.
  absl::StatusOr<std::string> AnyOfBody(const Json& schema, const std::string& pointer, const std::string& name) {
    const char* keyword = schema.contains("anyOf") ? "anyOf" : "oneOf";
    const std::vector<std::string> others = ValidationKeys(schema, {keyword});
    if (!others.empty()) return Refuse(Child(pointer, others[0]), StrCat("next to ", keyword, " is not supported"));
    const Json& branches = schema[keyword];
    const std::string where = Child(pointer, keyword);
    if (!branches.is_array() || branches.empty()) return Refuse(where, "must be a non-empty array");
    std::vector<std::string> alts;
    for (size_t i = 0; i < branches.size(); ++i) {
      CASCADE_ASSIGN_OR_RETURN(std::string symbol,
                               Visit(branches[i], Child(where, std::to_string(i)), StrCat(name, "-", i)));
      if (std::find(alts.begin(), alts.end(), symbol) == alts.end()) alts.push_back(symbol);
    }
    return Alt(alts);
  }

  // `allOf`: one subschema (with the keywords beside it, if any, as a second), or object
  // schemas whose `properties` and `required` merge. Other intersections are refused.
  absl::StatusOr<std::string> AllOfBody(const Json& schema, const std::string& pointer, const std::string& name) {
    const std::string where = Child(pointer, "allOf");
    const Json& subs = schema["allOf"];
    if (!subs.is_array() || subs.empty()) return Refuse(where, "must be a non-empty array");
    const std::vector<std::string> others = ValidationKeys(schema, {"allOf"});
    if (others.empty() && subs.size() == 1) return Body(subs[0], Child(where, "0"), name);
    std::vector<std::pair<Json, std::string>> parts;  // (schema, pointer)
    if (!others.empty()) {
      Json rest = schema;
      rest.erase("allOf");
      rest.erase("$id");  // The root's, now in a copy that is no root.
      parts.emplace_back(rest, pointer);
    }
    for (size_t i = 0; i < subs.size(); ++i) parts.emplace_back(subs[i], Child(where, std::to_string(i)));
    Json merged = {{"type", "object"}, {"properties", Json::object()}, {"required", Json::array()}};
    for (auto& [part, part_pointer] : parts) {
      CASCADE_ASSIGN_OR_RETURN(Json object, ResolveObject(part, part_pointer));
      CASCADE_RETURN_IF_ERROR(MergeObject(object, part_pointer, merged));
    }
    return ObjectBody(merged, where, name);
  }

  // An allOf part as an object schema ({type: object, properties, required}), through
  // `$ref`s.
  absl::StatusOr<Json> ResolveObject(const Json& part, const std::string& pointer) const {
    const Json* s = &part;
    std::string at = pointer;
    for (int hops = 0; s->is_object() && s->contains("$ref") && hops < 64; ++hops) {
      if (!ValidationKeys(*s, {"$ref"}).empty() || !(*s)["$ref"].is_string()) break;
      const std::string target = (*s)["$ref"].get<std::string>();
      if (target.empty() || target[0] != '#') break;
      CASCADE_ASSIGN_OR_RETURN(at, DecodeFragment(target, at));
      try {
        s = &root_.at(Json::json_pointer(at));
      } catch (const nlohmann::json::exception&) {
        return Refuse(Child(pointer, "$ref"), StrCat("'", target, "' does not resolve"));
      }
    }
    if (!s->is_object()) return Refuse(at, "allOf merges object schemas only");
    CASCADE_RETURN_IF_ERROR(CheckKeywords(*s, at));
    const std::vector<std::string> others = ValidationKeys(*s, {"type", "properties", "required"});
    if (!others.empty()) {
      return Refuse(Child(at, others[0]), "allOf merges only object schemas of properties and required");
    }
    if (s->contains("type") && (*s)["type"] != Json("object") && (*s)["type"] != Json::array({"object"})) {
      return Refuse(Child(at, "type"), "allOf merges object schemas only");
    }
    return *s;
  }

  static absl::Status MergeObject(const Json& object, const std::string& pointer, Json& merged) {
    if (object.contains("properties")) {
      if (!object["properties"].is_object()) return Refuse(Child(pointer, "properties"), "must be an object");
      for (const auto& [key, sub] : object["properties"].items()) {
        Json& props = merged["properties"];
        if (props.contains(key) && props[key] != sub) {
          return Refuse(Child(Child(pointer, "properties"), key), "declared differently in two allOf parts");
        }
        props[key] = sub;
      }
    }
    if (object.contains("required")) {
      if (!object["required"].is_array()) return Refuse(Child(pointer, "required"), "must be an array of strings");
      for (const Json& key : object["required"]) {
        if (std::find(merged["required"].begin(), merged["required"].end(), key) == merged["required"].end()) {
          merged["required"].push_back(key);
        }
      }
    }
    return absl::OkStatus();
  }

  // The types a schema allows: its `type`, else those its keywords constrain (a
  // narrowing: `{"minLength": 1}` also validates numbers), else none (any value).
  static absl::StatusOr<std::vector<std::string>> Types(const Json& schema, const std::string& pointer) {
    static const std::set<std::string> kTypes = {"null", "boolean", "object", "array", "string", "integer", "number"};
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const Json& type = schema["type"];
      const Json list = type.is_array() ? type : Json::array({type});
      for (const Json& t : list) {
        if (!t.is_string() || !kTypes.count(t.get<std::string>())) {
          return Refuse(Child(pointer, "type"), StrCat("unknown type ", t.dump()));
        }
        const std::string name = t.get<std::string>();
        if (std::find(types.begin(), types.end(), name) == types.end()) types.push_back(name);
      }
      if (types.empty()) return Refuse(Child(pointer, "type"), "an empty list: nothing validates");
    } else {
      for (const auto& [key, value] : schema.items()) {
        const char* type = KeywordType(key);
        if (type == nullptr || key == "format" || key == "uniqueItems") continue;  // Any value.
        if (std::find(types.begin(), types.end(), type) == types.end()) types.push_back(type);
      }
    }
    // Integers are numbers: one alternative, not two that overlap.
    if (std::find(types.begin(), types.end(), "number") != types.end()) {
      types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
    }
    return types;
  }

  absl::StatusOr<std::string> TypedBody(const Json& schema, const std::string& pointer, const std::string& name,
                                        const std::string& type) {
    if (type == "null") return Use("null");
    if (type == "boolean") return Use("boolean");
    if (type == "integer" || type == "number") return NumberBody(schema, pointer, type == "integer");
    if (type == "string") return StringBody(schema, pointer);
    if (type == "array") return ArrayBody(schema, pointer, name);
    return ObjectBody(schema, pointer, name);
  }

  // --- Numbers ---
  absl::StatusOr<std::string> NumberBody(const Json& schema, const std::string& pointer, bool integer) {
    const char* bounds[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    int64_t lo = -kMaxMagnitude, hi = kMaxMagnitude;
    bool bounded = false;
    for (const char* key : bounds) {
      if (!schema.contains(key)) continue;
      if (!schema[key].is_number()) return Refuse(Child(pointer, key), "must be a number");
      bounded = true;
      const Json& v = schema[key];
      const std::string k = key;
      if (k == "minimum") lo = std::max(lo, RoundBound(v, /*up=*/true));
      if (k == "exclusiveMinimum") lo = std::max(lo, RoundBound(v, /*up=*/false) + 1);
      if (k == "maximum") hi = std::min(hi, RoundBound(v, /*up=*/false));
      if (k == "exclusiveMaximum") hi = std::min(hi, RoundBound(v, /*up=*/true) - 1);
    }
    if (!bounded) return Use(integer ? "integer" : "number");
    if (!integer) return NumberBoundsBody(schema, pointer);
    lo = std::max(lo, -kMaxMagnitude);
    hi = std::min(hi, kMaxMagnitude);
    if (lo > hi) return Refuse(pointer, "no integer of at most 16 digits is within the bounds: nothing validates");
    if (lo == -kMaxMagnitude && hi == kMaxMagnitude) return Use("integer");
    return IntegerRange(lo, hi);
  }

  // A number's bounds: integers of at most 2^53 (a double holds them exactly); the
  // tighter of minimum and exclusiveMinimum (maximum, exclusiveMaximum) counts.
  absl::StatusOr<std::string> NumberBoundsBody(const Json& schema, const std::string& pointer) {
    std::optional<Bound> lo, hi;
    for (const char* key : {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"}) {
      if (!schema.contains(key)) continue;
      const double d = schema[key].get<double>();
      if (std::trunc(d) != d || std::fabs(d) > 9007199254740992.0) {
        return Refuse(Child(pointer, key), "on a number, only integer bounds up to 2^53 are supported");
      }
      const std::string k = key;
      const Bound b{static_cast<int64_t>(d), k.rfind("exclusive", 0) == 0};
      std::optional<Bound>& slot = k.find("inimum") != std::string::npos ? lo : hi;
      const bool lower = &slot == &lo;
      const bool tighter = !slot.has_value() || (lower ? b.value > slot->value : b.value < slot->value) ||
                           (b.value == slot->value && b.exclusive);
      if (tighter) slot = b;
    }
    const std::string out = NumberRange(lo, hi);
    if (out.empty()) return Refuse(pointer, "no number is within the bounds: nothing validates");
    return out;
  }

  // --- Strings ---
  // A string: its `pattern` (whole-string match) or its lengths, in characters as Python
  // counts them; both at once would need the intersection of two grammars. `format` is
  // an annotation in 2020-12: the four formats with exact grammars narrow the strings
  // when nothing else constrains them, and every other format is ignored.
  absl::StatusOr<std::string> StringBody(const Json& schema, const std::string& pointer) {
    const std::string quote = "\"\\\"\"";
    CASCADE_ASSIGN_OR_RETURN(int64_t min_length, Count(schema, pointer, "minLength", 0));
    CASCADE_ASSIGN_OR_RETURN(int64_t max_length, Count(schema, pointer, "maxLength", kUnbounded));
    const bool lengths = schema.contains("minLength") || schema.contains("maxLength");
    if (schema.contains("pattern")) {
      const std::string where = Child(pointer, "pattern");
      if (lengths) {
        return Refuse(Child(pointer, schema.contains("minLength") ? "minLength" : "maxLength"),
                      "next to pattern is not supported");
      }
      if (!schema["pattern"].is_string()) return Refuse(where, "must be a string");
      absl::StatusOr<std::string> expr =
          RegexToGbnfExpression(schema["pattern"].get<std::string>(), RegexEscape::kJsonString);
      if (!expr.ok()) return Annotate(expr.status(), where);
      return Seq({quote, "(" + *expr + ")", quote});
    }
    if (lengths) {
      if (max_length != kUnbounded && max_length < min_length) {
        return Refuse(Child(pointer, "maxLength"), "below minLength: nothing validates");
      }
      return Seq({quote, Repeat(Use("char"), min_length, max_length), quote});
    }
    if (schema.contains("format") && schema["format"].is_string()) {
      const std::string format = schema["format"].get<std::string>();
      if (format == "date" || format == "time" || format == "date-time" || format == "uuid") {
        return Seq({quote, Use(format), quote});
      }
    }
    return Use("string");
  }

  // A count keyword (minLength, minItems, ...): a non-negative integer within GBNF's
  // repetition limit, or `fallback` when absent.
  static absl::StatusOr<int64_t> Count(const Json& schema, const std::string& pointer, const char* key,
                                       int64_t fallback) {
    if (!schema.contains(key)) return fallback;
    const Json& v = schema[key];
    const bool integral =
        v.is_number_integer() || (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
    if (!integral || v.get<double>() < 0) return Refuse(Child(pointer, key), "must be a non-negative integer");
    if (v.get<double>() > kMaxCount)
      return Refuse(Child(pointer, key), StrCat("above ", kMaxCount, " is not supported"));
    return static_cast<int64_t>(v.get<double>());
  }

  // --- Arrays ---
  absl::StatusOr<std::string> ArrayBody(const Json& schema, const std::string& pointer, const std::string& name) {
    std::vector<std::string> prefix;
    if (schema.contains("prefixItems")) {
      const Json& items = schema["prefixItems"];
      if (!items.is_array()) return Refuse(Child(pointer, "prefixItems"), "must be an array");
      for (size_t i = 0; i < items.size(); ++i) {
        CASCADE_ASSIGN_OR_RETURN(
            std::string symbol,
            VisitInside(items[i], Child(Child(pointer, "prefixItems"), std::to_string(i)), StrCat(name, "-", i)));
        prefix.push_back(symbol);
      }
    }
    std::optional<std::string> rest;  // The items after the prefix; nullopt: none.
    if (!schema.contains("items")) {
      rest = Use("value");
    } else if (schema["items"] != Json(false)) {
      CASCADE_ASSIGN_OR_RETURN(rest, VisitInside(schema["items"], Child(pointer, "items"), name + "-item"));
    }
    CASCADE_ASSIGN_OR_RETURN(int64_t lo, Count(schema, pointer, "minItems", 0));
    CASCADE_ASSIGN_OR_RETURN(int64_t hi, Count(schema, pointer, "maxItems", kUnbounded));
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (!rest.has_value() && (hi == kUnbounded || hi > k)) hi = k;
    if (hi != kUnbounded && lo > hi)
      return Refuse(pointer, "no array length fits minItems and maxItems: nothing validates");
    const std::string open = GbnfLiteral("[") + " " + Use("ws"), close = GbnfLiteral("]");
    if (hi == 0) return Seq({open, close});
    // Item i onward, each after a comma; the first lo items are required.
    const std::string sep = "ws \",\" ws";
    std::string tail;
    const int64_t rest_lo = std::max<int64_t>(lo - k, 0);
    if (rest.has_value() && (hi == kUnbounded || hi > k)) {
      tail = Repeat(Seq({sep, *rest}), std::max<int64_t>(rest_lo - (k == 0 ? 1 : 0), 0),
                    hi == kUnbounded ? kUnbounded : hi - std::max<int64_t>(k, 1));
    }
    for (int64_t i = k - 1; i >= 1; --i) {
      if (hi != kUnbounded && i >= hi) continue;
      const std::string item = Seq({sep, prefix[i], tail});
      tail = i < lo ? item : "(" + item + ")?";
    }
    const std::string first = Seq({k > 0 ? prefix[0] : *rest, tail});
    if (lo >= 1) return Seq({open, first, "ws", close});
    return Seq({open, "(" + first + " ws)?", close});
  }

  // --- Objects ---
  struct Member {
    std::string key;    // As written: the JSON string, quotes included, as a GBNF literal.
    std::string value;  // A symbol.
    bool required = false;
  };

  absl::StatusOr<std::string> ObjectBody(const Json& schema, const std::string& pointer, const std::string& name) {
    const bool has_properties = schema.contains("properties");
    const Json properties = has_properties ? schema["properties"] : Json::object();
    if (!properties.is_object()) return Refuse(Child(pointer, "properties"), "must be an object");
    std::vector<std::string> required;
    if (schema.contains("required")) {
      const Json& r = schema["required"];
      if (!r.is_array()) return Refuse(Child(pointer, "required"), "must be an array of strings");
      for (const Json& key : r) {
        if (!key.is_string()) return Refuse(Child(pointer, "required"), "must be an array of strings");
        const std::string name = key.get<std::string>();
        if (std::find(required.begin(), required.end(), name) == required.end()) required.push_back(name);
      }
    }
    auto is_required = [&](const std::string& key) {
      return std::find(required.begin(), required.end(), key) != required.end();
    };
    std::vector<Member> members;
    std::vector<std::string> declared;  // Keys the extra members must avoid.
    for (const auto& [key, sub] : properties.items()) {
      declared.push_back(key);
      const std::string at = Child(Child(pointer, "properties"), key);
      if (sub == Json(false)) {
        if (is_required(key)) return Refuse(at, "required but its schema is false: nothing validates");
        continue;  // It may not appear.
      }
      CASCADE_ASSIGN_OR_RETURN(std::string value, VisitInside(sub, at, name + "-" + NamePart(key)));
      CASCADE_ASSIGN_OR_RETURN(std::string literal, ValueGbnf(Json(key), at));
      members.push_back({literal, value, is_required(key)});
    }
    // Extra members: what `additionalProperties` allows; when it is absent, none next to
    // `properties` (a narrowing: JSON Schema allows any), any without.
    std::optional<std::string> extra;
    const std::string extra_at = Child(pointer, "additionalProperties");
    if (schema.contains("additionalProperties")) {
      if (schema["additionalProperties"] != Json(false)) {
        CASCADE_ASSIGN_OR_RETURN(extra, VisitInside(schema["additionalProperties"], extra_at, name + "-additional"));
      }
    } else if (!has_properties) {
      extra = Use("value");
    }
    // Required keys that `properties` does not declare: members of the extra kind.
    for (const std::string& key : required) {
      if (properties.contains(key)) continue;
      if (schema.contains("additionalProperties") && !extra.has_value()) {
        return Refuse(Child(pointer, "required"),
                      StrCat("'", key, "' is not allowed by additionalProperties: nothing validates"));
      }
      CASCADE_ASSIGN_OR_RETURN(std::string literal, ValueGbnf(Json(key), Child(pointer, "required")));
      members.push_back({literal, extra.value_or(Use("value")), true});
      declared.push_back(key);
    }
    std::optional<std::string> extra_member;
    if (extra.has_value()) {
      CASCADE_ASSIGN_OR_RETURN(std::string key, ExtraKey(declared, name));
      extra_member = Seq({key, "ws \":\" ws", *extra});
    }
    return Members(members, extra_member, name);
  }

  // The members in order, the required ones always, then any extra ones. Built from the
  // end: after[i] is what may follow once something was written before member i (each
  // member after a comma), first[i] the non-empty lists that start at member i or later.
  std::string Members(const std::vector<Member>& members, const std::optional<std::string>& extra,
                      const std::string& name) {
    const size_t n = members.size();
    const std::string sep = "ws \",\" ws";
    std::vector<bool> need_first(n + 1, false), need_after(n + 1, false);
    std::vector<int> after_uses(n + 1, 0);
    need_first[0] = true;
    for (size_t i = 0; i < n; ++i) {
      if (need_first[i]) {
        ++after_uses[i + 1];
        if (!members[i].required) need_first[i + 1] = true;
      }
      if (need_after[i]) ++after_uses[i + 1];
      need_after[i + 1] = after_uses[i + 1] > 0;
    }
    std::vector<std::string> after(n + 1);
    after[n] = extra.has_value() ? Repeat(Seq({sep, *extra}), 0, kUnbounded) : "";
    for (size_t i = n; i >= 1; --i) {
      if (i < n && need_after[i]) {
        const std::string member = Seq({sep, Kv(members[i])});
        after[i] = members[i].required ? Seq({member, after[i + 1]}) : Seq({"(" + member + ")?", after[i + 1]});
      }
      // A list shared by two places is a rule: inlined twice, each level would double.
      if (after_uses[i] > 1 && !after[i].empty()) {
        after[i] = Rule(StrCat(name, "-after-", NamePart(members[i - 1].key)), after[i]);
      }
    }
    std::optional<std::string> first;
    if (extra.has_value()) first = Seq({*extra, after[n]});
    for (size_t i = n; i-- > 0;) {
      if (!need_first[i]) continue;
      const std::string here = Seq({Kv(members[i]), after[i + 1]});
      first = members[i].required || !first.has_value() ? here : here + " | " + *first;
    }
    const std::string open = GbnfLiteral("{") + " " + Use("ws"), close = GbnfLiteral("}");
    if (!first.has_value()) return Seq({open, close});
    const bool any_required = std::any_of(members.begin(), members.end(), [](const Member& m) { return m.required; });
    if (any_required) return Seq({open, Parens(*first), "ws", close});
    return Seq({open, "(" + Parens(*first) + " ws)?", close});
  }

  static std::string Kv(const Member& m) { return Seq({m.key, "ws \":\" ws", m.value}); }

  // An extra member's key: any string but the declared keys. Over `key-char`, which
  // spells each character one way, the strings that are not a declared key are those
  // that leave the trie of the declared keys' spellings somewhere, or stop short.
  absl::StatusOr<std::string> ExtraKey(const std::vector<std::string>& declared, const std::string& name) {
    if (declared.empty()) return Use("string");
    Use("key-char");
    std::vector<Trie> trie(1);
    for (const std::string& key : declared) {
      std::optional<std::vector<std::string>> units = KeyUnits(key);
      if (!units.has_value()) continue;  // Not spelled by key-char: never written anyway.
      size_t node = 0;
      for (const std::string& unit : *units) {
        auto it = trie[node].next.find(unit);
        if (it == trie[node].next.end()) {
          it = trie[node].next.emplace(unit, trie.size()).first;
          trie.emplace_back();
        }
        node = it->second;
      }
      trie[node].end = true;
    }
    const std::string body = Seq({"\"\\\"\"", NotIn(trie, 0), "\"\\\"\""});
    return Rule(name + "-key", body);
  }

  struct Trie {
    std::map<std::string, size_t> next;  // By key-char spelling.
    bool end = false;
  };

  // A key's spelling inside its quotes, one string per character; nullopt when a
  // character is a \u escape, which key-char does not write.
  static std::optional<std::vector<std::string>> KeyUnits(const std::string& key) {
    std::string text;
    try {
      text = Json(key).dump();
    } catch (const nlohmann::json::exception&) {
      return std::nullopt;
    }
    std::vector<std::string> units;
    for (size_t i = 1; i + 1 < text.size();) {
      size_t len = 1;
      const unsigned char c = static_cast<unsigned char>(text[i]);
      if (c == '\\') {
        if (text[i + 1] == 'u') return std::nullopt;
        len = 2;
      } else if (c >= 0xF0) {
        len = 4;
      } else if (c >= 0xE0) {
        len = 3;
      } else if (c >= 0xC0) {
        len = 2;
      }
      units.push_back(text.substr(i, len));
      i += len;
    }
    return units;
  }

  // The continuations from trie `node` that spell no declared key, as one group: a
  // declared character and the continuations after it, or any other character and
  // then anything; optional (`?`) unless a declared key ends here.
  static std::string NotIn(const std::vector<Trie>& trie, size_t node) {
    std::vector<std::string> alts;
    std::string plain = "[^\"\\\\\\x00-\\x1F";  // Another plain character leaves the trie.
    std::string escapes = "\"\\bfnrt";          // So does another escape.
    for (const auto& [unit, child] : trie[node].next) {
      alts.push_back(Seq({GbnfLiteral(unit), NotIn(trie, child)}));
      if (unit[0] == '\\') {
        escapes.erase(escapes.find(unit[1]), 1);
      } else {
        plain += ClassChar(unit);
      }
    }
    alts.push_back(plain + "] key-char*");
    if (!escapes.empty()) {
      std::string cls;
      for (char e : escapes) cls += e == '"' || e == '\\' ? std::string("\\") + e : std::string(1, e);
      alts.push_back("\"\\\\\" [" + cls + "] key-char*");
    }
    return "(" + Alt(alts) + ")" + (trie[node].end ? "" : "?");
  }

  // One character (its UTF-8) inside a GBNF class.
  static std::string ClassChar(const std::string& utf8) {
    const unsigned char c = static_cast<unsigned char>(utf8[0]);
    if (utf8.size() == 1) {
      if (c == '\\' || c == ']' || c == '[' || c == '-' || c == '"') return std::string("\\") + utf8;
      if (c == '^') return "\\x5E";
      return utf8;
    }
    uint32_t cp = c & (0x3F >> (utf8.size() - 1));
    for (size_t i = 1; i < utf8.size(); ++i) cp = (cp << 6) | (static_cast<unsigned char>(utf8[i]) & 0x3F);
    char buf[16];
    std::snprintf(buf, sizeof(buf), cp < 0x10000 ? "\\u%04X" : "\\U%08X", cp);
    return buf;
  }

  const Json& root_;
  std::vector<std::pair<std::string, std::string>> rules_;  // (name, body), root first.
  std::map<std::string, std::string> by_body_;
  std::set<std::string> taken_;
  std::set<std::string> used_;  // Primitives.
  std::map<std::string, RefRule> refs_;
  int depth_ = 0;       // Objects and arrays entered: input consumed since the root.
  int body_depth_ = 0;  // Body calls on the stack.
};

}  // namespace

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::ordered_json& schema) {
  // nlohmann throws; the converter checks types before it reads, and this is the net.
  try {
    return Converter(schema).Run();
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(StrCat("json schema: ", e.what()));
  }
}

absl::StatusOr<std::string> JsonSchemaToGbnf(const nlohmann::json& schema) {
  return JsonSchemaToGbnf(nlohmann::ordered_json(schema));
}

std::string JsonObjectGbnf() { return *JsonSchemaToGbnf(nlohmann::ordered_json{{"type", "object"}}); }

}  // namespace cascade::grammar
