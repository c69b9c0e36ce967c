// Hand-written matchers for the few number and word forms read from text: std::regex costs
// more to set up than a whole `rapid net` run.
#pragma once
#include <cctype>
#include <string>

namespace netsim::scan {

inline bool digit(char c) { return c >= '0' && c <= '9'; }
inline bool letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

inline size_t digits(const std::string& s, size_t i) {
  while (i < s.size() && digit(s[i])) ++i;
  return i;
}

inline size_t spaces(const std::string& s, size_t i) {
  while (i < s.size() && space(s[i])) ++i;
  return i;
}

inline size_t sign(const std::string& s, size_t i) { return i < s.size() && (s[i] == '-' || s[i] == '+') ? i + 1 : i; }

// The end of an exponent [eE][-+]?d+ at i (a sign required when `need_sign`), or i when none.
inline size_t exponent(const std::string& s, size_t i, bool need_sign) {
  if (i >= s.size() || (s[i] != 'e' && s[i] != 'E')) return i;
  const size_t after_sign = sign(s, i + 1);
  if (need_sign && after_sign == i + 1) return i;
  const size_t end = digits(s, after_sign);
  return end > after_sign ? end : i;
}

// The end of [-+]?(d+.?d*|.d+)([eE][-+]?d+)? at i, or npos when there is no number there.
inline size_t decimal(const std::string& s, size_t i) {
  size_t j = sign(s, i);
  const size_t int_end = digits(s, j);
  if (int_end > j) {
    j = int_end;
    if (j < s.size() && s[j] == '.') j = digits(s, j + 1);
  } else if (j < s.size() && s[j] == '.' && digits(s, j + 1) > j + 1) {
    j = digits(s, j + 1);
  } else {
    return std::string::npos;
  }
  return exponent(s, j, false);
}

// Whether s equals one of `words` (a list ending with nullptr).
inline bool one_of(const std::string& s, const char* const* words) {
  for (; *words; ++words)
    if (s == *words) return true;
  return false;
}

}  // namespace netsim::scan
