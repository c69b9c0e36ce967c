// Python binding: buffers (numpy or array.array) in, dicts of buffers out; the GIL is released
// while the network is built and simulated.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>

#include <memory>
#include <optional>
#include <vector>

#include "collectives.hpp"
#include "engine.hpp"
#include "replay.hpp"
#include "topology.hpp"

namespace nb = nanobind;
using namespace netsim;

namespace {

template <class T>
using Array = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// A 1-D array owning `values`, handed to Python as a memoryview: the caller wraps it with
// numpy only where it needs numpy, so `rapid net` never imports it.
template <class T>
nb::ndarray<nb::memview, T, nb::ndim<1>> to_buffer(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::memview, T, nb::ndim<1>>(owned->data(), {owned->size()}, owner);
}

template <class T>
std::vector<T> to_vector(const Array<T>& a) {
  return std::vector<T>(a.data(), a.data() + a.shape(0));
}

// A 1-D int32 / float64 array of a dict, copied out of Python's memory.
std::vector<int32_t> int_vector(const nb::dict& d, const char* key) {
  return to_vector(nb::cast<Array<int32_t>>(d[key]));
}

std::vector<double> real_vector(const nb::dict& d, const char* key) {
  return to_vector(nb::cast<Array<double>>(d[key]));
}

// Everything needed to rebuild one faulted network, copied out of Python's buffers.
struct NetSpec {
  std::vector<DimSpec> dims;
  std::vector<int32_t> soft_a, soft_b, hard_a, hard_b;
  std::vector<double> soft_factor, soft_extra_latency_s;

  std::unique_ptr<Network> build() const {
    auto net = std::make_unique<Network>(dims);
    for (size_t i = 0; i < soft_a.size(); ++i)
      net->soft_fault(soft_a[i], soft_b[i], soft_factor[i], soft_extra_latency_s[i]);
    for (size_t i = 0; i < hard_a.size(); ++i) net->hard_fault(hard_a[i], hard_b[i]);
    return net;
  }
};

void read_faults(NetSpec& spec, const nb::dict& faults) {
  spec.soft_a = int_vector(faults, "soft_a");
  spec.soft_b = int_vector(faults, "soft_b");
  spec.soft_factor = real_vector(faults, "soft_factor");
  spec.soft_extra_latency_s = real_vector(faults, "soft_extra_latency_s");
  spec.hard_a = int_vector(faults, "hard_a");
  spec.hard_b = int_vector(faults, "hard_b");
}

NetSpec make_spec(const nb::dict& dims, const nb::dict& faults) {
  const auto topology = int_vector(dims, "topology"), size = int_vector(dims, "size"),
             shape_x = int_vector(dims, "shape_x"), shape_y = int_vector(dims, "shape_y"),
             per_leaf = int_vector(dims, "npus_per_leaf"), spines = int_vector(dims, "spines");
  const auto bw = real_vector(dims, "bandwidth_Bps"), lat = real_vector(dims, "latency_s"),
             over = real_vector(dims, "oversubscription");
  NetSpec spec;
  for (size_t d = 0; d < topology.size(); ++d)
    spec.dims.push_back(DimSpec{topology[d], size[d], bw[d], lat[d], shape_x[d], shape_y[d], per_leaf[d], spines[d],
                                over[d]});
  read_faults(spec, faults);
  return spec;
}

nb::dict link_stats(const Network& net, LinkStats&& stats) {
  std::vector<int32_t> src, dst, dim;
  std::vector<double> bw, lat;
  std::vector<uint8_t> failed;
  for (size_t i = 0; i < net.links().size(); ++i) {
    const Link& l = net.links()[i];
    src.push_back(l.src);
    dst.push_back(l.dst);
    dim.push_back(net.link_dims()[i]);
    bw.push_back(l.bandwidth_Bps);
    lat.push_back(l.latency_s);
    failed.push_back(l.failed);
  }
  nb::dict d;
  d["src"] = to_buffer(std::move(src));
  d["dst"] = to_buffer(std::move(dst));
  d["dim"] = to_buffer(std::move(dim));
  d["bandwidth_Bps"] = to_buffer(std::move(bw));
  d["latency_s"] = to_buffer(std::move(lat));
  d["failed"] = to_buffer(std::move(failed));
  d["bytes"] = to_buffer(std::move(stats.bytes));
  d["busy_s"] = to_buffer(std::move(stats.busy_s));
  d["peak_flows"] = to_buffer(std::move(stats.peak_flows));
  return d;
}

nb::dict describe(const nb::dict& dims, const nb::dict& faults) {
  const NetSpec spec = make_spec(dims, faults);
  std::unique_ptr<Network> net;
  {
    nb::gil_scoped_release release;
    net = spec.build();
  }
  nb::dict d = link_stats(*net, LinkStats{std::vector<double>(net->links().size(), 0.0),
                                          std::vector<double>(net->links().size(), 0.0),
                                          std::vector<int32_t>(net->links().size(), 0)});
  d["num_npus"] = net->num_npus();
  d["num_nodes"] = net->num_nodes();
  return d;
}

nb::dict collective(const nb::dict& dims, const nb::dict& faults, int kind, int algorithm, const Array<int32_t>& group,
                    double bytes, int root, int chunks, bool hierarchical) {
  const NetSpec spec = make_spec(dims, faults);
  CollectiveRequest req{kind, algorithm, to_vector(group), bytes, root, chunks, hierarchical};
  std::unique_ptr<Network> net;
  SimOutput out;
  {
    nb::gil_scoped_release release;
    net = spec.build();
    Dag dag;
    const size_t p = req.group.size();
    dag.reserve(2 * p * p * static_cast<size_t>(chunks) + 4 * p, 6 * p * p * static_cast<size_t>(chunks) + 4 * p);
    emit_collective(dag, *net, req, std::vector<int>(req.group.size(), -1));
    out = simulate(*net, dag, false);
  }
  nb::dict d;
  d["time_s"] = out.makespan_s;
  d["flows"] = out.flows;
  d["links"] = link_stats(*net, std::move(out.links));
  return d;
}

// The arrays of a replay trace, viewed (not copied) as the C++ Trace; `arrays` must outlive it.
Trace trace_view(const nb::dict& arrays, int chunks, bool hierarchical) {
  auto ints = [&](const char* k) { return nb::cast<Array<int32_t>>(arrays[k]).data(); };
  auto reals = [&](const char* k) { return nb::cast<Array<double>>(arrays[k]).data(); };
  auto longs = [&](const char* k) { return nb::cast<Array<int64_t>>(arrays[k]); };
  const auto group_offsets = longs("group_offsets");
  Trace t;
  t.num_nodes = static_cast<int64_t>(nb::cast<Array<int32_t>>(arrays["rank"]).shape(0));
  t.rank = ints("rank");
  t.kind = ints("kind");
  t.duration_s = reals("duration_s");
  t.bytes = reals("bytes");
  t.group = ints("group");
  t.peer = ints("peer");
  t.tag = ints("tag");
  t.algorithm = ints("algorithm");
  t.dep_offsets = longs("dep_offsets").data();
  t.deps = ints("deps");
  t.num_groups = static_cast<int64_t>(group_offsets.shape(0)) - 1;
  t.group_offsets = group_offsets.data();
  t.group_npus = ints("group_npus");
  t.chunks = chunks;
  t.hierarchical = hierarchical;
  return t;
}

nb::dict run_replay(const nb::dict& dims, const nb::dict& faults, const nb::dict& arrays, int chunks,
                    bool hierarchical) {
  const NetSpec spec = make_spec(dims, faults);
  const Trace t = trace_view(arrays, chunks, hierarchical);
  std::unique_ptr<Network> net;
  ReplayOutput out;
  {
    nb::gil_scoped_release release;
    net = spec.build();
    out = replay(*net, t);
  }
  nb::dict d;
  d["time_s"] = out.sim.makespan_s;
  d["flows"] = out.sim.flows;
  d["rank_finish_s"] = to_buffer(std::move(out.rank_finish_s));
  d["node_start_s"] = to_buffer(std::move(out.node_start_s));
  d["node_end_s"] = to_buffer(std::move(out.node_end_s));
  d["links"] = link_stats(*net, std::move(out.sim.links));
  return d;
}

// A replay matched once and re-simulated under other faults and compute durations.
class Prepared {
 public:
  Prepared(const nb::dict& dims, const nb::dict& faults, const nb::dict& arrays, int chunks, bool hierarchical)
 {
    const NetSpec spec = make_spec(dims, faults);
    dims_ = spec.dims;
    const Trace t = trace_view(arrays, chunks, hierarchical);
    nb::gil_scoped_release release;
    replay_ = std::make_unique<PreparedReplay>(*spec.build(), t);
  }

