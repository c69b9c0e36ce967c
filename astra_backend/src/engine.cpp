#include "engine.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <stdexcept>

namespace netsim {

int Dag::join(const std::vector<int>& preds) {
  if (preds.size() == 1) return preds[0];
  const int j = add_nop();
  for (int p : preds) add_dep(p, j);
  return j;
}

std::vector<int> Dag::add_ring(const std::vector<int>& npus, double bytes, int steps, const std::vector<int>& start) {
  const int p = static_cast<int>(npus.size());
  RingPass r;
  const int64_t first = rings_.empty() ? kRingFlowBase
                                       : rings_.back().first_id + int64_t{rings_.back().steps} * rings_.back().size();
  if (first + int64_t{steps} * p > std::numeric_limits<int32_t>::max())
    throw std::length_error("too many ring flows to number");
  r.first_id = static_cast<int32_t>(first);
  r.ops_before = size();
  r.steps = steps;
  r.bytes = bytes;
  r.npus.assign(npus.begin(), npus.end());
  r.has_start.resize(p);
  for (int i = 0; i < p; ++i)
    if (start[i] >= 0) {
      r.has_start[i] = 1;
      add_dep(start[i], r.first_id + i);
    }
  for (int i = 0; i < p; ++i) {
    r.end_ops.push_back(add_nop());
    pending_[r.end_ops.back()] = 2;
  }
  rings_.push_back(std::move(r));
  return std::vector<int>(rings_.back().end_ops.begin(), rings_.back().end_ops.end());
}

int Dag::ring_index(int id) const {
  if (rings_.size() == 1) return 0;
  const auto it = std::upper_bound(rings_.begin(), rings_.end(), id,
                                   [](int value, const RingPass& r) { return value < r.first_id; });
  return static_cast<int>(it - rings_.begin()) - 1;
}

void Dag::finalize() {
  if (finalized_) return;
  finalized_ = true;
  succ_offsets_.assign(ops_.size() + 1, 0);
  for (int32_t f : edge_from_) ++succ_offsets_[f + 1];
  for (size_t i = 0; i < ops_.size(); ++i) succ_offsets_[i + 1] += succ_offsets_[i];
  succ_.resize(edge_from_.size());
  // Each op's offset serves as its fill cursor, ending at the next op's start; shifting the
  // offsets up one place afterwards restores them without a second array of cursors.
  for (size_t e = 0; e < edge_from_.size(); ++e) succ_[succ_offsets_[edge_from_[e]]++] = edge_to_[e];
  for (size_t i = ops_.size(); i > 0; --i) succ_offsets_[i] = succ_offsets_[i - 1];
  succ_offsets_[0] = 0;
  std::vector<int32_t>().swap(edge_from_);
  std::vector<int32_t>().swap(edge_to_);
}

namespace {

enum EventType : uint8_t { kTxEnd = 0, kDone = 1, kGroupTxEnd = 2, kGroupDone = 3 };

// An event of a calendar bucket (its time is the bucket's).
struct Event {
  int32_t id;  // flow slot for kTxEnd, op for kDone, flow group for kGroupTxEnd and kGroupDone
  uint32_t version;
  uint8_t type;
};

// Events bucketed by exact time: symmetric collectives finish thousands of
// flows at one instant, which then cost one map entry instead of heap work.
// Recent buckets are found again without a map search through a small table
// hashed by time (arrivals over routes of a few lengths interleave a few times).
class Calendar {
 public:
  void push(double t, const Event& e) {
    if (last_ != buckets_.end() && last_->first == t) {
      last_->second.push_back(e);
      return;
    }
    Recent& r = recent_[slot(t)];
    if (r.it != buckets_.end() && r.it->first == t) {
      r.it->second.push_back(e);
      last_ = r.it;
      return;
    }
    push_new_time(t, e, r);
  }
  bool empty() const { return buckets_.empty(); }
  double next_time() const { return buckets_.begin()->first; }
  // Swaps the earliest bucket into `out` (which must be empty).
  void pop_bucket(std::vector<Event>& out) {
    auto it = buckets_.begin();
    out.swap(it->second);
    spare_.push_back(std::move(it->second));
    if (last_ == it) last_ = buckets_.end();
    Recent& r = recent_[slot(it->first)];
    if (r.it == it) r.it = buckets_.end();
    buckets_.erase(it);
  }

 private:
  using Buckets = std::map<double, std::vector<Event>>;
  struct Recent {
    Buckets::iterator it;  // end(): none
  };
  static constexpr int kRecentBits = 6;

  static size_t slot(double t) {
    uint64_t bits;
    std::memcpy(&bits, &t, sizeof bits);
    return static_cast<size_t>((bits * 0x9E3779B97F4A7C15ull) >> (64 - kRecentBits));
  }

