"""Optuna-driven search: a third way (after the grid and fault samples) to produce points for
the same executors and the same table.

The driver asks `parallel` trials, turns each into a point with `Planner.point`, answers
points the table already holds from it, evaluates the rest as batches on Ray, a process pool
or in-process, writes one Parquet part per round (every legal trial a row, with
`trial_number` and `sampler`), and only then tells Optuna; the rounds' parts are compacted
when the search ends. Illegal and memory-infeasible points are told as PRUNED with a violated
`feasible` constraint (`Trial.set_constraint`), never as made-up objective values; memory is
checked before any timing (`core.evaluate`).

With a `faults:` block each trial's point is replayed under the study's fault samples by the
grid's fault blocks and workers, one row per (point, sample) stamped with the first trial that
asked for it, and trials are told the point's fault aggregates too (sweep.search.fault_rows).

Only this driver process talks to the Optuna storage; workers see points, never trials.
A run killed at any moment resumes: trials left RUNNING are finished from the table when
their row was written, re-evaluated when it was not, and asking goes on up to `trials`."""
import math
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import optuna
import pyarrow as pa

from core import SpecError

from sweep.execution import raycluster
from sweep.execution.engine import PART_ROWS, progress_bar, study_metadata, work_context
from sweep.faults.draws import FaultBlock, memory_fits
from sweep.study.plan import Planner, Point
from sweep.store.query import TRIAL_COLUMN, first_per_point, front_candidates, pareto_front
from sweep.execution.runner import make_executor, run_batches
from .fault_rows import FaultRows, per_point
from .storage import open_storage
from sweep.study.search_block import SearchSpec
from sweep.store.parts import SEARCH_KEY, ResultStore, read_results
from sweep.study.loader import Study
from sweep.evaluation.context import SpecBatch

SAMPLER_COLUMN = "sampler"
FEASIBLE_CONSTRAINT = "feasible"  # Optuna constraint: 0 for a legal point that fits in memory, 1 otherwise


@dataclass(frozen=True)
class Asked:
    """One trial of a round: its number, the knob values it chose and what they mean."""
    trial: optuna.trial.Trial
    choice: dict
    point: Point | str  # the reason, for an illegal layout

    @property
    def number(self) -> int:
        return self.trial.number


@dataclass
class RefineReport:
    backend: str
    rows: int = 0
    evaluated: int = 0
    kendall_tau: float = math.nan
    ranks: list = field(default_factory=list)  # (trial_number, rank by the study's backend, rank by `backend`)


@dataclass
class SearchReport:
    """What one search run did, for the end-of-run summary."""
    trials: int  # trials in the Optuna study now
    before: int  # trials finished before this run
    resumed: int = 0  # trials a killed run left RUNNING, finished now
    evaluated: int = 0  # points evaluated now
    sample_rows: int = 0  # with a faults: block, (point, sample) rows written now
    from_table: int = 0  # trials answered from rows already in the table
    illegal: int = 0
    infeasible: int = 0
    parts: int = 0
    seconds: float = 0.0
    refine: RefineReport | None = None


