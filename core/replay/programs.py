"""Core's operator graphs as the simulator's replay input: per-rank dependency graphs in
flat arrays, built from blocks (one rank's op sequence with its local dependencies),
programs (what every rank of a pipeline stage runs) and their stamping onto ranks."""
from dataclasses import dataclass

import numpy as np
from astra_backend import ALGORITHMS, NODE_KINDS, Trace

from .network import RankGroups

AXES = ("tp", "cp", "ep", "dp", "pp", "edp", "etp")
COMPUTE, SEND, RECV = NODE_KINDS["compute"], NODE_KINDS["send"], NODE_KINDS["recv"]


COLUMNS = (("kind", np.int32), ("duration_s", np.float64), ("bytes_", np.float64), ("axis", np.int32),
           ("algorithm", np.int32), ("label", np.int32), ("peer_offset", np.int32), ("tag", np.int32))


@dataclass(frozen=True)
class Block:
    """A rank-independent sequence of nodes, one entry per node in each column: kind,
    duration_s, bytes_, axis (index into AXES, -1 for none), algorithm, label (what the
    node's time counts as: 0 compute, 1 + i the i-th communication class, negative codes
    for the executor's own), peer_offset (send/recv: the peer's rank minus this rank) and
    tag. `deps` holds (waiting node, awaited node) pairs as local indices; `entry` nodes
    wait on whatever precedes the block; `exits` are what follows waits on."""
    columns: dict
    deps: np.ndarray  # shape (k, 2)
    entry: np.ndarray
    exits: np.ndarray

    @property
    def size(self) -> int:
        return self.columns["kind"].size

    def repeated(self, times: int) -> "Block":
        """`times` copies in a chain: copy k+1's entries wait on copy k's exits."""
        if times == 1:
            return self
        n = self.size
        offsets = np.arange(times) * n
        links = np.array([(e, x - n) for e in self.entry for x in self.exits], np.int64).reshape(-1, 2)
        deps = [(self.deps[None, :, :] + offsets[:, None, None]).reshape(-1, 2),
                (links[None, :, :] + offsets[1:, None, None]).reshape(-1, 2)]
        return Block({name: np.tile(column, times) for name, column in self.columns.items()},
                     np.concatenate(deps), self.entry.copy(), self.exits + n * (times - 1))


def _columns(rows: dict) -> dict:
    """Columns from lists (or scalars) of values, missing ones zero."""
    size = len(rows["kind"])
    return {name: np.asarray(rows[name], dtype) if name in rows else np.zeros(size, dtype)
            for name, dtype in COLUMNS}


def concat(blocks) -> Block:
    """Blocks one after another, each waiting on the previous one's exits."""
    blocks = [b for b in blocks if b.size]
    deps, offset, exits = [], 0, None
    for block in blocks:
        deps.append(block.deps + offset)
        if exits is not None:
            deps.append(np.array([(offset + e, x) for e in block.entry for x in exits], np.int64).reshape(-1, 2))
        exits = block.exits + offset
        offset += block.size
    columns = {name: np.concatenate([b.columns[name] for b in blocks]) for name, _ in COLUMNS}
    return Block(columns, np.concatenate(deps).astype(np.int64).reshape(-1, 2), blocks[0].entry.copy(), exits)


