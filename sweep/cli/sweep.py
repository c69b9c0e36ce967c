"""`rapid sweep STUDY`: run a study file and print what happened and the best configurations."""
import json
import sys
import time
from pathlib import Path

import pyarrow.compute as pc

from core import SpecError

from .args import POSITIVE, check_folder_path
from sweep.execution.engine import SHOW_PLANNING_ABOVE, planning_bar, run_study
from sweep.execution.rates import last_rate, remember_rate
from sweep.faults.draws import BLOCK_SAMPLES
from sweep.faults.summary import faults_summary
from sweep.study.grid import grid_size, plan_study
from sweep.store.query import SUMMARY_METRICS, knob_columns, query, render, summary_columns, wide_console
from sweep.store.parts import ResultStore, part_files, read_results, row_counts
from sweep.study.loader import load_study

SHOWN_REASONS = 5
ASK_ABOVE = 10**8  # combinations; a larger grid runs only when the user says so


def add_arguments(parser) -> None:
    parser.add_argument("study", metavar="STUDY", help="study file (YAML)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--address", help="run on an existing Ray cluster (host:port, or auto)")
    where.add_argument("--local", action="store_true", help="a plain local process pool instead of Ray")
    parser.add_argument("--workers", type=POSITIVE, help="worker processes (default: the machine's cores)")
    parser.add_argument("--fresh", action="store_true", help="discard the existing table and start over")
    parser.add_argument("--wait", action="store_true", help="if another sweep is writing the folder, wait for it")
    parser.add_argument("--output", metavar="DIR", help="results folder (default: the study's output)")
    parser.add_argument("--dry-run", action="store_true", help="plan only: counts and illegal reasons, nothing evaluated")
    parser.add_argument("--compact", action="store_true",
                        help="only merge the table's small parts into parts of at most --part-rows rows")
    parser.add_argument("--json", action="store_true", help="print one JSON summary instead of tables")
    parser.add_argument("--batch-points", type=POSITIVE,
                        help=f"points per worker task; in a fault study, blocks of up to {BLOCK_SAMPLES} samples "
                             "of a point (default: sized to the study)")
    parser.add_argument("--part-rows", type=POSITIVE, default=20_000, help="rows per Parquet part at most")
    parser.add_argument("--top", type=POSITIVE, default=10, help="best configurations to print")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--yes", action="store_true",
                        help=f"run a grid of more than {ASK_ABOVE:,} combinations without asking")


def run(args) -> int:
    study = load_study(args.study, output=args.output and str(checked_output(args.output)))
    if args.compact:
        return compact(study, args)
    if study.search is not None:
        if args.dry_run:
            raise SpecError(study.path, "search", study.search.sampler,
                            "--dry-run plans a grid; a search asks its points as it goes (drop --dry-run)")
        from . import search as cmd_search  # Optuna, only for a study with a search: block
        return cmd_search.run(study, args)
    quiet = args.quiet or args.json
    announce_size(study, "plan" if args.dry_run else f"run {study.backend}", quiet, args.yes)
    if args.dry_run:
        start = time.perf_counter()
        with planning_bar(not quiet, grid_size(study.space)) as bar:
            plan = plan_study(study, points=False, progress=bar.advance)
        remember_rate("plan", plan.total, time.perf_counter() - start)
        if args.json:
            print(json.dumps(plan_summary(study, plan, plan.legal)))
        else:
            print_plan(wide_console(), study, plan, plan.legal)
        return 0
    executor = "local" if args.local else "ray"
    report = run_study(study, executor=executor, address=args.address, workers=args.workers, fresh=args.fresh,
                       batch_points=args.batch_points, part_rows=args.part_rows,
                       progress=not quiet, wait=args.wait)
    if args.json:
        rows, feasible = row_counts(study.output)
        print(json.dumps({**plan_summary(study, report.plan, report.legal), "evaluated": report.evaluated,
                          "feasible_evaluated": report.feasible, "infeasible_evaluated": report.infeasible,
                          "skipped": report.skipped, "seconds": round(report.seconds, 3),
                          "driver_cpu_s": round(report.driver_cpu_s, 3),
                          "points_per_s": round(report.evaluated / report.seconds, 1) if report.seconds else None,
                          "rows": rows, "feasible_rows": feasible, "parts_written": report.parts}))
        return 0
    by = "step_time_s" if study.mode == "train" else "tokens_per_s"
    knobs = knob_columns(study.output)
    # what the summary shows, not the whole table (a few million rows of every column are GBs)
    wanted = None if study.faults is not None else {"point_id", "feasible", by, *knobs, *SUMMARY_METRICS}
    table = read_results(study.output, wanted)
    feasible = pc.sum(table.column("feasible")).as_py() or 0
    console = wide_console()
    plan = report.plan
    print_plan(console, study, plan, report.legal)
    unit = "points" if study.faults is None else "fault-sample rows"
    rate = f" in {report.seconds:.1f} s ({report.evaluated / report.seconds:,.0f} {unit}/s)" if report.seconds else ""
    console.print(f"evaluated {report.evaluated} {unit}{rate}: {report.feasible} fit in memory, "
                  f"{report.infeasible} do not (written, not timed); {report.skipped} already in the table")
    hint = f"--top 10 --by {by}" if study.faults is None else "--faults-summary"
    console.print(f"table: {study.output}/ ({table.num_rows} rows, {feasible} feasible; "
                  f"{report.parts} part(s) written now)  ->  rapid query {study.output} {hint}")
    outside = table.num_rows - report.legal if study.faults is None and study.search is None else 0
    if outside > 0:
        console.print(f"{outside} of those rows are of points outside this study's space (written by an earlier, "
                      "wider run of it): kept, and in the summary below; --fresh starts the table over")
    if study.faults is not None:
        fragile = faults_summary(table, knob_columns(study.output)).slice(0, args.top)
        render(fragile, "table", title=f"{fragile.num_rows} most fragile points under faults", console=console)
        return 0
    best = query(table, where="feasible", by=by, top=args.top, columns=summary_columns(table, knobs))
    render(best, "table", title=f"top {best.num_rows} by {by}", console=console)
    return 0