class SearchLoop:
    """The Optuna side of a search: the study in its storage, the sampler, the parameter
    distributions the space defines, asking rounds and telling outcomes. No evaluation here."""

    def __init__(self, study: Study, planner: Planner, storage=None):
        """`storage`: an Optuna storage object to use instead of the block's URL (benchmarks)."""
        self.study, self.spec, self.planner = study, study.search, planner
        knobs = study.space.knobs
        self.fixed = {k.name: k.values[0] for k in knobs if not k.range and len(k.values) == 1}
        self.distributions = {k.name: _distribution(k) for k in knobs if k.name not in self.fixed}
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage = storage or open_storage(self.spec.storage)
        existing = _existing_trials(storage, study.name)
        self.optuna = optuna.create_study(storage=storage, study_name=study.name, load_if_exists=True,
                                          sampler=make_sampler(self.spec, self.spec.seed + existing),
                                          directions=self.spec.directions)
        if existing or self.optuna.metric_names:
            self._check_same_objectives()
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                self.optuna.set_metric_names(self.spec.objective_columns)

    def _check_same_objectives(self) -> None:
        if self.optuna.metric_names != self.spec.objective_columns or \
                [d.name.lower() for d in self.optuna.directions] != self.spec.directions:
            raise SpecError(self.study.path, "search.objectives", self.spec.objective_columns,
                            f"the Optuna study {self.study.name} in {self.spec.storage} optimises "
                            f"{self.optuna.metric_names}; run with --fresh or use another storage")

    def count(self) -> int:
        return len(self.optuna.get_trials(deepcopy=False))

    def finished(self) -> int:
        return self.count() - len(self._running())

    def _running(self) -> list:
        return self.optuna.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))

    def stale(self) -> list:
        """Trials a killed driver asked but never told, rebuilt from their stored parameters; one
        stopped while Optuna was still drawing them draws the ones it lacks now."""
        asked = []
        for frozen in self._running():
            trial = optuna.trial.Trial(self.optuna, frozen._trial_id)
            missing = {name: _suggest(trial, name, distribution)
                       for name, distribution in self.distributions.items() if name not in frozen.params}
            asked.append(self._asked(trial, {**frozen.params, **missing}))
        return asked

    def ask(self, n: int) -> list:
        asked = []
        for _ in range(n):
            trial = self.optuna.ask(self.distributions)
            asked.append(self._asked(trial, trial.params))
        return asked

    def _asked(self, trial, params: dict) -> Asked:
        choice = {**self.fixed, **params}
        return Asked(trial, choice, self.planner.point(choice))

    def tell(self, asked: Asked, row: dict | None) -> None:
        """Tell a trial its row (None: an illegal layout). Feasible rows are COMPLETE with their
        objective values; illegal and memory-infeasible ones PRUNED, with `feasible` violated."""
        trial = asked.trial
        feasible = row is not None and row["feasible"]
        stored = trial.constraints  # a trial a killed driver had begun telling holds some already (the same values)
        for name, value in constraint_values(self.spec, row).items():
            if name not in stored:
                trial.set_constraint(name, value)
        if row is None:
            trial.set_user_attr("illegal_reason", asked.point)
        else:
            trial.set_user_attr("point_id", row["point_id"])
            if not feasible:
                trial.set_user_attr("infeasible_reason", row["infeasible_reason"])
        if not feasible:
            self.optuna.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return
        values = [row[column] for column in self.spec.objective_columns]
        missing = any(v is None or math.isnan(v) for v in values)
        if missing and self.study.faults is not None:
            trial.set_user_attr("fault_reason", "no fault sample of this point could be simulated")
            self.optuna.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        if missing:
            raise SpecError(self.study.path, "search.objectives", self.spec.objective_columns,
                            f"a feasible {self.study.mode} row has no value for one of them")
        self.optuna.tell(trial, values)


def constraint_values(spec: SearchSpec, row: dict | None) -> dict:
    """Optuna constraints by name (<= 0 is satisfied): `feasible` is 1 for an illegal or
    memory-infeasible point, else 0; each study constraint is its excess over the bound
    (0 where the value was not computed: the point is already infeasible)."""
    values = {FEASIBLE_CONSTRAINT: 0.0 if row is not None and row["feasible"] else 1.0}
    for column, op, bound in spec.constraints:
        value = None if row is None else row.get(column)
        excess = 0.0 if value is None or math.isnan(value) else (value - bound if op == "<=" else bound - value)
        values[constraint_label(column, op, bound)] = excess
    return values


def constraint_label(column: str, op: str, bound: float) -> str:
    """A study constraint as written and as Optuna records it: `memory_peak_gib <= 60`."""
    return f"{column} {op} {bound:g}"


def make_sampler(spec: SearchSpec, seed: int):
    """The Optuna sampler the block names; TPE, NSGA-II and GP read the trials' constraints."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if spec.sampler == "tpe":
            return optuna.samplers.TPESampler(seed=seed, constant_liar=spec.parallel > 1)
        if spec.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed)
        if spec.sampler == "gp":
            return optuna.samplers.GPSampler(seed=seed)
        if spec.sampler == "cmaes":
            return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        if spec.sampler == "qmc":
            return optuna.samplers.QMCSampler(seed=seed, scramble=True, warn_independent_sampling=False,
                                              warn_asynchronous_seeding=False)
        return optuna.samplers.RandomSampler(seed=seed)


def _distribution(knob):
    span = knob.range
    if span is None:
        return optuna.distributions.CategoricalDistribution(list(knob.values))
    if span.integer:
        return optuna.distributions.IntDistribution(int(span.low), int(span.high), log=span.log, step=int(span.step or 1))
    return optuna.distributions.FloatDistribution(span.low, span.high, log=span.log, step=span.step)


def _suggest(trial, name: str, distribution):
    """Draw one parameter of `trial` from `distribution` through Optuna's public suggest API."""
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, optuna.distributions.IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)
    return trial.suggest_float(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)


