// The serving engine's iteration loop (core/serving/simulate.py says what it models) and the
// iteration-time memo it reads, compiled: a 1,000-request simulation runs thousands of
// scheduler turns, each a few dozen integer operations, which Python makes the bottleneck.
// The memo keeps one engine's iteration times across simulations; on a miss it calls back
// into Python's operator model. Every float operation happens in the order the Python
// statement it mirrors gives, so the figures are Python's to the last bit.
#include <nanobind/nanobind.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace {

using i64 = int64_t;
using u64 = uint64_t;  // wraps: a fingerprint
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A token count rounded up to a grid within 1/32 of it (counts up to 64 kept), so nearby
// contexts share a memo entry.
i64 bucket(i64 tokens) {
  if (tokens <= 64) return tokens;
  const int bits = 64 - __builtin_clzll(static_cast<uint64_t>(tokens));
  const i64 step = i64(1) << std::max(0, bits - 6);
  return (tokens + step - 1) / step * step;
}

u64 square(i64 x) { return u64(x) * u64(x); }

i64 floor_div(i64 a, i64 b) {  // Python's a // b for b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

struct Mix {  // an iteration's token mix, bucketed
  i64 prefill, past, decodes, context;
  bool graph;
  bool operator==(const Mix& o) const {
    return prefill == o.prefill && past == o.past && decodes == o.decodes && context == o.context &&
           graph == o.graph;
  }
};

constexpr u64 kFnvBasis = 1469598103934665603ull;

u64 fnv(u64 h, i64 v) { return (h ^ u64(v)) * 1099511628211ull; }  // FNV-1a, a word at a time

struct MixHash {
  size_t operator()(const Mix& m) const {
    u64 h = kFnvBasis;
    for (const i64 v : {m.prefill, m.past, m.decodes, m.context, i64(m.graph)}) h = fnv(h, v);
    return h;
  }
};

// Seconds of one engine's iterations by token mix; `time_fn(prefill_tokens, prefill_past,
// decodes, decode_context, graph)` times a mix the memo has not seen.
class IterationMemo {
 public:
  double time_s(i64 prefill, i64 past, i64 decodes, i64 context, bool graph, const nb::callable& time_fn) {
    const Mix key{bucket(prefill), bucket(past), decodes, bucket(context), graph};
    const auto hit = table_.find(key);
    if (hit != table_.end()) return hit->second;
    const double seconds = nb::cast<double>(time_fn(key.prefill, key.past, key.decodes, key.context, key.graph));
    table_.emplace(key, seconds);
    return seconds;
  }
  size_t size() const { return table_.size(); }

 private:
  std::unordered_map<Mix, double, MixHash> table_;
};

struct Engine {
  bool mixed_batches, chunked_prefill, reserve;
  i64 kv_block_tokens, max_num_tokens, max_batch, cuda_graph_max_batch;
  double request_overhead_s;
  bool first_token_with_decode;  // a request's first token reaches the client when its first decode step ends
  // batch waiting: picked prompts are held while decodes run, up to this many iterations in all,
  // until they and the decodes fill this share of max_num_tokens (0 iterations: never held)
  i64 batch_wait_iters;
  double batch_wait_tokens_ratio;
  i64 state_tokens;  // cache tokens' worth of a request's fixed recurrent state (Mamba, linear attention)
};

using Stats = std::tuple<double, double, double, double>;

// Weighted mean, p50, p90, p99 of the values that are not NaN.
Stats stats(const std::vector<double>& values, const std::vector<i64>& weights) {
  std::vector<std::pair<double, i64>> ordered;
  ordered.reserve(values.size());
  i64 total = 0;
  double sum = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) continue;
    ordered.emplace_back(values[i], weights[i]);
    total += weights[i];
    sum += values[i] * static_cast<double>(weights[i]);
  }
  if (!total) return {kNaN, kNaN, kNaN, kNaN};
  std::sort(ordered.begin(), ordered.end());
  const double wanted[3] = {0.5, 0.9, 0.99};
  double out[3];
  size_t found = 0;
  double seen = 0.0;
  for (const auto& [value, weight] : ordered) {
    seen += static_cast<double>(weight);
    while (found < 3 && seen >= wanted[found] * static_cast<double>(total) - 1e-9) out[found++] = value;
  }
  while (found < 3) out[found++] = ordered.back().first;
  return {sum / static_cast<double>(total), out[0], out[1], out[2]};
}

