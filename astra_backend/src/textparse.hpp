// Reading configuration text into a Value: JSON as Python's json module reads it, and the
// small YAML subset ASTRA-sim's network files are written in (top-level `key: [a, b]` or
// `key:` then `- a` lines, plain scalars, comments). Text beyond that subset is left to
// Python's YAML parser: parse_simple_yaml returns false rather than guess.
#pragma once
#include <string>

#include "value.hpp"

namespace netsim {

bool parse_json(const std::string& text, Value& out);
bool parse_simple_yaml(const std::string& text, Value& out);

}  // namespace netsim
