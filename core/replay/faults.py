"""One training configuration replayed again and again under link faults and stragglers.

The replay programs (per-stage layer passes and the pipeline for astra-hierarchical, the
whole pipeline for astra-flattened) are built and matched once; a sample only changes link
bandwidths (soft faults), removes links (hard faults) or slows some GPUs' compute, and
re-simulates just the programs whose links or ranks it touches."""
from dataclasses import dataclass

import numpy as np
from astra_backend import NODE_KINDS, HardFault, NoRouteError, SoftFault, Trace

from .steps import (EDGE, OPTIMIZER, STAGE_BWD, STAGE_FWD, flattened_work, hierarchical_work, layer_trace,
                    pipeline_trace, train_replay)
from core.errors import SpecError
from .programs import COMPUTE, RECV, SEND, CommClasses
from core.model.specs import TrainWorkload


class Unroutable(Exception):
    """Failed links leave two GPUs that must exchange data with no path between them."""


@dataclass(frozen=True)
class Link:
    """An undirected network link between nodes a < b (NPUs, then switches) in dimension `dim`."""
    a: int
    b: int
    dim: str

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


def undirected(stats) -> list:
    """(a, b) with a < b for each directed link of a LinkStats, in its order."""
    return [(min(a, b), max(a, b)) for a, b in zip(stats.src.tolist(), stats.dst.tolist())]


class _Program:
    """One prepared replay, its fault-free time, the link pairs it loads and its compute nodes."""

    def __init__(self, network, trace, node_rank, base_faults, pairs):
        self.prepared = network.prepare(trace)
        self.base_faults = base_faults
        self.duration_s = np.asarray(trace.duration_s, np.float64)
        self.node_rank = node_rank
        self.compute = np.asarray(trace.kind) == COMPUTE
        self.ranks = frozenset(np.unique(node_rank).tolist())
        self.time_s, link_bytes = self.prepared.run(*base_faults)
        self.loaded = frozenset(pairs[i] for i in np.flatnonzero(link_bytes > 0))

    def run(self, soft, hard, duration_s=None) -> float:
        return self.prepared.run(self.base_faults[0] + soft, self.base_faults[1] + hard, duration_s)[0]

    def answer(self, soft, hard, touched: set, speed: np.ndarray, slow: set) -> float:
        """The time under these faults: the baseline's when they touch none of its links or ranks."""
        if slow & self.ranks:
            return self.run(soft, hard, self.straggling(speed))
        return self.run(soft, hard) if touched & self.loaded else self.time_s

    def straggling(self, speed: np.ndarray):
        """Compute durations with each rank's compute slowed to `speed[rank]` of nominal."""
        return np.where(self.compute, self.duration_s / speed[self.node_rank], self.duration_s)


