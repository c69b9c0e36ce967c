"""The end-of-run summary of `rapid sweep` on a study with a `search:` block."""
import math

from sweep.metrics import AGGREGATES
from sweep.store.query import knob_columns, render, summary_columns, wide_console
from sweep.search.loop import TRIAL_COLUMN, best_rows, constraint_label, run_search
from sweep.search.storage import load_hint
from sweep.store.parts import read_results


def run(study, args) -> int:
    spec = study.search
    executor = "local" if args.local else "ray"
    report = run_search(study, executor=executor, address=args.address, workers=args.workers, fresh=args.fresh,
                        progress=not args.quiet, wait=args.wait)
    console = wide_console()
    size = study.space.size()
    console.print(f"[bold]{study.name}[/]: {spec.sampler} search, {report.trials} of {spec.trials} trials "
                  f"({report.before} before this run, {report.resumed} resumed from a stopped run) over "
                  f"{'a continuous space' if math.isinf(size) else f'{size:,.0f} combinations'}")
    rate = f" in {report.seconds:.1f} s" if report.seconds else ""
    samples = f" ({report.sample_rows} fault-sample rows)" if study.faults is not None else ""
    console.print(f"evaluated {report.evaluated} points{samples}{rate}; {report.from_table} trials answered from the table; "
                  f"{report.illegal} illegal and {report.infeasible} memory-infeasible trials told to Optuna as infeasible")
    console.print(f"optuna: study {study.name!r} in {spec.storage}  ({load_hint(spec.storage)})")
    table = read_results(study.output)
    best = best_rows(study, table)
    if best.num_rows:
        columns = [TRIAL_COLUMN] + summary_columns(best, knob_columns(study.output))
        if study.faults is not None:  # a point's tail under faults, not its baseline sample
            columns = [c for c in columns if c not in ("fault_sample", "slowdown")] + list(AGGREGATES)
        objectives = ", ".join(f"{d} {c}" for c, d in spec.objectives)
        title = (f"Pareto front ({best.num_rows} trials; {objectives})" if len(spec.objectives) > 1
                 else f"best {min(args.top, best.num_rows)} trials ({objectives})")
        shown = best if len(spec.objectives) > 1 else best.slice(0, args.top)
        render(shown.select([c for c in columns if c in shown.column_names]), "table", title=title, console=console)
    else:
        bounds = f" within {', '.join(constraint_label(*c) for c in spec.constraints)}" if spec.constraints else ""
        console.print(f"no trial so far is feasible{bounds}, so there is no best one to show")
    if report.refine and not report.refine.rows:
        console.print(f"refinement with {report.refine.backend}: no feasible trial to re-evaluate")
    elif report.refine:
        refined = report.refine
        console.print(f"refinement with {refined.backend}: {refined.rows} best trials by {spec.objectives[0][0]} "
                      f"({refined.evaluated} evaluated now); Kendall tau between the rankings = {refined.kendall_tau:.3f}")
        moves = ", ".join(f"#{n}: {a}->{b}" for n, a, b in refined.ranks if a != b)
        console.print(f"  rank changes (trial: {study.backend} -> {refined.backend}): {moves or 'none'}")
    return 0