  __attribute__((noinline)) void push_new_time(double t, const Event& e, Recent& r) {
    auto it = buckets_.find(t);
    if (it == buckets_.end()) {
      std::vector<Event> bucket;
      if (!spare_.empty()) {
        bucket.swap(spare_.back());
        spare_.pop_back();
      }
      it = buckets_.emplace(t, std::move(bucket)).first;
    }
    it->second.push_back(e);
    last_ = it;
    r.it = it;
  }

  Buckets buckets_;
  Buckets::iterator last_ = buckets_.end();
  std::array<Recent, size_t{1} << kRecentBits> recent_ = make_recent();
  std::vector<std::vector<Event>> spare_;

  std::array<Recent, size_t{1} << kRecentBits> make_recent() {
    std::array<Recent, size_t{1} << kRecentBits> recent;
    recent.fill(Recent{buckets_.end()});
    return recent;
  }
};

struct Flow {
  int op = -1;
  uint32_t version = 0;
  double remaining = 0.0;
  double rate = 0.0;
  double last_s = 0.0;
  double latency_s = 0.0;
};

// A route's link ids, viewed in place.
struct Route {
  const int* first;
  const int* last;
  const int* begin() const { return first; }
  const int* end() const { return last; }
};

// The route of every flow slot, each computed once with its latency: per NPU pair where the NPUs
// are few (a direct pattern sends to every peer, twice in an all-reduce), a slot then pointing at
// its pair's route; else per source for its latest destination (a ring member sends to the same
// neighbour step after step), copied into the slot's own region, which it keeps across reuses
// and moves to the end only when a longer route comes along.
class FlowRoutes {
 public:
  explicit FlowRoutes(Network& net) : net_(net), npus_(net.num_npus()) {
    if (npus_ <= kMaxPairNpus) {
      pairs_.resize(static_cast<size_t>(npus_) * npus_);
    } else {
      last_dst_.assign(npus_, -1);
      last_route_.resize(npus_);
      last_latency_s_.assign(npus_, 0.0);
    }
  }

  // Makes src -> dst the current route; returns its latency.
  double find(int src, int dst) {
    if (pairs_.empty()) {
      src_ = src;
      if (last_dst_[src] != dst) {
        net_.route(src, dst, last_route_[src]);
        last_dst_[src] = dst;
        last_latency_s_[src] = latency_of(last_route_[src]);
      }
      return last_latency_s_[src];
    }
    Pair& p = pairs_[static_cast<size_t>(src) * npus_ + dst];
    if (p.size == kUnknown) {
      net_.route(src, dst, scratch_);
      p.offset = static_cast<uint32_t>(links_.size());
      p.size = static_cast<uint32_t>(scratch_.size());
      p.latency_s = latency_of(scratch_);
      links_.insert(links_.end(), scratch_.begin(), scratch_.end());
    }
    pair_ = &p;
    return p.latency_s;
  }

  // The current route, valid until the next find().
  Route current() const {
    if (pairs_.empty()) {
      const std::vector<int>& route = last_route_[src_];
      return Route{route.data(), route.data() + route.size()};
    }
    const int* first = links_.data() + pair_->offset;
    return Route{first, first + pair_->size};
  }

  // Gives flow slot `slot` the current route.
  void assign(int slot) {
    if (static_cast<size_t>(slot) >= regions_.size()) regions_.resize(slot + 1);
    Region& r = regions_[slot];
    if (!pairs_.empty()) {
      r.offset = pair_->offset;
      r.size = pair_->size;
      return;
    }
    const std::vector<int>& route = last_route_[src_];
    const auto size = static_cast<uint32_t>(route.size());
    r.size = size;
    if (size > r.capacity) {  // a new region at the end, filled as it is appended (no zeroing first)
      r.offset = static_cast<uint32_t>(links_.size());
      r.capacity = size;
      links_.insert(links_.end(), route.begin(), route.end());
      return;
    }
    int* out = links_.data() + r.offset;
    for (uint32_t i = 0; i < size; ++i) out[i] = route[i];  // routes are a few links: no memmove call
  }

  // Valid until the next find().
  Route operator[](int slot) const {
    const Region& r = regions_[slot];
    const int* first = links_.data() + r.offset;
    return Route{first, first + r.size};
  }

 private:
  static constexpr int kMaxPairNpus = 256;  // a table of 64 Ki pairs, 1 MiB
  static constexpr uint32_t kUnknown = ~uint32_t{0};
  struct Pair {
    uint32_t offset = 0;
    uint32_t size = kUnknown;  // not computed yet
    double latency_s = 0.0;
  };
  struct Region {
    uint32_t offset = 0;
    uint32_t size = 0;
    uint32_t capacity = 0;  // per-source routes only: the links the region holds
  };

