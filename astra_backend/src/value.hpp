// A parsed configuration value (from JSON, a small YAML subset or a Python object) and the
// way Python's repr() writes it, so that error messages read the same whichever path made them.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace netsim {

struct Value {
  enum Kind { kNone, kBool, kInt, kReal, kString, kList, kTuple, kDict, kOther };
  Kind kind = kNone;
  double number = 0.0;   // kBool (0/1), kInt, kReal
  int64_t integer = 0;   // kInt, clamped to +-2^62 when larger (then out of every allowed range)
  std::string text;      // kString; str() of any value from Python
  std::string repr;      // set for values from Python (their own repr); else made by python_repr
  std::vector<Value> items;                           // kList, kTuple
  std::vector<std::pair<std::string, Value>> fields;  // kDict, in order (keys are strings)

  bool is_integral() const { return kind == kInt; }
  bool is_real() const { return kind == kInt || kind == kReal; }
  const Value* get(const std::string& key) const;
};

// Python's repr() of a float, an int and a str.
std::string python_float(double v);
std::string python_str(const std::string& s);
// Python's repr() of a value (its own when it came from Python).
std::string python_repr(const Value& v);
// A tuple's repr, e.g. of a 2-D shape written as a list.
std::string python_tuple(const std::vector<Value>& items);

}  // namespace netsim
