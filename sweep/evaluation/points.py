"""Points evaluated into rows: each point through `core.evaluate`, back as one Arrow table.

Returning columns (not row dicts) keeps the driver cheap."""
import time
from operator import itemgetter

import pyarrow as pa
import pyarrow.compute as pc

from core import Parallelism, evaluate
from core.model.specs import POOL_KNOBS
from sweep.metrics import COST, METRICS, SERVE_METRICS
from sweep.study.cost_block import cost_fields
from sweep.study.grid import PointBlock
from sweep.study.plan import PARALLELISM_FIELDS

from .context import WorkContext


def evaluate_points(context: WorkContext, points) -> pa.Table:
    """One row per point (a list of Points, or a grid's PointBlock): id, constants, knobs,
    feasibility, metrics, memory, breakdown, eval time."""
    ids, knob_columns, layouts, model_codes, hardware_codes = _point_columns(points)
    knob_columns = knob_columns or [[] for _ in context.knob_fields]
    n = len(ids)
    columns = {"point_id": ids}
    for name, value in context.constants:
        columns[name] = [value] * n
    for field, column in zip(context.knob_fields, knob_columns):
        columns[field.name] = column
    if context.workload.mode == "serve":
        _drop_unused_pools(columns, n)
    for index, column, numbers in context.unit_columns:
        columns[column] = [numbers[value] for value in knob_columns[index]]
    records, seconds = [], []
    models, hardware, workload, gpus, backend = (context.models, context.hardware, context.workload, context.gpus,
                                                 context.backend)
    priced = context.cost is not None
    clock = time.perf_counter
    for row, (fields, model_index, hardware_index) in enumerate(zip(layouts, model_codes, hardware_codes)):
        par = layout(fields)
        start = clock()
        work = context.workload_of(knob_columns, row) if context.workload_knobs else workload
        record = evaluate(models[model_index], hardware[hardware_index], par, work, gpus, backend=backend)
        if priced:
            record.update(cost_fields(record, context.cost, work, gpus, par))
        records.append(record)
        seconds.append(clock() - start)
    columns["feasible"] = [r["feasible"] for r in records]
    columns["infeasible_reason"] = [r["infeasible_reason"] for r in records]
    metrics = METRICS + (SERVE_METRICS if workload.mode == "serve" else ())
    # no cost block: the dollar columns are null (cost_fields' answer without prices)
    computed = metrics if priced else tuple(key for key in metrics if key not in COST)
    values = dict(zip(computed, zip(*map(itemgetter(*computed), records)))) if records else {}
    for key in metrics:
        columns[key] = _numbers(values[key]) if key in values else pa.nulls(n, pa.float64())
    # a part of the time a timed point does not have is 0 s; an untimed (memory-infeasible)
    # point has no breakdown at all (null); a memory kind not counted is 0 GiB
    timed = pc.is_valid(columns["step_time_s"]).to_pylist()
    for group in ("memory", "breakdown", "detail"):
        entries = [r[group] for r in records]
        missing = [0.0] * n if group == "memory" else [0.0 if t else None for t in timed]
        for key in sorted(set().union(*entries)):
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


def _drop_unused_pools(columns: dict, n: int) -> None:
    """A serving table's pool columns left null on aggregated rows, which have no pools."""
    aggregated = [not d for d in columns["disagg"]] if "disagg" in columns else [True] * n
    for name in POOL_KNOBS:
        if name in columns:
            columns[name] = [None if agg else value for agg, value in zip(aggregated, columns[name])]


def _point_columns(points) -> tuple:
    """(ids, each knob's column, each point's Parallelism fields, model indices, hardware indices)."""
    if isinstance(points, PointBlock):
        return points.columns()
    knobs = list(zip(*(p.values for p in points))) if points else []
    return ([p.point_id for p in points], [list(column) for column in knobs], [p.parallelism for p in points],
            [p.model_index for p in points], [p.hardware_index for p in points])


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