  double latency_of(const std::vector<int>& route) const {
    double latency_s = 0.0;
    for (int l : route) latency_s += net_.links()[l].latency_s;
    return latency_s;
  }

  Network& net_;
  const int npus_;
  std::vector<int> links_;  // the pairs' routes, or the slots' regions
  std::vector<Region> regions_;
  std::vector<Pair> pairs_;  // per (src, dst) pair, when the NPUs are few
  const Pair* pair_ = nullptr;
  std::vector<int> scratch_;
  std::vector<int> last_dst_;  // per source NPU: its memoized route's destination, -1 for none
  std::vector<std::vector<int>> last_route_;
  std::vector<double> last_latency_s_;
  int src_ = 0;  // the current route's source (per-source routes)
};

// A flow slot's flags, kept apart from Flow in one dense array: the passes over a large
// component test them for every flow, and most of them touch nothing else of it.
struct FlowMarks {
  bool active = false;
  bool in_component = false;
  bool frozen = false;
};

struct LinkState {
  std::vector<int> flows;  // may hold ended flows until the link's next compaction
  int active_flows = 0;
  double capacity = 0.0;
  double busy_since = 0.0;
  int group = -1;  // the flow group sending on it (its only flow then), -1: none
  bool dirty = false;
  bool in_component = false;
  double spare = 0.0;   // water-filling scratch: capacity not yet given out
  int unfrozen = 0;     // water-filling scratch: flows without a rate yet
};

// Min-heap of links keyed by their fair share, one entry per link, updated in place. Each entry
// holds its key beside the link id, so a sift compares without visiting the links; each link's
// place in the heap is kept in a dense array of its own.
class ShareHeap {
 public:
  void resize(size_t links) { pos_.assign(links, -1); }

  bool empty() const { return heap_.empty(); }

  bool contains(int link) const { return pos_[link] >= 0; }

  double share_of_top() const { return heap_.front().share; }

  void push(int link, double share) {
    heap_.push_back(Entry{share, link});
    sift_up(heap_.size() - 1);
  }

  int pop() {
    const int top = heap_.front().link;
    remove(top);
    return top;
  }

  // Gives `link` the key `share` and moves it to its place. Only one sift can move it: up when
  // the key fell, down when it rose (the other sift of a general fix would stop at once).
  void update(int link, double share) {
    const size_t i = static_cast<size_t>(pos_[link]);
    const double old = heap_[i].share;
    if (share == old) return;
    heap_[i].share = share;
    if (share < old) sift_up(i);
    else sift_down(i);
  }

  void remove(int link) {
    const size_t i = static_cast<size_t>(pos_[link]);
    const Entry last = heap_.back();
    heap_.pop_back();
    pos_[link] = -1;
    if (last.link == link) return;
    place(i, last);
    sift_up(i);
    sift_down(static_cast<size_t>(pos_[last.link]));
  }

 private:
  struct Entry {
    double share;
    int link;
  };

  double key(size_t i) const { return heap_[i].share; }

  void place(size_t i, const Entry& e) {
    heap_[i] = e;
    pos_[e.link] = static_cast<int>(i);
  }

  void sift_up(size_t i) {
    const Entry e = heap_[i];
    while (i > 0 && key((i - 1) / 2) > e.share) {
      place(i, heap_[(i - 1) / 2]);
      i = (i - 1) / 2;
    }
    place(i, e);
  }

  void sift_down(size_t i) {
    const Entry e = heap_[i];
    for (size_t child = 2 * i + 1; child < heap_.size(); child = 2 * i + 1) {
      if (child + 1 < heap_.size() && key(child + 1) < key(child)) ++child;
      if (!(key(child) < e.share)) break;
      place(i, heap_[child]);
      i = child;
    }
    place(i, e);
  }

