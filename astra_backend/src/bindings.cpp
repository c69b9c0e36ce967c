// Python binding: buffers (numpy or array.array) in, dicts of buffers out; the GIL is released
// while the network is built and simulated.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <vector>

#include "collectives.hpp"
#include "dimcheck.hpp"
#include "engine.hpp"
#include "netcli.hpp"
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
                    double bytes, int root, int chunks, bool hierarchical, bool flow_groups) {
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
    out = simulate(*net, dag, false, flow_groups);
  }
  nb::dict d;
  d["time_s"] = out.makespan_s;
  d["flows"] = out.flows;
  d["grouped_flows"] = out.grouped_flows;
  d["split_groups"] = out.split_groups;
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
                    bool hierarchical, bool flow_groups) {
  const NetSpec spec = make_spec(dims, faults);
  const Trace t = trace_view(arrays, chunks, hierarchical);
  std::unique_ptr<Network> net;
  ReplayOutput out;
  {
    nb::gil_scoped_release release;
    net = spec.build();
    out = replay(*net, t, flow_groups);
  }
  nb::dict d;
  d["time_s"] = out.sim.makespan_s;
  d["flows"] = out.sim.flows;
  d["grouped_flows"] = out.sim.grouped_flows;
  d["split_groups"] = out.sim.split_groups;
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

// A Python object as the validators see it: its kind, number, str() and repr().
Value to_value(nb::handle h) {
  static PyObject* integral = nb::object(nb::module_::import_("numbers").attr("Integral")).release().ptr();
  static PyObject* real = nb::object(nb::module_::import_("numbers").attr("Real")).release().ptr();
  Value v;
  v.repr = nb::repr(h).c_str();
  v.text = nb::str(h).c_str();
  if (h.is_none()) {
    v.kind = Value::kNone;
  } else if (PyBool_Check(h.ptr())) {
    v.kind = Value::kBool;
    v.number = h.ptr() == Py_True ? 1 : 0;
  } else if (PyObject_IsInstance(h.ptr(), integral) == 1) {
    v.kind = Value::kInt;
    nb::object index = nb::steal(PyNumber_Index(h.ptr()));
    if (!index.is_valid()) throw nb::python_error();
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
    const int64_t limit = int64_t{1} << 62;
    v.integer = overflow ? (overflow > 0 ? limit : -limit) : std::max<int64_t>(-limit, std::min<int64_t>(limit, x));
    v.number = static_cast<double>(v.integer);
  } else if (PyObject_IsInstance(h.ptr(), real) == 1) {
    v.kind = Value::kReal;
    v.number = PyFloat_AsDouble(h.ptr());
    if (PyErr_Occurred()) throw nb::python_error();
  } else if (nb::isinstance<nb::str>(h)) {
    v.kind = Value::kString;
  } else if (nb::isinstance<nb::list>(h) || nb::isinstance<nb::tuple>(h)) {
    v.kind = nb::isinstance<nb::list>(h) ? Value::kList : Value::kTuple;
    for (nb::handle item : h) v.items.push_back(to_value(item));
  } else {
    v.kind = Value::kOther;
  }
  return v;
}

nb::object to_python(const Value& v) {
  switch (v.kind) {
    case Value::kNone: return nb::none();
    case Value::kBool: return nb::bool_(v.number != 0);
    case Value::kInt: return nb::int_(v.integer);
    case Value::kReal: return nb::float_(v.number);
    case Value::kString: return nb::str(v.text.c_str(), v.text.size());
    default: {
      nb::list items;
      for (const Value& item : v.items) items.append(to_python(item));
      return std::move(items);
    }
  }
}

nb::dict dim_record(const DimSpec& s) {
  nb::dict d;
  d["topology"] = s.topology;
  d["size"] = s.size;
  d["bandwidth_Bps"] = s.bandwidth_Bps;
  d["latency_s"] = s.latency_s;
  d["shape_x"] = s.shape_x;
  d["shape_y"] = s.shape_y;
  d["npus_per_leaf"] = s.npus_per_leaf;
  d["spines"] = s.spines;
  d["oversubscription"] = s.oversubscription;
  return d;
}

DimSpec from_record(nb::handle r) {
  return DimSpec{nb::cast<int>(r["topology"]), nb::cast<int>(r["size"]), nb::cast<double>(r["bandwidth_Bps"]),
                 nb::cast<double>(r["latency_s"]), nb::cast<int>(r["shape_x"]), nb::cast<int>(r["shape_y"]),
                 nb::cast<int>(r["npus_per_leaf"]), nb::cast<int>(r["spines"]), nb::cast<double>(r["oversubscription"])};
}

// A Dimension (topology, size, bandwidth_gbps, latency_s, shape, npus_per_leaf, spines,
// oversubscription) -> its validated record.
nb::dict dimension_record(nb::handle dim, const std::string& field) {
  DimInput in;
  Value* slots[] = {&in.topology, &in.size, &in.bandwidth_gbps, &in.latency_s, &in.shape, &in.npus_per_leaf,
                    &in.spines, &in.oversubscription};
  for (int k = 0; k < 8; ++k) *slots[k] = to_value(dim[k]);
  return dim_record(validate_dim(in, field));
}

std::vector<DimSpec> from_records(nb::handle records) {
  std::vector<DimSpec> dims;
  for (nb::handle r : records) dims.push_back(from_record(r));
  return dims;
}

std::optional<std::string> optional_text(nb::handle h) {
  if (h.is_none()) return std::nullopt;
  return std::string(nb::str(h).c_str());
}

// `rapid net` from argparse's values; `fallback(path, npus)` loads a network file the C++
// reader leaves to Python (our hardware YAML) as validated records. (status, stdout, stderr).
nb::tuple rapid_net(nb::dict a, nb::callable fallback) {
  NetArgs args;
  args.network = nb::cast<std::string>(a["network"]);
  args.collective = nb::cast<std::string>(a["collective"]);
  args.size = nb::cast<std::string>(a["size"]);
  if (!a["algorithm"].is_none()) args.algorithm = nb::cast<std::string>(a["algorithm"]);
  args.root = nb::cast<std::string>(a["root"]);
  args.chunks = nb::cast<std::string>(a["chunks"]);
  args.top = nb::cast<std::string>(a["top"]);
  args.npus = optional_text(a["npus"]);
  if (!a["group"].is_none()) args.group = nb::cast<std::vector<std::string>>(a["group"]);
  args.faults = nb::cast<std::vector<std::string>>(a["fault"]);
  args.flat = nb::cast<bool>(a["flat"]);
  args.json = nb::cast<bool>(a["json"]);
  const NetworkFallback load = [&](const std::string& path, std::optional<int64_t> npus) {
    try {
      return from_records(fallback(path, npus ? nb::object(nb::int_(*npus)) : nb::none()));
    } catch (nb::python_error& e) {
      if (!e.matches(PyExc_ValueError)) throw;
      throw SpecError(nb::str(e.value()).c_str());
    }
  };
  const NetOutcome outcome = run_net(args, load);
  return nb::make_tuple(outcome.status, outcome.out, outcome.err);
}

nb::list options_table() {
  static const char* const kinds[] = {"value", "list", "append", "flag"};
  nb::list out;
  for (const NetOption& o : net_options())
    out.append(nb::make_tuple(o.flag, kinds[o.kind], o.required, o.metavar ? nb::object(nb::str(o.metavar)) : nb::none(),
                              o.default_value ? nb::object(nb::str(o.default_value)) : nb::none(), o.help));
  return out;
}

}  // namespace

