"""Monte Carlo link-fault and straggler studies: the `faults:` block of a study file.

Every point of the grid becomes rows (point, sample): sample 0 is the fault-free baseline,
samples 1..N each draw faulty links and slow GPUs from a random stream seeded by
(seed, the point's layout, sample) alone, so adding samples extends a table and never
reshuffles it, and points that differ only in model or hardware meet the same faults.
Work goes to the runner as blocks of samples of one point; a worker builds the point's
replay once (core.replay.faults) and answers a sample whose faulty links the baseline never
loads, and that has no straggler, from the baseline without a replay."""
import hashlib
import json
import math
import time
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pyarrow as pa

from core import Parallelism, SpecError, estimate_memory

from sweep.study.plan import PARALLELISM_FIELDS
from sweep.store.parts import conform, unified_schema
from sweep.execution.worker import evaluate_batch

FACTOR_FLOOR = 1e-3  # sampled factors are clipped to [FACTOR_FLOOR, 1]; 0 comes only from `hard`
FAULT_KEYS = ("samples", "seed", "links", "count", "factor", "hard", "stragglers")
STRAGGLER_KEYS = ("count", "factor")
BLOCK_SAMPLES = 50  # samples per unit of work
KEY_COLUMNS = ("point_id", "fault_sample")
AGGREGATES = ("slowdown_p50", "slowdown_p95", "slowdown_max", "step_time_p95_s")
FAULT_FIELDS = (pa.field("fault_sample", pa.int64()), pa.field("fault_links", pa.list_(pa.string())),
                pa.field("fault_dims", pa.list_(pa.string())), pa.field("fault_factors", pa.list_(pa.float64())),
                pa.field("straggler_ranks", pa.list_(pa.int64())),
                pa.field("straggler_factors", pa.list_(pa.float64())), pa.field("slowdown", pa.float64()),
                pa.field("fault_replayed", pa.bool_()), pa.field("fault_reason", pa.string()))


@dataclass(frozen=True)
class Distribution:
    """normal (mean, std), uniform (low, high) or choice (values...), clipped to [FACTOR_FLOOR, 1]."""
    kind: str
    params: tuple

    def draw(self, rng: np.random.Generator, size: int) -> list:
        if not size:
            return []
        if self.kind == "normal":
            values = rng.normal(self.params[0], self.params[1], size)
        elif self.kind == "uniform":
            values = rng.uniform(self.params[0], self.params[1], size)
        else:
            values = np.asarray(self.params)[rng.integers(0, len(self.params), size)]
        return [min(1.0, max(FACTOR_FLOOR, v)) for v in values.tolist()]


@dataclass(frozen=True)
class Count:
    """A fixed number, or Poisson-distributed with this mean."""
    fixed: int | None = None
    poisson_mean: float | None = None

    def draw(self, rng: np.random.Generator) -> int:
        return self.fixed if self.fixed is not None else int(rng.poisson(self.poisson_mean))


@dataclass(frozen=True)
class FaultSpec:
    samples: int
    seed: int
    links: object  # "all" | "used" | tuple of dimension names | tuple of (a, b) pairs
    count: Count
    factor: Distribution
    hard: float
    straggler_count: Count
    straggler_factor: Distribution


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


