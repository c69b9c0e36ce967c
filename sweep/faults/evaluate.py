"""Fault samples replayed into rows: a worker builds a point's replay once
(core.replay.faults) and answers a sample whose faulty links the baseline never loads, and
that has no straggler, from the baseline without a replay."""
import time
from dataclasses import replace

import numpy as np
import pyarrow as pa

from core import Parallelism
from core.evaluation import ENERGY, slowed_energy_fields
from sweep.evaluation.points import evaluate_points
from sweep.store.parts import conform, unified_schema
from sweep.study.cost_block import cost_fields
from sweep.study.faults_block import FaultSpec
from sweep.study.plan import PARALLELISM_FIELDS

from .draws import sample_faults

FAULT_FIELDS = (pa.field("fault_sample", pa.int64()), pa.field("fault_links", pa.list_(pa.string())),
                pa.field("fault_dims", pa.list_(pa.string())), pa.field("fault_factors", pa.list_(pa.float64())),
                pa.field("straggler_ranks", pa.list_(pa.int64())),
                pa.field("straggler_factors", pa.list_(pa.float64())), pa.field("slowdown", pa.float64()),
                pa.field("fault_replayed", pa.bool_()), pa.field("fault_reason", pa.string()))


_REPLAYS = {}  # per worker process: (point, its columns) -> (baseline row table, FaultReplay); a few recent
_REPLAYS_KEPT = 4


def _point_state(context, point):
    """The point's grid row and its prepared replay, built once per worker and reused. The key
    holds the row's columns as well as the point: one process may serve two studies (the
    in-process executor, the Python API) whose tables share a point under other knobs."""
    key = (point.point_id, point.values, context.constants, context.knob_fields)
    if key not in _REPLAYS:
        from core.replay.faults import FaultReplay  # loads the compiled simulator

        row = evaluate_points(replace(context, faults=None), [point])
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
        seconds = []
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
        tables.append(_sample_rows(row, columns, seconds, _slowed_energy(context, block.point, row, columns)))
    schema = unified_schema([t.schema for t in tables])
    return pa.concat_tables([conform(t, schema) for t in tables])


def _slowed_energy(context, point, row: pa.Table, columns: dict) -> dict:
    """Energy and cost columns per sample ({column: values}): the slower step's GPUs idle
    through the extra time (core.evaluation.slowed_energy_fields), at the study's prices."""
    base = {name: row.column(name)[0].as_py() for name in (*ENERGY, "step_time_s") if name in row.column_names}
    if base.get("power_avg_w") is None:
        return {}
    hw = context.hardware[point.hardware_index]
    par = Parallelism(**dict(zip(PARALLELISM_FIELDS, point.parallelism)))
    values = {}
    for slowdown in columns["slowdown"]:
        fields = slowed_energy_fields(base, hw, context.gpus, float("nan") if slowdown is None else slowdown)
        timed = {**fields, "step_time_s": None if slowdown is None else base["step_time_s"] * slowdown}
        fields.update(cost_fields(timed, context.cost, context.workload, context.gpus, par))
        for name, value in fields.items():
            values.setdefault(name, []).append(value)
    return values


def _sample_rows(row: pa.Table, columns: dict, seconds: list, energy: dict) -> pa.Table:
    """The point's row repeated per sample, its timing metrics scaled by each sample's slowdown
    and its energy and cost columns (`energy`) taken as the sample's."""
    n = len(seconds)
    table = row.take([0] * n)
    for name, values in energy.items():
        table = table.set_column(table.column_names.index(name), name, pa.array(values, pa.float64()))
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
