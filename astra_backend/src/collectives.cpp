#include "collectives.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace netsim {

namespace {

// Synchronous-step builder: a member's sends in a step wait for everything
// it sent and received in its previous active step (one stream per member).
class Steps {
 public:
  Steps(Dag& dag, const std::vector<int>& npus, const std::vector<int>& start)
      : dag_(dag), npus_(npus), frontier_(npus.size()), next_(npus.size()), sent_(npus.size(), 0) {
    for (size_t i = 0; i < npus.size(); ++i)
      if (start[i] >= 0) frontier_[i].push_back(start[i]);
  }

  void begin() {
    for (auto& f : frontier_)
      if (f.size() > 2) f.assign(1, dag_.join(f));
  }

  void send(int i, int j, double bytes) {
    const int op = dag_.add_flow(npus_[i], npus_[j], bytes);
    for (int p : frontier_[i]) dag_.add_dep(p, op);
    next_[i].push_back(op);
    next_[j].push_back(op);
    sent_[i] = 1;
  }

  void end() {
    for (size_t i = 0; i < npus_.size(); ++i) {
      if (!sent_[i]) next_[i].insert(next_[i].end(), frontier_[i].begin(), frontier_[i].end());
      frontier_[i].swap(next_[i]);
      next_[i].clear();
      sent_[i] = 0;
    }
  }

  std::vector<int> finish() {
    std::vector<int> ends(npus_.size());
    for (size_t i = 0; i < npus_.size(); ++i) ends[i] = dag_.join(frontier_[i]);
    return ends;
  }

