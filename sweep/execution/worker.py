"""What a worker runs: a batch of points (or of fault-sample blocks) into one Arrow table.

Batches amortise the per-task cost of Ray or a process pool and let core's memo caches work
across neighbouring points."""
from dataclasses import replace

import pyarrow as pa

from sweep.evaluation.context import SpecBatch, WorkContext
from sweep.evaluation.points import evaluate_points


def evaluate_batch(context: WorkContext, points: list) -> pa.Table:
    """One row per point, or in a faults study one row per (point, sample) of each block (see
    sweep.faults.evaluate)."""
    if isinstance(points, SpecBatch):
        context = replace(context, models=points.models, hardware=points.hardware)
        points = points.points
    if context.faults is not None:
        from sweep.faults.evaluate import evaluate_blocks  # the compiled simulator, only for fault studies
        return evaluate_blocks(context, points)
    return evaluate_points(context, points)