class FaultReplay:
    """Build once with a training configuration on an astra backend; then `run` answers a
    sample: `link_factors` {(a, b): bandwidth factor, 0 = failed} and `straggler_factors`
    {rank: compute speed as a fraction of nominal}. Raises Unroutable when failed links
    disconnect two GPUs that must talk."""

    def __init__(self, model, hw, par, work, gpus: int, backend: str):
        if not isinstance(work, TrainWorkload):
            raise SpecError("", "workload", work.mode, "fault sampling replays training steps only")
        if backend not in ("astra-hierarchical", "astra-flattened"):
            raise SpecError("", "backend", backend, "fault sampling needs astra-hierarchical or astra-flattened")
        self.step = step = train_replay(model, hw, par, work, gpus)
        self.gpus, self.hierarchical = gpus, backend == "astra-hierarchical"
        network = step.ctx.network
        stats = network.links()
        dims = step.ctx.dims
        pairs = undirected(stats)
        names = {pair: dims[d].name for pair, d in zip(pairs, stats.dim.tolist())}
        self.links = tuple(Link(a, b, names[(a, b)]) for a, b in sorted(names))
        base = (network.soft_faults, network.hard_faults)
        self.layers = []  # per stage, per layer kind: (forward program, backward program)
        if self.hierarchical:
            for stage in range(par.pp):
                self.layers.append({spec: tuple(_Program(network, *layer_trace(step.ctx, ops, stage)[:2], base, pairs)
                                                for ops in pair) for spec, pair in step.passes.items()})
            self.pass_s = [{spec: (f.time_s, b.time_s) for spec, (f, b) in kinds.items()} for kinds in self.layers]
            work_ = self._stage_work(self.pass_s)
        else:
            work_ = flattened_work(step, CommClasses())
        trace, node_rank, label = pipeline_trace(step.ctx, work_, step.micro, step.message_bytes, CommClasses())
        self.pipeline = _Program(network, trace, node_rank, base, pairs)
        stage = step.ctx.groups.coords["pp"][node_rank]
        # pipeline compute nodes rebuilt per sample: (nodes, their stage, their rank) per kind
        self.passes = {code: (nodes, stage[nodes], node_rank[nodes])
                       for code in (STAGE_FWD, STAGE_BWD, OPTIMIZER, EDGE) for nodes in [np.flatnonzero(label == code)]}
        self.slices = _independent_slices(network, trace, node_rank, base, pairs, self.pipeline.time_s)
        self.classes = _alike(self.slices, (label, stage, self.pipeline.duration_s)) if not any(base) else None
        self.loaded = frozenset().union(self.pipeline.loaded, *(p.loaded for kinds in self.layers
                                                                for pair in kinds.values() for p in pair))
        self.baseline_s = self.pipeline.time_s

    def run(self, link_factors: dict, straggler_factors: dict) -> float:
        """Step seconds under these faults and stragglers."""
        try:
            return self._run(link_factors, straggler_factors)
        except NoRouteError as err:
            raise Unroutable(str(err)) from None

    def _run(self, link_factors: dict, straggler_factors: dict) -> float:
        soft = tuple(SoftFault(a, b, f) for (a, b), f in link_factors.items() if f > 0)
        hard = tuple(HardFault(a, b) for (a, b), f in link_factors.items() if f == 0)
        touched = set(link_factors)
        speed = np.ones(self.gpus)
        for rank, factor in straggler_factors.items():
            speed[rank] = factor
        slow = set(straggler_factors)
        if not self.hierarchical:
            if slow or hard or not self.slices:
                return self.pipeline.run(soft, hard, self.pipeline.straggling(speed) if slow else None)
            return max(piece.answer(soft, hard, touched, speed, slow) for piece in self.slices)
        changed = {}
        for stage, kinds in enumerate(self.layers):
            for spec, programs in kinds.items():
                times = tuple(p.answer(soft, hard, touched, speed, slow) for p in programs)
                if times != (programs[0].time_s, programs[1].time_s):
                    changed.setdefault(stage, {})[spec] = times
        if not changed and not slow and not touched & self.pipeline.loaded:
            return self.pipeline.time_s
        if not changed and not slow and not hard and self.slices:
            return max(piece.answer(soft, hard, touched, speed, slow) for piece in self.slices)
        if not slow and not hard and self.classes:
            return self._by_class(soft, touched, self._pipeline_durations(changed, speed))
        return self.pipeline.run(soft, hard, self._pipeline_durations(changed, speed))

    def _by_class(self, soft, touched: set, duration_s: np.ndarray) -> float:
        """The slowest slice when stage passes changed: the slices a fault touches run on their
        own, the rest once per class of alike slices."""
        times = []
        for members in self.classes:
            alike = [piece for piece in members if not touched & piece.loaded]
            for piece in [p for p in members if touched & p.loaded] + alike[:1]:
                times.append(piece.run(soft, (), duration_s[piece.nodes]))
        return max(times)

    def _stage_work(self, pass_s: list):
        """hierarchical_work from per stage {layer spec: (forward, backward) seconds}."""
        return hierarchical_work(self.step, [{spec: {"time_s": f} for spec, (f, _) in kinds.items()} for kinds in pass_s],
                                 [{spec: {"time_s": b} for spec, (_, b) in kinds.items()} for kinds in pass_s])

    def _pipeline_durations(self, changed: dict, speed: np.ndarray) -> np.ndarray:
        """Stage passes at the (re-)replayed layer times; edge compute (embedding, LM head) and
        the optimizer step slowed on straggling ranks."""
        times = [dict(kinds) for kinds in self.pass_s]
        for stage, kinds in changed.items():
            times[stage].update(kinds)
        if len(self.pass_s[0]) == 1:  # one kind of layer: every stage pass scales with it
            spec = next(iter(self.pass_s[0]))
            before = np.array([kinds[spec] for kinds in self.pass_s])
            ratio = np.divide([kinds[spec] for kinds in times], before, out=np.ones_like(before), where=before > 0)
            out = self.pipeline.duration_s.copy()
            for column, code in ((0, STAGE_FWD), (1, STAGE_BWD)):
                nodes, stage, _ = self.passes[code]
                out[nodes] *= ratio[stage, column]
        else:  # passes mix kinds: the pipeline's durations laid out again (the same nodes)
            work_ = self._stage_work(times)
            trace = pipeline_trace(self.step.ctx, work_, self.step.micro, self.step.message_bytes, CommClasses())[0]
            out = np.asarray(trace.duration_s, np.float64).copy()
        for code in (EDGE, OPTIMIZER):
            nodes, _, rank = self.passes[code]
            out[nodes] /= speed[rank]
        return out


