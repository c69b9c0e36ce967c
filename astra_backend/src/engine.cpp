#include "engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace netsim {

int Dag::join(const std::vector<int>& preds) {
  if (preds.size() == 1) return preds[0];
  const int j = add_nop();
  for (int p : preds) add_dep(p, j);
  return j;
}

void Dag::finalize() {
  if (finalized_) return;
  finalized_ = true;
  succ_offsets_.assign(ops_.size() + 1, 0);
  for (int32_t f : edge_from_) ++succ_offsets_[f + 1];
  for (size_t i = 0; i < ops_.size(); ++i) succ_offsets_[i + 1] += succ_offsets_[i];
  succ_.resize(edge_from_.size());
  std::vector<int64_t> fill(succ_offsets_.begin(), succ_offsets_.end() - 1);
  for (size_t e = 0; e < edge_from_.size(); ++e) succ_[fill[edge_from_[e]]++] = edge_to_[e];
  std::vector<int32_t>().swap(edge_from_);
  std::vector<int32_t>().swap(edge_to_);
}

namespace {

enum EventType : uint8_t { kTxEnd = 0, kDone = 1 };

struct Event {
  double t;
  int32_t id;  // flow slot for kTxEnd, op for kDone
  uint32_t version;
  uint8_t type;
};

// Events bucketed by exact time: symmetric collectives finish thousands of
// flows at one instant, which then cost one map entry instead of heap work.
class Calendar {
 public:
  void push(const Event& e) {
    auto it = last_ != buckets_.end() && last_->first == e.t ? last_ : buckets_.find(e.t);
    if (it == buckets_.end()) {
      std::vector<Event> bucket;
      if (!spare_.empty()) {
        bucket.swap(spare_.back());
        spare_.pop_back();
      }
      it = buckets_.emplace(e.t, std::move(bucket)).first;
    }
    it->second.push_back(e);
    last_ = it;
  }
  bool empty() const { return buckets_.empty(); }
  double next_time() const { return buckets_.begin()->first; }
  // Swaps the earliest bucket into `out` (which must be empty).
  void pop_bucket(std::vector<Event>& out) {
    auto it = buckets_.begin();
    out.swap(it->second);
    spare_.push_back(std::move(it->second));
    if (last_ == it) last_ = buckets_.end();
    buckets_.erase(it);
  }

 private:
  std::map<double, std::vector<Event>> buckets_;
  std::map<double, std::vector<Event>>::iterator last_ = buckets_.end();
  std::vector<std::vector<Event>> spare_;
};

struct Flow {
  int op = -1;
  bool active = false;
  bool in_component = false;
  bool frozen = false;
  uint32_t version = 0;
  double remaining = 0.0;
  double rate = 0.0;
  double last_s = 0.0;
  double latency_s = 0.0;
  std::vector<int> path;
  std::vector<int> pos;  // index of this flow in each path link's flow list
};

struct LinkState {
  std::vector<int> flows;
  double capacity = 0.0;
  double busy_since = 0.0;
  bool dirty = false;
  bool in_component = false;
  uint32_t version = 0;
  double spare = 0.0;   // water-filling scratch: capacity not yet given out
  int unfrozen = 0;     // water-filling scratch: flows without a rate yet
};

struct Share {
  double share;
  int link;
  uint32_t version;
  bool operator>(const Share& o) const { return share > o.share; }
};

class Simulator {
 public:
  // Runs `dag`'s structure with these op amounts and a scratch copy of its pending counts.
  Simulator(Network& net, const Dag& dag, const std::vector<Op>& ops, std::vector<int32_t>& pending, bool record)
      : net_(net), dag_(dag), ops_(ops), pending_(pending) {
    const auto& links = net.links();
    links_.resize(links.size());
    for (size_t i = 0; i < links.size(); ++i) links_[i].capacity = links[i].bandwidth_Bps;
    out_.links.bytes.assign(links.size(), 0.0);
    out_.links.busy_s.assign(links.size(), 0.0);
    out_.links.peak_flows.assign(links.size(), 0);
    if (record) out_.op_end_s.assign(dag.ops_.size(), std::numeric_limits<double>::quiet_NaN());
  }

