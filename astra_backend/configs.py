"""Network files: our hardware YAML (`network:` list of dimensions, innermost first) and
ASTRA-sim's analytical network YAML (`topology`, `npus_count`, `bandwidth` GiB/s, `latency` ns)."""
import json

from . import _netsim
from .errors import NetworkSpecError
from .spec import Dimension, topology_code
from .units import parse_bandwidth, parse_time

_OUR_KEYS = {"name", "topology", "size", "link_bandwidth", "latency", "shape", "npus_per_leaf", "spines",
             "oversubscription", "parallelism", "axes", "efficiency"}
# Keys of the hardware presets that describe NCCL's algorithms rather than links: in-switch
# reduction (NVLS), the LL protocol's bandwidth cap and the pipeline fills. core's closed forms
# cost them; the link-level simulator moves bytes over links and has none, so it reads past them.
_ALGORITHM_KEYS = {"switch_reduction", "ll_bandwidth", "ring_fill_chunks", "all_to_all_fill_chunks",
                   "byte_reduce_fill_chunks"}


def load_network_file(path, npus=None):
    """Reads either network YAML format and returns its list of Dimension; `npus` sizes an
    outermost dimension written `size: auto`. A file that parses as JSON (a subset of YAML) is
    read as JSON, which spares `rapid net` importing the YAML parser; ASTRA-sim's format is read
    and checked by the compiled reader that `rapid net` runs without Python."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise NetworkSpecError(f"network file {path}: cannot be read ({exc.strerror})") from None
    dims = _astra_sim(text, str(path))
    if dims is not None:
        return dims
    try:
        config = json.loads(text)
    except ValueError:
        config = _yaml(text, path)
    return network_from_config(config, str(path), npus)


def _yaml(text, path):
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise NetworkSpecError(f"network file {path}: is not valid YAML ({str(exc).splitlines()[0]})") from None


def network_from_config(config, source="network", npus=None):
    """A parsed YAML mapping (ours or ASTRA-sim's) -> list of Dimension."""
    if isinstance(config, dict) and "network" in config:
        return _ours(config["network"], source, npus)
    return _astra_sim(json.dumps(config, default=str), source)


def _ours(dims, source, npus):
    if not isinstance(dims, list) or not dims:
        raise NetworkSpecError(f"{source}: network: must be a non-empty list of dimensions, innermost first")
    result, inner = [], 1
    for d, entry in enumerate(dims):
        field = f"{source}: network[{d}]"
        if not isinstance(entry, dict):
            raise NetworkSpecError(f"{field}: {entry!r} must be a mapping with topology, size, link_bandwidth, latency")
        unknown = set(entry) - _OUR_KEYS - _ALGORITHM_KEYS
        if unknown:
            raise NetworkSpecError(f"{field}: unknown keys {sorted(unknown)}; allowed: {sorted(_OUR_KEYS | _ALGORITHM_KEYS)}")
        for key in ("topology", "size", "link_bandwidth"):
            if key not in entry:
                raise NetworkSpecError(f"{field}.{key}: missing")
        try:
            bandwidth_gbps = parse_bandwidth(entry["link_bandwidth"]) / 1e9
            latency_s = parse_time(entry.get("latency", 0))
        except ValueError as exc:
            raise NetworkSpecError(f"{field}: {exc}") from None
        efficiency = entry.get("efficiency", 1.0)
        if isinstance(efficiency, bool) or not isinstance(efficiency, (int, float)) or not 0 < efficiency <= 1:
            raise NetworkSpecError(f"{field}.efficiency: {efficiency!r} must be a number in (0, 1]")
        size = sized(entry["size"], npus, inner, d == len(dims) - 1, field)
        inner *= size if isinstance(size, int) else 1
        shape = entry.get("shape")
        result.append(Dimension(entry["topology"], size, bandwidth_gbps * efficiency, latency_s,
                                tuple(shape) if isinstance(shape, list) else shape, entry.get("npus_per_leaf"),
                                entry.get("spines"), entry.get("oversubscription", 1.0)))
        result[-1].validated(field)
    return result


def sized(size, npus, inner, outermost, field):
    """A dimension's size; `auto` (outermost only) takes the NPUs the inner ones leave."""
    if size != "auto":
        return size
    if not outermost:
        raise NetworkSpecError(f"{field}.size: auto is allowed on the outermost dimension only")
    if npus is None:
        raise NetworkSpecError(f"{field}.size: auto needs the NPU count (rapid net --npus N)")
    if npus % inner:
        raise NetworkSpecError(f"{field}.size: auto with {npus} NPUs: not a multiple of the inner {inner}")
    return npus // inner


def _astra_sim(text, source):
    """Dimensions of ASTRA-sim's format read by the compiled reader (which also says when a
    mapping is neither format); None for our format or YAML it leaves to PyYAML."""
    try:
        dims = _netsim.astra_sim_dims(text, source)
    except ValueError as exc:
        raise NetworkSpecError(str(exc)) from None
    return None if dims is None else [Dimension(*dim) for dim in dims]


# Topology codes ASTRA-sim's analytical backends take, with the name they spell them.
_ASTRA_SIM_TOPOLOGIES = {1: "Ring", 2: "FullyConnected", 3: "Switch"}


def astra_sim_network(dims) -> dict:
    """Dimensions -> ASTRA-sim's analytical network mapping (bandwidth GiB/s, latency ns per link).
    Dimensions of one NPU are left out (ASTRA-sim takes sizes above 1; NPU ids do not change);
    raises NetworkSpecError for a topology it does not have."""
    out = {"topology": [], "npus_count": [], "bandwidth": [], "latency": []}
    for d, dim in enumerate(dims):
        if dim.size == 1:
            continue
        code = topology_code(dim.topology, f"dimension {d}: topology")
        if code not in _ASTRA_SIM_TOPOLOGIES:
            raise NetworkSpecError(f"dimension {d}: topology: {dim.topology!r} has no ASTRA-sim analytical "
                                   f"equivalent; allowed: ring, fully_connected, switch")
        out["topology"].append(_ASTRA_SIM_TOPOLOGIES[code])
        out["npus_count"].append(int(dim.size))
        out["bandwidth"].append(float(dim.bandwidth_gbps) / _netsim.ASTRA_SIM_UNIT_GBPS)
        out["latency"].append(float(dim.latency_s) * 1e9)
    return out
