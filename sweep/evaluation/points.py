"""Points evaluated into rows: each point through `core.evaluate`, back as one Arrow table.

Returning columns (not row dicts) keeps the driver cheap."""
import math
import time

import pyarrow as pa

from core import Parallelism, evaluate
from sweep.metrics import METRICS, SERVE_METRICS
from sweep.study.cost_block import cost_fields
from sweep.study.plan import PARALLELISM_FIELDS

from .context import WorkContext


def evaluate_points(context: WorkContext, points: list) -> pa.Table:
    """One row per point: id, constants, knobs, feasibility, metrics, memory, breakdown, eval time."""
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
        work = context.workload_of(p.values)
        record = evaluate(context.models[p.model_index], context.hardware[p.hardware_index], par,
                          work, context.gpus, backend=context.backend)
        record.update(cost_fields(record, context.cost, work, context.gpus, par))
        records.append(record)
        seconds.append(time.perf_counter() - start)
    columns["feasible"] = [r["feasible"] for r in records]
    columns["infeasible_reason"] = [r["infeasible_reason"] for r in records]
    for key in METRICS + (SERVE_METRICS if context.workload.mode == "serve" else ()):
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
