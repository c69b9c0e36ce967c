#include "topology.hpp"

#include <algorithm>
#include <deque>

namespace netsim {

namespace {
uint64_t key(int src, int dst) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(src)) << 32) | static_cast<uint32_t>(dst);
}

int internal_nodes_per_line(const DimSpec& s) {
  if (s.topology == kSwitch) return 1;
  if (s.topology == kFatTree) return s.size / s.npus_per_leaf + s.spines;
  return 0;
}
}  // namespace

Network::Network(const std::vector<DimSpec>& dims) : dims_(dims) {
  for (const DimSpec& s : dims_) {
    strides_.push_back(num_npus_);
    num_npus_ *= s.size;
  }
  num_nodes_ = num_npus_;
  for (const DimSpec& s : dims_) {
    internal_base_.push_back(num_nodes_);
    internal_per_line_.push_back(internal_nodes_per_line(s));
    num_nodes_ += internal_per_line_.back() * (num_npus_ / s.size);
  }
  out_links_.resize(num_nodes_);
  line_first_link_.resize(dims_.size());
  for (int d = 0; d < num_dims(); ++d) {
    const int n = dims_[d].size;
    const int st = strides_[d];
    for (int npu = 0; npu < num_npus_; ++npu) {
      if (coord(npu, d) != 0) continue;
      const int line = (npu % st) + st * (npu / (st * n));
      line_first_link_[d].push_back(static_cast<int>(links_.size()));
      build_line(d, npu, internal_base_[d] + line * internal_per_line_[d]);
    }
  }
  neighbours_.resize(num_nodes_);
  for (int u = 0; u < num_nodes_; ++u) {
    for (int id : out_links_[u]) neighbours_[u].emplace_back(links_[id].dst, id);
    std::sort(neighbours_[u].begin(), neighbours_[u].end());
  }
}

void Network::add_link(int src, int dst, double bw, double lat, int d) {
  out_links_[src].push_back(static_cast<int>(links_.size()));
  links_.push_back(Link{src, dst, bw, lat, false});
  link_dim_.push_back(d);
}

void Network::add_pair(int a, int b, double bw, double lat, int d) {
  add_link(a, b, bw, lat, d);
  add_link(b, a, bw, lat, d);
}

int Network::find_link(int src, int dst) const {
  const auto& out = neighbours_[src];
  auto it = std::lower_bound(out.begin(), out.end(), std::make_pair(dst, -1));
  return it != out.end() && it->first == dst ? it->second : -1;
}

void Network::build_line(int d, int base, int first_internal) {
  const DimSpec& s = dims_[d];
  const int n = s.size;
  const int st = strides_[d];
  const double bw = s.bandwidth_Bps;
  const double lat = s.latency_s;
  auto npu = [&](int k) { return base + k * st; };
  auto pair = [&](int a, int b) { add_pair(npu(a), npu(b), bw, lat, d); };
  const int X = s.shape_x, Y = s.shape_y;
  switch (s.topology) {
    case kRing:
      if (n > 1)
        for (int k = 0; k < n; ++k) add_link(npu(k), npu((k + 1) % n), bw, lat, d);
      break;
    case kRingBidir:
      for (int k = 0; k + 1 < n; ++k) pair(k, k + 1);
      if (n > 2) pair(n - 1, 0);
      break;
    case kFullyConnected:
      for (int a = 0; a < n; ++a)
        for (int b = a + 1; b < n; ++b) pair(a, b);
      break;
    case kSwitch:
      for (int k = 0; k < n; ++k) add_pair(npu(k), first_internal, bw, lat, d);
      break;
    case kMesh1D:
      for (int k = 0; k + 1 < n; ++k) pair(k, k + 1);
      break;
    case kMesh2D:
    case kTorus2D:
    case kKingMesh2D:
      for (int y = 0; y < Y; ++y)
        for (int x = 0; x < X; ++x) {
          const int k = x + X * y;
          if (x + 1 < X) pair(k, k + 1);
          if (y + 1 < Y) pair(k, k + X);
          if (s.topology == kTorus2D) {
            if (x == X - 1 && X > 2) pair(k, y * X);
            if (y == Y - 1 && Y > 2) pair(k, x);
          }
          if (s.topology == kKingMesh2D && x + 1 < X) {
            if (y + 1 < Y) pair(k, k + X + 1);
            if (y > 0) pair(k, k - X + 1);
          }
        }
      break;
    case kHyperCube:
      for (int k = 0; k < n; ++k)
        for (int bit = 1; bit < n; bit <<= 1)
          if (k < (k ^ bit)) pair(k, k ^ bit);
      break;
    case kFatTree: {
      const int leaves = n / s.npus_per_leaf;
      const double up_bw = s.npus_per_leaf * bw / (s.oversubscription * s.spines);
      for (int k = 0; k < n; ++k) add_pair(npu(k), first_internal + k / s.npus_per_leaf, bw, lat, d);
      for (int l = 0; l < leaves; ++l)
        for (int sp = 0; sp < s.spines; ++sp)
          add_pair(first_internal + l, first_internal + leaves + sp, up_bw, lat, d);
      break;
    }
    default:
      throw std::invalid_argument("unknown topology code " + std::to_string(s.topology));
  }
}

