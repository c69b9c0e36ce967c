"""Run a study end to end: plan, skip what the table already holds, evaluate the rest on
an executor, write the results in parts as they stream in, and compact the small parts."""
import hashlib
import itertools
import json
import math
import subprocess
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from importlib import metadata as package_metadata
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn,
                           TimeElapsedColumn, TimeRemainingColumn)

from core import MODEL_VERSION
from core.model.specs import POOL_KNOBS

from . import raycluster
from .rates import remember_rate
from sweep.faults.draws import KEY_COLUMNS, fault_blocks, memory_fits
from sweep.study.grid import (DoneIds, GridPlanner, GridSlice, PointBlock, check_faulted_network, grid_size,
                              plan_study)
from sweep.study.plan import Plan, definition_digests, locality_key
from .runner import make_executor, run_batches
from sweep.study.space import AUTO
from sweep.store.parts import DEFINITION_KEY, ResultStore, finished_summary
from sweep.study.loader import Study
from sweep.evaluation.context import WorkContext, knob_type, unit_columns

MAX_BATCH_POINTS = 2048
PART_ROWS = 20_000
PART_SECONDS = 5.0


@dataclass
class SweepReport:
    """What one `rapid sweep` did, for the end-of-run summary."""
    plan: Plan  # without points when a finished study's re-run answered from its record
    legal: int  # legal points in the plan
    skipped: int = 0  # already in the table from an earlier run
    evaluated: int = 0
    feasible: int = 0
    infeasible: int = 0
    parts: int = 0
    seconds: float = 0.0
    driver_cpu_s: float = 0.0  # CPU time of the driver's own process over those seconds (coordinating, writing)


def run_study(study: Study, executor: str = "ray", address: str | None = None, workers: int | None = None,
              fresh: bool = False, batch_points: int | None = None, part_rows: int = PART_ROWS,
              part_seconds: float = PART_SECONDS, progress: bool = True, wait: bool = False) -> SweepReport:
    """Plan the study (raises SpecError before touching the disk), then evaluate what is missing
    while holding the output folder's lock (`wait`: queue behind another writer). A finished
    study whose table is as its run left it is answered from its record, without planning."""
    key = finished_key(study)
    summary = None if fresh else finished_summary(study.output, key)
    if summary is not None:
        plan = Plan((), (), (), Counter(summary["illegal"]), summary["examples"], summary["total"], summary["legal"])
        return SweepReport(plan, summary["legal"], skipped=summary["rows"])
    if executor == "ray":
        raycluster.preflight(address)
    grid, runner, verdicts = None, None, ()
    try:
        with planning_bar(progress, grid_size(study.space)) as bar:
            if study.faults is None:
                plan, grid, verdicts, runner = _count(study, executor, address, workers, bar.advance)
            else:
                plan = plan_study(study, points=True, progress=bar.advance)
        start = time.perf_counter()
        with ResultStore(study.output, study_metadata(study), fresh=fresh, wait=wait) as store:
            report = _evaluate_missing(study, plan, grid, verdicts, store, runner, executor, address, workers,
                                       batch_points, part_rows, part_seconds, progress)
            store.compact(part_rows)
            store.mark_finished(key, {"total": plan.total, "legal": report.legal, "illegal": dict(plan.illegal),
                                      "examples": plan.illegal_examples, "rows": report.skipped + report.evaluated})
    finally:
        if runner is not None:
            runner.close()
    if report.evaluated:
        remember_rate(f"run {study.backend}", plan.total, time.perf_counter() - start)
    return report


def finished_key(study: Study) -> str:
    """A digest of everything a study's plan and rows depend on: the study text, the specs'
    contents, the model and tool versions and the git commit."""
    return hashlib.sha256(json.dumps(study_metadata(study), sort_keys=True).encode()).hexdigest()


