"""A search over a study with a `faults:` block: the table side.

Each trial's point is replayed under the study's fault samples by the grid's own fault
blocks and workers (sweep.faults), one row per (point, sample), written once per point
whatever the number of trials that ask for it. A trial is told the point's baseline row
(sample 0) with its fault aggregates (`fault_aggregates` over its samples), so objectives
and constraints may name `slowdown_p95` and the rest beside the plain columns."""
import pyarrow as pa
import pyarrow.compute as pc

from sweep.metrics import AGGREGATES
from sweep.faults.draws import KEY_COLUMNS, fault_blocks
from sweep.faults.summary import fault_aggregates

SAMPLE_COLUMNS = ("point_id", "fault_sample", "slowdown", "step_time_s")  # what fault_aggregates reads


class FaultRows:
    """The table's fault rows grouped by point: which samples each point has, and what a
    trial on that point is told."""

    def __init__(self, table: pa.Table, spec):
        self.spec = spec
        self.done = set()
        self.points = {}  # point_id -> [row dict, ...]
        if table.num_rows:
            self.add(table)

    def add(self, table: pa.Table) -> None:
        for row in table.to_pylist():
            self.done.add(tuple(row[c] for c in KEY_COLUMNS))
            self.points.setdefault(row["point_id"], []).append(row)

    def missing(self, points: list, fits) -> list:
        """FaultBlocks of the samples `points` still lack (a point that does not fit in
        memory needs its baseline row only)."""
        return fault_blocks(points, self.spec, self.done, fits)

    def told(self, point_id: str) -> dict | None:
        """The point's baseline row with its aggregates (None when absent from the table, or
        NaN aggregates when no sample could be simulated)."""
        rows = self.points.get(point_id)
        base = next((r for r in rows or () if r["fault_sample"] == 0), None)
        if base is None:
            return None
        samples = [{c: r[c] for c in SAMPLE_COLUMNS} for r in rows]
        aggregates = fault_aggregates(samples).get(point_id, dict.fromkeys(AGGREGATES, float("nan")))
        return {**base, **aggregates}


def per_point(table: pa.Table) -> pa.Table:
    """One row per point of a fault table: its baseline row (sample 0) with the columns
    `fault_aggregates` computes (null where no sample could be simulated)."""
    base = table.filter(pc.equal(table.column("fault_sample"), 0))
    aggregates = fault_aggregates(table)
    ids = base.column("point_id").to_pylist()
    for name in AGGREGATES:
        base = base.append_column(pa.field(name, pa.float64()),
                                  pa.array([aggregates.get(p, {}).get(name) for p in ids], pa.float64()))
    return base
