#include "replay.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "collectives.hpp"

namespace netsim {

namespace {

std::string node_label(const Trace& t, int64_t i) {
  static const char* names[] = {"compute", "send", "recv", "all_reduce", "reduce_scatter",
                                "all_gather", "all_to_all", "broadcast"};
  return "node " + std::to_string(i) + " (rank " + std::to_string(t.rank[i]) + ", " + names[t.kind[i]] + ")";
}

void match_point_to_point(Dag& dag, const Trace& t, const std::vector<int>& gate, std::vector<int>& end) {
  std::map<std::tuple<int, int, int>, std::deque<int64_t>> sends;
  for (int64_t i = 0; i < t.num_nodes; ++i)
    if (t.kind[i] == kNodeSend) sends[{t.rank[i], t.peer[i], t.tag[i]}].push_back(i);
  for (int64_t i = 0; i < t.num_nodes; ++i) {
    if (t.kind[i] != kNodeRecv) continue;
    auto& queue = sends[{t.peer[i], t.rank[i], t.tag[i]}];
    if (queue.empty())
      throw std::invalid_argument(node_label(t, i) + " from rank " + std::to_string(t.peer[i]) + " with tag " +
                                  std::to_string(t.tag[i]) + " has no matching send");
    const int64_t s = queue.front();
    queue.pop_front();
    if (t.bytes[s] != t.bytes[i])
      throw std::invalid_argument(node_label(t, i) + " expects " + std::to_string(t.bytes[i]) + " bytes but " +
                                  node_label(t, s) + " sends " + std::to_string(t.bytes[s]));
    const int op = dag.add_flow(t.rank[s], t.rank[i], t.bytes[s]);
    dag.add_dep(gate[s], op);
    dag.add_dep(gate[i], op);
    end[s] = op;
    end[i] = op;
  }
  for (auto& kv : sends)
    if (!kv.second.empty())
      throw std::invalid_argument(node_label(t, kv.second.front()) + " to rank " + std::to_string(std::get<1>(kv.first)) +
                                  " with tag " + std::to_string(std::get<2>(kv.first)) + " has no matching recv");
}

void match_collectives(Dag& dag, const Network& net, const Trace& t, const std::vector<int>& gate,
                       std::vector<int>& end) {
  // Per group, per rank: that rank's collective nodes on the group, in order.
  std::vector<std::map<int, std::deque<int64_t>>> per_group(t.num_groups);
  for (int64_t i = 0; i < t.num_nodes; ++i)
    if (t.kind[i] >= kNodeCollectiveBase) per_group[t.group[i]][t.rank[i]].push_back(i);
  for (int64_t g = 0; g < t.num_groups; ++g) {
    auto& ranks = per_group[g];
    if (ranks.empty()) continue;
    std::vector<int> members(t.group_npus + t.group_offsets[g], t.group_npus + t.group_offsets[g + 1]);
    const size_t count = ranks.begin()->second.size();
    for (int r : members)
      if (ranks[r].size() != count)
        throw std::invalid_argument("group " + std::to_string(g) + ": rank " + std::to_string(r) + " has " +
                                    std::to_string(ranks[r].size()) + " collective nodes but rank " +
                                    std::to_string(ranks.begin()->first) + " has " + std::to_string(count));
    for (size_t k = 0; k < count; ++k) {
      const int64_t first = ranks[members[0]][k];
      CollectiveRequest req;
      req.kind = t.kind[first] - kNodeCollectiveBase;
      req.algorithm = t.algorithm[first];
      req.group = members;
      req.bytes = t.bytes[first];
      req.root = t.peer[first];
      req.chunks = t.chunks;
      req.hierarchical = t.hierarchical;
      std::vector<int> start;
      for (int r : members) {
        const int64_t i = ranks[r][k];
        if (t.kind[i] != t.kind[first] || t.bytes[i] != t.bytes[first] || t.algorithm[i] != t.algorithm[first] ||
            (req.kind == kBroadcast && t.peer[i] != t.peer[first]))
          throw std::invalid_argument(node_label(t, i) + " does not match " + node_label(t, first) +
                                      " (collective #" + std::to_string(k) + " of group " + std::to_string(g) +
                                      " must agree on kind, bytes, algorithm and root)");
        start.push_back(gate[i]);
      }
      const std::vector<int> ends = emit_collective(dag, net, req, start);
      for (size_t m = 0; m < members.size(); ++m) end[ranks[members[m]][k]] = ends[m];
    }
  }
}

}  // namespace

// gate[i] is the op node i starts with, end[i] the op it ends with. A compute node is one
// delay op waiting on its dependencies directly (gate = end): no join of its own, since its
// start is the latest end among its dependencies (replay() reads it from there).
void build_replay_dag(const Network& net, const Trace& t, Dag& dag, std::vector<int>& gate, std::vector<int>& end) {
  gate.assign(t.num_nodes, 0);
  end.assign(t.num_nodes, -1);
  // Room reserved up front, untouched until used (growing by doubling would briefly hold two
  // copies): two ops per node and two edges per node besides its dependencies cover the
  // nodes' ops and joins and the collectives' start and end edges of a training graph.
  dag.reserve(2 * t.num_nodes, t.dep_offsets[t.num_nodes] + 2 * t.num_nodes);
  for (int64_t i = 0; i < t.num_nodes; ++i)
    if (t.kind[i] != kNodeCompute) gate[i] = dag.add_nop();
  for (int64_t i = 0; i < t.num_nodes; ++i)
    if (t.kind[i] == kNodeCompute) gate[i] = end[i] = dag.add_delay(t.duration_s[i]);
  match_point_to_point(dag, t, gate, end);
  match_collectives(dag, net, t, gate, end);
  for (int64_t i = 0; i < t.num_nodes; ++i)
    for (int64_t k = t.dep_offsets[i]; k < t.dep_offsets[i + 1]; ++k) dag.add_dep(end[t.deps[k]], gate[i]);
}

ReplayOutput replay(Network& net, const Trace& t, bool flow_groups) {
  std::vector<int> gate, end;
  ReplayOutput out;
  {  // the graph is freed before the per-node times are laid out: only op_end_s is read from here
    Dag dag;
    build_replay_dag(net, t, dag, gate, end);
    out.sim = simulate(net, dag, true, flow_groups);
  }
  out.node_start_s.resize(t.num_nodes);
  out.node_end_s.resize(t.num_nodes);
  out.rank_finish_s.assign(net.num_npus(), 0.0);
  for (int64_t i = 0; i < t.num_nodes; ++i) {
    out.node_end_s[i] = out.sim.op_end_s[end[i]];
    if (std::isnan(out.node_end_s[i]))
      throw std::invalid_argument("trace deadlocks: " + node_label(t, i) +
                                  " never finishes (a dependency cycle, or a collective/recv waiting on a node "
                                  "that waits on it)");
    out.rank_finish_s[t.rank[i]] = std::max(out.rank_finish_s[t.rank[i]], out.node_end_s[i]);
  }
  // A compute node starts when its last dependency ends (0 without any): the instant the join
  // it would otherwise wait behind completes, so the same double.
  for (int64_t i = 0; i < t.num_nodes; ++i) {
    if (t.kind[i] != kNodeCompute) {
      out.node_start_s[i] = out.sim.op_end_s[gate[i]];
      continue;
    }
    double start = 0.0;
    for (int64_t k = t.dep_offsets[i]; k < t.dep_offsets[i + 1]; ++k) start = std::max(start, out.node_end_s[t.deps[k]]);
    out.node_start_s[i] = start;
  }
  std::vector<double>().swap(out.sim.op_end_s);
  return out;
}

PreparedReplay::PreparedReplay(const Network& net, const Trace& t) : num_nodes_(t.num_nodes) {
  std::vector<int> gate, end;
  build_replay_dag(net, t, dag_, gate, end);
  dag_.finalize();
  for (int64_t i = 0; i < t.num_nodes; ++i)
    if (t.kind[i] == kNodeCompute) {
      compute_nodes_.push_back(i);
      compute_ops_.push_back(end[i]);
    }
}

std::vector<double> PreparedReplay::shape(Network& net) const {
  std::vector<double> out;
  std::map<int, int> renumbered;
  std::vector<int> path;
  const auto& links = net.links();
  auto add_route = [&](int src, int dst) {
    net.route(src, dst, path);
    out.push_back(static_cast<double>(path.size()));
    for (int l : path) {
      const auto [it, fresh] = renumbered.emplace(l, static_cast<int>(renumbered.size()));
      out.push_back(it->second);
      if (fresh) {
        out.push_back(links[l].bandwidth_Bps);
        out.push_back(links[l].latency_s);
      }
    }
  };
  for (const Op& op : dag_.ops_) {
    out.push_back(op.src < 0 ? op.src : -3);
    out.push_back(op.amount);
    if (op.src >= 0) add_route(op.src, op.dst);
  }
  for (const RingPass& r : dag_.rings_) {
    out.insert(out.end(), {-4.0, static_cast<double>(r.first_id), static_cast<double>(r.ops_before),
                           static_cast<double>(r.steps), r.bytes, static_cast<double>(r.size())});
    out.insert(out.end(), r.has_start.begin(), r.has_start.end());
    out.insert(out.end(), r.end_ops.begin(), r.end_ops.end());
    for (int i = 0; i < r.size(); ++i) add_route(r.npus[i], r.npus[(i + 1) % r.size()]);
  }
  out.insert(out.end(), dag_.pending_.begin(), dag_.pending_.end());
  out.insert(out.end(), dag_.succ_offsets_.begin(), dag_.succ_offsets_.end());
  out.insert(out.end(), dag_.succ_.begin(), dag_.succ_.end());
  out.insert(out.end(), compute_nodes_.begin(), compute_nodes_.end());
  out.insert(out.end(), compute_ops_.begin(), compute_ops_.end());
  return out;
}

SimOutput PreparedReplay::run(Network& net, const double* duration_s) const {
  std::vector<int32_t> pending = dag_.pending_;
  std::vector<Op> changed;
  if (duration_s != nullptr) {
    changed = dag_.ops_;
    for (size_t k = 0; k < compute_nodes_.size(); ++k) changed[compute_ops_[k]].amount = duration_s[compute_nodes_[k]];
  }
  SimOutput out = simulate(net, dag_, duration_s != nullptr ? changed : dag_.ops_, pending);
  if (out.completed_ops != dag_.size())
    throw std::invalid_argument("trace deadlocks: some node never finishes");
  return out;
}

}  // namespace netsim
