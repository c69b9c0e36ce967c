"""What a worker runs: a batch of points (or of fault-sample blocks) into one Arrow table.

Batches amortise the per-task cost of Ray or a process pool and let core's memo caches work
across neighbouring points."""
from dataclasses import replace

from sweep.evaluation.context import SpecBatch, WorkContext
from sweep.evaluation.points import evaluate_points
from sweep.study.grid import ChunkRange, GridSlice


def evaluate_batch(context: WorkContext, points: list):
    """One row per point, or in a faults study one row per (point, sample) of each block (see
    sweep.faults.evaluate). Where workers plan the grid: a ChunkRange's Verdict (the count
    pass), or a GridSlice's points but those the table holds, planned and evaluated (None when
    it holds them all)."""
    if isinstance(points, ChunkRange):
        return context.grid.verdict(points)
    if isinstance(points, GridSlice):
        block = context.grid.block(context.grid.picked(points.numbers), context.done)
        return evaluate_points(context, block) if len(block) else None
    if isinstance(points, SpecBatch):
        context = replace(context, models=points.models, hardware=points.hardware)
        points = points.points
    if context.faults is not None:
        from sweep.faults.evaluate import evaluate_blocks  # the compiled simulator, only for fault studies
        return evaluate_blocks(context, points)
    return evaluate_points(context, points)