 private:
  Dag& dag_;
  const std::vector<int>& npus_;
  std::vector<std::vector<int>> frontier_, next_;
  std::vector<char> sent_;
};

bool power_of_two(int p) { return p > 0 && (p & (p - 1)) == 0; }

const char* kind_name(int kind) {
  static const char* names[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "send_recv"};
  return names[kind];
}

// All-to-all and broadcast on a ring; all-reduce, reduce-scatter and all-gather are ring passes
// (Dag::add_ring).
void ring(Steps& st, int kind, int p, double S, int root) {
  switch (kind) {
    case kAllToAll:
      for (int k = 1; k < p; ++k) {
        st.begin();
        for (int i = 0; i < p; ++i) st.send(i, (i + 1) % p, S / p * (p - k));
        st.end();
      }
      break;
    case kBroadcast:
      for (int h = 0; h + 1 < p; ++h) {
        st.begin();
        st.send((root + h) % p, (root + h + 1) % p, S);
        st.end();
      }
      break;
  }
}

void direct_pass(Steps& st, int p, double bytes) {
  st.begin();
  for (int i = 0; i < p; ++i)
    for (int k = 1; k < p; ++k) st.send(i, (i + k) % p, bytes);
  st.end();
}

void direct(Steps& st, int kind, int p, double S, int root) {
  switch (kind) {
    case kAllReduce: direct_pass(st, p, S / p); direct_pass(st, p, S / p); break;
    case kReduceScatter:
    case kAllGather:
    case kAllToAll: direct_pass(st, p, S / p); break;
    case kBroadcast:
      st.begin();
      for (int k = 1; k < p; ++k) st.send(root, (root + k) % p, S);
      st.end();
      break;
  }
}

void halving(Steps& st, int p, double S) {
  double bytes = S;
  for (int dist = p / 2; dist >= 1; dist /= 2) {
    bytes /= 2;
    st.begin();
    for (int i = 0; i < p; ++i) st.send(i, i ^ dist, bytes);
    st.end();
  }
}

void doubling(Steps& st, int p, double S) {
  double bytes = S / p;
  for (int dist = 1; dist < p; dist *= 2, bytes *= 2) {
    st.begin();
    for (int i = 0; i < p; ++i) st.send(i, i ^ dist, bytes);
    st.end();
  }
}

void halving_doubling(Steps& st, int kind, int p, double S, int root) {
  if (kind != kBroadcast && !power_of_two(p))
    throw std::invalid_argument(std::string("algorithm halving_doubling needs a power-of-two group for ") +
                                kind_name(kind) + ", got " + std::to_string(p) + " NPUs");
  switch (kind) {
    case kAllReduce: halving(st, p, S); doubling(st, p, S); break;
    case kReduceScatter: halving(st, p, S); break;
    case kAllGather: doubling(st, p, S); break;
    case kAllToAll:
      for (int dist = 1; dist < p; dist *= 2) {
        st.begin();
        for (int i = 0; i < p; ++i) st.send(i, i ^ dist, S / 2);
        st.end();
      }
      break;
    case kBroadcast:  // binomial tree
      for (int dist = 1; dist < p; dist *= 2) {
        st.begin();
        for (int rel = 0; rel < dist && rel + dist < p; ++rel) st.send((root + rel) % p, (root + rel + dist) % p, S);
        st.end();
      }
      break;
  }
}

// Two complementary binary trees, each carrying half the data in pipelined
// chunks: reduce towards the root, then broadcast back down.
std::vector<int> double_binary_tree(Dag& dag, const std::vector<int>& npus, const std::vector<int>& start, int kind,
                                    double S, int root, int chunks) {
  const int p = static_cast<int>(npus.size());
  if (kind != kAllReduce && kind != kBroadcast)
    throw std::invalid_argument(std::string("algorithm double_binary_tree supports all_reduce and broadcast, not ") +
                                kind_name(kind));
  const double b = S / 2 / chunks;
  std::vector<std::vector<int>> last(p);
  for (int t = 0; t < 2; ++t) {
    auto member = [&](int q) { return t == 0 ? (root + q) % p : (root + (p - q) % p) % p; };
    std::vector<int> up_prev(p, -1), up_now(p, -1), down_prev(p, -1), have(p, -1);
    std::vector<int> down_send_prev(p, -1);
    for (int c = 0; c < chunks; ++c) {
      std::vector<int> down_send_now(p, -1);
      if (kind == kAllReduce) {
        for (int q = p - 1; q >= 1; --q) {
          const int i = member(q);
          const int op = dag.add_flow(npus[i], npus[member((q - 1) / 2)], b);
          for (int dep : {start[i], up_prev[i]})
            if (dep >= 0) dag.add_dep(dep, op);
          for (int child : {2 * q + 1, 2 * q + 2})
            if (child < p) dag.add_dep(up_now[member(child)], op);
          up_now[i] = op;
        }
        std::vector<int> reduced;
        if (start[member(0)] >= 0) reduced.push_back(start[member(0)]);
        for (int child : {1, 2})
          if (child < p) reduced.push_back(up_now[member(child)]);
        have[member(0)] = reduced.empty() ? dag.add_nop() : dag.join(reduced);
      } else {
        have[member(0)] = start[member(0)] >= 0 ? start[member(0)] : dag.add_nop();
      }
      for (int q = 0; q < p; ++q) {
        const int i = member(q);
        for (int child : {2 * q + 1, 2 * q + 2}) {
          if (child >= p) continue;
          const int op = dag.add_flow(npus[i], npus[member(child)], b);
          dag.add_dep(have[i], op);
          if (down_send_prev[i] >= 0) dag.add_dep(down_send_prev[i], op);
          if (start[member(child)] >= 0 && kind == kBroadcast) dag.add_dep(start[member(child)], op);
          have[member(child)] = op;
          down_send_now[i] = op;
        }
      }
      for (int i = 0; i < p; ++i) {
        if (down_send_now[i] >= 0) down_send_prev[i] = down_send_now[i];
        up_prev[i] = up_now[i];
      }
    }
    for (int i = 0; i < p; ++i)
      for (int op : {have[i], up_prev[i], down_send_prev[i]})
        if (op >= 0) last[i].push_back(op);
  }
  std::vector<int> ends(p);
  for (int i = 0; i < p; ++i) {
    if (start[i] >= 0) last[i].push_back(start[i]);
    ends[i] = last[i].empty() ? dag.add_nop() : dag.join(last[i]);
  }
  return ends;
}

// One algorithm on one set of NPUs (a line of a dimension, or a flat group).
std::vector<int> emit_base(Dag& dag, int kind, int algo, const std::vector<int>& npus, double S, int root_index,
                           const std::vector<int>& start) {
  const int p = static_cast<int>(npus.size());
  if (p > 1 && algo == kAlgoRing && (kind == kAllReduce || kind == kReduceScatter || kind == kAllGather))
    return dag.add_ring(npus, S / p, kind == kAllReduce ? 2 * (p - 1) : p - 1, start);
  Steps st(dag, npus, start);
  if (p > 1) {
    if (algo == kAlgoRing) ring(st, kind, p, S, root_index);
    else if (algo == kAlgoDirect) direct(st, kind, p, S, root_index);
    else halving_doubling(st, kind, p, S, root_index);
  }
  return st.finish();
}

struct Phase {
  int kind;
  int dim;  // -1: the whole group at once
  double bytes;
};

std::vector<Phase> plan_phases(int kind, const std::vector<int>& dims, const std::vector<int>& sizes, double S) {
  const int k = static_cast<int>(dims.size());
  std::vector<Phase> phases;
  double bytes = S;
  if (kind == kAllReduce || kind == kReduceScatter) {
    for (int j = 0; j < k; ++j) {
      const bool last = j == k - 1;
      phases.push_back({last && kind == kAllReduce ? kAllReduce : kReduceScatter, dims[j], bytes});
      if (!last) bytes /= sizes[j];
    }
    if (kind == kAllReduce)
      for (int j = k - 2; j >= 0; --j) {
        bytes *= sizes[j];
        phases.push_back({kAllGather, dims[j], bytes});
      }
  } else if (kind == kAllGather) {
    for (int j = 0; j < k; ++j) bytes /= sizes[j];
    for (int j = k - 1; j >= 0; --j) {
      bytes *= sizes[j];
      phases.push_back({kAllGather, dims[j], bytes});
    }
  } else if (kind == kAllToAll) {
    for (int j = 0; j < k; ++j) phases.push_back({kAllToAll, dims[j], S});
  } else {
    for (int j = k - 1; j >= 0; --j) phases.push_back({kBroadcast, dims[j], S});
  }
  return phases;
}

// Dimensions along which the group varies, if the group is a full grid of them.
std::vector<int> grid_dims(const Network& net, const std::vector<int>& group, std::vector<int>& sizes) {
  std::vector<int> dims;
  long long product = 1;
  for (int d = 0; d < net.num_dims(); ++d) {
    std::vector<char> seen(net.dim(d).size, 0);
    int distinct = 0;
    for (int npu : group) {
      char& s = seen[net.coord(npu, d)];
      if (!s) ++distinct;
      s = 1;
    }
    if (distinct > 1) {
      dims.push_back(d);
      sizes.push_back(distinct);
      product *= distinct;
    }
  }
  if (product != static_cast<long long>(group.size())) dims.clear();
  return dims;
}

}  // namespace