def _count(study, executor, address, workers, progress) -> tuple:
    """The grid's count pass: every chunk judged, on Ray's workers (which then plan the points
    too: the runner, returned, holds the grid) or here; (Plan without points, the GridPlanner,
    the Verdicts in grid order, that runner or None). A space without a legal point is a study
    error."""
    check_faulted_network(study)
    grid = GridPlanner(study)
    runner, verdicts = None, []
    try:
        if executor == "ray":
            runner = make_executor(executor, replace(work_context(study, grid.models, grid.hardware), grid=grid),
                                   address, workers)

            def take(verdict, part) -> None:
                grid.add(verdict)
                verdicts.append(verdict)
                progress(part.stop - part.start)

            run_batches(runner, grid.ranges(), take)
            verdicts.sort(key=lambda verdict: verdict.start)
        else:
            for part in grid.ranges():
                verdicts.append(grid.verdict(part))
                grid.add(verdicts[-1])
                progress(part.stop - part.start)
        grid.refuse_empty()
    except BaseException:
        if runner is not None:
            runner.close()
        raise
    illegal, examples = grid.reasons()
    return Plan((), grid.models, grid.hardware, illegal, examples, grid.total, grid.legal), grid, verdicts, runner


def _evaluate_missing(study, plan, grid, verdicts, store, runner, executor, address, workers, batch_points, part_rows,
                      part_seconds, progress) -> SweepReport:
    """Evaluate what the table lacks on `runner` (one started here when None, closed here)."""
    context = work_context(study, plan.models, plan.hardware)
    if study.faults is None:
        done = DoneIds(store.done_ids())
        report = SweepReport(plan, plan.legal)
        rows = max(0, plan.legal - len(done))  # done rows of points the space still holds, as a rule all
        units = rows
        if runner is None:
            todo = _grid_blocks(grid, verdicts, done, report)
        else:  # workers plan the points: they need the grid and the done ids
            runner.share(replace(context, grid=grid, done=done))
            size = batch_points or _batch_size(rows, runner.workers)
            todo = (GridSlice(numbers) for verdict in verdicts for numbers in _slices(verdict.numbers(), size))
    else:
        done = store.done_keys(KEY_COLUMNS)
        todo = fault_blocks(sorted(plan.points, key=locality_key), study.faults, done, memory_fits(context))
        report = SweepReport(plan, len(plan.points), skipped=len(done))  # rows: one per (point, sample)
        rows = sum(block.stop - block.start for block in todo)
        units = len(todo)  # a batch is cut in fault blocks, not rows
    todo = iter(todo)
    first = next(todo, None)  # planned up to the first point not done (all of them in a finished table)
    if first is None:
        return report
    todo = itertools.chain([first], todo)
    owned = runner is None
    if owned:
        runner = make_executor(executor, context, address, workers)
    if progress:
        Console(stderr=True).print(runner.note, highlight=False)
    size = batch_points or _batch_size(units, runner.workers)
    parts = _PartBuffer(store, part_rows, part_seconds)
    start, cpu_start = time.perf_counter(), time.process_time()
    try:
        with progress_bar(progress, rows, "points" if study.faults is None else "rows") as bar:
            def on_table(table: pa.Table | None, batch) -> None:
                if isinstance(batch, GridSlice):
                    report.skipped += len(batch) - (0 if table is None else table.num_rows)
                if table is None:
                    return
                feasible = pc.sum(table.column("feasible")).as_py() or 0
                report.evaluated += table.num_rows
                report.feasible += feasible
                report.infeasible += table.num_rows - feasible
                parts.add(table)
                bar.advance(table.num_rows)

            run_batches(runner, _batches(todo, size), on_table)
        report.seconds = time.perf_counter() - start  # the progress bar's span: one rate, not two
        report.driver_cpu_s = time.process_time() - cpu_start
    finally:
        parts.flush()  # whatever finished is kept, even when the run stops early
        if owned:
            runner.close()
    report.parts = parts.written
    return report


def _batch_size(rows: int, workers: int) -> int:
    """Units (points, or a fault study's blocks of samples) per batch: about eight batches a
    worker, at most MAX_BATCH_POINTS."""
    return max(1, min(MAX_BATCH_POINTS, math.ceil(rows / (workers * 8))))


def _slices(numbers, size: int):
    return (numbers[start:start + size] for start in range(0, len(numbers), size))


def _grid_blocks(grid: GridPlanner, verdicts, done: DoneIds, report: SweepReport):
    """The grid's legal points (the count pass's Verdicts) not in `done` as one PointBlock per
    chunk (the driver holds one chunk's arrays, not the study's points), each in dispatch
    order; skipped ones are counted."""
    for verdict in verdicts:
        block = grid.block(grid.picked(verdict.numbers()), skip=done)
        report.skipped += len(verdict.order) - len(block)
        if len(block):
            yield block