  SimOutput run() {
    for (int i = 0; i < dag_.size(); ++i)
      if (pending_[i] == 0) ready_.push_back(i);
    drain_ready();
    solve_rates();
    while (!events_.empty()) {
      now_ = events_.next_time();
      const double horizon = now_ + std::max(1e-18, now_ * 1e-12);
      while (!events_.empty() && events_.next_time() <= horizon) {
        events_.pop_bucket(batch_);
        for (const Event& e : batch_) {
          if (e.type == kDone) {
            complete(e.id);
          } else if (flows_[e.id].active && flows_[e.id].version == e.version) {
            end_flow(e.id);
          }
        }
        batch_.clear();
      }
      drain_ready();
      solve_rates();
    }
    return std::move(out_);
  }

 private:
  void complete(int op) {
    if (!out_.op_end_s.empty()) out_.op_end_s[op] = now_;
    out_.makespan_s = std::max(out_.makespan_s, now_);
    ++out_.completed_ops;
    for (int64_t k = dag_.succ_offsets_[op]; k < dag_.succ_offsets_[op + 1]; ++k) {
      const int s = dag_.succ_[k];
      if (--pending_[s] == 0) ready_.push_back(s);
    }
  }

  void finish_at(int op, double t) {
    if (t <= now_) complete(op);
    else events_.push(Event{t, op, 0, kDone});
  }

  void drain_ready() {
    while (!ready_.empty()) {
      const int op = ready_.back();
      ready_.pop_back();
      const Op& o = ops_[op];
      if (o.src == kNop) complete(op);
      else if (o.src == kDelay) finish_at(op, now_ + o.amount);
      else start_flow(op);
    }
  }

  int new_slot() {
    if (!free_slots_.empty()) {
      const int s = free_slots_.back();
      free_slots_.pop_back();
      return s;
    }
    flows_.emplace_back();
    return static_cast<int>(flows_.size()) - 1;
  }

  void mark_dirty(int l) {
    if (!links_[l].dirty) {
      links_[l].dirty = true;
      dirty_.push_back(l);
    }
  }

  void start_flow(int op) {
    const Op& o = ops_[op];
    if (o.src == o.dst) {
      complete(op);
      return;
    }
    ++out_.flows;
    const int slot = new_slot();
    Flow& f = flows_[slot];
    net_.route(o.src, o.dst, f.path);
    const auto& links = net_.links();
    f.latency_s = 0.0;
    for (int l : f.path) f.latency_s += links[l].latency_s;
    if (o.amount <= 0.0) {
      free_slots_.push_back(slot);
      finish_at(op, now_ + f.latency_s);
      return;
    }
    f.op = op;
    f.active = true;
    f.remaining = o.amount;
    f.rate = 0.0;
    f.last_s = now_;
    ++f.version;
    f.pos.resize(f.path.size());
    for (size_t i = 0; i < f.path.size(); ++i) {
      const int l = f.path[i];
      LinkState& ls = links_[l];
      if (ls.flows.empty()) ls.busy_since = now_;
      f.pos[i] = static_cast<int>(ls.flows.size());
      ls.flows.push_back(slot);
      out_.links.peak_flows[l] = std::max<int32_t>(out_.links.peak_flows[l], static_cast<int32_t>(ls.flows.size()));
      out_.links.bytes[l] += o.amount;
      mark_dirty(l);
    }
  }

  void end_flow(int slot) {
    Flow& f = flows_[slot];
    for (size_t i = 0; i < f.path.size(); ++i) {
      const int l = f.path[i];
      LinkState& ls = links_[l];
      const int p = f.pos[i];
      const int moved = ls.flows.back();
      ls.flows[p] = moved;
      ls.flows.pop_back();
      if (moved != slot) {
        Flow& m = flows_[moved];
        for (size_t j = 0; j < m.path.size(); ++j)
          if (m.path[j] == l) m.pos[j] = p;
      }
      if (ls.flows.empty()) out_.links.busy_s[l] += now_ - ls.busy_since;
      mark_dirty(l);
    }
    f.active = false;
    ++f.version;
    free_slots_.push_back(slot);
    finish_at(f.op, now_ + f.latency_s);
  }

  // Gathers the flows connected (through shared links) to the dirty links.
  void collect_component(int seed) {
    stack_.assign(1, seed);
    links_[seed].in_component = true;
    comp_links_.push_back(seed);
    while (!stack_.empty()) {
      const int l = stack_.back();
      stack_.pop_back();
      for (int s : links_[l].flows) {
        Flow& f = flows_[s];
        if (f.in_component) continue;
        f.in_component = true;
        comp_flows_.push_back(s);
        for (int l2 : f.path)
          if (!links_[l2].in_component) {
            links_[l2].in_component = true;
            comp_links_.push_back(l2);
            stack_.push_back(l2);
          }
      }
    }
  }

