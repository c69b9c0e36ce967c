"""Core's operator graphs as the simulator's replay input: per-rank dependency graphs in
flat arrays, built from blocks (one rank's op sequence with its local dependencies)
that are stamped out per rank, layer and micro-batch with numpy."""
from dataclasses import dataclass

import numpy as np
from astra_backend import ALGORITHMS, NODE_KINDS, Trace

from .network import RankGroups

AXES = ("tp", "cp", "ep", "dp", "pp")
COMPUTE, SEND, RECV = NODE_KINDS["compute"], NODE_KINDS["send"], NODE_KINDS["recv"]


@dataclass(frozen=True)
class Block:
    """A rank-independent sequence of nodes. `deps` holds (waiting node, awaited node) pairs
    as local indices; `entry` nodes wait on whatever precedes the block; `exits` are what
    follows waits on. `label` says what each node's time counts as in a breakdown:
    0 compute, 1 + i the i-th communication class of the replay."""
    kind: np.ndarray
    duration_s: np.ndarray
    bytes_: np.ndarray
    axis: np.ndarray  # index into AXES, -1 for compute
    algorithm: np.ndarray
    label: np.ndarray
    deps: np.ndarray  # shape (k, 2)
    entry: np.ndarray
    exits: np.ndarray

    @property
    def size(self) -> int:
        return self.kind.size

    def repeated(self, times: int) -> "Block":
        """`times` copies in a chain: copy k+1's entries wait on copy k's exits."""
        if times == 1:
            return self
        n = self.size
        offsets = np.arange(times) * n
        deps = [(self.deps[None, :, :] + offsets[:, None, None]).reshape(-1, 2)]
        for k in range(1, times):
            deps.append(np.array([(n * k + e, n * (k - 1) + x) for e in self.entry for x in self.exits]))
        tile = lambda a: np.tile(a, times)
        return Block(tile(self.kind), tile(self.duration_s), tile(self.bytes_), tile(self.axis),
                     tile(self.algorithm), tile(self.label), np.concatenate(deps).astype(np.int64),
                     self.entry.copy(), self.exits + n * (times - 1))


def concat(blocks) -> Block:
    """Blocks one after another, each waiting on the previous one's exits."""
    blocks = [b for b in blocks if b.size]
    parts, deps, offset, exits = [], [], 0, None
    for block in blocks:
        deps.append(block.deps + offset)
        if exits is not None:
            deps.append(np.array([(offset + e, x) for e in block.entry for x in exits]).reshape(-1, 2))
        exits = block.exits + offset
        parts.append(block)
        offset += block.size
    cat = lambda name: np.concatenate([getattr(b, name) for b in parts])
    return Block(cat("kind"), cat("duration_s"), cat("bytes_"), cat("axis"), cat("algorithm"), cat("label"),
                 np.concatenate(deps).astype(np.int64).reshape(-1, 2), parts[0].entry.copy(), exits)


def compute_block(duration_s: float, label: int = 0) -> Block:
    one = lambda v, t: np.array([v], dtype=t)
    return Block(one(COMPUTE, np.int32), one(duration_s, np.float64), one(0.0, np.float64), one(-1, np.int32),
                 one(0, np.int32), one(label, np.int32), np.zeros((0, 2), np.int64), one(0, np.int64),
                 one(0, np.int64))


class CommClasses:
    """Distinct (axis, collective, bytes) communications, each a breakdown label."""

    def __init__(self):
        self.keys = []
        self._index = {}

    def label(self, axis: str, collective: str, bytes_: float) -> int:
        key = (axis, collective, float(bytes_))
        if key not in self._index:
            self._index[key] = len(self.keys)
            self.keys.append(key)
        return 1 + self._index[key]


