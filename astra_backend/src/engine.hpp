// Operation graph and the flow-level (fluid) event-driven simulator.
//
// A flow occupies every link of its route at once (cut-through) at its
// max-min fair rate; its data arrives one route latency after its last byte
// leaves. Rates are re-solved only for the connected set of flows whose links
// saw a flow start or end, once per batch of simultaneous events.
#pragma once
#include <cstdint>
#include <vector>

#include "topology.hpp"

namespace netsim {

// src >= 0 marks a flow; delays and joins use these negative codes (16-byte ops).
enum OpKind : int32_t { kDelay = -1, kNop = -2 };

// Op ids from here on name the flows of ring passes, which are implied by the ring, not stored.
constexpr int32_t kRingFlowBase = 1 << 30;

struct Op {
  double amount = 0.0;  // bytes for a flow, seconds for a delay
  int32_t src = kNop;
  int32_t dst = 0;
};

// A ring pass stored in compact form: in step k member i sends `bytes` to member i + 1 (mod p)
// once its own send and its left neighbour's send of step k - 1 are done (step 0: once its
// start op is). Flow (k, i) has the id first_id + k * p + i; each member's end op (a join of
// its last send and its last receive) is an ordinary op.
struct RingPass {
  int32_t first_id = kRingFlowBase;
  int32_t ops_before = 0;  // ops added before it: its flows come after them in a DAG's start order
  int32_t steps = 0;
  double bytes = 0.0;
  std::vector<int32_t> npus;
  std::vector<uint8_t> has_start;  // member i's step-0 send waits for an op (an edge into the pass)
  std::vector<int32_t> end_ops;
  int size() const { return static_cast<int>(npus.size()); }
};

// A DAG of flows, delays, joins and ring passes; successors stored as CSR after finalize().
class Dag {
 public:
  int add_flow(int src, int dst, double bytes) { return add(Op{bytes, src, dst}); }
  int add_delay(double seconds) { return add(Op{seconds, kDelay, 0}); }
  int add_nop() { return add(Op{0.0, kNop, 0}); }
  void add_dep(int pred, int succ) {
    edge_from_.push_back(pred);
    edge_to_.push_back(succ);
    if (succ < kRingFlowBase) ++pending_[succ];
  }
  // Adds a ring pass of `steps` steps of `bytes` on `npus` after `start` (one op per member,
  // -1: none); returns each member's end op.
  std::vector<int> add_ring(const std::vector<int>& npus, double bytes, int steps, const std::vector<int>& start);
  // The ring pass holding flow id `id` (>= kRingFlowBase).
  const RingPass& ring_of(int id) const { return rings_[ring_index(id)]; }
  int ring_index(int id) const;
  void reserve(size_t ops, size_t edges) {
    ops_.reserve(ops);
    pending_.reserve(ops);
    edge_from_.reserve(edges);
    edge_to_.reserve(edges);
  }
  // A single op that completes after every op in preds (a join when needed).
  int join(const std::vector<int>& preds);
  int size() const { return static_cast<int>(ops_.size()); }
  void finalize();  // once; later calls keep the successor lists

  std::vector<Op> ops_;
  std::vector<int32_t> pending_;  // unfinished predecessors of each op
  std::vector<int64_t> succ_offsets_;
  std::vector<int32_t> succ_;
  std::vector<RingPass> rings_;

 private:
  int add(const Op& op) {
    ops_.push_back(op);
    pending_.push_back(0);
    return static_cast<int>(ops_.size()) - 1;
  }
  std::vector<int32_t> edge_from_;
  std::vector<int32_t> edge_to_;
  bool finalized_ = false;
};

struct LinkStats {
  std::vector<double> bytes;
  std::vector<double> busy_s;
  std::vector<int32_t> peak_flows;
};

struct SimOutput {
  double makespan_s = 0.0;
  std::vector<double> op_end_s;  // filled when recording is requested
  LinkStats links;
  int64_t flows = 0;
  int64_t completed_ops = 0;
  int64_t grouped_flows = 0;  // flows that ran to their end in a flow group
  int64_t split_groups = 0;   // flow groups split into single flows
};

// Runs the DAG to completion on the network. Throws NoRouteError when hard
// faults disconnect a flow's endpoints. flow_groups = false runs every flow single, the
// reference that flow groups (same results, fewer events) are checked against.
SimOutput simulate(Network& net, Dag& dag, bool record_op_times, bool flow_groups = true);

// Runs a finalized DAG without changing it: `ops` stands in for its ops (same size, e.g.
// with other delays) and `pending` is a scratch copy of its pending counts, used up.
SimOutput simulate(Network& net, const Dag& dag, const std::vector<Op>& ops, std::vector<int32_t>& pending,
                   bool flow_groups = true);

}  // namespace netsim