def parse_faults(data, source: str, backend: str, mode: str, dim_names: tuple, links: set, gpus: int) -> FaultSpec:
    """The study's `faults:` block, validated against the network's dimension names, its
    links ((a, b) node pairs, a < b) and GPU count; raises SpecError naming the faults.* field."""
    if not isinstance(data, dict):
        raise SpecError(source, "faults", data, f"expected a mapping with {', '.join(FAULT_KEYS)}")
    for key in data:
        if key not in FAULT_KEYS:
            raise SpecError(source, f"faults.{key}", data[key], f"unknown field (allowed: {', '.join(FAULT_KEYS)})")
    if backend not in ("astra-hierarchical", "astra-flattened"):
        raise SpecError(source, "backend", backend, "a faults study needs astra-hierarchical or astra-flattened "
                        "(the analytical backend has no links to fault)")
    if mode != "train":
        raise SpecError(source, "workload.mode", mode, "a faults study replays training steps (mode: train)")
    samples = _integer(data.get("samples"), source, "faults.samples", 1, "<missing>" if "samples" not in data else None)
    seed = _integer(data.get("seed", 0), source, "faults.seed", 0)
    hard = data.get("hard", 0.0)
    if isinstance(hard, bool) or not isinstance(hard, (int, float)) or not 0 <= hard <= 1:
        raise SpecError(source, "faults.hard", hard, "expected a probability in [0, 1]")
    stragglers = data.get("stragglers", {"count": 0})
    if not isinstance(stragglers, dict):
        raise SpecError(source, "faults.stragglers", stragglers, "expected {count: N, factor: distribution}")
    for key in stragglers:
        if key not in STRAGGLER_KEYS:
            raise SpecError(source, f"faults.stragglers.{key}", stragglers[key],
                            f"unknown field (allowed: {', '.join(STRAGGLER_KEYS)})")
    return FaultSpec(samples, seed, _links(data.get("links", "all"), source, dim_names, links),
                     _count(data.get("count", 1), source, "faults.count", len(links), "links in the network"),
                     _distribution(data.get("factor", {"normal": {"mean": 0.5, "std": 0.1}}), source, "faults.factor"),
                     float(hard), _count(stragglers.get("count", 0), source, "faults.stragglers.count", gpus, "GPUs"),
                     _distribution(stragglers.get("factor", {"uniform": [0.7, 0.95]}), source,
                                   "faults.stragglers.factor"))


