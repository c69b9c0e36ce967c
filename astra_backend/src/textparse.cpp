#include "textparse.hpp"

#include <cmath>
#include <cstdlib>

#include "scan.hpp"

namespace netsim {

namespace {

struct JsonReader {
  const std::string& s;
  size_t i = 0;

  void space() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) ++i;
  }
  bool literal(const char* word) {
    const std::string w(word);
    if (s.compare(i, w.size(), w) != 0) return false;
    i += w.size();
    return true;
  }
  bool hex4(unsigned& code) {
    if (i + 4 > s.size()) return false;
    code = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = s[i++];
      code <<= 4;
      if (c >= '0' && c <= '9') code |= c - '0';
      else if (c >= 'a' && c <= 'f') code |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') code |= c - 'A' + 10;
      else return false;
    }
    return true;
  }
  static void utf8(unsigned code, std::string& out) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }
  bool string(std::string& out) {
    if (i >= s.size() || s[i] != '"') return false;
    ++i;
    while (i < s.size()) {
      const unsigned char c = s[i++];
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (i >= s.size()) return false;
      const char e = s[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned code;
          if (!hex4(code)) return false;
          if (code >= 0xd800 && code < 0xdc00 && s.compare(i, 2, "\\u") == 0) {
            const size_t back = i;
            i += 2;
            unsigned low;
            if (hex4(low) && low >= 0xdc00 && low < 0xe000) code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
            else i = back;
          }
          utf8(code, out);
          break;
        }
        default: return false;
      }
    }
    return false;
  }
  // -?(0|[1-9]d*)(.d+)?([eE][-+]?d+)?
  bool number(Value& out) {
    const size_t begin = i;
    size_t j = i < s.size() && s[i] == '-' ? i + 1 : i;
    if (j >= s.size() || !scan::digit(s[j])) return false;
    j = s[j] == '0' ? j + 1 : scan::digits(s, j);
    bool real = false;
    if (j < s.size() && s[j] == '.') {
      const size_t end = scan::digits(s, j + 1);
      if (end == j + 1) return false;
      j = end;
      real = true;
    }
    const size_t end = scan::exponent(s, j, false);
    real = real || end > j;
    i = end;
    const std::string text = s.substr(begin, end - begin);
    if (real) {
      out.kind = Value::kReal;
      out.number = std::strtod(text.c_str(), nullptr);
      return true;
    }
    out.kind = Value::kInt;
    const double approx = std::strtod(text.c_str(), nullptr);
    const bool huge = std::fabs(approx) >= 4e18;
    out.integer = !huge ? std::strtoll(text.c_str(), nullptr, 10) : (approx < 0 ? -(1LL << 62) : (1LL << 62));
    out.number = approx;
    if (huge) out.repr = text;
    return true;
  }
  bool value(Value& out, int depth) {
    if (depth > 64) return false;
    space();
    if (i >= s.size()) return false;
    const char c = s[i];
    if (c == '{') {
      ++i;
      out.kind = Value::kDict;
      space();
      if (i < s.size() && s[i] == '}') return ++i, true;
      while (true) {
        space();
        std::string key;
        if (!string(key)) return false;
        space();
        if (i >= s.size() || s[i++] != ':') return false;
        Value item;
        if (!value(item, depth + 1)) return false;
        bool replaced = false;
        for (auto& field : out.fields)
          if (field.first == key) field.second = item, replaced = true;
        if (!replaced) out.fields.emplace_back(key, item);
        space();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == '}') return ++i, true;
        return false;
      }
    }
    if (c == '[') {
      ++i;
      out.kind = Value::kList;
      space();
      if (i < s.size() && s[i] == ']') return ++i, true;
      while (true) {
        Value item;
        if (!value(item, depth + 1)) return false;
        out.items.push_back(item);
        space();
        if (i < s.size() && s[i] == ',') { ++i; continue; }
        if (i < s.size() && s[i] == ']') return ++i, true;
        return false;
      }
    }
    if (c == '"') {
      out.kind = Value::kString;
      return string(out.text);
    }
    if (literal("true")) return out.kind = Value::kBool, out.number = 1, true;
    if (literal("false")) return out.kind = Value::kBool, out.number = 0, true;
    if (literal("null")) return out.kind = Value::kNone, true;
    if (literal("NaN")) return out.kind = Value::kReal, out.number = NAN, true;
    if (literal("Infinity")) return out.kind = Value::kReal, out.number = INFINITY, true;
    if (literal("-Infinity")) return out.kind = Value::kReal, out.number = -INFINITY, true;
    return number(out);
  }
};