  std::vector<Entry> heap_;
  std::vector<int> pos_;  // per link: its index in heap_, -1 when out
};

// Flows of one ring pass started at one instant, each alone on its links (so no two share one),
// with equal rate and latency (a ring's flows carry equal bytes): each would end its transfer, and
// land, at the very instant the others do, so they run as one unit with one event for each, and
// their links' figures change as the single flows' would. A flow that comes onto one of their
// links while they send splits them into single flows, each just as it would have been. A group
// holding a whole step of its ring pass goes on to the next step as a whole, on the same links.
struct FlowGroup {
  enum State : uint8_t {
    kFree,
    kOpen,     // formed in this batch: its end comes with the batch's solve
    kSending,  // its transfers end at end_s
    kLanding,  // its data arrives one latency after end_s
    kQueued,   // the next step of its ring pass, ready to start (an entry of the ready stack)
  };
  double bytes = 0.0;
  double rate = 0.0;
  double latency_s = 0.0;
  double start_s = 0.0;
  double end_s = 0.0;
  uint32_t version = 0;
  State state = kFree;
  int ring = 0;         // the ring pass
  bool closed = false;  // started as a whole ring step: takes no other flows
  std::vector<int> ops;    // the members' ops
  std::vector<int> links;  // every member's links
};

class Simulator {
 public:
  // Runs `dag`'s structure with these op amounts and a scratch copy of its pending counts.
  Simulator(Network& net, const Dag& dag, const std::vector<Op>& ops, std::vector<int32_t>& pending, bool record,
            bool flow_groups)
      : dag_(dag), ops_(ops), pending_(pending), flow_groups_(flow_groups), routes_(net) {
    const auto& links = net.links();
    links_.resize(links.size());
    for (size_t i = 0; i < links.size(); ++i) links_[i].capacity = links[i].bandwidth_Bps;
    heap_.resize(links.size());
    out_.links.bytes.assign(links.size(), 0.0);
    out_.links.busy_s.assign(links.size(), 0.0);
    out_.links.peak_flows.assign(links.size(), 0);
    if (record) out_.op_end_s.assign(dag.ops_.size(), std::numeric_limits<double>::quiet_NaN());
    for (const RingPass& r : dag.rings_) {
      ring_member_base_.push_back(static_cast<int64_t>(ring_done_.size()));
      ring_done_.resize(ring_done_.size() + r.size(), 0);
    }
    reserve_flow_slots();
  }

  SimOutput run() {
    size_t r = 0;
    for (int i = 0; i <= dag_.size(); ++i) {
      for (; r < dag_.rings_.size() && dag_.rings_[r].ops_before == i; ++r) {
        const RingPass& ring = dag_.rings_[r];
        for (int m = 0; m < ring.size(); ++m)
          if (!ring.has_start[m]) ready_.push_back(ring.first_id + m);
      }
      if (i < dag_.size() && pending_[i] == 0) ready_.push_back(i);
    }
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
          } else if (e.type == kTxEnd) {
            if (marks_[e.id].active && flows_[e.id].version == e.version) end_flow(e.id);
          } else if (groups_[e.id].version == e.version) {
            if (e.type == kGroupTxEnd) end_group(e.id);
            else land_group(e.id);
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
    out_.makespan_s = std::max(out_.makespan_s, now_);
    if (op >= kRingFlowBase) {
      complete_ring_flow(op);
      return;
    }
    if (!out_.op_end_s.empty()) out_.op_end_s[op] = now_;
    ++out_.completed_ops;
    for (int64_t k = dag_.succ_offsets_[op]; k < dag_.succ_offsets_[op + 1]; ++k) {
      const int s = dag_.succ_[k];
      if (s >= kRingFlowBase || --pending_[s] == 0) ready_.push_back(s);  // a ring's step 0 waits on one op
    }
  }

  // Flow (k, i) of a ring pass is done: member i's and member i + 1's next sends (or end ops)
  // lose a predecessor, visited in the order the edges of a stored DAG would list them.
  void complete_ring_flow(int op) {
    const int index = dag_.ring_index(op);
    const RingPass& r = dag_.rings_[index];
    const int p = r.size();
    const int local = op - r.first_id;
    const int k = local / p;
    const int i = local % p;
    int32_t* done = ring_done_.data() + ring_member_base_[index];
    done[i] = k + 1;
    const int first = i == p - 1 ? 0 : i;
    const int second = i == p - 1 ? p - 1 : i + 1;
    for (int j : {first, second}) {
      if (k + 1 == r.steps) {
        if (--pending_[r.end_ops[j]] == 0) ready_.push_back(r.end_ops[j]);
      } else if (done[j] > k && done[j == 0 ? p - 1 : j - 1] > k) {
        ready_.push_back(r.first_id + (k + 1) * p + j);
      }
    }
  }

  void finish_at(int op, double t) {
    if (t <= now_) complete(op);
    else events_.push(t, Event{op, 0, kDone});
  }

  void drain_ready() {
    while (!ready_.empty()) {
      const int op = ready_.back();
      ready_.pop_back();
      if (static_cast<uint32_t>(op) >= static_cast<uint32_t>(kRingFlowBase)) {  // a ring flow, or a ring step (< 0)
        if (op < 0) start_ring_step(-1 - op);
        else start_ring_flow(op, dag_.ring_index(op));
        continue;
      }
      const Op& o = ops_[op];
      if (o.src == kNop) complete(op);
      else if (o.src == kDelay) finish_at(op, now_ + o.amount);
      else start_flow(op, o.src, o.dst, o.amount);
    }
  }

