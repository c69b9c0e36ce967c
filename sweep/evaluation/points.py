"""Points evaluated into rows: each point through `core.evaluate`, back as one Arrow table.

Returning columns (not row dicts) keeps the driver cheap."""
import time

import pyarrow as pa
import pyarrow.compute as pc

from core import Parallelism, evaluate
from sweep.metrics import METRICS
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
        par = layout(p.parallelism)
        start = time.perf_counter()
        record = evaluate(context.models[p.model_index], context.hardware[p.hardware_index], par,
                          context.workload, context.gpus, backend=context.backend)
        record.update(cost_fields(record, context.cost, context.workload, context.gpus, par))
        records.append(record)
        seconds.append(time.perf_counter() - start)
    columns["feasible"] = [r["feasible"] for r in records]
    columns["infeasible_reason"] = [r["infeasible_reason"] for r in records]
    for key in METRICS:
        columns[key] = _numbers([r[key] for r in records])
    # a part of the time a timed point does not have is 0 s; an untimed (memory-infeasible)
    # point has no breakdown at all (null); a memory kind not counted is 0 GiB
    timed = pc.is_valid(columns["step_time_s"]).to_pylist()
    for group in ("memory", "breakdown", "detail"):
        entries = [r[group] for r in records]
        missing = [0.0] * n if group == "memory" else [0.0 if t else None for t in timed]
        for key in sorted({k for entry in entries for k in entry}):
            columns[f"{group}_{key}"] = _numbers([entry.get(key, absent) for entry, absent in zip(entries, missing)])
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


def _numbers(values: list) -> pa.Array:
    """A float64 column, None and NaN written as null."""
    return pa.array(values, pa.float64(), from_pandas=True)


_LAYOUTS = {}  # Parallelism fields -> the Parallelism: a layout met again (another hardware variant) is one object
LAYOUTS_KEPT = 65536


def layout(fields: tuple) -> Parallelism:
    """The Parallelism of a point's fields (PARALLELISM_FIELDS order), built once per worker."""
    par = _LAYOUTS.get(fields)
    if par is None:
        if len(_LAYOUTS) >= LAYOUTS_KEPT:
            _LAYOUTS.clear()
        par = _LAYOUTS[fields] = Parallelism(**dict(zip(PARALLELISM_FIELDS, fields)))
    return par