  // (makespan seconds, bytes per link) under `faults`, with compute durations `duration_s`
  // (one per trace node) when given.
  nb::tuple run(const nb::dict& faults, std::optional<Array<double>> duration_s) {
    NetSpec spec;
    spec.dims = dims_;
    read_faults(spec, faults);
    const double* durations = nullptr;
    if (duration_s) {
      if (static_cast<int64_t>(duration_s->shape(0)) != replay_->num_nodes())
        throw std::invalid_argument("duration_s: one entry per trace node is needed");
      durations = duration_s->data();
    }
    SimOutput out;
    {
      nb::gil_scoped_release release;
      out = replay_->run(*spec.build(), durations);
    }
    return nb::make_tuple(out.makespan_s, to_buffer(std::move(out.links.bytes)));
  }

  // See PreparedReplay::shape; on the network without faults.
  nb::ndarray<nb::memview, double, nb::ndim<1>> shape() {
    std::vector<double> out;
    {
      nb::gil_scoped_release release;
      NetSpec spec;
      spec.dims = dims_;
      out = replay_->shape(*spec.build());
    }
    return to_buffer(std::move(out));
  }

 private:
  std::vector<DimSpec> dims_;
  std::unique_ptr<PreparedReplay> replay_;
};

}  // namespace

NB_MODULE(_netsim, m) {
  m.doc() = "Compiled flow-level network simulator (use astra_backend's Python API, which validates inputs).";
  nb::exception<NoRouteError>(m, "NoRouteError", PyExc_ValueError);
  m.def("describe", &describe, "Builds a network and returns its links and node counts.");
  m.def("collective", &collective, "Simulates one collective or send/recv.");
  m.def("replay", &run_replay, "Replays a per-rank dependency graph.");
  nb::class_<Prepared>(m, "PreparedReplay")
      .def(nb::init<const nb::dict&, const nb::dict&, const nb::dict&, int, bool>())
      .def("run", &Prepared::run, nb::arg("faults"), nb::arg("duration_s").none())
      .def("shape", &Prepared::shape);
}
