"""The Python entry point: a validated network on which collectives run and traces replay."""
from array import array
import math
from numbers import Integral, Real

from . import _netsim
from .codes import ALGORITHMS, COLLECTIVES, SEND_RECV
from .errors import CollectiveSpecError, NetworkSpecError, NoRouteError, TraceSpecError
from .results import CollectiveResult, LinkStats, ReplayResult
from .spec import dims_arrays, fault_arrays, link_pairs

MAX_CHUNKS = 1024
MAX_FLOW_ESTIMATE = 1 << 26  # about a gigabyte of ops and edges


def _call(function, error, *args):
    """Runs a C++ entry point, turning its input errors into our exception classes."""
    try:
        return function(*args)
    except _netsim.NoRouteError as exc:
        raise NoRouteError(str(exc)) from None
    except ValueError as exc:
        raise error(str(exc)) from None


def _as_tuple(faults, field):
    if isinstance(faults, (str, bytes)) or not hasattr(faults, "__iter__"):
        raise NetworkSpecError(f"{field}: {faults!r} must be a list of faults")
    return tuple(faults)


def _check_chunks(chunks, error):
    if isinstance(chunks, bool) or not isinstance(chunks, Integral) or not 1 <= chunks <= MAX_CHUNKS:
        raise error(f"chunks: {chunks!r} must be an integer in [1, {MAX_CHUNKS}]")
    return int(chunks)


class Network:
    """An N-dimensional network (NPU id = i0 + n0 * (i1 + n1 * i2 ...), dim 0 innermost) with optional
    soft and hard link faults. Node ids >= num_npus are switches. Immutable; `with_faults` makes variants."""

    def __init__(self, dims, soft_faults=(), hard_faults=()):
        self.dims = tuple(dims) if not isinstance(dims, (str, bytes)) and hasattr(dims, "__iter__") else dims
        self._dims = dims_arrays(self.dims)
        empty = fault_arrays((), (), set(), 1)
        base = _netsim.describe(self._dims, empty)
        self.num_npus = int(base["num_npus"])
        self.num_nodes = int(base["num_nodes"])
        self.soft_faults = _as_tuple(soft_faults, "soft_faults")
        self.hard_faults = _as_tuple(hard_faults, "hard_faults")
        self._pairs = link_pairs(base)
        self._faults = fault_arrays(self.soft_faults, self.hard_faults, self._pairs, self.num_nodes)

    def with_faults(self, soft_faults=(), hard_faults=()):
        """The same dimensions with these faults instead (for Monte Carlo fault sampling)."""
        return Network(self.dims, soft_faults, hard_faults)

    def links(self):
        """Every directed link with its effective bandwidth and latency (no traffic)."""
        return LinkStats.from_dict(_netsim.describe(self._dims, self._faults))

    def collective(self, kind, size_bytes, algorithm="ring", group=None, root=0, chunks=1, hierarchical=True):
        """Simulates one collective of `size_bytes` per rank (NCCL-tests convention) on `group`
        (NPU ids; default all). With hierarchical=True a group spanning several dimensions runs
        dimension by dimension; `chunks` pipelines the message across dimensions."""
        if kind not in COLLECTIVES:
            raise CollectiveSpecError(f"kind: {kind!r} is not a collective; allowed: {', '.join(COLLECTIVES)}")
        if algorithm not in ALGORITHMS:
            raise CollectiveSpecError(f"algorithm: {algorithm!r} is not known; allowed: {', '.join(ALGORITHMS)}")
        size = self._size(size_bytes)
        members = self._group(group)
        if kind == "broadcast" and root not in members:
            raise CollectiveSpecError(f"root: {root!r} must be an NPU of the group")
        chunks = _check_chunks(chunks, CollectiveSpecError)
        if len(members) * len(members) * chunks > MAX_FLOW_ESTIMATE:
            raise CollectiveSpecError(f"group: {len(members)} NPUs x {chunks} chunks is too large to simulate "
                                      f"(group size squared times chunks must stay below {MAX_FLOW_ESTIMATE})")
        out = _call(_netsim.collective, CollectiveSpecError, self._dims, self._faults, COLLECTIVES[kind],
                    ALGORITHMS[algorithm], members, size, int(root), chunks, bool(hierarchical))
        return CollectiveResult(kind, algorithm, size, len(members), out["time_s"], out["flows"],
                                LinkStats.from_dict(out["links"]))

    def send_recv(self, src, dst, size_bytes, chunks=1):
        """Simulates one point-to-point message from NPU `src` to NPU `dst`."""
        members = self._group([src, dst])
        size = self._size(size_bytes)
        chunks = _check_chunks(chunks, CollectiveSpecError)
        out = _call(_netsim.collective, CollectiveSpecError, self._dims, self._faults, SEND_RECV, 0, members, size,
                    0, chunks, False)
        return CollectiveResult("send_recv", "direct", size, 2, out["time_s"], out["flows"],
                                LinkStats.from_dict(out["links"]))

    def replay(self, trace, chunks=1, hierarchical=True):
        """Runs every rank's dependency graph at once on this network (see Trace for the arrays)."""
        import numpy as np

        from .trace import Trace

        if not isinstance(trace, Trace):
            raise TraceSpecError(f"trace: {type(trace).__name__} must be an astra_backend.Trace")
        arrays = trace.arrays(self.num_npus)
        chunks = _check_chunks(chunks, TraceSpecError)
        sizes = np.diff(arrays["group_offsets"])
        collective = arrays["kind"] >= 3
        estimate = int(sizes[arrays["group"][collective]].astype(np.int64).sum()) * chunks if collective.any() else 0
        if estimate > MAX_FLOW_ESTIMATE:
            raise TraceSpecError(f"trace: its collectives need about {estimate} flows, more than the "
                                 f"{MAX_FLOW_ESTIMATE} that fit in memory; use fewer chunks or smaller groups")
        out = _call(_netsim.replay, TraceSpecError, self._dims, self._faults, arrays, chunks, bool(hierarchical))
        return ReplayResult(out["time_s"], np.asarray(out["rank_finish_s"]), np.asarray(out["node_start_s"]),
                            np.asarray(out["node_end_s"]), out["flows"], LinkStats.from_dict(out["links"]))

    def prepare(self, trace, chunks=1, hierarchical=True):
        """`trace` matched into its operation graph once, to be re-run under other faults and
        compute durations without rebuilding it (see PreparedReplay)."""
        from .trace import Trace

        if not isinstance(trace, Trace):
            raise TraceSpecError(f"trace: {type(trace).__name__} must be an astra_backend.Trace")
        arrays = trace.arrays(self.num_npus)
        chunks = _check_chunks(chunks, TraceSpecError)
        native = _call(_netsim.PreparedReplay, TraceSpecError, self._dims, self._faults, arrays, chunks,
                       bool(hierarchical))
        return PreparedReplay(self, native, arrays["kind"].size)

    @staticmethod
    def _size(size_bytes):
        ok = isinstance(size_bytes, Real) and not isinstance(size_bytes, bool)
        if not ok or not math.isfinite(size_bytes) or not 0 <= size_bytes <= 1e18:
            raise CollectiveSpecError(f"size_bytes: {size_bytes!r} must be a finite number of bytes in [0, 1e18]")
        return float(size_bytes)

    def _group(self, group):
        if group is None:
            return array("i", range(self.num_npus))
        try:
            ids = [int(g) for g in group]
        except (TypeError, ValueError):
            raise CollectiveSpecError(f"group: {group!r} must be a list of NPU ids") from None
        if any(isinstance(g, bool) or g != int(g) for g in group):
            raise CollectiveSpecError(f"group: {group!r} must hold integer NPU ids")
        if not ids or any(not 0 <= g < self.num_npus for g in ids):
            raise CollectiveSpecError(f"group: {group!r} must be non-empty NPU ids in 0..{self.num_npus - 1}")
        if len(set(ids)) != len(ids):
            raise CollectiveSpecError(f"group: {group!r} lists an NPU twice")
        return array("i", ids)