// The scheduler's state at a completion, up to a shift of the decode clock (its cheap part
// is the map key; the running requests' remaining steps are compared on a key match).
struct CycleKey {
  std::vector<i64> prefill_left;
  i64 waiting, kv_used, decodes, finish_offset, unseen, held;
  bool operator==(const CycleKey& o) const {
    return prefill_left == o.prefill_left && waiting == o.waiting && kv_used == o.kv_used && decodes == o.decodes &&
           finish_offset == o.finish_offset && unseen == o.unseen && held == o.held;
  }
};

struct CycleKeyHash {
  size_t operator()(const CycleKey& k) const {
    u64 h = kFnvBasis;
    for (const i64 v : k.prefill_left) h = fnv(h, v);
    for (const i64 v : {k.waiting, k.kv_used, k.decodes, k.finish_offset, k.unseen, k.held}) h = fnv(h, v);
    return h;
  }
};

struct CycleMark {
  std::vector<i64> ends;  // the running requests' ends, sorted
  u64 squares;  // their ends less the clock, squared and summed (modulo 2^64)
  double now, busy, prefill_total, decode_total, iterations;
  i64 clock, issued, records;
};

using Entry = std::pair<i64, i64>;  // (decode clock at which it ends, request)

class Loop {
 public:
  Loop(IterationMemo& memo, const nb::callable& time_fn, const Engine& engine, std::vector<i64> isl,
       std::vector<i64> osl, std::vector<double> arrival, i64 first_wave, i64 warmup, bool closed, bool cyclic,
       bool prefilled, i64 kv_tokens, double return_s)
      : memo_(memo), time_fn_(time_fn), e_(engine), isl_(std::move(isl)), osl_(std::move(osl)),
        arrival_(std::move(arrival)), n_(static_cast<i64>(isl_.size())), first_wave_(first_wave), warmup_(warmup),
        return_s_(return_s),
        closed_(closed), cyclic_(cyclic), prefilled_(prefilled), kv_tokens_(kv_tokens), need_(isl_),
        done_(n_, 0), out_left_(osl_), first_(n_, kNaN), join_(n_, 0), ctx0_(n_, 0), finish_(n_, 0),
        decoding_(n_, false), scheduled_(first_wave) {}

  // The figures; with `samples`, each finished request's TTFT, TPOT and latency and its weight
  // too, which loads simulated apart (uneven shares of one load) are pooled by.
  nb::tuple run(bool samples) {
    while (completed_ < n_) turn();
    nb::tuple figures = nb::make_tuple(stats(ttft_, weight_), stats(tpot_, weight_), stats(latency_, weight_), now_,
                                       busy_, prefill_total_, decode_total_, iterations_, preemptions_);
    if (!samples) return figures;
    return nb::make_tuple(figures, ttft_, tpot_, latency_, weight_);
  }

 private:
  double time_s(i64 prefill, i64 past, i64 decodes, i64 context, bool graph) {
    return memo_.time_s(prefill, past, decodes, context, graph, time_fn_);
  }

  i64 footprint(i64 rid) const {
    const i64 tokens = e_.reserve ? isl_[rid] + osl_[rid] : need_[rid];
    const i64 block = e_.kv_block_tokens;
    return (tokens + block - 1) / block * block + e_.state_tokens;
  }

  void push(Entry entry) {
    heap_.push_back(entry);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
  }

