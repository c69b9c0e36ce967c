// Validation of network dimensions and their totals: the one place that says which
// topologies, sizes, bandwidths and latencies the simulator takes (Python's Dimension and
// `rapid net` both call it), with one-line messages naming the field, the value and the range.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include "topology.hpp"
#include "value.hpp"

namespace netsim {

constexpr int kMaxNpus = 1 << 20;
constexpr int64_t kMaxLinks = 1 << 23;
constexpr int kMaxFullyConnected = 1024;

// Bad input: the message is the whole one-line error.
struct SpecError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// One dimension as written: topology name, size, bandwidth_gbps (GB/s), latency_s, shape,
// npus_per_leaf, spines, oversubscription (kNone where not given).
struct DimInput {
  Value topology, size, bandwidth_gbps, latency_s, shape, npus_per_leaf, spines, oversubscription;
};

// Topology name as users write it ('Ring', 'fat_tree', 'Torus2D') -> code; throws naming `field`.
int topology_code(const Value& name, const std::string& field);
DimSpec validate_dim(const DimInput& dim, const std::string& field);
// Total NPUs and links of validated dimensions within the limits ("dims: ..." otherwise).
void check_totals(const std::vector<DimSpec>& dims);

}  // namespace netsim
