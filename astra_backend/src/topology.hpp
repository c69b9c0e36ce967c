// Explicit multi-dimensional network: nodes (NPUs, then switches), directed
// links with their own bandwidth and latency, dimension-order routing, and
// fault-aware rerouting around hard-failed links.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace netsim {

enum Topology : int {
  kRing = 0,          // unidirectional ring
  kRingBidir = 1,     // bidirectional ring
  kFullyConnected = 2,
  kSwitch = 3,
  kMesh1D = 4,
  kMesh2D = 5,
  kTorus2D = 6,
  kKingMesh2D = 7,
  kHyperCube = 8,
  kFatTree = 9        // two levels: leaves and spines
};

// One dimension of the fabric, already validated by the Python layer.
struct DimSpec {
  int topology = kRing;
  int size = 1;
  double bandwidth_Bps = 1.0;   // bytes per second of every NPU-facing link
  double latency_s = 0.0;       // per link
  int shape_x = 0;              // 2-D topologies: size = shape_x * shape_y
  int shape_y = 0;
  int npus_per_leaf = 0;        // fat tree
  int spines = 0;
  double oversubscription = 1.0;
};

struct Link {
  int src = 0;
  int dst = 0;
  double bandwidth_Bps = 0.0;  // after soft faults
  double latency_s = 0.0;      // after soft faults
  bool failed = false;
};

// Raised when hard faults leave no path between two nodes.
struct NoRouteError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Network {
 public:
  explicit Network(const std::vector<DimSpec>& dims);

  int num_npus() const { return num_npus_; }
  int num_nodes() const { return num_nodes_; }
  int num_dims() const { return static_cast<int>(dims_.size()); }
  const DimSpec& dim(int d) const { return dims_[d]; }
  int stride(int d) const { return strides_[d]; }
  int coord(int npu, int d) const { return (npu / strides_[d]) % dims_[d].size; }
  const std::vector<Link>& links() const { return links_; }
  const std::vector<int>& link_dims() const { return link_dim_; }

  // Faults apply to every directed link between a and b (both directions).
  void soft_fault(int a, int b, double factor, double extra_latency_s);
  void hard_fault(int a, int b);

  // Replaces out with the link ids of the route src -> dst.
  void route(int src, int dst, std::vector<int>& out);

 private:
  void add_link(int src, int dst, double bw, double lat, int d);
  void add_pair(int a, int b, double bw, double lat, int d);
  int find_link(int src, int dst) const;
  void build_line(int d, int base, int first_internal);
  void dor_in_line(int d, int base, int from, int to, std::vector<int>& out) const;
  void hop(int u, int v, std::vector<int>& out) const;
  void shortest_route(int src, int dst, std::vector<int>& out);
  std::vector<int> matching_links(int a, int b) const;

  std::vector<DimSpec> dims_;
  std::vector<int> strides_;
  std::vector<int> internal_base_;      // first internal node id of each dimension
  std::vector<int> internal_per_line_;  // internal nodes per line of each dimension
  std::vector<std::vector<int>> line_first_link_;  // per dimension, per line: its first link id
  int num_npus_ = 1;
  int num_nodes_ = 0;
  std::vector<Link> links_;
  std::vector<int> link_dim_;
  std::vector<std::vector<int>> out_links_;
  std::vector<std::vector<std::pair<int, int>>> neighbours_;  // per node: (dst, link id), sorted
  bool has_hard_faults_ = false;
  std::unordered_map<uint64_t, std::vector<int>> reroutes_;
};

}  // namespace netsim
