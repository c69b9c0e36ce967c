"""What a worker runs: a batch of points through `core.evaluate`, back as one Arrow table.

Batches amortise the per-task cost of Ray or a process pool and let core's memo caches
work across neighbouring points; returning columns (not row dicts) keeps the driver cheap."""
import math
import time
from dataclasses import dataclass, replace

import pyarrow as pa

from core import Parallelism, evaluate
from core.units import quantity

from sweep.study.plan import PARALLELISM_FIELDS

METRICS = ("step_time_s", "mfu", "tokens_per_s", "ttft_s", "tpot_s", "memory_peak_gib")


@dataclass(frozen=True)
class WorkContext:
    """Everything a batch needs besides its points; shipped once per worker, not per batch."""
    models: tuple
    hardware: tuple
    workload: object
    gpus: int
    backend: str
    constants: tuple  # ((column, value), ...) the same on every row
    knob_fields: tuple  # of pa.Field, one per knob, in `Space.knobs` order
    unit_columns: tuple = ()  # ((knob index, column, {written value: number}), ...) for unit strings
    faults: object = None  # a sweep.faults.samples.FaultSpec: batches are then FaultBlocks, one row per sample


def unit_columns(knobs: tuple) -> tuple:
    """A numeric twin (`..._bps`, `..._bytes`, `..._s`) for each knob written as strings with
    units, so `--where` compares numbers, not text."""
    twins = []
    for index, knob in enumerate(knobs):
        parsed = [quantity(v) for v in knob.values]
        kinds = {q[0] for q in parsed if q}
        if parsed and all(parsed) and len(kinds) == 1:
            twins.append((index, f"{knob.column}_{kinds.pop()}", {v: q[1] for v, q in zip(knob.values, parsed)}))
    return tuple(twins)


@dataclass(frozen=True)
class SpecBatch:
    """Points shipped with the spec variants they index into: a search meets new model and
    hardware variants as it samples, so they travel with the batch, not the context."""
    points: tuple  # of Point, or of sweep.faults.samples.FaultBlock in a study with a faults: block
    models: tuple
    hardware: tuple


def knob_type(values: tuple) -> pa.DataType:
    """Arrow type for a knob column, from its candidate values (so every part agrees)."""
    kinds = {type(v) for v in values}
    if kinds <= {bool}:
        return pa.bool_()
    if kinds <= {int}:
        return pa.int64()
    if kinds <= {int, float}:
        return pa.float64()
    return pa.string()


def evaluate_batch(context: WorkContext, points: list) -> pa.Table:
    """One row per point: id, constants, knobs, feasibility, metrics, memory, breakdown, eval time
    (or, in a faults study, one row per (point, sample) of each block: see sweep.faults.samples)."""
    if isinstance(points, SpecBatch):
        context = replace(context, models=points.models, hardware=points.hardware)
        points = points.points
    if context.faults is not None:
        from sweep.faults.samples import evaluate_blocks
        return evaluate_blocks(context, points)
    n = len(points)
    columns = {"point_id": [p.point_id for p in points]}
    for name, value in context.constants:
        columns[name] = [value] * n
    for i, field in enumerate(context.knob_fields):
        columns[field.name] = [p.values[i] for p in points]
    for index, column, numbers in context.unit_columns:
        columns[column] = [numbers[p.values[index]] for p in points]
    records, seconds = [], []
    for p in points:
        par = Parallelism(**dict(zip(PARALLELISM_FIELDS, p.parallelism)))
        start = time.perf_counter()
        records.append(evaluate(context.models[p.model_index], context.hardware[p.hardware_index], par,
                                context.workload, context.gpus, backend=context.backend))
        seconds.append(time.perf_counter() - start)
    columns["feasible"] = [r["feasible"] for r in records]
    columns["infeasible_reason"] = [r["infeasible_reason"] for r in records]
    for key in METRICS:
        columns[key] = [_number(r[key]) for r in records]
    for group in ("memory", "breakdown", "detail"):
        keys = sorted({k for r in records for k in r[group]})
        for key in keys:
            columns[f"{group}_{key}"] = [_group_value(r, group, key) for r in records]
    if any("busiest_links" in r for r in records):
        top = [r.get("busiest_links") or [None] for r in records]
        columns["busiest_link"] = [f"{t['src']}->{t['dst']} {t['dim']}" if t else None for t, *_ in top]
        columns["busiest_link_utilisation"] = [t["utilisation"] if t else None for t, *_ in top]
    if any("replay_note" in r for r in records):
        columns["replay_note"] = [r.get("replay_note") for r in records]
    columns["eval_time_s"] = seconds
    fields = [pa.field("point_id", pa.string())]
    fields += [pa.field(name, pa.scalar(value).type) for name, value in context.constants]
    fields += list(context.knob_fields)
    fields += [pa.field(column, pa.float64()) for _, column, _ in context.unit_columns]
    fields += [pa.field("feasible", pa.bool_()), pa.field("infeasible_reason", pa.string())]
    fields += [pa.field(name, pa.string()) for name in ("busiest_link", "replay_note") if name in columns]
    known = {f.name for f in fields}
    fields += [pa.field(name, pa.float64()) for name in columns if name not in known]
    return pa.Table.from_pydict(columns, schema=pa.schema(fields))


def _number(value):
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _group_value(record: dict, group: str, key: str):
    """A memory, breakdown or detail entry; a part of the time a timed point does not have is
    0 s, an untimed (memory-infeasible) point has no breakdown at all (null)."""
    if key in record[group]:
        return _number(record[group][key])
    timed = _number(record["step_time_s"]) is not None
    return 0.0 if timed or group == "memory" else None
