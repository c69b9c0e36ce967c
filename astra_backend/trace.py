"""Replay input: a per-rank dependency graph as flat numpy arrays (node kinds, durations, bytes,
groups, peers, tags, algorithms, and CSR lists of dependencies and group members)."""
from dataclasses import dataclass, field

import numpy as np

from .codes import ALGORITHMS, ALL_REDUCE, BROADCAST, COMPUTE, NODE_KINDS, RECV, SEND  # noqa: F401 (callers read them here too)
from .errors import TraceSpecError


# Each per-node array's dtype as the C++ core takes it (Trace.arrays converts to these).
NODE_DTYPES = {"rank": np.int32, "kind": np.int32, "duration_s": np.float64, "bytes_": np.float64, "group": np.int32,
               "peer": np.int32, "tag": np.int32, "algorithm": np.int32}


def _empty_int():
    return np.zeros(0, dtype=np.int32)


@dataclass
class Trace:
    """Node i runs on NPU `rank[i]`. kind: COMPUTE (takes duration_s[i]), SEND/RECV (peer[i], bytes_[i],
    tag[i]; the k-th send rank->peer with a tag matches the k-th recv there), or a collective on group
    group[i] (bytes_[i] per rank, algorithm[i]; broadcast root = peer[i]); a group's k-th collective on
    every member is one collective. Node i starts once nodes deps[dep_offsets[i]:dep_offsets[i+1]] end.
    Group g is NPUs group_npus[group_offsets[g]:group_offsets[g+1]]. Unused fields may be left zero."""

    rank: np.ndarray
    kind: np.ndarray
    duration_s: np.ndarray | None = None
    bytes_: np.ndarray | None = None
    group: np.ndarray | None = None
    peer: np.ndarray | None = None
    tag: np.ndarray | None = None
    algorithm: np.ndarray | None = None
    dep_offsets: np.ndarray | None = None
    deps: np.ndarray = field(default_factory=_empty_int)
    group_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    group_npus: np.ndarray = field(default_factory=_empty_int)

    def arrays(self, num_npus):
        """Validated, contiguous arrays for the C++ core; raises TraceSpecError."""
        n = _vector(self.rank, "rank", NODE_DTYPES["rank"], None).size
        out = {name: _vector(getattr(self, name), name, NODE_DTYPES[name], n) for name in ("rank", "kind")}
        for name in ("duration_s", "bytes_", "group", "peer", "tag", "algorithm"):  # these may be left None
            value, dtype = getattr(self, name), NODE_DTYPES[name]
            out[name.rstrip("_")] = np.zeros(n, dtype) if value is None else _vector(value, name, dtype, n)
        offsets = np.zeros(n + 1, np.int64) if self.dep_offsets is None else self.dep_offsets
        out["dep_offsets"] = _vector(offsets, "dep_offsets", np.int64, n + 1)
        out["deps"] = _vector(self.deps, "deps", np.int32, None)
        out["group_offsets"] = _vector(self.group_offsets, "group_offsets", np.int64, None)
        out["group_npus"] = _vector(self.group_npus, "group_npus", np.int32, None)
        _check(out, num_npus)
        return out


def _vector(value, name, dtype, length):
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise TraceSpecError(f"{name}: cannot be read as an array ({exc})") from None
    if raw.ndim != 1:
        raise TraceSpecError(f"{name}: must be a 1-D array, got shape {raw.shape}")
    if raw.size and not (np.issubdtype(raw.dtype, np.number) and not np.issubdtype(raw.dtype, np.complexfloating)):
        raise TraceSpecError(f"{name}: must hold numbers, got dtype {raw.dtype}")
    if length is not None and raw.size != length:
        raise TraceSpecError(f"{name}: has {raw.size} entries, expected {length}")
    if raw.size and np.issubdtype(raw.dtype, np.floating) and not np.all(np.isfinite(raw)):
        raise TraceSpecError(f"{name}: must be finite, found {raw[~np.isfinite(raw)][0]!r}")
    if np.issubdtype(dtype, np.integer) and raw.size:
        info = np.iinfo(dtype)
        if np.issubdtype(raw.dtype, np.floating) and np.any(raw != np.round(raw)):
            raise TraceSpecError(f"{name}: must hold integers")
        if raw.min() < info.min or raw.max() > info.max:
            raise TraceSpecError(f"{name}: values must fit in {np.dtype(dtype).name}")
    return np.ascontiguousarray(raw, dtype=dtype)