  Entry pop() {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Entry>());
    const Entry top = heap_.back();
    heap_.pop_back();
    return top;
  }

  void join_decodes(i64 rid) {
    finish_[rid] = clock_ + std::max<i64>(0, out_left_[rid]);
    finish_sum_ += finish_[rid];
    finish_squares_ += square(finish_[rid]);
    ends_.insert(std::upper_bound(ends_.begin(), ends_.end(), finish_[rid]), finish_[rid]);
    push({finish_[rid], rid});
    decoding_[rid] = true;
    join_[rid] = clock_;
    ctx0_[rid] = need_[rid];
    order_.push_back(rid);
    decodes_ += 1;
    sum_base_ += ctx0_[rid] - clock_;
  }

  void admit() {
    while (issued_ < scheduled_ && arrival_[issued_] <= now_) waiting_.push_back(issued_++);
    i64 active = static_cast<i64>(prefilling_.size()) + decodes_;
    while (!waiting_.empty() && active < e_.max_batch) {
      const i64 rid = waiting_.front();
      // on demand, a newcomer also leaves every running decode its next token
      const i64 cost = footprint(rid) + (e_.reserve ? 0 : decodes_ + static_cast<i64>(prefilling_.size()) + 1);
      if (kv_used_ + cost > kv_tokens_ && active) break;
      waiting_.pop_front();
      kv_used_ += footprint(rid);
      active += 1;
      if (prefilled_ && std::isnan(first_[rid])) {
        done_[rid] = need_[rid];
        first_[rid] = arrival_[rid];
        out_left_[rid] -= 1;
        join_decodes(rid);
      } else {
        prefilling_.push_back(rid);
      }
    }
  }

  void preempt_newest() {
    i64 victim = order_.back();
    order_.pop_back();
    while (!decoding_[victim]) {
      victim = order_.back();
      order_.pop_back();
    }
    decoding_[victim] = false;
    finish_sum_ -= finish_[victim];
    finish_squares_ -= square(finish_[victim]);
    drop_end(finish_[victim]);
    stale_ += 1;
    decodes_ -= 1;
    sum_base_ -= ctx0_[victim] - join_[victim];
    kv_used_ -= footprint(victim) + (clock_ - join_[victim]);
    // the tokens it made since it joined are kept: it recomputes prompt and output so far, then
    // decodes only what is left (vLLM's recompute)
    out_left_[victim] -= clock_ - join_[victim];
    need_[victim] = isl_[victim] + osl_[victim] - out_left_[victim];
    done_[victim] = 0;
    waiting_.push_front(victim);
    preemptions_ += 1;
  }

  void turn() {
    admit();
    if (prefilling_.empty() && !decodes_) {
      if (issued_ >= scheduled_) throw std::logic_error("serving loop: idle with no request left to arrive");
      now_ = std::max(now_, arrival_[issued_]);  // idle until the next arrival
      return;
    }
    chunks_.clear();
    if (!prefilling_.empty()) {
      i64 budget = e_.max_num_tokens - (e_.mixed_batches ? decodes_ : 0);
      for (const i64 rid : prefilling_) {
        const i64 left = need_[rid] - done_[rid];
        if (budget <= 0 || (!e_.chunked_prefill && left > budget && !chunks_.empty())) break;
        const i64 take = std::min(left, budget);
        chunks_.emplace_back(rid, take);
        budget -= take;
      }
    }
    const i64 hold = held_back();
    const i64 run_decodes = (e_.mixed_batches || chunks_.empty()) ? decodes_ : 0;
    i64 steps = 1;
    if (run_decodes && chunks_.empty()) {
      steps = heap_.front().first - clock_;
      if (hold) steps = std::min(steps, hold);  // the held prompts go when the wait runs out
      if (issued_ < scheduled_) {
        const double step_s =
            time_s(0, 0, decodes_, (sum_base_ + decodes_ * clock_) / decodes_, decodes_ <= e_.cuda_graph_max_batch);
        const i64 until = static_cast<i64>(std::ceil((arrival_[issued_] - now_) / step_s));
        steps = std::min(steps, std::max<i64>(1, until));
      }
      if (!e_.reserve) {
        const i64 room = floor_div(kv_tokens_ - kv_used_, decodes_);
        if (room <= 0) {
          preempt_newest();
          return;
        }
        steps = std::max<i64>(1, std::min(steps, room));
      }
    }
    i64 prefill = 0;
    double seconds, first_step_s;
    if (!chunks_.empty()) {
      for (const auto& chunk : chunks_) prefill += chunk.second;
      const i64 past = done_[chunks_.front().first];
      const i64 context = run_decodes ? (sum_base_ + run_decodes * clock_) / run_decodes : 0;
      seconds = time_s(prefill, past, run_decodes, context, false);
      first_step_s = seconds;
    } else {
      const i64 c0 = (sum_base_ + decodes_ * clock_) / decodes_;
      const bool graph = decodes_ <= e_.cuda_graph_max_batch;
      seconds = time_s(0, 0, decodes_, c0, graph);
      first_step_s = seconds;
      if (steps > 1)  // decode time is linear in context: the mean of the span's ends
        seconds = static_cast<double>(steps) * (seconds + time_s(0, 0, decodes_, c0 + steps - 1, graph)) / 2;
    }
    if (run_decodes) reveal_first(now_ + first_step_s);
    now_ += seconds;
    busy_ += seconds;
    iterations_ += static_cast<double>(steps);
    prefill_total_ += static_cast<double>(prefill);
    held_ += hold ? steps : 0;
    if (run_decodes) {
      clock_ += steps;
      decode_total_ += static_cast<double>(run_decodes * steps);
      if (!e_.reserve) kv_used_ += run_decodes * steps;
    }
    for (const auto& [rid, take] : chunks_) {
      done_[rid] += take;
      if (done_[rid] < need_[rid]) continue;
      prefilling_.erase(std::find(prefilling_.begin(), prefilling_.end(), rid));
      if (std::isnan(first_[rid])) {
        first_[rid] = now_;
        out_left_[rid] -= 1;
        if (e_.first_token_with_decode && out_left_[rid] > 0) unseen_.push_back(rid);
      }
      join_decodes(rid);
    }
    const bool finished = complete();
    if (static_cast<i64>(order_.size()) > 2 * decodes_ + 64) {
      std::vector<i64> kept;
      for (const i64 rid : order_)
        if (decoding_[rid]) kept.push_back(rid);
      order_.swap(kept);
    }
    if (finished && cyclic_ && !stale_ && issued_ >= first_wave_ && completed_ >= warmup_) skip_cycles();
  }

  // Batch waiting (Engine::batch_wait_iters): with decodes running, the prompts picked this turn
  // are held back (chunks_ emptied) while the iterations held so far are fewer than the limit
  // and the picked prompt tokens with one token per decode fall short of the share of
  // max_num_tokens; the iterations the hold may still last, 0 when the prompts go (and the count
  // starts again) or nothing is held.
  i64 held_back() {
    if (chunks_.empty() || !decodes_ || e_.batch_wait_iters <= 0) return 0;
    i64 tokens = decodes_;
    for (const auto& chunk : chunks_) tokens += chunk.second;
    if (held_ < e_.batch_wait_iters &&
        static_cast<double>(tokens) < e_.batch_wait_tokens_ratio * static_cast<double>(e_.max_num_tokens)) {
      chunks_.clear();
      return e_.batch_wait_iters - held_;
    }
    held_ = 0;
    return 0;
  }

  bool complete() {  // the decodes that reached their last token leave; a closed loop sends the next requests
    bool finished = false;
    while (!heap_.empty() && heap_.front().first <= clock_) {
      const auto [end, rid] = pop();
      if (!decoding_[rid] || end != finish_[rid]) {
        stale_ -= 1;  // preempted since it was queued
        continue;
      }
      finish_sum_ -= end;
      finish_squares_ -= square(end);
      drop_end(end);
      decoding_[rid] = false;
      decodes_ -= 1;
      sum_base_ -= ctx0_[rid] - join_[rid];
      kv_used_ -= footprint(rid) + (e_.reserve ? 0 : clock_ - join_[rid]);
      completed_ += 1;
      if (rid >= warmup_) {
        ttft_.push_back(first_[rid] - arrival_[rid] + e_.request_overhead_s);
        latency_.push_back(now_ - arrival_[rid] + e_.request_overhead_s);
        tpot_.push_back(osl_[rid] > 1 ? (now_ - first_[rid]) / static_cast<double>(osl_[rid] - 1) : kNaN);
        weight_.push_back(1);
      }
      finished = true;
      if (closed_ && scheduled_ < n_) {  // the successor arrives return_s later (at once: it waits now)
        arrival_[scheduled_++] = now_ + return_s_;
        if (return_s_ == 0.0) waiting_.push_back(issued_++);
      }
    }
    return finished;
  }

  // An engine whose first token reaches the client only with the second (first_token_with_decode):
  // the requests that made their first token since the last decode step see it when the decode
  // step now running ends at `at_s` (a preempted one at its next).
  void reveal_first(double at_s) {
    size_t kept = 0;
    for (const i64 rid : unseen_) {
      if (decoding_[rid])
        first_[rid] = at_s;
      else
        unseen_[kept++] = rid;
    }
    unseen_.resize(kept);
  }

  void drop_end(i64 end) { ends_.erase(std::lower_bound(ends_.begin(), ends_.end(), end)); }

  // Whether the running requests end as many steps from now as they did at `mark`.
  bool same_offsets(const CycleMark& mark) const {
    if (mark.ends.size() != ends_.size()) return false;
    for (size_t i = 0; i < ends_.size(); ++i)
      if (mark.ends[i] - mark.clock != ends_[i] - clock_) return false;
    return true;
  }

  // A closed loop with fixed lengths settles into a cycle: when the scheduler is where it was
  // some requests ago (up to the clock), the cycles left but one repeat that one.
  void skip_cycles() {
    probe_.prefill_left.clear();
    for (const i64 rid : prefilling_) probe_.prefill_left.push_back(need_[rid] - done_[rid]);
    probe_.waiting = static_cast<i64>(waiting_.size());
    probe_.kv_used = kv_used_;
    probe_.decodes = decodes_;
    probe_.finish_offset = finish_sum_ - decodes_ * clock_;
    probe_.unseen = static_cast<i64>(unseen_.size());
    probe_.held = held_;
    // the sum of the ends' squared offsets tells most states apart before the offsets are compared
    const u64 c = u64(clock_);
    const u64 squares = finish_squares_ - 2 * c * u64(finish_sum_) + u64(decodes_) * c * c;
    const auto [earlier, fresh] = seen_.try_emplace(probe_);
    CycleMark& mark = earlier->second;
    if (fresh || mark.squares != squares || !same_offsets(mark)) {  // (re)mark this state
      mark.ends = ends_;
      mark.squares = squares;
      mark.now = now_, mark.busy = busy_, mark.prefill_total = prefill_total_, mark.decode_total = decode_total_;
      mark.iterations = iterations_, mark.clock = clock_, mark.issued = issued_;
      mark.records = static_cast<i64>(weight_.size());
      return;
    }
    const CycleMark before = std::move(mark);
    seen_.erase(earlier);
    const i64 per_cycle = issued_ - before.issued;
    const i64 repeats = per_cycle ? (n_ - issued_) / per_cycle - 1 : 0;
    if (repeats <= 0) return;
    const double r = static_cast<double>(repeats);
    const double shift_now = r * (now_ - before.now), shift_busy = r * (busy_ - before.busy),
                 shift_prefill = r * (prefill_total_ - before.prefill_total),
                 shift_decode = r * (decode_total_ - before.decode_total),
                 shift_iterations = r * (iterations_ - before.iterations);
    const i64 shift_clock = repeats * (clock_ - before.clock);
    for (size_t w = before.records; w < weight_.size(); ++w) weight_[w] += repeats;
    completed_ += repeats * per_cycle;
    issued_ += repeats * per_cycle;
    scheduled_ += repeats * per_cycle;
    auto shift_times = [&](i64 rid) {
      arrival_[rid] += shift_now;
      first_[rid] += shift_now;
    };
    for (const i64 rid : prefilling_) shift_times(rid);
    for (const i64 rid : waiting_) shift_times(rid);
    for (i64& end : ends_) end += shift_clock;
    for (auto& entry : heap_) {
      shift_times(entry.second);
      entry.first += shift_clock;  // the same shift for all keeps the heap ordered
      join_[entry.second] += shift_clock;
      finish_[entry.second] += shift_clock;
    }
    sum_base_ -= decodes_ * shift_clock;
    finish_squares_ += 2 * u64(shift_clock) * u64(finish_sum_) + u64(decodes_) * square(shift_clock);
    finish_sum_ += decodes_ * shift_clock;
    now_ += shift_now;
    clock_ += shift_clock;
    busy_ += shift_busy;
    prefill_total_ += shift_prefill;
    decode_total_ += shift_decode;
    iterations_ += shift_iterations;
    seen_.clear();
  }

  IterationMemo& memo_;
  const nb::callable& time_fn_;
  const Engine e_;
  const std::vector<i64> isl_, osl_;
  std::vector<double> arrival_;
  const i64 n_, first_wave_, warmup_;
  const double return_s_;  // closed loop: from a request's end to its successor's arrival
  const bool closed_, cyclic_, prefilled_;
  const i64 kv_tokens_;
  std::vector<i64> need_;  // prompt tokens still to compute (more after a preemption)
  std::vector<i64> done_;  // of them computed
  std::vector<i64> out_left_;  // output tokens still to make
  std::vector<double> first_;
  std::vector<i64> join_, ctx0_;  // decode clock when it joined the decodes, and its context then
  std::vector<i64> finish_;  // decode clock at which a decoding request ends
  std::vector<bool> decoding_;
  std::deque<i64> waiting_;
  std::vector<i64> prefilling_;
  std::vector<Entry> heap_;  // a min-heap of ends, stale ones (preempted since) included
  std::vector<i64> ends_;  // the decoding requests' ends, sorted
  std::vector<i64> order_;  // decoding requests by join, newest last (preemption victims)
  std::vector<std::pair<i64, i64>> chunks_;
  std::vector<i64> unseen_;  // requests whose first token the client has not seen yet
  std::vector<double> ttft_, tpot_, latency_;
  std::vector<i64> weight_;
  CycleKey probe_{};  // the state now, its buffer reused
  std::unordered_map<CycleKey, CycleMark, CycleKeyHash> seen_;
  double now_ = 0.0, busy_ = 0.0, prefill_total_ = 0.0, decode_total_ = 0.0, iterations_ = 0.0;
  i64 scheduled_;  // requests whose arrival is known (the first wave's, then each successor's)
  i64 clock_ = 0, issued_ = 0, completed_ = 0, decodes_ = 0;
  i64 sum_base_ = 0;  // sum of decode contexts = sum_base + decodes * clock
  i64 kv_used_ = 0, preemptions_ = 0, stale_ = 0, finish_sum_ = 0;
  i64 held_ = 0;  // iterations the prompts waiting to prefill have been held back (batch waiting)
  u64 finish_squares_ = 0;  // the decodes' ends squared and summed, modulo 2^64
};