NB_MODULE(_netsim, m) {
  m.doc() = "Compiled flow-level network simulator (use astra_backend's Python API, which validates inputs).";
  nb::exception<NoRouteError>(m, "NoRouteError", PyExc_ValueError);
  m.def("describe", &describe, "Builds a network and returns its links and node counts.");
  // flow_groups=False runs every flow single: the reference the tests hold flow groups to.
  m.def("collective", &collective, nb::arg("dims"), nb::arg("faults"), nb::arg("kind"), nb::arg("algorithm"),
        nb::arg("group"), nb::arg("bytes"), nb::arg("root"), nb::arg("chunks"), nb::arg("hierarchical"),
        nb::arg("flow_groups") = true, "Simulates one collective or send/recv.");
  m.def("replay", &run_replay, nb::arg("dims"), nb::arg("faults"), nb::arg("arrays"), nb::arg("chunks"),
        nb::arg("hierarchical"), nb::arg("flow_groups") = true, "Replays a per-rank dependency graph.");
  nb::class_<Prepared>(m, "PreparedReplay")
      .def(nb::init<const nb::dict&, const nb::dict&, const nb::dict&, int, bool>())
      .def("run", &Prepared::run, nb::arg("faults"), nb::arg("duration_s").none())
      .def("shape", &Prepared::shape);
  m.attr("MAX_NPUS") = kMaxNpus;
  m.attr("MAX_LINKS") = kMaxLinks;
  m.attr("ASTRA_SIM_UNIT_GBPS") = kAstraSimUnitGBps;
  m.def("dimension_record", &dimension_record, "A Dimension's validated record (ValueError naming `field`).");
  m.def("check_totals", [](nb::handle records) { check_totals(from_records(records)); },
        "Raises ValueError when validated dimensions exceed the NPU or link limits.");
  m.def("topology_code", [](nb::handle name, const std::string& field) { return topology_code(to_value(name), field); },
        "A topology name as users write it -> its code (ValueError naming `field`).");
  m.def("astra_sim_dims", [](const std::string& text, const std::string& source) -> nb::object {
          const auto dims = astra_sim_dims(text, source);
          if (!dims) return nb::none();
          nb::list out;
          for (const DimInput& d : *dims)
            out.append(nb::make_tuple(to_python(d.topology), to_python(d.size), d.bandwidth_gbps.number, d.latency_s.number));
          return std::move(out);
        }, "An ASTRA-sim network file's text -> (topology, size, GB/s, s) per dimension; None for other formats.");
  m.def("parse_fault", [](const std::string& text) {
          const FaultOption f = parse_fault(text);
          return nb::make_tuple(f.a, f.b, f.factor);
        }, "--fault SRC-DST:FACTOR -> (a, b, factor).");
  m.def("parse_bytes", &parse_bytes, "'64MiB', '1 GB', '4096' -> bytes (ValueError otherwise).");
  {
    nb::dict units;
    for (const auto& [unit, scale] : byte_units()) units[unit.c_str()] = scale;
    m.attr("BYTE_UNITS") = units;
  }
  m.def("top_links", &top_links, "--top K -> K, an integer >= 0.");
  m.def("cli_faults", [](nb::handle records, const std::vector<std::string>& texts) {
          nb::list out;
          for (const FaultOption& f : checked_faults(from_records(records), texts)) out.append(nb::make_tuple(f.a, f.b, f.factor));
          return out;
        }, "--fault options checked against a network's links -> (a, b, factor) each.");
  m.def("net_options", &options_table, "`rapid net`'s options: (flag, kind, required, metavar, default, help).");
  m.def("rapid_net", &rapid_net, "Runs `rapid net` -> (exit status, stdout, stderr).");
}