def ops_block(ops_list, choose_algorithm, classes: CommClasses) -> Block:
    """One rank's run of core ops: a chain, except that a communication with compute to hide
    behind (cover_s > 0) runs beside the compute ops that follow until they add up to its
    cover, and the op after those waits for it too."""
    kind, duration, size, axis, algorithm, label, deps = [], [], [], [], [], [], []
    entry, frontier, beside = [], [], []  # beside: [node, cover still to run]
    for op in ops_list:
        i = len(kind)
        if op.kind == "compute":
            kind.append(COMPUTE)
            duration.append(op.time_s)
            size.append(0.0)
            axis.append(-1)
            algorithm.append(0)
            label.append(0)
        else:
            kind.append(NODE_KINDS[op.collective])
            duration.append(0.0)
            size.append(op.bytes_)
            axis.append(AXES.index(op.axis))
            algorithm.append(ALGORITHMS[choose_algorithm(op.axis, op.collective, op.bytes_)])
            label.append(classes.label(op.axis, op.collective, op.bytes_))
        if frontier:
            deps.extend((i, f) for f in frontier)
        else:
            entry.append(i)
        if op.kind == "comm" and op.cover_s > 0:
            beside.append([i, op.cover_s])
            continue
        joined = []
        if op.kind == "compute":
            for side in beside:
                side[1] -= op.time_s
            joined = [node for node, cover in beside if cover <= 1e-15]
            beside = [side for side in beside if side[1] > 1e-15]
        frontier = [i] + joined
    exits = frontier + [node for node, _ in beside]
    as_array = lambda values, dtype: np.array(values, dtype=dtype)
    return Block(as_array(kind, np.int32), as_array(duration, np.float64), as_array(size, np.float64),
                 as_array(axis, np.int32), as_array(algorithm, np.int32), as_array(label, np.int32),
                 as_array(deps, np.int64).reshape(-1, 2), as_array(entry, np.int64), as_array(exits, np.int64))


class TraceBuilder:
    """Places blocks and point-to-point nodes on ranks and assembles one Trace."""

    def __init__(self, groups: RankGroups):
        self.groups = groups
        self._parts = []  # (rank, block, global offset, external deps for the entries)
        self._extra_deps = []
        self._p2p = []  # (index, rank, kind, peer, bytes, tag, label)
        self.size = 0

    def place(self, rank: int, block: Block, after) -> np.ndarray:
        """Puts `block` on `rank`, its entries waiting on global nodes `after`; returns its
        exits as global indices."""
        offset = self.size
        self._parts.append((rank, block, offset))
        for e in block.entry:
            self._extra_deps.extend((offset + e, a) for a in after)
        self.size += block.size
        return block.exits + offset

    def p2p(self, rank: int, kind: int, peer: int, bytes_: float, tag: int, after, label: int) -> int:
        index = self.size
        self._p2p.append((index, rank, kind, peer, bytes_, tag, label))
        self._extra_deps.extend((index, a) for a in after)
        self.size += 1
        return index

    def build(self) -> tuple:
        """(Trace, rank of each node, breakdown label of each node)."""
        n = self.size
        rank = np.zeros(n, np.int32)
        kind = np.zeros(n, np.int32)
        duration = np.zeros(n)
        size = np.zeros(n)
        group = np.zeros(n, np.int32)
        peer = np.zeros(n, np.int32)
        tag = np.zeros(n, np.int32)
        algorithm = np.zeros(n, np.int32)
        label = np.zeros(n, np.int32)
        deps = [np.array(self._extra_deps, np.int64).reshape(-1, 2)]
        group_of = np.stack([self.groups.of[a] for a in AXES])  # (axes, ranks)
        for r, block, offset in self._parts:
            sl = slice(offset, offset + block.size)
            rank[sl] = r
            kind[sl] = block.kind
            duration[sl] = block.duration_s
            size[sl] = block.bytes_
            algorithm[sl] = block.algorithm
            label[sl] = block.label
            comm = block.axis >= 0
            group[sl][comm] = group_of[block.axis[comm], r]
            deps.append(block.deps + offset)
        for index, r, k, p, b, t, lab in self._p2p:
            rank[index], kind[index], peer[index], size[index], tag[index], label[index] = r, k, p, b, t, lab
        deps = np.concatenate(deps)
        order = np.argsort(deps[:, 0], kind="stable")
        waiting, awaited = deps[order, 0], deps[order, 1]
        dep_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(waiting, minlength=n), out=dep_offsets[1:])
        members = self.groups.members
        group_offsets = np.zeros(len(members) + 1, np.int64)
        np.cumsum([len(m) for m in members], out=group_offsets[1:])
        group_npus = np.fromiter((r for m in members for r in m), np.int32, int(group_offsets[-1]))
        trace = Trace(rank=rank, kind=kind, duration_s=duration, bytes_=size, group=group, peer=peer, tag=tag,
                      algorithm=algorithm, dep_offsets=dep_offsets, deps=awaited.astype(np.int32),
                      group_offsets=group_offsets, group_npus=group_npus)
        return trace, rank, label


def frontier_increments(node_rank: np.ndarray, node_end: np.ndarray, rank: int) -> tuple:
    """Indices of `rank`'s nodes and how much each pushed that rank's finish time out:
    processed by end time, a node adds what it ends past every earlier node."""
    mine = np.flatnonzero(node_rank == rank)
    order = mine[np.argsort(node_end[mine], kind="stable")]
    reach = np.maximum.accumulate(node_end[order])
    increments = np.diff(reach, prepend=0.0)
    return order, increments