def _integer(value, source, field, low, shown=None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise SpecError(source, field, shown or value, f"expected an integer >= {low}")
    return value


def _links(value, source, dim_names, links):
    allowed = "all, used, a list of dimension names, or a list of [a, b] node pairs"
    if value in ("all", "used"):
        return value
    if not isinstance(value, list) or not value:
        raise SpecError(source, "faults.links", value, f"expected {allowed}")
    if all(isinstance(v, str) for v in value):
        for name in value:
            if name not in dim_names:
                raise SpecError(source, "faults.links", name, f"no such network dimension (have: {', '.join(dim_names)})")
        return tuple(value)
    pairs = []
    for pair in value:
        if not isinstance(pair, list) or len(pair) != 2 or any(isinstance(n, bool) or not isinstance(n, int) for n in pair):
            raise SpecError(source, "faults.links", pair, f"expected {allowed}")
        if (min(pair), max(pair)) not in links:
            raise SpecError(source, "faults.links", pair, "no link joins these nodes (NPUs, then switches)")
        pairs.append((min(pair), max(pair)))
    return tuple(pairs)


def _count(value, source, field, most: int, of: str) -> Count:
    """A fixed count (at most `most`, the number of `of` there are to choose) or a Poisson mean."""
    if isinstance(value, dict) and list(value) == ["poisson"]:
        mean = value["poisson"]
        if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not 0 <= mean <= 1e3:
            raise SpecError(source, f"{field}.poisson", mean, "expected a mean in [0, 1000]")
        return Count(poisson_mean=float(mean))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SpecError(source, field, value, "expected an integer >= 0 or {poisson: mean}")
    if value > most:
        raise SpecError(source, field, value, f"expected at most {most} (the {of}) or {{poisson: mean}}")
    return Count(fixed=value)


def _distribution(value, source, field) -> Distribution:
    allowed = "{normal: {mean: m, std: s}}, {uniform: [low, high]} or a list of factors in (0, 1]"
    number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    if isinstance(value, list) and value and all(number(v) and 0 < v <= 1 for v in value):
        return Distribution("choice", tuple(float(v) for v in value))
    if isinstance(value, dict) and list(value) == ["normal"] and isinstance(value["normal"], dict):
        params = value["normal"]
        if set(params) != {"mean", "std"} or not all(number(v) for v in params.values()) or params["std"] < 0:
            raise SpecError(source, f"{field}.normal", params, "expected {mean: m, std: s} with s >= 0")
        return Distribution("normal", (float(params["mean"]), float(params["std"])))
    if isinstance(value, dict) and list(value) == ["uniform"]:
        bounds = value["uniform"]
        if not (isinstance(bounds, list) and len(bounds) == 2 and all(number(b) for b in bounds)
                and 0 <= bounds[0] <= bounds[1] <= 1):
            raise SpecError(source, f"{field}.uniform", bounds, "expected [low, high] with 0 <= low <= high <= 1")
        return Distribution("uniform", (float(bounds[0]), float(bounds[1])))
    raise SpecError(source, field, value, f"expected {allowed}")


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


@lru_cache(maxsize=1024)  # one point's samples share it
def layout_text(parallelism: tuple) -> str:
    """A layout as the fields it sets away from Parallelism's defaults, by name: a field added to
    Parallelism later (at its default) leaves every layout's text, and so its draws, as they were."""
    defaults = Parallelism()
    changed = {name: value for name, value in zip(PARALLELISM_FIELDS, parallelism) if value != getattr(defaults, name)}
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


_REPLAYS = {}  # per worker process: (point, its columns) -> (baseline row table, FaultReplay); a few recent
_REPLAYS_KEPT = 4


def _point_state(context, point):
    """The point's grid row and its prepared replay, built once per worker and reused. The key
    holds the row's columns as well as the point: one process may serve two studies (the
    in-process executor, the Python API) whose tables share a point under other knobs."""
    key = (point.point_id, point.values, context.constants, context.knob_fields)
    if key not in _REPLAYS:
        from core.replay.faults import FaultReplay  # loads the compiled simulator

        row = evaluate_batch(replace(context, faults=None), [point])
        replay = None
        if row.column("feasible")[0].as_py():
            par = Parallelism(**dict(zip(PARALLELISM_FIELDS, point.parallelism)))
            replay = FaultReplay(context.models[point.model_index], context.hardware[point.hardware_index], par,
                                 context.workload, context.gpus, context.backend)
        while len(_REPLAYS) >= _REPLAYS_KEPT:
            _REPLAYS.pop(next(iter(_REPLAYS)))
        _REPLAYS[key] = (row, replay)
    return _REPLAYS[key]


def evaluate_blocks(context, blocks: list) -> pa.Table:
    """One row per (point, sample) of every block: the point's grid columns, then the sample's."""
    from core.replay.faults import Unroutable

    tables = []
    for block in blocks:
        row, replay = _point_state(context, block.point)
        columns = {f.name: [] for f in FAULT_FIELDS}
        steps, seconds = [], []
        candidates = _candidates(context.faults, replay) if replay else ()
        for index in range(block.start, block.stop):
            start = time.perf_counter()
            sample = sample_faults(context.faults, block.point, index, candidates, context.gpus)
            replayed, reason, step = False, None, None
            if replay is not None:
                pairs = {(link.a, link.b): f for link, f in zip(sample.links, sample.factors)}
                replayed = bool(sample.ranks) or any(pair in replay.loaded for pair in pairs)
                try:
                    step = replay.run(pairs, dict(zip(sample.ranks, sample.rank_factors))) if replayed else replay.baseline_s
                except Unroutable as err:
                    reason = f"no route: {err}"
            for name, value in (("fault_sample", index), ("fault_links", [link.name for link in sample.links]),
                                ("fault_dims", [link.dim for link in sample.links]),
                                ("fault_factors", list(sample.factors)), ("straggler_ranks", list(sample.ranks)),
                                ("straggler_factors", list(sample.rank_factors)),
                                ("slowdown", None if step is None else step / replay.baseline_s),
                                ("fault_replayed", replayed), ("fault_reason", reason)):
                columns[name].append(value)
            seconds.append(time.perf_counter() - start)
        tables.append(_sample_rows(row, columns, seconds))
    schema = unified_schema([t.schema for t in tables])
    return pa.concat_tables([conform(t, schema) for t in tables])


def _sample_rows(row: pa.Table, columns: dict, seconds: list) -> pa.Table:
    """The point's row repeated per sample, its timing metrics scaled by each sample's slowdown."""
    n = len(seconds)
    table = row.take([0] * n)
    slowdown = pa.array(columns["slowdown"], pa.float64())
    for name in ("step_time_s", "mfu", "tokens_per_s"):
        if name in table.column_names:
            base = table.column(name).to_numpy(zero_copy_only=False).astype(float)
            factor = np.array([np.nan if s is None else s for s in columns["slowdown"]], float)
            values = base * factor if name == "step_time_s" else base / factor
            table = table.set_column(table.column_names.index(name), name,
                                     pa.array(values, pa.float64(), mask=np.isnan(values)))
    table = table.drop_columns(["eval_time_s"])
    for field in FAULT_FIELDS:
        array = slowdown if field.name == "slowdown" else pa.array(columns[field.name], field.type)
        table = table.append_column(field, array)
    return table.append_column(pa.field("eval_time_s", pa.float64()), pa.array(seconds, pa.float64()))


def _candidates(spec: FaultSpec, replay) -> tuple:
    if spec.links == "all":
        return replay.links
    if spec.links == "used":
        return tuple(link for link in replay.links if (link.a, link.b) in replay.loaded)
    if isinstance(spec.links[0], str):
        return tuple(link for link in replay.links if link.dim in spec.links)
    by_pair = {(link.a, link.b): link for link in replay.links}
    return tuple(by_pair[pair] for pair in spec.links)


def fault_aggregates(rows) -> dict:
    """Per point_id over its fault samples (fault_sample >= 1 that could be simulated):
    {"slowdown_p50", "slowdown_p95", "slowdown_max", "step_time_p95_s"}; search objectives use
    these. `rows`: a fault table (pyarrow) or row dicts with those columns."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows))
    frame = table.select(["point_id", "fault_sample", "slowdown", "step_time_s"]).to_pandas()
    frame = frame[(frame.fault_sample >= 1) & frame.slowdown.notna()]
    out = {}
    for point_id, group in frame.groupby("point_id", sort=True):
        slow, step = group.slowdown.to_numpy(), group.step_time_s.to_numpy()
        out[point_id] = {"slowdown_p50": float(np.percentile(slow, 50)), "slowdown_p95": float(np.percentile(slow, 95)),
                         "slowdown_max": float(slow.max()), "step_time_p95_s": float(np.percentile(step, 95))}
    return out


def faults_summary(table: pa.Table, knobs: list, worst_links: int = 3) -> pa.Table:
    """One row per point with fault samples: its varying knobs, baseline step, slowdown
    p50/p95/max, samples, the share replayed, unroutable samples, and the links whose faults
    slowed it most on average; most fragile (highest p95) first."""
    if "fault_sample" not in table.column_names:
        raise SpecError("command line", "--faults-summary", "", "this table has no fault samples (no faults: block)")
    frame = table.to_pandas()
    aggregates = fault_aggregates(table)
    base = frame[frame.fault_sample == 0].set_index("point_id")
    varying = [k for k in knobs if k in frame.columns and frame[k].nunique() > 1]
    samples = frame[frame.fault_sample >= 1]
    rows = []
    for point_id, stats in aggregates.items():
        mine = samples[samples.point_id == point_id]
        hurt = {}
        for links, slow in zip(mine.fault_links, mine.slowdown):
            for link in links if slow == slow else ():
                hurt.setdefault(link, []).append(slow)
        worst = sorted(hurt, key=lambda k: (-float(np.mean(hurt[k])), k))[:worst_links]
        row = {k: base.at[point_id, k] for k in varying}
        row.update({"point_id": point_id, "baseline_step_s": base.at[point_id, "step_time_s"], **stats,
                    "samples": len(mine), "replayed_share": float(mine.fault_replayed.mean()),
                    "unroutable": int(mine.fault_reason.notna().sum()),
                    "worst_links": ", ".join(f"{k} ({np.mean(hurt[k]):.3f})" for k in worst)})
        rows.append(row)
    rows.sort(key=lambda r: (-r["slowdown_p95"], r["point_id"]))
    columns = varying + ["point_id", "baseline_step_s"] + list(AGGREGATES) + ["samples", "replayed_share",
                                                                               "unroutable", "worst_links"]
    return pa.Table.from_pylist([{c: r[c] for c in columns} for r in rows])
