"""Network description: dimensions (innermost first) and link faults, validated before C++ sees them."""
from array import array
from collections import namedtuple
import math
from numbers import Integral, Real

from . import _netsim
from .errors import NetworkSpecError

MAX_NPUS = _netsim.MAX_NPUS


def topology_code(name, field="topology"):
    """Topology name as users write it ('Ring', 'fat_tree', 'Torus2D') -> C++ code."""
    return _spec_error(_netsim.topology_code, name, field)


def _spec_error(function, *args):
    """A compiled check, its ValueError as NetworkSpecError."""
    try:
        return function(*args)
    except ValueError as exc:
        raise NetworkSpecError(str(exc)) from None


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


class Dimension(namedtuple("Dimension", "topology size bandwidth_gbps latency_s shape npus_per_leaf spines "
                                       "oversubscription", defaults=(0.0, None, None, None, 1.0))):
    """One network dimension: `size` NPUs joined by `topology`, every link `bandwidth_gbps` GB/s (1e9 B/s)
    and `latency_s` seconds. 2-D topologies take `shape` (x, y); fattree takes npus_per_leaf, spines and
    oversubscription (leaf uplink capacity = npus_per_leaf * bandwidth / oversubscription). An immutable
    record (a named tuple, not a dataclass: `rapid net` starts without the dataclasses module)."""

    __slots__ = ()

    def validated(self, field):
        """The C++ record of this dimension; raises NetworkSpecError naming `field` (the checks
        are compiled, shared with `rapid net`'s reader of ASTRA-sim files)."""
        return _spec_error(_netsim.dimension_record, self, field)


class SoftFault(namedtuple("SoftFault", "a b factor extra_latency_s", defaults=(0.0,))):
    """A degraded link between nodes `a` and `b` (both directions): bandwidth times `factor`, plus latency."""

    __slots__ = ()


class HardFault(namedtuple("HardFault", "a b")):
    """A removed link between nodes `a` and `b` (both directions)."""

    __slots__ = ()


def dims_arrays(dims):
    """Validated dimensions -> dict of int32 / float64 arrays for the C++ core."""
    if isinstance(dims, (str, bytes)) or not hasattr(dims, "__len__") or len(dims) == 0:
        raise NetworkSpecError(f"dims: {dims!r} must be a non-empty list of Dimension")
    records = []
    for d, dim in enumerate(dims):
        if not isinstance(dim, Dimension):
            raise NetworkSpecError(f"dims[{d}]: {dim!r} must be a Dimension")
        records.append(dim.validated(f"dims[{d}]"))
    _spec_error(_netsim.check_totals, records)
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