def _existing_trials(storage, name: str) -> int:
    try:
        return len(optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False))
    except KeyError:
        return 0


def search_metadata(study: Study) -> dict:
    return {**study_metadata(study), SEARCH_KEY: study.search.storage, "optuna_study": study.name,
            "sampler": study.search.sampler}


def run_search(study: Study, executor: str = "ray", address: str | None = None, workers: int | None = None,
               fresh: bool = False, progress: bool = True, wait: bool = False) -> SearchReport:
    """Continue the study's Optuna study up to `trials`, then refine if asked, holding the
    output folder's lock (`wait`: queue behind another writer) as a grid sweep does."""
    if executor == "ray":
        raycluster.preflight(address)
    with ResultStore(study.output, search_metadata(study), fresh=fresh, wait=wait) as store:
        if fresh:
            _delete_optuna_study(study.search.storage, study.name)
        return _search(study, store, executor, address, workers, progress)


def _search(study: Study, store: ResultStore, executor: str, address, workers, progress: bool) -> SearchReport:
    spec = study.search
    planner = Planner(study)
    loop = SearchLoop(study, planner)
    table = read_results(study.output)
    rows = _TableRows(table, study.backend) if study.faults is None else FaultRows(table, study.faults)
    play = _round if study.faults is None else _fault_round
    report = SearchReport(trials=spec.trials, before=loop.finished())
    executors = _Executors(study, executor, address, workers)
    start = time.perf_counter()
    try:
        asked = loop.stale()
        report.resumed = len(asked)
        with progress_bar(progress, max(0, spec.trials - report.before), "trials") as bar:
            while True:
                asked += loop.ask(max(0, min(spec.parallel, spec.trials - loop.count())))
                if not asked:
                    break
                play(study, loop, planner, asked, rows, store, executors, report)
                bar.advance(len(asked))
                asked = []
        if spec.refine:
            report.refine = refine(study, loop, rows, store, executors, report)
    finally:
        executors.close()
    report.seconds = time.perf_counter() - start
    report.trials = loop.count()
    store.compact(PART_ROWS)  # one part per round would leave thousands; Optuna's storage is untouched
    return report


def _round(study, loop, planner, asked, rows, store, executors, report) -> None:
    """Evaluate one round's new points, write its rows as one part, then tell every trial."""
    todo = {}
    for a in asked:
        if isinstance(a.point, Point) and rows.by_trial(a.number) is None and rows.by_point(a.point.point_id, study.backend) is None:
            todo.setdefault(a.point.point_id, a.point)
    evaluated = executors.evaluate(study.backend, planner, list(todo.values()))
    report.evaluated += len(evaluated)
    new, used = [], set()
    for a in asked:
        if isinstance(a.point, str) or rows.by_trial(a.number) is not None:
            continue
        point_id = a.point.point_id
        copied = point_id not in evaluated or point_id in used  # the first trial on a new point owns its time
        used.add(point_id)
        report.from_table += point_id not in evaluated
        source = evaluated[point_id] if point_id in evaluated else rows.by_point(point_id, study.backend)
        new.append(_with_trial(source, a.number, study.search.sampler, copied))
    if new:
        store.write_part(new)
        report.parts += 1
        for row in new:
            rows.add(row)
    for a in asked:
        row = None if isinstance(a.point, str) else rows.by_trial(a.number).to_pylist()[0]
        report.illegal += row is None
        report.infeasible += row is not None and not row["feasible"]
        loop.tell(a, row)