def _batches(items, size: int):
    """Batches of `size` points, pulled as the executor asks: slices of each PointBlock, each
    GridSlice as it is (already `size` points at most), or consecutive runs of points (or fault
    blocks)."""
    batch = []
    for item in items:
        if isinstance(item, GridSlice):
            yield item
            continue
        if isinstance(item, PointBlock):
            yield from (item.slice(start, start + size) for start in range(0, len(item), size))
            continue
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def work_context(study: Study, models: tuple = (), hardware: tuple = ()) -> WorkContext:
    """The per-study constants and column types every worker batch needs, with the spec
    variants points index into (a search ships its variants with each batch instead)."""
    swept = tuple((i, study.space.knobs[i].name) for i in study.space.workload_axes)
    not_constant = {name for _, name in swept}
    if study.mode == "serve" and "disagg" not in not_constant and not study.workload.disagg:
        not_constant |= set(POOL_KNOBS)  # no point has pools: no pool columns
    constants = (("model", study.model), ("hardware", study.hardware), ("gpus", study.gpus),
                 ("backend", study.backend)) + tuple((key, value) for key, value in asdict(study.workload).items()
                                                     if key not in not_constant)
    auto_types = {"dp": pa.int64(), "sp": pa.bool_(), "overlap_param_gather": pa.bool_()}
    fields = tuple(pa.field(k.column, auto_types[k.name] if k.values == (AUTO,) else knob_type(k.probe_values))
                   for k in study.space.knobs)
    return WorkContext(models, hardware, study.workload, study.gpus, study.backend, constants, fields,
                       unit_columns(study.space.knobs), study.faults, study.cost, swept)


def study_metadata(study: Study) -> dict:
    return {"study": study.text, "study_path": study.path, "study_name": study.name,
            "knobs": ",".join(study.space.columns), "model_version": MODEL_VERSION,
            DEFINITION_KEY: json.dumps(definition_digests(study), sort_keys=True),
            "version": tool_version(), "git_commit": git_commit()}


def tool_version() -> str:
    try:
        return package_metadata.version("rapid-sweep")
    except package_metadata.PackageNotFoundError:
        return "unknown"


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


class _PartBuffer:
    """Collects batch tables and writes them as one part every `rows` rows or `seconds` seconds."""

    def __init__(self, store: ResultStore, rows: int, seconds: float):
        self.store, self.rows, self.seconds = store, rows, seconds
        self.tables, self.buffered, self.since, self.written = [], 0, time.monotonic(), 0

    def add(self, table: pa.Table) -> None:
        self.tables.append(table)
        self.buffered += table.num_rows
        if self.buffered >= self.rows or time.monotonic() - self.since >= self.seconds:
            self.flush()

    def flush(self) -> None:
        if self.tables:
            self.store.write_part(self.tables)
            self.written += 1
        self.tables, self.buffered, self.since = [], 0, time.monotonic()


class _RateColumn(ProgressColumn):
    """Items over the whole elapsed time: the figure the end-of-run summary prints too."""

    def __init__(self, unit: str):
        super().__init__()
        self.unit = unit

    def render(self, task):
        return f"{task.completed / task.elapsed:,.0f} {self.unit}/s" if task.elapsed and task.completed else ""


class _NoBar:
    def advance(self, n: int) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Bar:
    """A rich progress bar on stderr: points (or trials, or combinations planned) done, rate,
    elapsed and ETA."""

    def __init__(self, total: int, unit: str, label: str):
        self.progress = Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), _RateColumn(unit),
                                 TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                 console=Console(stderr=True))
        self.task = self.progress.add_task(unit, total=total)

    def advance(self, n: int) -> None:
        self.progress.advance(self.task, n)

    def __enter__(self):
        self.progress.start()
        return self

    def __exit__(self, *exc):
        self.progress.stop()
        return False


def progress_bar(enabled: bool, total: int, unit: str = "points", label: str = "evaluating"):
    return _Bar(total, unit, label) if enabled else _NoBar()


SHOW_PLANNING_ABOVE = 100_000  # combinations; smaller grids plan in well under a second


def planning_bar(enabled: bool, combinations: int):
    """A bar over the combinations planned, for grids large enough to take a while."""
    return progress_bar(enabled and combinations > SHOW_PLANNING_ABOVE, combinations, "combinations", "planning")
