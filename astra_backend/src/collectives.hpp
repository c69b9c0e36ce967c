// Expands a collective (or a send/recv) on a group of NPUs into DAG ops:
// ring, direct, halving-doubling and double-binary-tree algorithms, run flat
// on the group or hierarchically dimension by dimension with the message cut
// into chunks that pipeline across dimensions.
#pragma once
#include <vector>

#include "engine.hpp"
#include "topology.hpp"

namespace netsim {

enum CollectiveKind : int {
  kAllReduce = 0,
  kReduceScatter = 1,
  kAllGather = 2,
  kAllToAll = 3,
  kBroadcast = 4,
  kSendRecv = 5
};

enum Algorithm : int {
  kAlgoRing = 0,
  kAlgoDirect = 1,
  kAlgoHalvingDoubling = 2,
  kAlgoDoubleBinaryTree = 3
};

struct CollectiveRequest {
  int kind = kAllReduce;
  int algorithm = kAlgoRing;
  std::vector<int> group;  // NPU ids; for send/recv {src, dst}
  double bytes = 0.0;      // per-rank buffer (NCCL-tests convention)
  int root = 0;            // NPU id, broadcast only
  int chunks = 1;
  bool hierarchical = true;
};

// start[i] is the op member i waits for before it begins (-1: none).
// Returns, per member, an op that completes when that member is done.
std::vector<int> emit_collective(Dag& dag, const Network& net, const CollectiveRequest& req,
                                 const std::vector<int>& start);

}  // namespace netsim
