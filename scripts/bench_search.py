"""How fast Optuna search finds good layouts, against random search (prints, asserts nothing).

1. On studies/llama70b_64gpu.yaml's space (evaluated once as a grid): trials and distinct
   evaluations TPE and random search need before a feasible point within 1 % of the grid's
   best step time, median over 5 seeds. The samplers run through `SearchLoop` (the driver's
   own ask/tell, constraints and distributions) on in-memory Optuna storage, answered from
   the grid table, as the driver answers points the table holds.
2. On studies/search_70b_hardware.yaml's space (parallel layout x HBM bandwidth x L2 size x
   IB rate, > 10^6 combinations): the hypervolume NSGA-II and random search reach over
   (step time, memory) in the same number of trials, each run by `rapid sweep`'s driver
   (`run_search`) on a local process pool; reference point: the worst value of each
   objective over both Pareto fronts.

    python scripts/bench_search.py [--seeds 5] [--trials 2000] [--workers 2] [--skip-grid | --skip-pareto]
"""
import argparse
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import optuna

from sweep.execution.engine import run_study
from sweep.study.plan import Planner
from sweep.search.loop import SearchLoop, best_rows, run_search
from sweep.study.search_block import SearchSpec
from sweep.store.parts import read_results
from sweep.study.loader import load_study

ROOT = Path(__file__).resolve().parent.parent
GRID_STUDY = ROOT / "studies" / "llama70b_64gpu.yaml"
PARETO_STUDY = ROOT / "studies" / "search_70b_hardware.yaml"
WITHIN = 0.01


def reach(study, rows: dict, sampler: str, seed: int, target: float, cap: int) -> tuple:
    """(trials, distinct evaluations) until a feasible step time <= target; None if not within `cap` trials."""
    spec = SearchSpec(sampler, cap, 1, (("step_time_s", "minimize"),), (), "", seed, None)
    searched = replace(study, search=spec)
    loop = SearchLoop(searched, Planner(searched), storage=optuna.storages.InMemoryStorage())
    seen = set()
    for trial in range(1, cap + 1):
        (asked,) = loop.ask(1)
        row = None if isinstance(asked.point, str) else rows[asked.point.point_id]
        loop.tell(asked, row)
        if row is None:
            continue
        seen.add(row["point_id"])
        if row["feasible"] and row["step_time_s"] <= target:
            return trial, len(seen)
    return None, len(seen)


def grid_benchmark(seeds: int, folder: Path) -> None:
    study = replace(load_study(GRID_STUDY), output=folder / "grid")
    start = time.perf_counter()
    plan_report = run_study(study, executor="inprocess", progress=False)
    table = read_results(study.output)
    rows = {r["point_id"]: r for r in table.to_pylist()}
    best = min(r["step_time_s"] for r in rows.values() if r["feasible"])
    target = best * (1 + WITHIN)
    near = sum(1 for r in rows.values() if r["feasible"] and r["step_time_s"] <= target)
    legal = len(rows)
    print(f"grid {GRID_STUDY.name}: {plan_report.plan.total} combinations, {legal} legal points evaluated in "
          f"{time.perf_counter() - start:.1f} s; best step time {best:.4f} s; {near} points within {WITHIN:.0%} "
          f"(blind draws without repeats expect {(legal + 1) / (near + 1):.0f} evaluations to meet one)")
    cap = legal * 2
    for sampler in ("tpe", "random"):
        trials, evaluations = [], []
        for seed in range(seeds):
            t, e = reach(study, rows, sampler, seed, target, cap)
            trials.append(t if t is not None else float("inf"))
            evaluations.append(e if t is not None else float("inf"))
            print(f"  {sampler:6s} seed {seed}: " + (f"{t} trials, {e} distinct evaluations" if t else f"not within {cap} trials"))
        med_e = statistics.median(evaluations)
        print(f"{sampler}: median {statistics.median(trials)} trials, {med_e} evaluations "
              f"= {med_e / legal:.1%} of the grid's {legal} evaluations (mean {statistics.mean(evaluations):.0f})")


def hypervolume_2d(points: list, reference: tuple) -> float:
    """Area dominated by `points` (both objectives minimised) and bounded by `reference`."""
    front, best_second = [], float("inf")
    for a, b in sorted(points):
        if b < best_second and a < reference[0] and b < reference[1]:
            front.append((a, b))
            best_second = b
    area, previous = 0.0, reference[1]
    for a, b in front:
        area += (reference[0] - a) * (previous - b)
        previous = b
    return area


def pareto_benchmark(trials: int, workers: int, seed: int, folder: Path) -> None:
    base = load_study(PARETO_STUDY)
    fronts = {}
    for sampler in ("nsga2", "random"):
        output = folder / sampler
        study = replace(base, name=f"bench-{sampler}", output=output,
                        search=replace(base.search, sampler=sampler, trials=trials, seed=seed,
                                       storage=f"sqlite:///{output / 'optuna.db'}"))
        start = time.perf_counter()
        report = run_search(study, executor="local", workers=workers, progress=False)
        table = read_results(output)
        front = best_rows(study, table).to_pylist()  # feasible, within the study's constraints, non-dominated
        fronts[sampler] = [(r["step_time_s"], r["memory_peak_gib"]) for r in front]
        print(f"{sampler}: {report.trials} trials, {report.evaluated} evaluated, {report.illegal} illegal, "
              f"{report.infeasible} memory-infeasible, {len(front)} on its Pareto front, "
              f"{time.perf_counter() - start:.0f} s")
    everything = [p for points in fronts.values() for p in points]
    reference = (max(a for a, _ in everything), max(b for _, b in everything))  # worst of the two fronts
    print(f"hypervolume over (step_time_s, memory_peak_gib), reference ({reference[0]:.3f} s, {reference[1]:.2f} GiB), "
          f"{trials} trials each:")
    for sampler, points in fronts.items():
        print(f"  {sampler:6s} {hypervolume_2d(points, reference):.3f} s*GiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=2000, help="trials per sampler in the Pareto benchmark")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip-grid", action="store_true")
    parser.add_argument("--skip-pareto", action="store_true")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as folder:
        if not args.skip_grid:
            grid_benchmark(args.seeds, Path(folder))
        if not args.skip_pareto:
            pareto_benchmark(args.trials, args.workers, 0, Path(folder))


if __name__ == "__main__":
    main()