nb::tuple simulate(IterationMemo& memo, const nb::callable& time_fn, bool mixed_batches, bool chunked_prefill,
                   bool reserve, i64 kv_block_tokens, i64 max_num_tokens, i64 max_batch, i64 cuda_graph_max_batch,
                   double request_overhead_s, bool first_token_with_decode, std::vector<i64> isl,
                   std::vector<i64> osl, std::vector<double> arrival, i64 first_wave, i64 warmup, bool closed, bool cyclic, bool prefilled, i64 kv_tokens,
                   double return_s, i64 batch_wait_iters, double batch_wait_tokens_ratio, bool samples,
                   i64 state_tokens) {
  if (isl.size() != osl.size() || isl.size() != arrival.size())
    throw std::invalid_argument("serving loop: isl, osl and arrival differ in length");
  const Engine engine{mixed_batches,  chunked_prefill, reserve, kv_block_tokens, max_num_tokens, max_batch,
                      cuda_graph_max_batch, request_overhead_s, first_token_with_decode,
                      batch_wait_iters, batch_wait_tokens_ratio, state_tokens};
  return Loop(memo, time_fn, engine, std::move(isl), std::move(osl), std::move(arrival), first_wave, warmup, closed,
              cyclic && return_s == 0.0, prefilled, kv_tokens, return_s)
      .run(samples);
}

}  // namespace

