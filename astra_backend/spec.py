"""Network description: dimensions (innermost first) and link faults, validated before C++ sees them."""
from array import array
from collections import namedtuple
import math
from numbers import Integral, Real

from .errors import NetworkSpecError

# Topology names (lower case, without '_', '-' or spaces) -> C++ code.
TOPOLOGY_CODES = {
    "ringuni": 0, "unidirectionalring": 0,
    "ring": 1, "ringbidir": 1, "bidirectionalring": 1,
    "fullyconnected": 2,
    "switch": 3,
    "mesh": 4, "mesh1d": 4,
    "mesh2d": 5,
    "torus2d": 6,
    "kingmesh2d": 7, "kingmesh": 7,
    "hypercube": 8,
    "fattree": 9,
}
_TWO_D = {5, 6, 7}
MAX_NPUS = 1 << 20
MAX_LINKS = 1 << 23
MAX_FULLY_CONNECTED = 1024


def topology_code(name, field="topology"):
    """Topology name as users write it ('Ring', 'fat_tree', 'Torus2D') -> C++ code."""
    code = TOPOLOGY_CODES.get(str(name).lower().replace("_", "").replace("-", "").replace(" ", ""))
    if code is None or isinstance(name, bool):
        allowed = "ring, ring_uni, fully_connected, switch, mesh, mesh2d, torus2d, kingmesh2d, hypercube, fattree"
        raise NetworkSpecError(f"{field}: {name!r} is not a topology; allowed: {allowed}")
    return code


def _int(value, field, low, high):
    if isinstance(value, bool) or not isinstance(value, Integral) or not low <= value <= high:
        raise NetworkSpecError(f"{field}: {value!r} must be an integer in [{low}, {high}]")
    return int(value)


def _real(value, field, low, high, low_open=False):
    ok = isinstance(value, Real) and not isinstance(value, bool)
    ok = ok and math.isfinite(value) and (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        raise NetworkSpecError(f"{field}: {value!r} must be a finite number in {bracket}{low}, {high}]")
    return float(value)


def _square_factor(n):
    """Largest divisor of n not above sqrt(n): the default 2-D shape is (n / it, it)."""
    return max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)


