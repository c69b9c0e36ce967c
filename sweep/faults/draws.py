"""What each fault sample draws, and how a study's samples are cut into units of work.

Every point becomes rows (point, sample): sample 0 is the fault-free baseline, samples 1..N
each draw faulty links and slow GPUs from a random stream seeded by (seed, the point's
layout, sample) alone, so adding samples extends a table and never reshuffles it, and points
that differ only in model or hardware meet the same faults."""
import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from core import Parallelism, estimate_memory
from sweep.study.faults_block import FaultSpec
from sweep.study.plan import PARALLELISM_FIELDS

BLOCK_SAMPLES = 50  # samples per unit of work
KEY_COLUMNS = ("point_id", "fault_sample")


@dataclass(frozen=True)
class FaultBlock:
    """Samples [start, stop) of one point: one unit of work."""
    point: object
    start: int
    stop: int


@dataclass(frozen=True)
class Sample:
    links: tuple  # of core.replay.faults.Link
    factors: tuple
    ranks: tuple
    rank_factors: tuple


def sample_faults(spec: FaultSpec, point, index: int, candidates: tuple, gpus: int) -> Sample:
    """Sample `index`'s faulty links (from `candidates`) and stragglers; a function of (seed,
    the point's parallelism, index) alone. Points that differ only in model or hardware (a knob,
    a variant, a model version) draw the same faults: their comparison is paired, not two
    independent draws. Sample 0 is the fault-free baseline."""
    if index == 0:
        return Sample((), (), (), ())
    layout_key = int.from_bytes(hashlib.sha256(layout_text(point.parallelism).encode()).digest()[:8], "little")
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([spec.seed, layout_key, index])))
    count = min(spec.count.draw(rng), len(candidates))
    chosen = sorted(rng.choice(len(candidates), count, replace=False).tolist()) if count else []
    factors = spec.factor.draw(rng, count)
    failed = rng.random(count) < spec.hard
    factors = [0.0 if down else f for f, down in zip(factors, failed.tolist())]
    stragglers = min(spec.straggler_count.draw(rng), gpus)
    ranks = sorted(rng.choice(gpus, stragglers, replace=False).tolist()) if stragglers else []
    return Sample(tuple(candidates[i] for i in chosen), tuple(factors), tuple(ranks),
                  tuple(spec.straggler_factor.draw(rng, stragglers)))


# The layout the draws are keyed against: Parallelism's defaults before they became Megatron-Core's
# (no sequence parallelism, ZeRO 0, no overlap), fixed so that the change left every draw as it was.
DRAW_REFERENCE = Parallelism(sp=False, zero=0, overlap_grad_reduce=False, overlap_param_gather=False)


@lru_cache(maxsize=1024)  # one point's samples share it
def layout_text(parallelism: tuple) -> str:
    """A layout as the fields it sets away from DRAW_REFERENCE, by name: a field added to
    Parallelism later (at its default) leaves every layout's text, and so its draws, as they were."""
    changed = {name: value for name, value in zip(PARALLELISM_FIELDS, parallelism)
               if value != getattr(DRAW_REFERENCE, name)}
    return json.dumps(changed, sort_keys=True)


def fault_blocks(points, spec: FaultSpec, done: set, fits) -> list:
    """Blocks of samples still missing from the table (`done` holds (point_id, fault_sample)
    keys), each run of missing samples cut into near-equal blocks of at most BLOCK_SAMPLES;
    a point `fits(point)` says is memory-infeasible gets its baseline row only."""
    blocks = []
    for point in points:
        last = spec.samples + 1 if fits(point) else 1
        missing = [i for i in range(last) if (point.point_id, i) not in done]
        runs = np.split(np.array(missing, np.int64), np.flatnonzero(np.diff(missing) > 1) + 1) if missing else []
        for run in runs:
            for piece in np.array_split(run, math.ceil(run.size / BLOCK_SAMPLES)):
                blocks.append(FaultBlock(point, int(piece[0]), int(piece[-1]) + 1))
    return blocks


def memory_fits(context):
    """`fits(point)` for `fault_blocks`, from core's memory estimate (cheap, no timing)."""
    def fits(point) -> bool:
        par = Parallelism(**dict(zip(PARALLELISM_FIELDS, point.parallelism)))
        return estimate_memory(context.models[point.model_index], context.hardware[point.hardware_index], par,
                               context.workload).feasible
    return fits