def compute_block(duration_s: float, label: int = 0) -> Block:
    columns = _columns({"kind": [COMPUTE], "duration_s": [duration_s], "axis": [-1], "label": [label]})
    zero = np.zeros(1, np.int64)
    return Block(columns, np.zeros((0, 2), np.int64), zero, zero)


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
    cover, and the op after those waits for it too. Two such communications on one group run
    one after the other: a process group issues its collectives on one NCCL stream (ZeRO-3's
    gather of the next layer and scatter of this one's gradients do not share the wire)."""
    rows = {"kind": [], "duration_s": [], "bytes_": [], "axis": [], "algorithm": [], "label": []}
    deps, entry, frontier, beside = [], [], [], []  # beside: [node, cover still to run]
    running = {}  # axis -> the communication running beside the chain on that group
    for op in ops_list:
        i = len(rows["kind"])
        if op.kind == "compute":
            values = (COMPUTE, op.time_s, 0.0, -1, 0, 0)
        else:
            values = (NODE_KINDS[op.collective], 0.0, op.bytes_, AXES.index(op.axis),
                      ALGORITHMS[choose_algorithm(op.axis, op.collective, op.bytes_)],
                      classes.label(op.axis, op.collective, op.bytes_))
        for column, value in zip(rows.values(), values):
            column.append(value)
        if frontier:
            deps.extend((i, f) for f in frontier)
        else:
            entry.append(i)
        if op.kind == "comm" and op.cover_s > 0:
            if op.axis in running:
                deps.append((i, running[op.axis]))
            running[op.axis] = i
            beside.append([i, op.cover_s])
            continue
        joined = []
        if op.kind == "compute":
            for side in beside:
                side[1] -= op.time_s
            joined = [node for node, cover in beside if cover <= 1e-15]
            beside = [side for side in beside if side[1] > 1e-15]
        if joined:
            running = {axis: node for axis, node in running.items() if node not in joined}
        frontier = [i] + joined
    exits = frontier + [node for node, _ in beside]
    return Block(_columns(rows), np.array(deps, np.int64).reshape(-1, 2), np.array(entry, np.int64),
                 np.array(exits, np.int64))


class Program:
    """One rank's program, built once for every rank that runs the same one: blocks and
    point-to-point nodes (peers as rank offsets) in the order they are placed."""

    def __init__(self):
        self._parts = []  # Blocks, and runs of point-to-point rows
        self._deps = []
        self.size = 0

    def place(self, block: Block, after) -> np.ndarray:
        """Appends `block`, its entries waiting on local nodes `after`; returns its exits."""
        offset = self.size
        self._parts.append(block)
        self._deps.append(block.deps + offset)
        if len(after):
            self._deps.append(np.array([(offset + e, a) for e in block.entry for a in after], np.int64))
        self.size += block.size
        return block.exits + offset

    def p2p(self, kind: int, peer_offset: int, bytes_: float, tag: int, after, label: int) -> int:
        index = self.size
        if not self._parts or isinstance(self._parts[-1], Block):
            self._parts.append([])
        self._parts[-1].append((kind, bytes_, label, peer_offset, tag))
        self._deps.append(np.array([(index, a) for a in after], np.int64).reshape(-1, 2))
        self.size += 1
        return index

    def block(self) -> Block:
        parts = []
        for part in self._parts:
            if isinstance(part, Block):
                parts.append(part.columns)
            else:
                kind, size, label, peer, tag = zip(*part)
                parts.append(_columns({"kind": kind, "bytes_": size, "label": label, "axis": [-1] * len(kind),
                                       "peer_offset": peer, "tag": tag}))
        columns = {name: np.concatenate([p[name] for p in parts]) for name, _ in COLUMNS}
        deps = np.concatenate(self._deps) if self._deps else np.zeros((0, 2), np.int64)
        empty = np.zeros(0, np.int64)
        return Block(columns, deps.reshape(-1, 2), empty, empty)


def assemble(groups: RankGroups, programs) -> tuple:
    """One Trace from (ranks, Block) pairs, each block stamped out on each of its ranks.
    Returns (trace, rank of each node, label of each node, first node of each (pair, rank)).
    Every array is allocated once at its final size and filled block by block, in the dtype
    the simulator reads: the trace is the replay's largest object (1.8 M nodes for a 70B
    model on 64 GPUs), and growing lists of copies would double its peak."""
    group_of = np.stack([groups.of[a] for a in AXES])  # (axes, ranks)
    programs = [(np.asarray(ranks, np.int64), block) for ranks, block in programs]
    nodes = sum(ranks.size * block.size for ranks, block in programs)
    edges = sum(ranks.size * len(block.deps) for ranks, block in programs)
    kept = ("kind", "duration_s", "bytes_", "algorithm", "label", "tag")
    cat = {name: np.empty(nodes, dtype) for name, dtype in COLUMNS if name in kept}
    rank, group, peer = np.empty(nodes, np.int32), np.zeros(nodes, np.int32), np.zeros(nodes, np.int32)
    dep_offsets, awaited = np.zeros(nodes + 1, np.int64), np.empty(edges, np.int32)
    starts, offset, edge = [], 0, 0
    for ranks, block in programs:
        n, k, copies = block.size, len(block.deps), ranks.size
        first = offset + np.arange(copies) * n
        starts.append(first)
        window = slice(offset, offset + n * copies)

        def stamp(out):  # `out`'s window as one row per rank
            return out[window].reshape(copies, n)
        for name in kept:
            stamp(cat[name])[:] = block.columns[name]
        stamp(rank)[:] = ranks[:, None]
        comm = np.flatnonzero(block.columns["axis"] >= 0)
        stamp(group)[:, comm] = group_of[block.columns["axis"][comm]][:, ranks].T
        p2p = np.flatnonzero((block.columns["kind"] == SEND) | (block.columns["kind"] == RECV))
        stamp(peer)[:, p2p] = ranks[:, None] + block.columns["peer_offset"][p2p]
        # Dependencies by waiting node (stable), as CSR: one rank's are its block's, shifted.
        order = np.argsort(block.deps[:, 0], kind="stable")
        awaited[edge:edge + k * copies].reshape(copies, k)[:] = block.deps[order, 1] + first[:, None]
        stamp(dep_offsets[1:])[:] = np.bincount(block.deps[:, 0], minlength=n)
        offset += n * copies
        edge += k * copies
    np.cumsum(dep_offsets, out=dep_offsets)
    members = groups.members
    group_offsets = np.zeros(len(members) + 1, np.int64)
    np.cumsum([len(m) for m in members], out=group_offsets[1:])
    group_npus = np.fromiter((r for m in members for r in m), np.int32, int(group_offsets[-1]))
    trace = Trace(rank=rank, kind=cat["kind"], duration_s=cat["duration_s"], bytes_=cat["bytes_"], group=group,
                  peer=peer, tag=cat["tag"], algorithm=cat["algorithm"], dep_offsets=dep_offsets, deps=awaited,
                  group_offsets=group_offsets, group_npus=group_npus)
    return trace, rank, cat["label"], starts


def frontier_increments(node_rank: np.ndarray, node_end: np.ndarray, rank: int, node_start: np.ndarray = None,
                        compute: np.ndarray = None) -> tuple:
    """Indices of `rank`'s nodes (by end time) and the seconds of that rank's time, from 0 to
    its finish, charged to each: the frontier rule charges a node with what it ends past every
    earlier node. Given each node's start and which nodes compute (`compute`, a mask), time
    during which a compute node of the rank runs is charged to it instead, whatever ends
    first beside it, so that communication counts only where nothing computes (exposed, as
    the closed forms count it). The increments sum to the rank's finish either way."""
    mine = np.flatnonzero(node_rank == rank)
    order = mine[np.argsort(node_end[mine], kind="stable")]
    reach = np.maximum.accumulate(node_end[order])
    increments = np.diff(reach, prepend=0.0)
    if compute is None or not compute[order].any():
        return order, increments
    busy = np.flatnonzero(compute[order])  # positions in `order`
    begin, end = node_start[order[busy]], node_end[order[busy]]
    by_start = np.argsort(begin, kind="stable")
    begin, end, busy = begin[by_start], end[by_start], busy[by_start]
    # Elementary spans between consecutive event times on [0, finish]; each one belongs to a
    # compute node running through it if there is one, else to its frontier owner.
    finish = reach[-1]
    events = np.unique(np.clip(np.concatenate(([0.0], begin, end, reach)), 0.0, finish))
    length = np.diff(events)
    middle = events[:-1] + length / 2
    owner = np.minimum(np.searchsorted(reach, middle, side="left"), reach.size - 1)
    latest = np.searchsorted(begin, middle, side="right") - 1  # last compute node started
    reach_c = np.maximum.accumulate(end)  # compute nodes may overlap: the one reaching furthest
    holder = np.maximum.accumulate(np.where(end >= reach_c, np.arange(end.size), 0))
    started = latest >= 0
    pick = np.where(started, latest, 0)
    covered = started & (reach_c[pick] > middle)
    owner = np.where(covered, busy[holder[pick]], owner)
    return order, np.bincount(owner, weights=length, minlength=order.size)