def announce_size(study, kind: str, quiet: bool, yes: bool) -> None:
    """Say how many combinations the grid holds and, from the last rate measured here, about
    how long they take; above ASK_ABOVE, go on only with --yes or the user's answer."""
    total = grid_size(study.space)
    rate = last_rate(kind)
    if not quiet and total > SHOW_PLANNING_ABOVE:
        minutes = f"about {total / rate / 60:,.1f} min on this machine at the last measured rate" if rate else \
            "no rate measured on this machine yet"
        print(f"{total:,} combinations; {minutes}", file=sys.stderr)
    if total <= ASK_ABOVE or yes:
        return
    if sys.stdin.isatty() and not quiet:
        if input(f"{total:,} combinations is more than {ASK_ABOVE:,}; go on? [y/N] ").strip().lower() in ("y", "yes"):
            return
    raise SpecError(study.path, "space", f"{total:,} combinations",
                    f"more than {ASK_ABOVE:,}: narrow the space, or pass --yes to run them all")


def compact(study, args) -> int:
    """`--compact`: merge the small parts of an existing table (a killed search leaves one per
    round); nothing is evaluated and the study definition is not checked (no row is added)."""
    if not part_files(study.output):
        raise SpecError(study.path, "output", str(study.output),
                        "holds no results table to compact; run rapid sweep first")
    with ResultStore(study.output, {}, wait=args.wait) as store:
        before = len(store.parts())
        store.compact(args.part_rows)
        after = len(store.parts())
    rows = read_results(study.output).num_rows
    if args.json:
        print(json.dumps({"study": study.name, "output": str(study.output), "rows": rows,
                          "parts_before": before, "parts_after": after}))
    else:
        print(f"{study.output}/: {rows} rows, {before} part(s) compacted into {after} of at most "
              f"{args.part_rows} rows (a part larger on its own is kept)")
    return 0


def checked_output(folder: str) -> Path:
    """`--output DIR`: a folder, or a path where one can be made."""
    check_folder_path("--output", folder)
    return Path(folder)


def plan_summary(study, plan, legal: int) -> dict:
    return {"study": study.name, "output": str(study.output), "combinations": plan.total,
            "legal": legal, "illegal": plan.illegal_count,
            "illegal_reasons": {plan.illegal_examples[p]: n for p, n in plan.illegal.most_common()}}


def print_plan(console, study, plan, legal: int) -> None:
    console.print(f"[bold]{study.name}[/]: {plan.total} combinations in the space, "
                  f"{legal} legal, {plan.illegal_count} illegal (not written)")
    for pattern, count in plan.illegal.most_common(SHOWN_REASONS):
        console.print(f"  {count:>7}  illegal: {plan.illegal_examples[pattern]}", highlight=False, markup=False)
    if len(plan.illegal) > SHOWN_REASONS:
        console.print(f"  {sum(c for _, c in plan.illegal.most_common()[SHOWN_REASONS:]):>7}  illegal for other reasons")
