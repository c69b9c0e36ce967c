"""`rapid validate`: predictions against the published measurements, per suite."""
import json
from collections import Counter

from rich.console import Console
from rich.table import Table

from core.units import format_quantity
from core.validation.suites import SUITES, excluded_rows, run_all, summary


def add_arguments(parser) -> None:
    parser.add_argument("--suite", action="append", choices=tuple(SUITES),
                        help="run only this suite (repeatable; default: all)")
    parser.add_argument("--json", action="store_true", help="print cases and summary as JSON")


def run(args) -> int:
    suites = tuple(args.suite or SUITES)
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
        }, indent=1))
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


def _console(tables) -> Console:
    """The terminal as it is (a long case name wraps in its cell); printing to a file or pipe,
    as wide as the widest table needs, so every case name is on one line, whole."""
    console = Console()
    if console.is_terminal:
        return console
    widths = [sum(max(len(row[i]) for row in rows) + 3 for i in range(len(rows[0]))) for rows in tables if rows]
    return Console(width=max([80] + widths))