class PreparedReplay:
    """One trace on one network's dimensions, matched once. `run` re-simulates it with
    other link faults (the network's own faults are replaced, not added to) and, when
    given, other compute durations (one per trace node; non-compute entries are ignored)."""

    def __init__(self, network, native, num_nodes):
        self.network = network
        self.num_nodes = num_nodes
        self._native = native

    def run(self, soft_faults=(), hard_faults=(), duration_s=None):
        """(makespan seconds, bytes each directed link carried, in `Network.links()` order).
        Raises NoRouteError when hard faults leave a flow's endpoints disconnected."""
        import numpy as np

        faults = fault_arrays(_as_tuple(soft_faults, "soft_faults"), _as_tuple(hard_faults, "hard_faults"),
                              self.network._pairs, self.network.num_nodes)
        if duration_s is not None:
            duration_s = np.ascontiguousarray(duration_s, dtype=np.float64)
            if duration_s.shape != (self.num_nodes,) or not np.all(np.isfinite(duration_s)) or np.any(duration_s < 0):
                raise TraceSpecError(f"duration_s: expected {self.num_nodes} finite non-negative seconds")
        time_s, link_bytes = _call(self._native.run, TraceSpecError, faults, duration_s)
        return float(time_s), np.asarray(link_bytes)

    def shape(self):
        """The matched graph as numbers, flows as their routes (links numbered in order of first
        use, with bandwidth and latency) on the fault-free network: two prepared replays with
        equal shapes, given equal compute durations and no faults on their links, finish alike."""
        import numpy as np

        return np.asarray(self._native.shape())