def _fault_round(study, loop, planner, asked, rows: FaultRows, store, executors, report) -> None:
    """One round with fault samples: replay the samples the round's points lack, write them as
    one part stamped with the first trial asking for each point, then tell every trial."""
    owners = {}  # point_id -> (the first trial asking for it, the point)
    for a in asked:
        if isinstance(a.point, Point):
            owners.setdefault(a.point.point_id, (a.number, a.point))
    blocks = rows.missing([point for _, point in owners.values()], memory_fits(work_context(study, *planner.specs())))
    fresh = {block.point.point_id for block in blocks}
    report.evaluated += len(fresh)
    tables = [_stamp(t, [owners[p][0] for p in t.column("point_id").to_pylist()], study.search.sampler)
              for t in executors.evaluate_blocks(study.backend, planner, blocks)]
    if tables:
        report.sample_rows += store.write_part(tables)
        report.parts += 1
        for table in tables:
            rows.add(table)
    for a in asked:
        row = None if isinstance(a.point, str) else rows.told(a.point.point_id)
        report.from_table += row is not None and a.point.point_id not in fresh
        report.illegal += row is None
        report.infeasible += row is not None and not row["feasible"]
        loop.tell(a, row)


def _stamp(table: pa.Table, numbers: list, sampler: str) -> pa.Table:
    """`table` with a trial number per row and the sampler, right after point_id."""
    for name in (TRIAL_COLUMN, SAMPLER_COLUMN):
        if name in table.column_names:
            table = table.drop_columns([name])
    table = table.add_column(1, pa.field(TRIAL_COLUMN, pa.int64()), pa.array(numbers, pa.int64()))
    return table.add_column(2, pa.field(SAMPLER_COLUMN, pa.string()), pa.array([sampler] * len(numbers), pa.string()))


def _with_trial(row: pa.Table, number: int, sampler: str, copied: bool) -> pa.Table:
    """A one-row table stamped with its trial; a row copied from another trial took no
    evaluation time."""
    row = _stamp(row, [number], sampler)
    if copied and "eval_time_s" in row.column_names:
        index = row.column_names.index("eval_time_s")
        row = row.set_column(index, row.schema.field(index), pa.array([0.0], pa.float64()))
    return row


class _TableRows:
    """The study's table indexed by (point_id, backend) and by trial number (rows of `backend`).
    The backend is part of the key so that a refinement never mistakes a row of another
    backend for its own, however point ids are computed."""

    def __init__(self, table: pa.Table, backend: str):
        self.backend = backend
        self.points, self.trials = {}, {}
        for i in range(table.num_rows):
            self.add(table.slice(i, 1))

    def add(self, row: pa.Table) -> None:
        self.points.setdefault((row.column("point_id")[0].as_py(), row.column("backend")[0].as_py()), row)
        if TRIAL_COLUMN in row.column_names and row.column("backend")[0].as_py() == self.backend:
            number = row.column(TRIAL_COLUMN)[0].as_py()
            if number is not None:
                self.trials.setdefault(number, row)

    def by_point(self, point_id: str, backend: str) -> pa.Table | None:
        return self.points.get((point_id, backend))

    def by_trial(self, number: int) -> pa.Table | None:
        return self.trials.get(number)


class _Executors:
    """One executor per backend, started when first needed (a run answered wholly from the
    table starts no Ray), closed in reverse order so a reused Ray is shut down last."""

    def __init__(self, study: Study, kind: str, address, workers):
        self.study, self.kind, self.address, self.workers = study, kind, address, workers
        self.started = {}

    def evaluate(self, backend: str, planner: Planner, points: list) -> dict:
        """point_id -> one-row table, for every point."""
        out = {}
        for table in self._tables(backend, planner, points):
            for i in range(table.num_rows):
                out[table.column("point_id")[i].as_py()] = table.slice(i, 1)
        return out

    def evaluate_blocks(self, backend: str, planner: Planner, blocks: list) -> list:
        """One table per batch of FaultBlocks: a row per (point, sample) of each block."""
        return self._tables(backend, planner, blocks)

    def _tables(self, backend: str, planner: Planner, work: list) -> list:
        if not work:
            return []
        if backend not in self.started:
            context = work_context(replace(self.study, backend=backend))
            self.started[backend] = make_executor(self.kind, context, self.address, self.workers)
        runner = self.started[backend]
        size = max(1, math.ceil(len(work) / runner.workers))
        batches = [_spec_batch(planner, work[i:i + size]) for i in range(0, len(work), size)]
        tables = []
        run_batches(runner, batches, lambda table, batch: tables.append(table))
        return tables

    def close(self) -> None:
        for runner in reversed(list(self.started.values())):
            runner.close()
        self.started.clear()


