"""One training configuration replayed again and again under link faults and stragglers.

The replay programs (per-stage layer passes and the pipeline for astra-hierarchical, the
whole pipeline for astra-flattened) are built and matched once; a sample only changes link
bandwidths (soft faults), removes links (hard faults) or slows some GPUs' compute, and
re-simulates just the programs whose links or ranks it touches."""
from dataclasses import dataclass

import numpy as np
from astra_backend import HardFault, SoftFault

from .astra_exec import (OPTIMIZER, STAGE_BWD, STAGE_FWD, flattened_work, hierarchical_work, layer_trace,
                         pipeline_trace, train_replay)
from .errors import SpecError
from .replay import COMPUTE, CommClasses
from .specs import TrainWorkload


@dataclass(frozen=True)
class Link:
    """An undirected network link between nodes a < b (NPUs, then switches) in dimension `dim`."""
    a: int
    b: int
    dim: str

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"


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

    def straggling(self, speed: np.ndarray):
        """Compute durations with each rank's compute slowed to `speed[rank]` of nominal."""
        return np.where(self.compute, self.duration_s / speed[self.node_rank], self.duration_s)


class FaultReplay:
    """Build once with a training configuration on an astra backend; then `run` answers a
    sample: `link_factors` {(a, b): bandwidth factor, 0 = failed} and `straggler_factors`
    {rank: compute speed as a fraction of nominal}. Raises astra_backend.NoRouteError when
    failed links disconnect two GPUs that must talk."""

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
        pairs = [(min(a, b), max(a, b)) for a, b in zip(stats.src.tolist(), stats.dst.tolist())]
        names = {pair: dims[d].name for pair, d in zip(pairs, stats.dim.tolist())}
        self.links = tuple(Link(a, b, names[(a, b)]) for a, b in sorted(names))
        base = (network.soft_faults, network.hard_faults)
        self.layers = []  # per stage: (forward program, backward program)
        if self.hierarchical:
            for stage in range(par.pp):
                self.layers.append(tuple(_Program(network, *layer_trace(step.ctx, ops, stage)[:2], base, pairs)
                                         for ops in (step.forward_ops, step.backward_ops)))
            work_ = hierarchical_work(step, *self._pass_times({}))
        else:
            work_ = flattened_work(step, CommClasses())
        trace, node_rank, label = pipeline_trace(step.ctx, work_, step.micro, step.message_bytes, CommClasses())
        self.pipeline = _Program(network, trace, node_rank, base, pairs)
        self.label = label
        self.node_stage = step.ctx.groups.coords["pp"][node_rank]
        self.loaded = frozenset().union(self.pipeline.loaded, *(p.loaded for pair in self.layers for p in pair))
        self.baseline_s = self.pipeline.time_s

    def _pass_times(self, changed: dict) -> tuple:
        """Per stage, {"time_s": layer forward} and {"time_s": layer backward}: baseline unless in `changed`."""
        times = [changed.get(s, (f.time_s, b.time_s)) for s, (f, b) in enumerate(self.layers)]
        return [{"time_s": t[0]} for t in times], [{"time_s": t[1]} for t in times]

    def run(self, link_factors: dict, straggler_factors: dict) -> float:
        """Step seconds under these faults and stragglers."""
        soft = tuple(SoftFault(a, b, f) for (a, b), f in link_factors.items() if f > 0)
        hard = tuple(HardFault(a, b) for (a, b), f in link_factors.items() if f == 0)
        touched = set(link_factors)
        speed = np.ones(self.gpus)
        for rank, factor in straggler_factors.items():
            speed[rank] = factor
        slow = set(straggler_factors)
        if not self.hierarchical:
            return self.pipeline.run(soft, hard, self.pipeline.straggling(speed) if slow else None)
        changed = {}
        for stage, programs in enumerate(self.layers):
            if touched & programs[0].loaded or touched & programs[1].loaded or slow & programs[0].ranks:
                changed[stage] = tuple(p.run(soft, hard, p.straggling(speed) if slow & p.ranks else None)
                                       for p in programs)
        if not changed and not slow and not touched & self.pipeline.loaded:
            return self.pipeline.time_s
        return self.pipeline.run(soft, hard, self._pipeline_durations(changed, speed))

    def _pipeline_durations(self, changed: dict, speed: np.ndarray) -> np.ndarray:
        """Stage passes from the (re-)replayed layer times, edge compute and the optimizer step
        slowed on straggling ranks."""
        fwd, bwd = self._pass_times(changed)
        step, stage, rank = self.step, self.node_stage, self.pipeline.node_rank
        edge_f = np.array([e[0] for e in step.edges])[stage] / speed[rank]
        edge_b = np.array([e[1] for e in step.edges])[stage] / speed[rank]
        layer_f = step.layers * np.array([p["time_s"] for p in fwd])[stage]
        layer_b = step.layers * np.array([p["time_s"] for p in bwd])[stage]
        out = self.pipeline.duration_s.copy()
        label = self.label
        out[label == STAGE_FWD] = (layer_f + edge_f)[label == STAGE_FWD]
        out[label == STAGE_BWD] = ((layer_b + edge_b) / step.pieces)[label == STAGE_BWD]
        optimizer = label == OPTIMIZER
        out[optimizer] = out[optimizer] / speed[rank[optimizer]]
        return out
