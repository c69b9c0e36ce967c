// `rapid net`: its options, their checks, the network file, the simulation and the report
// (text or JSON). The one implementation: the compiled `rapid` launcher runs it in-process and
// the Python CLI calls it through _netsim, so both print the same bytes.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dimcheck.hpp"
#include "engine.hpp"
#include "topology.hpp"

namespace netsim {

// ASTRA-sim's network files give bandwidth in GiB/s: one of its units in our GB/s (1e9 B/s).
constexpr double kAstraSimUnitGBps = 1073741824.0 / 1e9;

// One option of `rapid net`, from which Python's argparse parser is also built.
struct NetOption {
  const char* flag;
  enum Kind { kValue, kList, kAppend, kFlag } kind;
  bool required;
  const char* metavar;
  const char* default_value;  // nullptr: none
  std::string help;
};
const std::vector<NetOption>& net_options();

// The options as the user wrote them (strings, checked by run_net).
struct NetArgs {
  std::string network, collective, size, algorithm, root = "0", chunks = "1", top = "5";  // algorithm "": the kind's
  std::optional<std::string> npus;
  std::optional<std::vector<std::string>> group;
  std::vector<std::string> faults;
  bool flat = false;
  bool json = false;
};

// Reads argv (after `net`) as argparse would; false where only argparse can answer: help,
// unknown or abbreviated options, a missing required one, a value that starts with '-'.
bool parse_net_argv(int argc, const char* const* argv, NetArgs& out);

// The dimensions of an ASTRA-sim network file's text (JSON or the simple YAML it is written
// in), validated, each with its topology as written; nullopt where the text is our hardware
// format (`network:`) or YAML this reader leaves to Python's parser.
std::optional<std::vector<DimInput>> astra_sim_dims(const std::string& text, const std::string& source);

// Loads a network file this code cannot read (our hardware YAML): validated dimensions.
using NetworkFallback = std::function<std::vector<DimSpec>(const std::string& path, std::optional<int64_t> npus)>;

// Byte units (lower case, as users write them after a number) -> bytes.
const std::map<std::string, double>& byte_units();
// '64MiB', '1 GB', '4096' -> bytes; SpecError("size ...") otherwise.
double parse_bytes(const std::string& text);

// A fault option parsed: link ends and factor (0 removes the link).
struct FaultOption {
  int64_t a, b;
  double factor;
};
FaultOption parse_fault(const std::string& text);
int64_t top_links(const std::string& text);
// The --fault options checked against the network of `dims`, as soft and hard faults.
std::vector<FaultOption> checked_faults(const std::vector<DimSpec>& dims, const std::vector<std::string>& texts);

// A network with faults, the collective's simulated output.
struct Simulated {
  std::unique_ptr<Network> net;
  SimOutput out;
};
struct CollectiveRequest;
Simulated simulate_collective(const std::vector<DimSpec>& dims, const std::vector<FaultOption>& faults,
                              const CollectiveRequest& req);

struct NetOutcome {
  int status = 0;  // 2: bad input, `err` says why in one line
  std::string out, err;
};
NetOutcome run_net(const NetArgs& args, const NetworkFallback& fallback);

}  // namespace netsim