  void solve_rates() {
    for (int l : dirty_) {
      LinkState& ls = links_[l];
      ls.dirty = false;
      if (ls.in_component || ls.flows.empty()) continue;
      if (ls.flows.size() == 1 && (flows_[ls.flows[0]].in_component || lone_flow(ls.flows[0]))) continue;
      comp_flows_.clear();
      comp_links_.clear();
      collect_component(l);
      all_comp_links_.insert(all_comp_links_.end(), comp_links_.begin(), comp_links_.end());
      all_comp_flows_.insert(all_comp_flows_.end(), comp_flows_.begin(), comp_flows_.end());
      if (!comp_flows_.empty()) water_fill();
    }
    dirty_.clear();
    for (int l : all_comp_links_) links_[l].in_component = false;
    for (int s : all_comp_flows_) flows_[s].in_component = false;
    all_comp_links_.clear();
    all_comp_flows_.clear();
  }

  // A flow alone on all its links runs at its slowest link's capacity.
  bool lone_flow(int slot) {
    Flow& f = flows_[slot];
    double rate = std::numeric_limits<double>::infinity();
    for (int l : f.path) {
      if (links_[l].flows.size() != 1) return false;
      rate = std::min(rate, links_[l].capacity);
    }
    f.in_component = true;
    all_comp_flows_.push_back(slot);
    assign_rate(f, slot, rate);
    return true;
  }

  void assign_rate(Flow& f, int slot, double rate) {
    f.remaining = std::max(0.0, f.remaining - f.rate * (now_ - f.last_s));
    f.last_s = now_;
    if (rate == f.rate) return;
    f.rate = rate;
    ++f.version;
    events_.push(Event{now_ + f.remaining / rate, slot, f.version, kTxEnd});
  }

  // Max-min fair rates by progressive filling over one connected component.
  void water_fill() {
    heap_.clear();
    for (int l : comp_links_) {
      LinkState& ls = links_[l];
      ls.spare = ls.capacity;
      ls.unfrozen = static_cast<int>(ls.flows.size());
      ++ls.version;
      heap_.push_back(Share{ls.spare / ls.unfrozen, l, ls.version});
    }
    std::make_heap(heap_.begin(), heap_.end(), std::greater<Share>());
    for (int s : comp_flows_) flows_[s].frozen = false;
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<Share>());
      const Share top = heap_.back();
      heap_.pop_back();
      LinkState& bottleneck = links_[top.link];
      if (top.version != bottleneck.version || bottleneck.unfrozen == 0) continue;
      const double share = std::max(top.share, 0.0) > 0.0 ? top.share : bottleneck.capacity * 1e-12;
      for (int s : bottleneck.flows) {
        Flow& f = flows_[s];
        if (f.frozen) continue;
        f.frozen = true;
        assign_rate(f, s, share);
        for (int l2 : f.path) {
          LinkState& ls = links_[l2];
          ls.spare -= share;
          --ls.unfrozen;
          ++ls.version;
          if (l2 != top.link && ls.unfrozen > 0) {
            heap_.push_back(Share{std::max(ls.spare, 0.0) / ls.unfrozen, l2, ls.version});
            std::push_heap(heap_.begin(), heap_.end(), std::greater<Share>());
          }
        }
      }
    }
  }

  Network& net_;
  const Dag& dag_;
  const std::vector<Op>& ops_;
  std::vector<int32_t>& pending_;
  SimOutput out_;
  double now_ = 0.0;
  std::vector<Flow> flows_;
  std::vector<int> free_slots_;
  std::vector<LinkState> links_;
  Calendar events_;
  std::vector<Event> batch_;
  std::vector<int> ready_;
  std::vector<int> dirty_;
  std::vector<int> stack_;
  std::vector<int> comp_flows_, comp_links_, all_comp_flows_, all_comp_links_;
  std::vector<Share> heap_;
};

}  // namespace

SimOutput simulate(Network& net, const Dag& dag, const std::vector<Op>& ops, std::vector<int32_t>& pending) {
  return Simulator(net, dag, ops, pending, false).run();
}

SimOutput simulate(Network& net, Dag& dag, bool record_op_times) {
  dag.finalize();
  return Simulator(net, dag, dag.ops_, dag.pending_, record_op_times).run();
}

}  // namespace netsim