  // Room for every flow of the DAG at once: reserved, not touched, so it costs no memory
  // until used and spares the copies of a growing slot array.
  void reserve_flow_slots() {
    size_t flow_ops = 0;
    for (const Op& o : ops_) flow_ops += o.src >= 0;
    for (const RingPass& r : dag_.rings_) flow_ops += r.size();
    flows_.reserve(flow_ops);
    marks_.reserve(flow_ops);
  }

  int new_slot() {
    if (!free_slots_.empty()) {
      const int s = free_slots_.back();
      free_slots_.pop_back();
      return s;
    }
    flows_.emplace_back();
    marks_.emplace_back();
    return static_cast<int>(flows_.size()) - 1;
  }

  bool idle(Route route) const {
    for (int l : route)
      if (links_[l].active_flows != 0) return false;
    return true;
  }

  void mark_dirty(int l) {
    if (!links_[l].dirty) {
      links_[l].dirty = true;
      dirty_.push_back(l);
    }
  }

  // A ring pass's flow, alone on idle links, joins a flow group; any other starts single.
  void start_ring_flow(int op, int ring) {
    const RingPass& r = dag_.rings_[ring];
    int src, dst;
    endpoints(r, op, src, dst);
    if (flow_groups_ && src != dst && r.bytes > 0.0) {
      const double latency_s = routes_.find(src, dst);
      if (idle(routes_.current()) && join_group(op, r.bytes, latency_s, ring, routes_.current())) {
        ++out_.flows;
        return;
      }
    }
    start_flow(op, src, dst, r.bytes);
  }

  void start_flow(int op, int src, int dst, double amount) {
    if (src == dst) {
      complete(op);
      return;
    }
    ++out_.flows;
    const double latency_s = routes_.find(src, dst);
    if (amount <= 0.0) {
      finish_at(op, now_ + latency_s);
      return;
    }
    const int slot = new_slot();
    routes_.assign(slot);
    const Route route = routes_[slot];
    Flow& f = flows_[slot];
    f.latency_s = latency_s;
    f.op = op;
    marks_[slot].active = true;
    f.remaining = amount;
    f.rate = 0.0;
    f.last_s = now_;
    ++f.version;
    // Arrays and time held in locals: the stores below could alias the members, which would be
    // read again at every link.
    LinkState* const links = links_.data();
    double* const bytes = out_.links.bytes.data();
    int32_t* const peak_flows = out_.links.peak_flows.data();
    const double now_s = now_;
    // On idle links the flow moves no other flow's rate, so its links need no re-solve: unless a
    // flow joins one of them in this batch (which dirties that link, and the re-solve takes this
    // flow in), it runs at its slowest link's capacity (solve_rates gives it that). Its links'
    // peak flow count is then at least this one; a link another flow shares is dirty, and
    // solve_rates takes its peak.
    bool alone = true;
    for (int l : route)
      if (links[l].active_flows != 0) {
        alone = false;
        break;
      }
    double slowest = std::numeric_limits<double>::infinity();
    for (int l : route) {
      LinkState& ls = links[l];
      if (ls.active_flows++ == 0) ls.busy_since = now_s;
      ls.flows.push_back(slot);
      bytes[l] += amount;
      if (alone) {
        slowest = std::min(slowest, ls.capacity);
        peak_flows[l] = std::max(peak_flows[l], 1);
      } else {
        mark_dirty(l);
      }
    }
    if (alone) lone_starts_.push_back({slot, slowest});
  }

  // Adds a ring flow alone on `route` to this batch's open group of its ring pass, bytes, rate and
  // latency (a new one if none): its links are taken as the single flow would take them, and held by
  // the group. False (the flow runs single) where its rate would not be a positive number.
  __attribute__((noinline)) bool join_group(int op, double amount, double latency_s, int ring, Route route) {
    double rate = std::numeric_limits<double>::infinity();
    for (int l : route) rate = std::min(rate, links_[l].capacity);
    if (!(rate > 0.0 && rate < std::numeric_limits<double>::infinity())) return false;
    int index = -1;
    for (auto it = open_groups_.rbegin(); it != open_groups_.rend(); ++it) {
      const FlowGroup& g = groups_[*it];
      if (g.ring == ring && !g.closed && g.bytes == amount && g.rate == rate && g.latency_s == latency_s) {
        index = *it;
        break;
      }
    }
    if (index < 0) index = open_group(amount, rate, latency_s, ring);
    FlowGroup& g = groups_[index];
    g.ops.push_back(op);
    for (int l : route) {
      occupy(l, index, amount);
      g.links.push_back(l);
    }
    return true;
  }