NB_MODULE(_loop, m) {
  m.doc() = "Compiled iteration loop of a serving engine (use core.serving.simulate).";
  m.def("bucket", &bucket, nb::arg("tokens"));
  m.def("weighted_stats", &stats, nb::arg("values"), nb::arg("weights"),
        "Weighted mean, p50, p90 and p99 of the values that are not NaN.");
  nb::class_<IterationMemo>(m, "IterationMemo")
      .def(nb::init<>())
      .def("time_s", &IterationMemo::time_s, nb::arg("prefill_tokens"), nb::arg("prefill_past"), nb::arg("decodes"),
           nb::arg("decode_context"), nb::arg("graph"), nb::arg("time_fn"))
      .def("__len__", &IterationMemo::size);
  m.def("simulate", &simulate, nb::arg("memo"), nb::arg("time_fn"), nb::arg("mixed_batches"),
        nb::arg("chunked_prefill"), nb::arg("reserve"), nb::arg("kv_block_tokens"), nb::arg("max_num_tokens"),
        nb::arg("max_batch"), nb::arg("cuda_graph_max_batch"), nb::arg("request_overhead_s"),
        nb::arg("first_token_with_decode"), nb::arg("isl"), nb::arg("osl"), nb::arg("arrival"), nb::arg("first_wave"),
        nb::arg("warmup"), nb::arg("closed"), nb::arg("cyclic"), nb::arg("prefilled"), nb::arg("kv_tokens"),
        nb::arg("return_s") = 0.0, nb::arg("batch_wait_iters") = 0, nb::arg("batch_wait_tokens_ratio") = 0.0,
        nb::arg("samples") = false, nb::arg("state_tokens") = 0);
}