def _independent_slices(network, trace, node_rank, base_faults, pairs, full_s: float) -> list:
    """The pipeline split into groups of ranks that never exchange data (no send/recv, no
    collective between them) and whose baseline routes share no link, as separate programs;
    [] when it does not split, or when the slowest slice does not give the full replay's time.
    Under soft faults routes stay put, so the step is the slowest slice's time, and a fault
    re-runs only the slices that load its link."""
    kind, peer = np.asarray(trace.kind), np.asarray(trace.peer)
    p2p = np.flatnonzero((kind == SEND) | (kind == RECV))
    joined = set(zip(node_rank[p2p].tolist(), peer[p2p].tolist()))
    offsets, members = np.asarray(trace.group_offsets), np.asarray(trace.group_npus).tolist()
    for g in np.unique(np.asarray(trace.group)[kind >= NODE_KINDS["all_reduce"]]).tolist():
        group = members[offsets[g]:offsets[g + 1]]
        joined.update((group[0], other) for other in group[1:])
    ranks = np.unique(node_rank)
    slice_of = _components(ranks, joined)
    pieces = _slice_programs(network, trace, node_rank, slice_of, base_faults, pairs)
    owner = {}  # link pair -> a slice loading it; slices loading one link are merged
    sharing = set()
    for r, piece in pieces.items():
        for pair in piece.loaded:
            sharing.add((owner.setdefault(pair, r), r))
    merged = _components(np.array(sorted(pieces)), sharing)
    if any(merged[r] != r for r in pieces):
        pieces = _slice_programs(network, trace, node_rank, merged[slice_of], base_faults, pairs)
    if len(pieces) < 2 or max(piece.time_s for piece in pieces.values()) != full_s:
        return []
    return list(pieces.values())


def _slice_programs(network, trace, node_rank, slice_of, base_faults, pairs) -> dict:
    """{slice label: its program}, each program knowing which pipeline nodes it holds."""
    pieces = {}
    for r in np.unique(slice_of[node_rank]).tolist():
        keep = slice_of[node_rank] == r
        pieces[r] = _Program(network, *_sub_trace(trace, node_rank, keep), base_faults, pairs)
        pieces[r].nodes = np.flatnonzero(keep)
    return pieces


def _alike(slices: list, node_columns: tuple) -> list:
    """Slices grouped into classes that simulate alike: equal graphs with equal routes (see
    PreparedReplay.shape) and, node for node, equal columns (pass kind, stage, base duration),
    so equal per-stage pass times give them equal finish times."""
    classes = {}
    for piece in slices:
        key = piece.prepared.shape().tobytes() + b"".join(np.ascontiguousarray(c[piece.nodes]).tobytes()
                                                          for c in node_columns)
        classes.setdefault(key, []).append(piece)
    return list(classes.values())


def _components(items: np.ndarray, joined) -> np.ndarray:
    """Lookup array: item -> the smallest item it is (transitively) joined with."""
    label = np.arange(int(items.max()) + 1)

    def root(i):
        while label[i] != i:
            label[i] = label[label[i]]
            i = label[i]
        return i

    for a, b in joined:
        ra, rb = root(a), root(b)
        label[max(ra, rb)] = min(ra, rb)
    for i in items.tolist():
        label[i] = root(i)
    return label


def _sub_trace(trace, node_rank, keep: np.ndarray) -> tuple:
    """(trace of the nodes in `keep`, their ranks); their dependencies stay among themselves."""
    nodes = np.flatnonzero(keep)
    index = np.full(keep.size, -1, np.int64)
    index[nodes] = np.arange(nodes.size)
    offsets = np.asarray(trace.dep_offsets)
    counts = offsets[nodes + 1] - offsets[nodes]
    starts = np.repeat(offsets[nodes] - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
    deps = index[np.asarray(trace.deps)[starts + np.arange(counts.sum())]]
    pick = lambda a: np.asarray(a)[nodes]
    sub = Trace(rank=pick(trace.rank), kind=pick(trace.kind), duration_s=pick(trace.duration_s),
                bytes_=pick(trace.bytes_), group=pick(trace.group), peer=pick(trace.peer), tag=pick(trace.tag),
                algorithm=pick(trace.algorithm), dep_offsets=np.concatenate(([0], np.cumsum(counts))),
                deps=deps.astype(np.int32), group_offsets=trace.group_offsets, group_npus=trace.group_npus)
    return sub, node_rank[nodes]