  // Link `l` carries one flow of group `index` from now on, `amount` more bytes on it.
  void occupy(int l, int index, double amount) {
    LinkState& ls = links_[l];
    ls.active_flows = 1;
    ls.busy_since = now_;
    ls.group = index;
    out_.links.bytes[l] += amount;
    out_.links.peak_flows[l] = std::max(out_.links.peak_flows[l], 1);
  }

  int open_group(double amount, double rate, double latency_s, int ring) {
    int index;
    if (free_groups_.empty()) {
      index = static_cast<int>(groups_.size());
      groups_.emplace_back();
    } else {
      index = free_groups_.back();
      free_groups_.pop_back();
    }
    FlowGroup& g = groups_[index];
    g.bytes = amount;
    g.rate = rate;
    g.latency_s = latency_s;
    g.start_s = now_;
    g.state = FlowGroup::kOpen;
    g.ring = ring;
    g.closed = false;
    open_groups_.push_back(index);
    return index;
  }

  // The batch's solve gives each open group its members' rate: their transfers end together, at
  // the time assign_rate gives a single flow that starts now with all its bytes to send.
  __attribute__((noinline)) void send_open_groups() {
    for (int index : open_groups_) {
      FlowGroup& g = groups_[index];
      g.end_s = now_ + g.bytes / g.rate;
      g.state = FlowGroup::kSending;
      events_.push(g.end_s, Event{index, g.version, kGroupTxEnd});
    }
    open_groups_.clear();
  }

  // Each member of group `index` becomes the single flow it would have been from its start: its
  // rate still to be given by this batch's solve (an open group), or given, with its own end event.
  __attribute__((noinline)) void split_group(int index) {
    FlowGroup& g = groups_[index];
    const RingPass& r = dag_.rings_[g.ring];
    const bool open = g.state == FlowGroup::kOpen;
    for (int op : g.ops) {
      int src, dst;
      endpoints(r, op, src, dst);
      routes_.find(src, dst);
      const int slot = new_slot();
      routes_.assign(slot);
      Flow& f = flows_[slot];
      f.op = op;
      f.latency_s = g.latency_s;
      f.remaining = g.bytes;
      f.last_s = g.start_s;
      ++f.version;
      marks_[slot].active = true;
      for (int l : routes_[slot]) links_[l].flows.push_back(slot);
      if (open) {
        f.rate = 0.0;
        lone_starts_.push_back({slot, g.rate});
      } else {
        f.rate = g.rate;
        events_.push(g.end_s, Event{slot, f.version, kTxEnd});
      }
    }
    for (int l : g.links) links_[l].group = -1;
    if (open) open_groups_.erase(std::find(open_groups_.begin(), open_groups_.end(), index));
    ++out_.split_groups;
    free_group(index);
  }

  void free_group(int index) {
    FlowGroup& g = groups_[index];
    g.ops.clear();
    g.links.clear();
    ++g.version;
    g.state = FlowGroup::kFree;
    g.closed = false;
    free_groups_.push_back(index);
  }

  // A group's transfers end: its links go idle as each single flow's would.
  __attribute__((noinline)) void end_group(int index) {
    FlowGroup& g = groups_[index];
    double* const busy_s = out_.links.busy_s.data();
    for (int l : g.links) {
      LinkState& ls = links_[l];
      ls.active_flows = 0;
      ls.group = -1;
      busy_s[l] += now_ - ls.busy_since;
    }
    out_.grouped_flows += static_cast<int64_t>(g.ops.size());
    const double t = now_ + g.latency_s;
    g.state = FlowGroup::kLanding;
    if (t <= now_) land_group(index);
    else events_.push(t, Event{index, g.version, kGroupDone});
  }

  // A group's data has arrived: each member's op completes, or the next step of its ring pass gets
  // ready.
  __attribute__((noinline)) void land_group(int index) {
    if (next_ring_step(groups_[index])) {
      groups_[index].state = FlowGroup::kQueued;
      ready_.push_back(-1 - index);
      return;
    }
    for (int op : groups_[index].ops) complete(op);
    free_group(index);
  }

  // A group holding every flow of step k of its ring pass, not the last step, lands as its single
  // flows would: each member's next send then waits for nothing more, so the whole next step gets
  // ready at this instant, in one entry of the ready stack where theirs would stand together. The
  // group turns into that step, with the same links. False for any other group.
  bool next_ring_step(FlowGroup& g) {
    const RingPass& r = dag_.rings_[g.ring];
    const int p = r.size();
    if (static_cast<int>(g.ops.size()) != p) return false;
    const int k = (g.ops[0] - r.first_id) / p;
    const int first = r.first_id + k * p;
    if (k + 1 == r.steps) return false;
    for (int op : g.ops)
      if (op < first || op >= first + p) return false;
    out_.makespan_s = std::max(out_.makespan_s, now_);
    int32_t* done = ring_done_.data() + ring_member_base_[g.ring];
    std::fill(done, done + p, k + 1);
    for (int& op : g.ops) op += p;
    return true;
  }

