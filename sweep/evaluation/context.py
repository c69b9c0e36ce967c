"""What a batch of work carries besides its points: the specs, workload and backend once per
worker, the columns every row shares, and the knob columns' Arrow types."""
from dataclasses import dataclass, replace

import pyarrow as pa

from core.units import quantity


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
    faults: object = None  # a sweep.study.faults_block.FaultSpec: batches are then FaultBlocks, one row per sample
    cost: object = None  # a sweep.study.cost_block.CostSpec: the dollar columns
    workload_knobs: tuple = ()  # ((knob index, workload field), ...): a serving study's swept load
    grid: object = None  # a sweep.study.grid.GridPlanner where workers plan the grid (ChunkRange, GridSlice batches)
    done: object = None  # the sweep.study.grid.DoneIds GridSlice batches skip

    def workload_of(self, knob_columns: list, row: int):
        """The workload of the point at `row` of a batch whose knob values are `knob_columns`."""
        return replace(self.workload, **{name: knob_columns[index][row] for index, name in self.workload_knobs}).settled()


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
    points: tuple  # of Point, or of sweep.faults.draws.FaultBlock in a study with a faults: block
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