void Network::hop(int u, int v, std::vector<int>& out) const {
  const int id = find_link(u, v);
  if (id < 0) throw std::logic_error("internal: missing link " + std::to_string(u) + "->" + std::to_string(v));
  out.push_back(id);
}

void Network::dor_in_line(int d, int base, int a, int b, std::vector<int>& out) const {
  const DimSpec& s = dims_[d];
  const int n = s.size;
  const int st = strides_[d];
  auto npu = [&](int k) { return base + k * st; };
  const int X = s.shape_x;
  switch (s.topology) {
    case kRing: {
      // build_line adds k -> k + 1 as link first + k
      const int first = line_first_link_[d][(base % st) + st * (base / (st * n))];
      for (int k = a; k != b; k = k + 1 == n ? 0 : k + 1) out.push_back(first + k);  // no division a hop
      break;
    }
    case kRingBidir: {
      const int fwd = (b - a + n) % n;
      const int step = fwd <= n - fwd ? 1 : n - 1;
      if (n == 2) {
        hop(npu(a), npu(b), out);
        break;
      }
      // build_line adds k -> k + 1 as link first + 2k and k + 1 -> k as first + 2k + 1 (mod n)
      const int first = line_first_link_[d][(base % st) + st * (base / (st * n))];
      if (step == 1)  // no division a hop
        for (int k = a; k != b; k = k + 1 == n ? 0 : k + 1) out.push_back(first + 2 * k);
      else
        for (int k = a; k != b; k = k == 0 ? n - 1 : k - 1) out.push_back(first + 2 * (k == 0 ? n - 1 : k - 1) + 1);
      break;
    }
    case kFullyConnected:
      hop(npu(a), npu(b), out);
      break;
    case kMesh1D: {
      // build_line adds k -> k + 1 as link first + 2k and k + 1 -> k as first + 2k + 1
      const int first = line_first_link_[d][(base % st) + st * (base / (st * n))];
      for (int k = a; k != b; k += (b > a ? 1 : -1)) out.push_back(b > a ? first + 2 * k : first + 2 * (k - 1) + 1);
      break;
    }
    case kHyperCube:
      for (int k = a, bit = 1; k != b; bit <<= 1)
        if ((k ^ b) & bit) {
          hop(npu(k), npu(k ^ bit), out);
          k ^= bit;
        }
      break;
    case kMesh2D:
    case kTorus2D:
    case kKingMesh2D: {
      const int Y = s.shape_y;
      int x = a % X, y = a / X;
      const int tx = b % X, ty = b / X;
      auto step_toward = [&](int c, int t, int len) {
        if (s.topology != kTorus2D) return c + (t > c ? 1 : -1);
        const int fwd = (t - c + len) % len;
        return fwd <= len - fwd ? (c + 1) % len : (c + len - 1) % len;
      };
      while (x != tx || y != ty) {
        int nx = x, ny = y;
        if (s.topology == kKingMesh2D && x != tx && y != ty) {
          nx = step_toward(x, tx, X);
          ny = step_toward(y, ty, Y);
        } else if (x != tx) {
          nx = step_toward(x, tx, X);
        } else {
          ny = step_toward(y, ty, Y);
        }
        hop(npu(x + X * y), npu(nx + X * ny), out);
        x = nx;
        y = ny;
      }
      break;
    }
    case kSwitch: {
      // build_line adds NPU k's up and down links as links first + 2k and first + 2k + 1.
      const int first = line_first_link_[d][(base % st) + st * (base / (st * n))];
      out.push_back(first + 2 * a);
      out.push_back(first + 2 * b + 1);
      break;
    }
    case kFatTree: {
      const int line = (base % st) + st * (base / (st * n));
      const int first = internal_base_[d] + line * internal_per_line_[d];
      const int leaves = n / s.npus_per_leaf;
      const int la = first + a / s.npus_per_leaf, lb = first + b / s.npus_per_leaf;
      hop(npu(a), la, out);
      if (la != lb) {
        const int spine = first + leaves + b % s.spines;
        hop(la, spine, out);
        hop(spine, lb, out);
      }
      hop(lb, npu(b), out);
      break;
    }
    default:
      throw std::logic_error("internal: unknown topology");
  }
}

