#include "text/jinja_lexer.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "core/str_cat.h"
#include "core/utf8.h"

namespace cascade::text::jinja {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

absl::Status Error(int line, std::string_view what) {
  return absl::InvalidArgumentError(StrCat("template line ", line, ": TemplateSyntaxError: ", what));
}

// Python's "unicode-escape" decoding of a literal's body, as jinja2 applies it: unknown
// escapes keep their backslash.
absl::StatusOr<std::string> Unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char c = body[++i];
    auto hex = [&](size_t n) -> absl::StatusOr<uint32_t> {
      uint32_t v = 0;
      for (size_t k = 1; k <= n; ++k) {
        const char h = i + k < body.size() ? body[i + k] : '\0';
        if (!std::isxdigit(static_cast<unsigned char>(h))) return Error(line, "truncated \\x/\\u escape");
        v = v * 16 + (IsDigit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      i += n;
      return v;
    };
    switch (c) {
      case '\n': break;  // Line continuation.
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        absl::StatusOr<uint32_t> cp = hex(c == 'x' ? 2 : c == 'u' ? 4 : 8);
        if (!cp.ok()) return cp.status();
        if (*cp > 0x10FFFF) return Error(line, "illegal Unicode character in escape");
        AppendUtf8(*cp, out);
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          uint32_t v = c - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k) {
            v = v * 8 + (body[++i] - '0');
          }
          AppendUtf8(v, out);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t start = pos_;
      while ((start = src_.find('{', start)) != std::string::npos) {
        if (start + 1 < src_.size() && (src_[start + 1] == '{' || src_[start + 1] == '%' || src_[start + 1] == '#')) {
          break;
        }
        ++start;
      }
      if (start == std::string::npos) {
        Emit(Token::Type::kText, src_.substr(pos_));
        pos_ = src_.size();
        break;
      }
      const char kind = src_[start + 1];
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      std::string text = src_.substr(pos_, start - pos_);
      const int text_lines = Newlines(text);
      if (sign == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      } else if (sign != '+' && kind != '{') {      // lstrip_blocks: not for {{ }}.
        const size_t l_pos = text.rfind('\n') + 1;  // npos + 1 == 0.
        if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
            text.find_first_not_of(" \t\r\f\v", l_pos) == std::string::npos) {
          text.erase(l_pos);
        }
      }
      Emit(Token::Type::kText, text);
      line_ += text_lines;
      pos_ = start + 2 + (sign == '-' || sign == '+' ? 1 : 0);
      absl::Status s;
      if (kind == '#') {
        s = Comment();
      } else if (kind == '%' && IsRaw()) {
        s = Raw();
      } else {
        s = Tag(kind == '%');
      }
      if (!s.ok()) return s;
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back(Token{Token::Type::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  static int Newlines(std::string_view s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  }

  void Emit(Token::Type type, std::string text) {
    if (type == Token::Type::kText && text.empty()) return;
    tokens_.push_back(Token{type, std::move(text), line_});
  }

  // Moves past `n` characters, counting lines.
  void Advance(size_t n) {
    line_ += Newlines(std::string_view(src_).substr(pos_, n));
    pos_ += n;
  }

  // After the end of a block or comment tag: `-` eats all whitespace, `+` none, else
  // trim_blocks eats one newline.
  void AfterBlockEnd(char sign) {
    if (sign == '-') {
      size_t e = pos_;
      while (e < src_.size() && IsSpace(src_[e])) ++e;
      Advance(e - pos_);
    } else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      Advance(1);
    }
  }

  absl::Status Comment() {
    const int begin_line = line_;
    const size_t content = pos_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return Error(begin_line, "Missing end of comment tag");
    const char sign = end > content ? src_[end - 1] : '\0';
    Advance(end + 2 - pos_);
    AfterBlockEnd(sign == '-' || sign == '+' ? sign : '\0');
    return absl::OkStatus();
  }

  // `{% raw %}` (pos_ is after "{%" and its sign): the text up to {% endraw %} verbatim.
  bool IsRaw() {
    size_t p = pos_;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    return src_.compare(p, 3, "raw") == 0 && (p + 3 >= src_.size() || !IsNameChar(src_[p + 3]));
  }

  absl::Status Raw() {
    const int begin_line = line_;
    size_t p = src_.find("raw", pos_) + 3;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      Advance(p + 3 - pos_);
      AfterBlockEnd('-');
    } else if (src_.compare(p, 2, "%}") == 0) {
      Advance(p + 2 - pos_);
    } else {
      return Error(begin_line, "expected '%}' after raw");
    }
    for (size_t s = src_.find("{%", pos_); s != std::string::npos; s = src_.find("{%", s + 1)) {
      size_t q = s + 2;
      const char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q++] : '\0';
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      char end_sign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) end_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(pos_, s - pos_);
      const int lines = Newlines(text);
      if (sign == '-') {
        text.erase(text.find_last_not_of(" \t\n\r\f\v") + 1);
      } else if (sign != '+') {
        const size_t l_pos = text.rfind('\n') + 1;
        if (l_pos > 0 && l_pos < text.size() && text.find_first_not_of(" \t\r\f\v", l_pos) == std::string::npos) {
          text.erase(l_pos);
        }
      }
      Emit(Token::Type::kText, text);
      line_ += lines;
      pos_ = s;
      Advance(q + 2 - s);
      AfterBlockEnd(end_sign);
      return absl::OkStatus();
    }
    return Error(begin_line, "Missing end of raw directive");
  }

  // The tokens of a {{ }} or {% %} tag, pos_ just after its opening and sign.
  absl::Status Tag(bool block) {
    const int begin_line = line_;
    tokens_.push_back(Token{block ? Token::Type::kBlockBegin : Token::Type::kVarBegin, "", line_});
    int depth = 0;  // Open brackets: a "}}" inside {{ {'a': {}} }} closes a dict, not the tag.
    const std::string_view end = block ? "%}" : "}}";
    while (true) {
      while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(1);
      if (pos_ >= src_.size())
        return Error(begin_line,
                     block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      if (depth == 0) {
        const char sign = src_[pos_] == '-' || src_[pos_] == '+' ? src_[pos_] : '\0';
        if (sign != '\0' && (block || sign == '-') && src_.compare(pos_ + 1, 2, end) == 0) {
          Advance(3);
          tokens_.push_back(Token{block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
          if (block) {
            AfterBlockEnd(sign);
          } else {
            AfterBlockEnd('-');
          }
          return absl::OkStatus();
        }
        if (src_.compare(pos_, 2, end) == 0) {
          Advance(2);
          tokens_.push_back(Token{block ? Token::Type::kBlockEnd : Token::Type::kVarEnd, "", line_});
          if (block) AfterBlockEnd('\0');
          return absl::OkStatus();
        }
      }
      const char c = src_[pos_];
      if (IsNameStart(c)) {
        size_t e = pos_;
        while (e < src_.size() && IsNameChar(src_[e])) ++e;
        tokens_.push_back(Token{Token::Type::kName, src_.substr(pos_, e - pos_), line_});
        pos_ = e;
      } else if (IsDigit(c)) {
        if (absl::Status s = Number(); !s.ok()) return s;
      } else if (c == '\'' || c == '"') {
        size_t e = pos_ + 1;
        while (e < src_.size() && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
        if (e >= src_.size()) return Error(line_, "unexpected end of string");
        absl::StatusOr<std::string> value = Unescape(std::string_view(src_).substr(pos_ + 1, e - pos_ - 1), line_);
        if (!value.ok()) return value.status();
        tokens_.push_back(Token{Token::Type::kString, *std::move(value), line_});
        Advance(e + 1 - pos_);
      } else {
        static constexpr std::string_view kTwo[] = {"**", "//", "==", "!=", ">=", "<="};
        std::string op;
        for (std::string_view two : kTwo) {
          if (src_.compare(pos_, 2, two) == 0) op = two;
        }
        if (op.empty() && std::string_view("+-*/%~[](){}<>=.:|,;").find(c) != std::string_view::npos) op = c;
        if (op.empty()) return Error(line_, StrCat("unexpected char '", std::string(1, c), "'"));
        if (op == "(" || op == "[" || op == "{") ++depth;
        if (op == ")" || op == "]" || op == "}") {
          if (depth == 0) return Error(line_, StrCat("unexpected '", op, "'"));
          --depth;
        }
        tokens_.push_back(Token{Token::Type::kOperator, op, line_});
        pos_ += op.size();
      }
    }
  }

  // Jinja's integer ("12", "1_000") and float ("1.5", "1e3", "2.5e-3") literals.
  absl::Status Number() {
    size_t e = pos_;
    auto digits = [&] {
      while (e < src_.size() && (IsDigit(src_[e]) || (src_[e] == '_' && e + 1 < src_.size() && IsDigit(src_[e + 1])))) {
        ++e;
      }
    };
    digits();
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && IsDigit(src_[e + 1])) {
      ++e;
      digits();
      is_float = true;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && IsDigit(src_[x])) {
        e = x;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = pos_; i < e; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t{is_float ? Token::Type::kFloat : Token::Type::kInt, text, line_};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error(line_, "integer literal out of range");
    }
    tokens_.push_back(std::move(t));
    pos_ = e;
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Lex(std::string_view source) {
  // Jinja treats \r\n, \r and \n alike and drops one trailing newline.
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).Run();
}

}  // namespace cascade::text::jinja
