#include "value.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace netsim {

const Value* Value::get(const std::string& key) const {
  for (auto it = fields.rbegin(); it != fields.rend(); ++it)
    if (it->first == key) return &it->second;
  return nullptr;
}

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific).ptr;
  const std::string sci(buf, end);  // shortest round-trip digits: [-]d[.ddd]e[+-]XX
  const size_t e = sci.find('e');
  const bool negative = sci[0] == '-';
  std::string digits;
  for (size_t i = negative ? 1 : 0; i < e; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string out = negative ? "-" : "";
  const int n = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {  // repr's fixed notation range
    if (exponent >= n - 1) {
      out += digits + std::string(exponent - (n - 1), '0') + ".0";
    } else if (exponent >= 0) {
      out += digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
    } else {
      out += "0." + std::string(-exponent - 1, '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (n > 1) out += "." + digits.substr(1);
  char exp_text[16];
  std::snprintf(exp_text, sizeof exp_text, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_text;
}

std::string python_str(const std::string& s) {
  const bool double_quotes = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (const unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + quote;
}

std::string python_tuple(const std::vector<Value>& items) {
  std::string out = "(";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + python_repr(items[i]);
  return out + (items.size() == 1 ? ",)" : ")");
}

std::string python_repr(const Value& v) {
  if (!v.repr.empty()) return v.repr;
  switch (v.kind) {
    case Value::kNone: return "None";
    case Value::kBool: return v.number != 0 ? "True" : "False";
    case Value::kInt: return std::to_string(v.integer);
    case Value::kReal: return python_float(v.number);
    case Value::kString: return python_str(v.text);
    case Value::kTuple: return python_tuple(v.items);
    case Value::kList: {
      std::string out = "[";
      for (size_t i = 0; i < v.items.size(); ++i) out += (i ? ", " : "") + python_repr(v.items[i]);
      return out + "]";
    }
    case Value::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < v.fields.size(); ++i)
        out += (i ? ", " : "") + python_str(v.fields[i].first) + ": " + python_repr(v.fields[i].second);
      return out + "}";
    }
    default: return v.text;
  }
}

}  // namespace netsim
