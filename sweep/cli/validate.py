"""`rapid validate`: predictions against the published measurements, per suite; grouped suites
(kernels) as error figures per GPU, kernel, dtype and size."""
import json
from collections import Counter

from rich.console import Console
from rich.table import Table

from core.units import format_quantity
from core.validation.energy import grouped_errors
from core.validation.suites import GROUPED_SUITES, SUITES, excluded_rows, grouped_suite, run_all, summary


ENERGY_SUITES = ("energy", "energy_at_pace")


def add_arguments(parser) -> None:
    parser.add_argument("--suite", action="append", choices=(*SUITES, *GROUPED_SUITES),
                        help="run only this suite (repeatable; default: all but kernels, measured and serving)")
    parser.add_argument("--json", action="store_true", help="print cases and summary as JSON")
    parser.add_argument("--serving-rows", metavar="CSV",
                        help="the serving suite over these measured runs (AIConfigurator's silicon-sample "
                             "columns) instead of ../shared/validation/serving's; implies --suite serving")


def run(args) -> int:
    chosen = tuple(dict.fromkeys(args.suite or (() if args.serving_rows else SUITES)))
    if args.serving_rows and "serving" not in chosen:
        chosen += ("serving",)
    suites = tuple(s for s in chosen if s in SUITES)
    groups, skipped, serving = [], [], None
    for name in (s for s in chosen if s in GROUPED_SUITES):
        result = grouped_suite(name, args.serving_rows)
        if name == "serving":
            serving = result
            continue
        records, left_out = result
        groups += records
        skipped += left_out
    cases, verdicts = run_all(suites)
    stats = summary(cases)
    excluded = excluded_rows(suites)
    if args.json:
        print(json.dumps({
            "cases": [{"suite": c.suite, "case": c.case, "measured": c.measured, "predicted": c.predicted,
                       "error_pct": c.error_pct, "unit": c.unit} for c in cases],
            "summary": stats,
            "verdicts": [{"case": v.case, "expected_feasible": v.expected_feasible,
                          "predicted_feasible": v.predicted_feasible, "detail": v.detail, "doubt": v.doubt}
                         for v in verdicts],
            "not_counted": [{"suite": suite, "case": case, "reason": reason} for suite, case, reason in excluded],
            "groups": groups,
            "skipped": skipped,
            **({"targets": _targets(groups)} if "kernels" in chosen else {}),
            **({"serving": serving[0], "serving_skipped": serving[1], "serving_rows": serving[2],
                "serving_targets": _serving_targets(serving[0])} if serving else {}),
        }, indent=1))
        return 0
    if groups or skipped:
        _print_groups(groups, skipped)
    if "kernels" in chosen:
        _print_targets(_targets(groups))
    if serving:
        _print_serving(*serving[:2], source=args.serving_rows or "../shared/validation/serving")
    if not suites:
        return 0
    rows = {suite: [(c.case, format_quantity(c.measured, c.unit), format_quantity(c.predicted, c.unit),
                     f"{c.error_pct:+.1f} %") for c in cases if c.suite == suite] for suite in stats}
    console = _console(rows.values())
    for suite, numbers in stats.items():
        table = Table(title=f"{suite} ({numbers['cases']} cases)", show_edge=False)
        table.add_column("case", overflow="fold")  # a name too long for the terminal wraps, never cut to "…"
        for column in ("measured", "predicted", "error"):
            table.add_column(column, justify="right", overflow="fold")
        for row in rows[suite]:
            table.add_row(*row)
        console.print(table)
        console.print(f"  mean |error| {numbers['mean_abs_error_pct']:.1f} %   "
                      f"max |error| {numbers['max_abs_error_pct']:.1f} %")
        if suite in ENERGY_SUITES:
            for kind, groups in grouped_errors([c for c in cases if c.suite == suite]).items():
                console.print(f"  by {kind}: " + "; ".join(f"{name} {mean:+.0f} % (|{absolute:.0f}| %, {n})"
                                                          for name, n, mean, absolute in groups))
        reasons = Counter(reason for name, _, reason in excluded if name == suite)
        if reasons:
            console.print(f"  not counted: {sum(reasons.values())} rows: "
                          + "; ".join(f"{reason} ({count})" for reason, count in reasons.most_common()))
        console.print()
    console.print("Errors are in-sample on the rows each preset's factors were fitted on (the preset's "
                  "`fitted_on` says which); `scripts/calibrate.py --cv` refits without each source and "
                  "prints the errors left out.")
    counted = [v for v in verdicts if not v.doubt]
    wrong = [v for v in counted if v.disagrees]
    console.print(f"memory verdicts: {len(counted) - len(wrong)} of {len(counted)} agree with reality")
    for v in wrong:
        console.print(f"  [red]disagrees[/]: {v.case}: predicted {'fits' if v.predicted_feasible else 'OOM'} ({v.detail})")
    for v in (v for v in verdicts if v.doubt):
        console.print(f"  not counted: {v.case}: predicted {'fits' if v.predicted_feasible else 'OOM'} "
                      f"({v.detail}); the published outcome is doubtful: {v.doubt}")
    return 0