def _fail_at(name, mask, values, allowed):
    if np.any(mask):
        i = int(np.flatnonzero(mask)[0])
        raise TraceSpecError(f"{name}[{i}]: {values[i].item()!r} is not allowed; {allowed}")


def _check(a, num_npus):
    n = a["rank"].size
    kind, rank = a["kind"], a["rank"]
    _fail_at("rank", (rank < 0) | (rank >= num_npus), rank, f"NPU ids are 0..{num_npus - 1}")
    _fail_at("kind", (kind < 0) | (kind > BROADCAST), kind, f"kinds are {NODE_KINDS}")
    _fail_at("duration_s", a["duration_s"] < 0, a["duration_s"], "durations are >= 0")
    _fail_at("bytes_", (a["bytes"] < 0) | (a["bytes"] > 1e18), a["bytes"], "bytes are in [0, 1e18]")
    p2p = (kind == SEND) | (kind == RECV)
    peer = a["peer"]
    _fail_at("peer", p2p & ((peer < 0) | (peer >= num_npus) | (peer == rank)), peer,
             f"a send/recv peer is another NPU in 0..{num_npus - 1}")
    offs, deps = a["dep_offsets"], a["deps"]
    if offs[0] != 0 or offs[-1] != deps.size or np.any(np.diff(offs) < 0):
        raise TraceSpecError(f"dep_offsets: must start at 0, never decrease and end at len(deps) = {deps.size}")
    _fail_at("deps", (deps < 0) | (deps >= n), deps, f"dependencies are node indices 0..{n - 1}")
    goffs, members = a["group_offsets"], a["group_npus"]
    if goffs.size < 1 or goffs[0] != 0 or goffs[-1] != members.size or np.any(np.diff(goffs) <= 0):
        raise TraceSpecError("group_offsets: must start at 0, strictly increase (no empty group) "
                             f"and end at len(group_npus) = {members.size}")
    _fail_at("group_npus", (members < 0) | (members >= num_npus), members, f"NPU ids are 0..{num_npus - 1}")
    num_groups = goffs.size - 1
    # (group, NPU) pairs as one integer key each: duplicates and membership tested at once
    keys = np.repeat(np.arange(num_groups, dtype=np.int64), np.diff(goffs)) * num_npus + members
    ordered = np.sort(keys)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size:
        g = int(repeated.min() // num_npus)
        raise TraceSpecError(f"group_npus: group {g} lists an NPU twice: {members[goffs[g]:goffs[g + 1]].tolist()}")
    coll = kind >= ALL_REDUCE
    if not np.any(coll):
        return
    group, algo = a["group"], a["algorithm"]
    _fail_at("group", coll & ((group < 0) | (group >= num_groups)), group, f"groups are 0..{num_groups - 1}")
    _fail_at("algorithm", coll & ((algo < 0) | (algo >= len(ALGORITHMS))), algo, f"algorithms are {ALGORITHMS}")
    # Membership over the collective nodes only: a trace's per-node int64 temporaries would
    # stay in the heap through the replay that follows.
    nodes = np.flatnonzero(coll)
    for name, npus, mask, what in (("rank", rank, coll, "NPU"), ("peer", peer, kind == BROADCAST, "broadcast root")):
        checked = nodes[mask[nodes]]
        bad = checked[~np.isin(group[checked].astype(np.int64) * num_npus + npus[checked], keys)]
        if bad.size:
            i = int(bad[0])
            ids = members[goffs[group[i]]:goffs[group[i] + 1]].tolist()
            raise TraceSpecError(f"{name}[{i}]: {what} {int(npus[i])} is not in group {int(group[i])} ({ids})")
