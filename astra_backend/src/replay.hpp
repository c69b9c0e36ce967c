// Trace replay: per-rank dependency graphs of compute, collective and
// send/recv nodes, matched across ranks and run on one shared network.
#pragma once
#include <cstdint>
#include <vector>

#include "engine.hpp"
#include "topology.hpp"

namespace netsim {

enum NodeKind : int {
  kNodeCompute = 0,
  kNodeSend = 1,
  kNodeRecv = 2,
  kNodeCollectiveBase = 3  // 3 + CollectiveKind for all_reduce .. broadcast
};

// Flat, already validated arrays (see astra_backend/trace.py).
struct Trace {
  int64_t num_nodes = 0;
  const int32_t* rank = nullptr;
  const int32_t* kind = nullptr;
  const double* duration_s = nullptr;
  const double* bytes = nullptr;
  const int32_t* group = nullptr;
  const int32_t* peer = nullptr;
  const int32_t* tag = nullptr;
  const int32_t* algorithm = nullptr;
  const int64_t* dep_offsets = nullptr;
  const int32_t* deps = nullptr;
  int64_t num_groups = 0;
  const int64_t* group_offsets = nullptr;
  const int32_t* group_npus = nullptr;
  int chunks = 1;
  bool hierarchical = true;
};

struct ReplayOutput {
  SimOutput sim;
  std::vector<double> node_start_s;
  std::vector<double> node_end_s;
  std::vector<double> rank_finish_s;
};

// Throws std::invalid_argument on unmatched sends/receives, inconsistent
// collectives or a deadlocked graph.
ReplayOutput replay(Network& net, const Trace& trace, bool flow_groups = true);

// A trace matched into its operation graph once, then simulated many times on
// networks that differ only in link faults, with the compute durations
// changed per run (Monte Carlo fault and straggler sampling).
class PreparedReplay {
 public:
  PreparedReplay(const Network& net, const Trace& trace);
  // duration_s: one entry per trace node (only compute nodes are read), or null.
  SimOutput run(Network& net, const double* duration_s) const;
  int64_t num_nodes() const { return num_nodes_; }
  // The graph with flows' endpoints replaced by their routes on `net`, links numbered in
  // order of first use, each with its bandwidth and latency: two prepared replays with
  // equal shapes, given equal compute durations, simulate alike step for step.
  std::vector<double> shape(Network& net) const;

 private:
  Dag dag_;
  int64_t num_nodes_;
  std::vector<int64_t> compute_nodes_;
  std::vector<int> compute_ops_;
};

}  // namespace netsim