// A plain YAML scalar as PyYAML's safe loader resolves it, for the forms this reader takes:
// decimal integers, floats with a point, null, booleans and identifiers; false for others.
bool yaml_scalar(const std::string& text, Value& out) {
  static const char* const kTrue[] = {"yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON", nullptr};
  static const char* const kFalse[] = {"no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF", nullptr};
  static const char* const kNull[] = {"~", "null", "Null", "NULL", nullptr};
  if (scan::one_of(text, kNull)) return out.kind = Value::kNone, true;
  if (scan::one_of(text, kTrue)) return out.kind = Value::kBool, out.number = 1, true;
  if (scan::one_of(text, kFalse)) return out.kind = Value::kBool, out.number = 0, true;
  const size_t start = scan::sign(text, 0);
  const size_t int_end = scan::digits(text, start);
  const bool plain_int = int_end == text.size() && int_end > start && (text[start] != '0' || int_end == start + 1);
  if (plain_int) {  // [-+]?(0|[1-9][0-9]*)
    if (text.size() > 18) return false;
    out.kind = Value::kInt;
    out.integer = std::strtoll(text.c_str(), nullptr, 10);
    out.number = static_cast<double>(out.integer);
    return true;
  }
  if (int_end > start && int_end < text.size() && text[int_end] == '.' &&  // [-+]?d+.d*([eE][-+]d+)?
      scan::exponent(text, scan::digits(text, int_end + 1), true) == text.size()) {
    out.kind = Value::kReal;
    out.number = std::strtod(text.c_str(), nullptr);
    return true;
  }
  if (text.empty() || !scan::letter(text[0])) return false;  // [A-Za-z][A-Za-z0-9_]*
  for (const char c : text)
    if (!scan::letter(c) && !scan::digit(c) && c != '_') return false;
  out.kind = Value::kString;
  out.text = text;
  return true;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(' ');
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(' ') - a + 1);
}

// A flow list `[a, b, c]` of plain scalars.
bool yaml_flow_list(const std::string& text, Value& out) {
  if (text.size() < 2 || text.front() != '[' || text.back() != ']') return false;
  out.kind = Value::kList;
  const std::string inside = trim(text.substr(1, text.size() - 2));
  if (inside.empty()) return true;
  size_t start = 0;
  while (true) {
    const size_t comma = inside.find(',', start);
    Value item;
    if (!yaml_scalar(trim(inside.substr(start, comma == std::string::npos ? std::string::npos : comma - start)), item))
      return false;
    out.items.push_back(item);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

}  // namespace

bool parse_json(const std::string& text, Value& out) {
  JsonReader reader{text};
  out = Value{};
  if (!reader.value(out, 0)) return false;
  reader.space();
  return reader.i == text.size();
}

bool parse_simple_yaml(const std::string& text, Value& out) {
  out = Value{};
  out.kind = Value::kDict;
  Value* open_list = nullptr;  // the value of a `key:` line that `- item` lines fill
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t hash = line.find('#');  // a comment: a file's notes may hold any character
    if (hash != std::string::npos) {
      if (hash > 0 && line[hash - 1] != ' ') return false;
      line = line.substr(0, hash);
    }
    if (line.find_first_of("\t'\"{}&*!|>%@`") != std::string::npos) return false;
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (line.empty()) continue;
    if (line == "---" && out.fields.empty()) continue;
    size_t colon = 0;  // a top-level `key:` ([A-Za-z_][A-Za-z0-9_]*), then nothing or spaces and a value
    if (scan::letter(line[0]) || line[0] == '_') {
      colon = 1;
      while (colon < line.size() && (scan::letter(line[colon]) || scan::digit(line[colon]) || line[colon] == '_')) ++colon;
      if (colon >= line.size() || line[colon] != ':' || (colon + 1 < line.size() && line[colon + 1] != ' ')) colon = 0;
    }
    if (colon > 0) {
      const std::string key = line.substr(0, colon);
      if (out.get(key) != nullptr) return false;
      Value value;
      const std::string rest = trim(line.substr(colon + 1));
      open_list = nullptr;
      if (rest.empty()) {
        value.kind = Value::kNone;
      } else if (rest[0] == '[') {
        if (!yaml_flow_list(rest, value)) return false;
      } else if (!yaml_scalar(rest, value)) {
        return false;
      }
      out.fields.emplace_back(key, value);
      if (rest.empty()) open_list = &out.fields.back().second;
      continue;
    }
    const std::string item = trim(line);
    if (open_list == nullptr || item.size() < 2 || item.compare(0, 2, "- ") != 0) return false;
    if (open_list->kind == Value::kNone) open_list->kind = Value::kList;
    Value scalar;
    if (!yaml_scalar(trim(item.substr(2)), scalar)) return false;
    open_list->items.push_back(scalar);
  }
  return !out.fields.empty();
}

}  // namespace netsim