void Network::route(int src, int dst, std::vector<int>& out) {
  out.clear();
  if (src == dst) return;
  int cur = src;
  for (int d = 0; d < num_dims(); ++d) {
    const int cd = coord(cur, d), td = coord(dst, d);
    if (cd == td) continue;
    dor_in_line(d, cur - cd * strides_[d], cd, td, out);
    cur += (td - cd) * strides_[d];
  }
  if (!has_hard_faults_) return;
  for (int id : out)
    if (links_[id].failed) {
      shortest_route(src, dst, out);
      return;
    }
}

void Network::shortest_route(int src, int dst, std::vector<int>& out) {
  auto cached = reroutes_.find(key(src, dst));
  if (cached != reroutes_.end()) {
    out = cached->second;
    return;
  }
  std::vector<int> via(num_nodes_, -1);
  std::vector<char> seen(num_nodes_, 0);
  std::deque<int> queue{src};
  seen[src] = 1;
  while (!queue.empty() && !seen[dst]) {
    const int u = queue.front();
    queue.pop_front();
    for (int id : out_links_[u]) {
      const Link& l = links_[id];
      if (l.failed || seen[l.dst]) continue;
      seen[l.dst] = 1;
      via[l.dst] = id;
      queue.push_back(l.dst);
    }
  }
  if (!seen[dst]) {
    std::string cut;
    for (const Link& l : links_)
      if (l.failed && seen[l.src] && !seen[l.dst])
        cut += (cut.empty() ? "" : ", ") + std::to_string(l.src) + "-" + std::to_string(l.dst);
    throw NoRouteError("no route from NPU " + std::to_string(src) + " to NPU " + std::to_string(dst) +
                       ": hard faults cut every path (failed links on the cut: " + cut + ")");
  }
  out.clear();
  for (int v = dst; v != src; v = links_[via[v]].src) out.push_back(via[v]);
  std::reverse(out.begin(), out.end());
  reroutes_[key(src, dst)] = out;
}

std::vector<int> Network::matching_links(int a, int b) const {
  std::vector<int> ids;
  for (int id : {find_link(a, b), find_link(b, a)})
    if (id >= 0) ids.push_back(id);
  if (ids.empty())
    throw std::invalid_argument("no link between node " + std::to_string(a) + " and node " + std::to_string(b));
  return ids;
}

void Network::soft_fault(int a, int b, double factor, double extra_latency_s) {
  for (int id : matching_links(a, b)) {
    links_[id].bandwidth_Bps *= factor;
    links_[id].latency_s += extra_latency_s;
  }
}

void Network::hard_fault(int a, int b) {
  for (int id : matching_links(a, b)) links_[id].failed = true;
  has_hard_faults_ = true;
  reroutes_.clear();
}

}  // namespace netsim