def _print_groups(groups: list, skipped: list) -> None:
    """One table per GPU: n and errors (predicted / measured - 1) per framework, kernel, dtype
    and size bucket; then the rows skipped and why."""
    rows = {}
    for g in groups:
        rows.setdefault(g["gpu"], []).append(
            (g["framework"], g["kernel"], g["dtype"], g["bucket"], f"{g['n']:,}", f"{g['median_error_pct']:+.1f} %",
             f"{g['median_abs_error_pct']:.1f} %", f"{g['mean_abs_error_pct']:.1f} %", f"{g['p90_abs_error_pct']:.1f} %"))
    hardware = {g["gpu"]: g["hardware"] for g in groups}
    suites = {}
    for g in groups:
        suites.setdefault(g["gpu"], {})[g["suite"]] = None
    suites = {gpu: " and ".join(names) for gpu, names in suites.items()}
    console = _console(rows.values())
    for gpu, table_rows in rows.items():
        table = Table(title=f"{suites[gpu]} on {gpu} (preset {hardware[gpu]})", show_edge=False)
        for column in ("framework", "kernel", "dtype", "bucket"):
            table.add_column(column, no_wrap=True)
        for column in ("n", "median error", "median |error|", "mean |error|", "p90 |error|"):
            table.add_column(column, justify="right")
        for row in table_rows:
            table.add_row(*row)
        console.print(table)
        console.print()
    reasons = Counter()
    for s in skipped:
        reasons[(s["gpu"], s["reason"])] += s["rows"]
    if reasons:
        console.print(f"kernels not compared: {sum(reasons.values()):,} rows")
        for (gpu, reason), count in sorted(reasons.items()):
            console.print(f"  {gpu}: {reason} ({count:,})")
    sources = {"kernels": "AIConfigurator's measured kernel tables (../shared/validation/kernels)",
               "measured": "our own H100 and H200 runs (core/validation/data/measured; sustained rows "
                           "are SM clock in MHz and board power in W under the power limit)"}
    named = [sources[s] for s in dict.fromkeys(g["suite"] for g in groups)]
    console.print(f"error = predicted / measured - 1, over {' and '.join(named)}; nothing is fitted to them here.")
    console.print()


def _targets(groups: list) -> list:
    from core.validation.kernel_targets import target_summary

    return target_summary(groups)


def _print_targets(targets: list) -> None:
    """How many kernel groups meet issue 21's targets, per kernel class, and which miss."""
    if not targets:
        return
    lines = [f"targets on {', '.join(targets[0]['gpus'])} (median and p90 of each group's |error|; in brackets, "
             "the groups within them reading the bound on the median signed error instead):"]
    for t in targets:
        lines.append(f"  {t['target']} ({t['bound']}): {t['on_target']} of {t['groups']} groups "
                     f"({t['on_target_signed_median']})")
        lines += [f"    missed: {r['gpu']} {r['framework']} {r['kernel']} {r['dtype']} {r['bucket']}: "
                  f"median |error| {r['median_abs_error_pct']:.1f} % (signed {r['median_error_pct']:+.1f} %), "
                  f"p90 {r['p90_abs_error_pct']:.1f} %" for r in t["missed"]]
    console = _console([[(line,) for line in lines]])
    for line in lines:
        console.print(line)
    console.print()


def _serving_targets(records: list) -> list:
    from core.validation.serving import target_summary

    return target_summary(records)


def _print_serving(records: list, skipped: list, source: str) -> None:
    """TTFT and TPOT errors (predicted / measured - 1) per GPU, model, engine and mode, then
    the rows not simulated and why."""
    rows = []
    for r in records:
        cells = [r["gpu"], r["model"], r["engine"], r["mode"], str(r["ttft"]["n"])]
        for key in ("ttft", "tpot"):
            f = r[key]
            cells += [f"{f['median_error_pct']:+.1f} %", f"{f['mean_abs_error_pct']:.1f} %", f"{f['within_20_pct']:.0f} %"]
        rows.append(tuple(cells))
    console = _console([rows])
    table = Table(title=f"serving: measured runs ({source}) against core.serving", show_edge=False)
    for column in ("gpu", "model", "engine", "mode"):
        table.add_column(column, no_wrap=True)
    for column in ("n", "TTFT median", "TTFT mean |err|", "TTFT within 20 %", "TPOT median", "TPOT mean |err|",
                   "TPOT within 20 %"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for s in skipped:
        console.print(f"  not simulated: {s['model']}: {s['reason']} ({s['rows']} rows)")
    for t in _serving_targets(records):
        console.print(f"  target ({t['metric'].upper()}, every row): mean |error| {t['mean_abs_error_pct']:.1f} % "
                      f"(<= {t['mean_bound_pct']:g} %), within 20 % {t['within_20_pct']:.0f} % "
                      f"(>= {t['within_bound_pct']:g} %): {'met' if t['met'] else 'missed'}")
    console.print("Engine overheads (request overheads per version family) and each client's ramp-up, length "
                  "spread and requests per slot are fitted on ../shared/validation/serving's rows "
                  "(scripts/fit_serving.py prints in-sample, left-one-engine-out and left-one-family-out errors).")
    console.print()


def _console(tables) -> Console:
    """The terminal as it is (a long case name wraps in its cell); printing to a file or pipe,
    as wide as the widest table needs, so every case name is on one line, whole."""
    console = Console()
    if console.is_terminal:
        return console
    widths = [sum(max(len(row[i]) for row in rows) + 3 for i in range(len(rows[0]))) for rows in tables if rows]
    return Console(width=max([80] + widths))