class Dimension(namedtuple("Dimension", "topology size bandwidth_gbps latency_s shape npus_per_leaf spines "
                                       "oversubscription", defaults=(0.0, None, None, None, 1.0))):
    """One network dimension: `size` NPUs joined by `topology`, every link `bandwidth_gbps` GB/s (1e9 B/s)
    and `latency_s` seconds. 2-D topologies take `shape` (x, y); fattree takes npus_per_leaf, spines and
    oversubscription (leaf uplink capacity = npus_per_leaf * bandwidth / oversubscription). An immutable
    record (a named tuple, not a dataclass: `rapid net` starts without the dataclasses module)."""

    __slots__ = ()

    def validated(self, field):
        """The C++ record of this dimension; raises NetworkSpecError naming `field`."""
        code = topology_code(self.topology, f"{field}.topology")
        size = _int(self.size, f"{field}.size", 1, MAX_NPUS)
        bandwidth = _real(self.bandwidth_gbps, f"{field}.bandwidth_gbps", 0.0, 1e9, low_open=True)
        latency = _real(self.latency_s, f"{field}.latency_s", 0.0, 1e3)
        record = {"topology": code, "size": size, "bandwidth_Bps": bandwidth * 1e9, "latency_s": latency,
                  "shape_x": 0, "shape_y": 0, "npus_per_leaf": 0, "spines": 0, "oversubscription": 1.0}
        if code == 2 and size > MAX_FULLY_CONNECTED:
            raise NetworkSpecError(f"{field}.size: {size} is too large for fully_connected (at most {MAX_FULLY_CONNECTED})")
        if code == 8 and size & (size - 1):
            raise NetworkSpecError(f"{field}.size: {size} must be a power of two for hypercube")
        if code in _TWO_D:
            shape = self.shape if self.shape is not None else (size // _square_factor(size), _square_factor(size))
            if not isinstance(shape, (tuple, list)) or len(shape) != 2:
                raise NetworkSpecError(f"{field}.shape: {self.shape!r} must be two integers (x, y)")
            x, y = (_int(v, f"{field}.shape", 1, MAX_NPUS) for v in shape)
            if x * y != size:
                raise NetworkSpecError(f"{field}.shape: {tuple(shape)!r} must multiply to size {size}")
            record.update(shape_x=x, shape_y=y)
        elif self.shape is not None:
            raise NetworkSpecError(f"{field}.shape: only mesh2d, torus2d and kingmesh2d take a shape")
        if code == 9:
            per_leaf = _square_factor(size) if self.npus_per_leaf is None else self.npus_per_leaf
            per_leaf = _int(per_leaf, f"{field}.npus_per_leaf", 1, size)
            if size % per_leaf:
                raise NetworkSpecError(f"{field}.npus_per_leaf: {per_leaf} must divide size {size}")
            spines = _int(per_leaf if self.spines is None else self.spines, f"{field}.spines", 1, 4096)
            over = _real(self.oversubscription, f"{field}.oversubscription", 0.0, 1e3, low_open=True)
            record.update(npus_per_leaf=per_leaf, spines=spines, oversubscription=over)
        return record


class SoftFault(namedtuple("SoftFault", "a b factor extra_latency_s", defaults=(0.0,))):
    """A degraded link between nodes `a` and `b` (both directions): bandwidth times `factor`, plus latency."""

    __slots__ = ()


class HardFault(namedtuple("HardFault", "a b")):
    """A removed link between nodes `a` and `b` (both directions)."""

    __slots__ = ()


def _links_per_line(record):
    """Upper bound on the directed links one line of a dimension adds."""
    n, code = record["size"], record["topology"]
    if code == 2:
        return n * (n - 1)
    if code == 8:
        return n * max(1, n.bit_length() - 1)
    if code == 9:
        return 2 * n + 2 * (n // record["npus_per_leaf"]) * record["spines"]
    return 8 * n


def dims_arrays(dims):
    """Validated dimensions -> dict of int32 / float64 arrays for the C++ core."""
    if isinstance(dims, (str, bytes)) or not hasattr(dims, "__len__") or len(dims) == 0:
        raise NetworkSpecError(f"dims: {dims!r} must be a non-empty list of Dimension")
    records = []
    for d, dim in enumerate(dims):
        if not isinstance(dim, Dimension):
            raise NetworkSpecError(f"dims[{d}]: {dim!r} must be a Dimension")
        records.append(dim.validated(f"dims[{d}]"))
    npus = math.prod(r["size"] for r in records)
    if npus > MAX_NPUS:
        raise NetworkSpecError(f"dims: {npus} NPUs in total is more than the {MAX_NPUS} allowed")
    links = sum(npus // r["size"] * _links_per_line(r) for r in records)
    if links > MAX_LINKS:
        raise NetworkSpecError(f"dims: {links} links in total is more than the {MAX_LINKS} allowed")
    ints = ("topology", "size", "shape_x", "shape_y", "npus_per_leaf", "spines")
    return {k: array("i" if k in ints else "d", [r[k] for r in records]) for k in records[0]}


def link_pairs(links) -> set:
    """(src, dst) of every directed link in a describe()/LinkStats-like mapping."""
    return set(zip(links["src"].tolist(), links["dst"].tolist()))


def fault_arrays(soft, hard, existing, num_nodes):
    """Validated faults -> dict of int32 / float64 arrays; every fault must name a link in `existing`
    (a set of (src, dst) pairs, see link_pairs)."""

    def endpoints(fault, field):
        a = _int(fault.a, f"{field}.a", 0, num_nodes - 1)
        b = _int(fault.b, f"{field}.b", 0, num_nodes - 1)
        if (a, b) not in existing and (b, a) not in existing:
            raise NetworkSpecError(f"{field}: there is no link between node {a} and node {b}")
        return a, b

    arrays = {k: [] for k in ("soft_a", "soft_b", "soft_factor", "soft_extra_latency_s", "hard_a", "hard_b")}
    for i, fault in enumerate(soft):
        if not isinstance(fault, SoftFault):
            raise NetworkSpecError(f"soft_faults[{i}]: {fault!r} must be a SoftFault")
        a, b = endpoints(fault, f"soft_faults[{i}]")
        arrays["soft_a"].append(a)
        arrays["soft_b"].append(b)
        arrays["soft_factor"].append(_real(fault.factor, f"soft_faults[{i}].factor", 0.0, 1.0, low_open=True))
        arrays["soft_extra_latency_s"].append(_real(fault.extra_latency_s, f"soft_faults[{i}].extra_latency_s", 0.0, 1e3))
    for i, fault in enumerate(hard):
        if not isinstance(fault, HardFault):
            raise NetworkSpecError(f"hard_faults[{i}]: {fault!r} must be a HardFault")
        a, b = endpoints(fault, f"hard_faults[{i}]")
        arrays["hard_a"].append(a)
        arrays["hard_b"].append(b)
    return {k: array("d" if "factor" in k or "latency" in k else "i", v) for k, v in arrays.items()}