def _spec_batch(planner: Planner, work: list) -> SpecBatch:
    """The points (or FaultBlocks) with only the spec variants they use, indices renumbered."""
    models, hardware = planner.specs()
    points = [w.point if isinstance(w, FaultBlock) else w for w in work]
    model_ids = {old: new for new, old in enumerate(sorted({p.model_index for p in points}))}
    hardware_ids = {old: new for new, old in enumerate(sorted({p.hardware_index for p in points}))}

    def renumbered(p: Point) -> Point:
        return replace(p, model_index=model_ids[p.model_index], hardware_index=hardware_ids[p.hardware_index])

    return SpecBatch(tuple(replace(w, point=renumbered(w.point)) if isinstance(w, FaultBlock) else renumbered(w)
                           for w in work),
                     tuple(models[i] for i in model_ids), tuple(hardware[i] for i in hardware_ids))


def _delete_optuna_study(url: str, name: str) -> None:
    try:
        optuna.delete_study(study_name=name, storage=open_storage(url))
    except KeyError:
        pass


def best_rows(study: Study, table: pa.Table) -> pa.Table:
    """The search's feasible trials that meet every constraint, one row per configuration
    (with a faults: block, its baseline row and fault aggregates): sorted by the objective
    for one objective, the Pareto front for several."""
    spec = study.search
    if TRIAL_COLUMN not in table.column_names:
        return table.slice(0, 0)
    if study.faults is not None:
        table = per_point(table)
    rows = first_per_point(front_candidates(table, study.backend, spec.constraints))
    if len(spec.objectives) > 1:
        return pareto_front(rows, [(c, d == "maximize") for c, d in spec.objectives])
    column, direction = spec.objectives[0]
    return rows.sort_by([(column, "descending" if direction == "maximize" else "ascending"), (TRIAL_COLUMN, "ascending")])


def refine(study: Study, loop: SearchLoop, rows: _TableRows, store: ResultStore, executors: _Executors,
           report: SearchReport) -> RefineReport:
    """Re-evaluate the `top` best rows (by the first objective) with the refinement backend,
    add them to the table under that backend, and compare the two rankings (Kendall tau)."""
    from scipy.stats import kendalltau

    spec, backend = study.search, study.search.refine.backend
    result = RefineReport(backend)
    column, direction = spec.objectives[0]
    best = best_rows(replace(study, search=replace(spec, objectives=spec.objectives[:1])), read_results(study.output))
    best = best.slice(0, spec.refine.top)
    planner = Planner(replace(study, backend=backend))
    trials = {t.number: t for t in loop.optuna.get_trials(deepcopy=False)}
    points = {n: planner.point({**loop.fixed, **trials[n].params}) for n in best.column(TRIAL_COLUMN).to_pylist()}
    known = {p.point_id: rows.by_point(p.point_id, backend) for p in points.values()
             if rows.by_point(p.point_id, backend) is not None}
    evaluated = executors.evaluate(backend, planner, [p for p in points.values() if p.point_id not in known])
    result.evaluated = len(evaluated)
    new = [_with_trial(evaluated[p.point_id], n, spec.sampler, False) for n, p in points.items() if p.point_id in evaluated]
    if new:
        store.write_part(new)
        report.parts += 1
    refined = {**known, **evaluated}
    base = dict(zip(best.column(TRIAL_COLUMN).to_pylist(), best.column(column).to_pylist()))
    pairs = [(n, base[n], refined[p.point_id].column(column)[0].as_py()) for n, p in points.items()]
    pairs = [(n, a, b) for n, a, b in pairs if a is not None and b is not None]
    result.rows = len(pairs)
    sign = -1 if direction == "maximize" else 1
    rank_a = _ranks([sign * a for _, a, _ in pairs])
    rank_b = _ranks([sign * b for _, _, b in pairs])
    result.ranks = [(n, ra, rb) for (n, _, _), ra, rb in zip(pairs, rank_a, rank_b)]
    if len(pairs) >= 2:
        result.kendall_tau = float(kendalltau([a for _, a, _ in pairs], [b for _, _, b in pairs]).statistic)
    return result


def _ranks(values: list) -> list:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0] * len(values)
    for rank, i in enumerate(order, 1):
        ranks[i] = rank
    return ranks