std::vector<int> emit_collective(Dag& dag, const Network& net, const CollectiveRequest& req,
                                 const std::vector<int>& start) {
  const auto& group = req.group;
  const int p = static_cast<int>(group.size());
  if (req.kind == kSendRecv) {
    std::vector<int> prev = start;
    for (int c = 0; c < req.chunks; ++c) {
      const int op = dag.add_flow(group[0], group[1], req.bytes / req.chunks);
      for (int dep : prev)
        if (dep >= 0) dag.add_dep(dep, op);
      prev.assign(2, op);
    }
    return prev;
  }
  const int root_index =
      static_cast<int>(std::find(group.begin(), group.end(), req.root) - group.begin()) % std::max(p, 1);
  if (req.algorithm == kAlgoDoubleBinaryTree)
    return double_binary_tree(dag, group, start, req.kind, req.bytes, root_index, req.chunks);

  std::vector<int> sizes;
  std::vector<int> dims = req.hierarchical ? grid_dims(net, group, sizes) : std::vector<int>{};
  if (dims.size() < 2) {
    dims.clear();
    sizes.clear();
  }
  const std::vector<Phase> phases =
      dims.empty() ? std::vector<Phase>{{req.kind, -1, req.bytes}} : plan_phases(req.kind, dims, sizes, req.bytes);

  // Lines of each phase: member indices sharing every coordinate but the phase's.
  std::vector<std::vector<std::vector<int>>> lines(phases.size());
  for (size_t j = 0; j < phases.size(); ++j) {
    const int d = phases[j].dim;
    if (d < 0) {
      lines[j].emplace_back();
      for (int i = 0; i < p; ++i) lines[j][0].push_back(i);
      continue;
    }
    std::map<int, std::vector<int>> by_line;
    for (int i = 0; i < p; ++i) by_line[group[i] - net.coord(group[i], d) * net.stride(d)].push_back(i);
    for (auto& kv : by_line) {
      std::sort(kv.second.begin(), kv.second.end(),
                [&](int a, int b) { return net.coord(group[a], d) < net.coord(group[b], d); });
      lines[j].push_back(std::move(kv.second));
    }
  }

  std::vector<std::vector<int>> phase_end(phases.size(), std::vector<int>(p, -1));
  for (int c = 0; c < req.chunks; ++c) {
    std::vector<int> cur = start;
    for (size_t j = 0; j < phases.size(); ++j) {
      const Phase& ph = phases[j];
      for (const auto& line : lines[j]) {
        int line_root = 0;
        if (ph.kind == kBroadcast) {
          // Only lines that already hold the data take part.
          bool holds = true;
          for (size_t jj = j + 1; jj < phases.size(); ++jj) {
            const int d2 = phases[jj].dim;
            if (d2 >= 0 && net.coord(group[line[0]], d2) != net.coord(req.root, d2)) holds = false;
          }
          if (!holds) continue;
          for (size_t k = 0; k < line.size(); ++k)
            if (ph.dim < 0 ? group[line[k]] == req.root
                           : net.coord(group[line[k]], ph.dim) == net.coord(req.root, ph.dim))
              line_root = static_cast<int>(k);
        }
        std::vector<int> npus, line_start;
        for (int i : line) {
          npus.push_back(group[i]);
          std::vector<int> deps;
          for (int dep : {cur[i], phase_end[j][i]})
            if (dep >= 0) deps.push_back(dep);
          line_start.push_back(deps.empty() ? -1 : dag.join(deps));
        }
        const std::vector<int> ends = emit_base(dag, ph.kind, req.algorithm, npus, ph.bytes / req.chunks, line_root,
                                                line_start);
        for (size_t k = 0; k < line.size(); ++k) {
          phase_end[j][line[k]] = ends[k];
          cur[line[k]] = ends[k];
        }
      }
    }
    if (c + 1 == req.chunks) return cur;
  }
  return start;
}

}  // namespace netsim
