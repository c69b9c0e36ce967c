#include "dimcheck.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

namespace netsim {

namespace {

const std::map<std::string, int>& topology_codes() {
  static const std::map<std::string, int> codes = {
      {"ringuni", kRing}, {"unidirectionalring", kRing},
      {"ring", kRingBidir}, {"ringbidir", kRingBidir}, {"bidirectionalring", kRingBidir},
      {"fullyconnected", kFullyConnected},
      {"switch", kSwitch},
      {"mesh", kMesh1D}, {"mesh1d", kMesh1D},
      {"mesh2d", kMesh2D},
      {"torus2d", kTorus2D},
      {"kingmesh2d", kKingMesh2D}, {"kingmesh", kKingMesh2D},
      {"hypercube", kHyperCube},
      {"fattree", kFatTree}};
  return codes;
}

int checked_int(const Value& v, const std::string& field, int64_t low, int64_t high) {
  if (!v.is_integral() || v.integer < low || v.integer > high)
    throw SpecError(field + ": " + python_repr(v) + " must be an integer in [" + std::to_string(low) + ", " +
                    std::to_string(high) + "]");
  return static_cast<int>(v.integer);
}

double checked_real(const Value& v, const std::string& field, double low, double high, bool low_open) {
  const double x = v.number;
  const bool ok = v.is_real() && std::isfinite(x) && (low_open ? x > low : x >= low) && x <= high;
  if (!ok)
    throw SpecError(field + ": " + python_repr(v) + " must be a finite number in " + (low_open ? "(" : "[") +
                    python_float(low) + ", " + python_float(high) + "]");
  return x;
}

int square_factor(int n) {
  int best = 1;
  for (int d = 1; static_cast<int64_t>(d) * d <= n; ++d)
    if (n % d == 0) best = d;
  return best;
}

bool two_d(int code) { return code == kMesh2D || code == kTorus2D || code == kKingMesh2D; }

Value int_value(int64_t x) {
  Value v;
  v.kind = Value::kInt;
  v.integer = x;
  v.number = static_cast<double>(x);
  return v;
}

int64_t links_per_line(const DimSpec& s) {
  const int64_t n = s.size;
  if (s.topology == kFullyConnected) return n * (n - 1);
  if (s.topology == kHyperCube) {
    int bits = 0;
    for (int64_t m = n; m > 0; m >>= 1) ++bits;
    return n * std::max<int64_t>(1, bits - 1);
  }
  if (s.topology == kFatTree) return 2 * n + 2 * (n / s.npus_per_leaf) * s.spines;
  return 8 * n;
}

}  // namespace

int topology_code(const Value& name, const std::string& field) {
  std::string key;
  for (const char c : name.kind == Value::kString ? name.text : std::string())
    if (c != '_' && c != '-' && c != ' ') key += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto it = topology_codes().find(key);
  if (name.kind != Value::kString || it == topology_codes().end())
    throw SpecError(field + ": " + python_repr(name) + " is not a topology; allowed: ring, ring_uni, fully_connected, "
                    "switch, mesh, mesh2d, torus2d, kingmesh2d, hypercube, fattree");
  return it->second;
}

DimSpec validate_dim(const DimInput& dim, const std::string& field) {
  DimSpec spec;
  spec.topology = topology_code(dim.topology, field + ".topology");
  spec.size = checked_int(dim.size, field + ".size", 1, kMaxNpus);
  spec.bandwidth_Bps = checked_real(dim.bandwidth_gbps, field + ".bandwidth_gbps", 0.0, 1e9, true) * 1e9;
  spec.latency_s = checked_real(dim.latency_s, field + ".latency_s", 0.0, 1e3, false);
  const int size = spec.size;
  if (spec.topology == kFullyConnected && size > kMaxFullyConnected)
    throw SpecError(field + ".size: " + std::to_string(size) + " is too large for fully_connected (at most " +
                    std::to_string(kMaxFullyConnected) + ")");
  if (spec.topology == kHyperCube && (size & (size - 1)))
    throw SpecError(field + ".size: " + std::to_string(size) + " must be a power of two for hypercube");
  if (two_d(spec.topology)) {
    std::vector<Value> shape;
    if (dim.shape.kind == Value::kNone) {
      shape = {int_value(size / square_factor(size)), int_value(square_factor(size))};
    } else if ((dim.shape.kind == Value::kList || dim.shape.kind == Value::kTuple) && dim.shape.items.size() == 2) {
      shape = dim.shape.items;
    } else {
      throw SpecError(field + ".shape: " + python_repr(dim.shape) + " must be two integers (x, y)");
    }
    spec.shape_x = checked_int(shape[0], field + ".shape", 1, kMaxNpus);
    spec.shape_y = checked_int(shape[1], field + ".shape", 1, kMaxNpus);
    if (static_cast<int64_t>(spec.shape_x) * spec.shape_y != size)
      throw SpecError(field + ".shape: " + python_tuple(shape) + " must multiply to size " + std::to_string(size));
  } else if (dim.shape.kind != Value::kNone) {
    throw SpecError(field + ".shape: only mesh2d, torus2d and kingmesh2d take a shape");
  }
  if (spec.topology == kFatTree) {
    const Value per_leaf = dim.npus_per_leaf.kind == Value::kNone ? int_value(square_factor(size)) : dim.npus_per_leaf;
    spec.npus_per_leaf = checked_int(per_leaf, field + ".npus_per_leaf", 1, size);
    if (size % spec.npus_per_leaf)
      throw SpecError(field + ".npus_per_leaf: " + std::to_string(spec.npus_per_leaf) + " must divide size " +
                      std::to_string(size));
    const Value spines = dim.spines.kind == Value::kNone ? int_value(spec.npus_per_leaf) : dim.spines;
    spec.spines = checked_int(spines, field + ".spines", 1, 4096);
    spec.oversubscription = checked_real(dim.oversubscription, field + ".oversubscription", 0.0, 1e3, true);
  }
  return spec;
}

void check_totals(const std::vector<DimSpec>& dims) {
  int64_t npus = 1;
  for (const DimSpec& s : dims) npus = std::min<int64_t>(npus * s.size, int64_t{1} << 40);
  if (npus > kMaxNpus)
    throw SpecError("dims: " + std::to_string(npus) + " NPUs in total is more than the " + std::to_string(kMaxNpus) +
                    " allowed");
  int64_t links = 0;
  for (const DimSpec& s : dims) links += npus / s.size * links_per_line(s);
  if (links > kMaxLinks)
    throw SpecError("dims: " + std::to_string(links) + " links in total is more than the " + std::to_string(kMaxLinks) +
                    " allowed");
}

}  // namespace netsim