  // A queued ring step starts as a whole where all its links are idle (each member alone, as
  // single flows would be), else member by member.
  __attribute__((noinline)) void start_ring_step(int index) {
    FlowGroup& g = groups_[index];
    LinkState* const links = links_.data();
    for (int l : g.links)
      if (links[l].active_flows != 0) {
        members_.assign(g.ops.begin(), g.ops.end());
        const int ring = g.ring;
        free_group(index);
        for (int op : members_) start_ring_flow(op, ring);
        return;
      }
    out_.flows += static_cast<int64_t>(g.ops.size());
    for (int l : g.links) occupy(l, index, g.bytes);
    g.start_s = now_;
    g.state = FlowGroup::kOpen;
    g.closed = true;
    open_groups_.push_back(index);
  }

  // A ring flow's source and destination NPUs.
  void endpoints(const RingPass& r, int op, int& src, int& dst) const {
    const int i = (op - r.first_id) % r.size();
    src = r.npus[i];
    dst = r.npus[i + 1 == r.size() ? 0 : i + 1];
  }

  // The flow stays in its links' lists until compact_dirty_links() drops it; its slot is
  // reused only after that. A link it leaves idle holds only ended flows and no rate depends
  // on it: its list is emptied here and it needs no re-solve.
  void end_flow(int slot) {
    Flow& f = flows_[slot];
    for (int l : routes_[slot]) {
      LinkState& ls = links_[l];
      if (--ls.active_flows == 0) {
        out_.links.busy_s[l] += now_ - ls.busy_since;
        ls.flows.clear();
      } else {
        mark_dirty(l);
      }
    }
    marks_[slot].active = false;
    ++f.version;
    ended_slots_.push_back(slot);
    finish_at(f.op, now_ + f.latency_s);
  }

  // Drops ended flows from the dirty links' lists and frees their slots. A flow group sending on a
  // dirty link that other flows came onto in this batch becomes single flows first (before any rate
  // is solved): its flows are the ones a link's list lacks.
  void compact_dirty_links() {
    for (int l : dirty_) {
      LinkState& ls = links_[l];
      std::vector<int>& flows = ls.flows;
      if (flows.size() == static_cast<size_t>(ls.active_flows)) continue;  // none ended, no group on it
      if (ls.group >= 0) {
        if (ls.active_flows == 1) continue;  // the group alone
        split_group(ls.group);
      }
      flows.erase(std::remove_if(flows.begin(), flows.end(), [&](int s) { return !marks_[s].active; }), flows.end());
    }
    free_slots_.insert(free_slots_.end(), ended_slots_.begin(), ended_slots_.end());
    ended_slots_.clear();
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
        if (marks_[s].in_component) continue;
        marks_[s].in_component = true;
        comp_flows_.push_back(s);
        for (int l2 : routes_[s])
          if (!links_[l2].in_component) {
            links_[l2].in_component = true;
            comp_links_.push_back(l2);
            stack_.push_back(l2);
          }
      }
    }
  }

  // Flows start only after a batch's ends and before its solve: a link's flow count peaks here.
  void solve_rates() {
    compact_dirty_links();
    for (int l : dirty_) {
      LinkState& ls = links_[l];
      ls.dirty = false;
      out_.links.peak_flows[l] = std::max(out_.links.peak_flows[l], ls.active_flows);
      if (ls.in_component || ls.flows.empty()) continue;
      if (ls.flows.size() == 1 && (marks_[ls.flows[0]].in_component || lone_flow(ls.flows[0]))) continue;
      comp_flows_.clear();
      comp_links_.clear();
      collect_component(l);
      all_comp_links_.insert(all_comp_links_.end(), comp_links_.begin(), comp_links_.end());
      all_comp_flows_.insert(all_comp_flows_.end(), comp_flows_.begin(), comp_flows_.end());
      if (!comp_flows_.empty()) water_fill();
    }
    dirty_.clear();
    send_open_groups();
    for (const LoneStart& start : lone_starts_)
      if (!marks_[start.slot].in_component) assign_rate(flows_[start.slot], start.slot, start.rate);
    lone_starts_.clear();
    for (int l : all_comp_links_) links_[l].in_component = false;
    for (int s : all_comp_flows_) marks_[s].in_component = false;
    all_comp_links_.clear();
    all_comp_flows_.clear();
  }

  // A flow alone on all its links runs at its slowest link's capacity.
  bool lone_flow(int slot) {
    double rate = std::numeric_limits<double>::infinity();
    for (int l : routes_[slot]) {
      if (links_[l].flows.size() != 1) return false;
      rate = std::min(rate, links_[l].capacity);
    }
    marks_[slot].in_component = true;
    all_comp_flows_.push_back(slot);
    assign_rate(flows_[slot], slot, rate);
    return true;
  }

  void assign_rate(Flow& f, int slot, double rate) {
    f.remaining = std::max(0.0, f.remaining - f.rate * (now_ - f.last_s));
    f.last_s = now_;
    if (rate == f.rate) return;
    f.rate = rate;
    ++f.version;
    events_.push(now_ + f.remaining / rate, Event{slot, f.version, kTxEnd});
  }

  // Max-min fair rates by progressive filling over one connected component.
  void water_fill() {
    for (int l : comp_links_) {
      LinkState& ls = links_[l];
      ls.spare = ls.capacity;
      ls.unfrozen = static_cast<int>(ls.flows.size());
      heap_.push(l, ls.spare / ls.unfrozen);
    }
    for (int s : comp_flows_) marks_[s].frozen = false;
    while (!heap_.empty()) {
      // Every link whose fair share equals the lowest saturates at that level: all leave the heap
      // before any flow is frozen, so their flows get that very share (freezing one link's flows
      // first would re-key the others with rounding in the last bits, and flows of a symmetric
      // pattern would end ulps apart, each end a re-solve of its own).
      const double level = heap_.share_of_top();
      bottlenecks_.clear();
      do bottlenecks_.push_back(heap_.pop());
      while (!heap_.empty() && heap_.share_of_top() == level);
      // At the last level (often the only one: a symmetric pattern ties every link) no link is
      // left to re-key, and the flows' shares need not be taken out of their links.
      const bool last_level = heap_.empty();
      for (int bottleneck : bottlenecks_) {
        const LinkState& b = links_[bottleneck];
        const double share = level > 0.0 ? level : b.capacity * 1e-12;
        for (int s : b.flows) {
          if (marks_[s].frozen) continue;
          marks_[s].frozen = true;
          Flow& f = flows_[s];
          assign_rate(f, s, share);
          if (!last_level)
            for (int l2 : routes_[s]) give_share(l2, share);
        }
      }
    }
  }

  // Takes one frozen flow's share out of link `l`'s spare capacity and re-keys it (a link out of
  // the heap, a bottleneck of this level, only keeps count).
  void give_share(int l, double share) {
    LinkState& ls = links_[l];
    ls.spare -= share;
    --ls.unfrozen;
    if (!heap_.contains(l)) return;
    if (ls.unfrozen == 0) {
      heap_.remove(l);
      return;
    }
    heap_.update(l, std::max(ls.spare, 0.0) / ls.unfrozen);
  }

  const Dag& dag_;
  const std::vector<Op>& ops_;
  std::vector<int32_t>& pending_;
  const bool flow_groups_;  // false: every flow runs single (the reference the groups must match)
  std::vector<int64_t> ring_member_base_;  // per ring pass: its members' first entry in ring_done_
  std::vector<int32_t> ring_done_;         // per ring member: its sends done so far (they end in order)
  SimOutput out_;
  double now_ = 0.0;
  std::vector<Flow> flows_;
  std::vector<FlowMarks> marks_;
  FlowRoutes routes_;
  std::vector<int> free_slots_;
  std::vector<int> ended_slots_;
  std::vector<LinkState> links_;
  Calendar events_;
  std::vector<Event> batch_;
  std::vector<int> ready_;
  std::vector<int> dirty_;
  struct LoneStart {
    int slot;
    double rate;  // its slowest link's capacity
  };
  std::vector<LoneStart> lone_starts_;  // flows started on idle links since the last solve
  std::vector<int> stack_;
  std::vector<int> comp_flows_, comp_links_, all_comp_flows_, all_comp_links_;
  std::vector<int> bottlenecks_;  // water-filling scratch: the links saturating at one level
  ShareHeap heap_;
  std::vector<FlowGroup> groups_;
  std::vector<int> free_groups_;
  std::vector<int> open_groups_;   // formed in this batch: their rate comes at its solve
  std::vector<int> members_;  // scratch: a queued ring step's flows, started one by one
};

}  // namespace

SimOutput simulate(Network& net, const Dag& dag, const std::vector<Op>& ops, std::vector<int32_t>& pending,
                   bool flow_groups) {
  return Simulator(net, dag, ops, pending, false, flow_groups).run();
}

SimOutput simulate(Network& net, Dag& dag, bool record_op_times, bool flow_groups) {
  dag.finalize();
  return Simulator(net, dag, dag.ops_, dag.pending_, record_op_times, flow_groups).run();
}

}  // namespace netsim
