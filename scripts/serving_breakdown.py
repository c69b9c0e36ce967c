"""Where the serving suite's errors are systematic: the measured serving rows
(../shared/validation/serving, or a CSV of one's own in the same columns: --rows) against the engine simulator, grouped by any of engine, version,
model, gpu, mode, layout, io (isl x osl) and concurrency (rounded down to a power of two), with
each group's signed median error (the direction of a miss), mean |error| and share within
+-20 %, for TTFT and TPOT. `rapid validate --suite serving` groups by GPU, model, engine and mode
only; this splits further, to find the mechanism behind a miss rather than its size.

Example: scripts/serving_breakdown.py --by engine,io,concurrency --where model=Llama-3.1-70B"""
import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.errors import SpecError  # noqa: E402
from core.validation import serving  # noqa: E402


def _layout(row: dict) -> str:
    count = lambda key: serving.row_count(row.get(key, ""))  # noqa: E731
    if row["mode"] == "disagg":
        return "/".join(f"{p}{count(p + '_num_workers')}x(tp{count(p + '_tp_size')}"
                        f" adp{count(p + '_attention_dp_size')})" for p in ("prefill", "decode"))
    return f"tp{count('tp_size')} adp{count('attention_dp_size')} ep{count('moe_ep_size')}"


KEYS = {
    "engine": lambda r: r["backend"],
    "version": lambda r: f"{r['backend']} {r['backend_version']}",
    "model": lambda r: r["model_path"].split("/")[-1],
    "gpu": lambda r: r["system"],
    "mode": lambda r: r["mode"],
    "layout": _layout,
    "io": lambda r: f"{r['isl']}x{r['osl']}",
    "concurrency": lambda r: 1 << (serving.concurrency(r).bit_length() - 1),
}


def _line(label: str, items: list) -> str:
    ttft, tpot = (serving.figures(values) for values in serving.errors(items))
    return (f"{label:58s} {ttft['n']:5d}  TTFT {ttft['median_error_pct']:+7.1f} {ttft['mean_abs_error_pct']:6.1f}"
            f" {ttft['within_20_pct']:4.0f}  TPOT {tpot['median_error_pct']:+7.1f} {tpot['mean_abs_error_pct']:6.1f}"
            f" {tpot['within_20_pct']:4.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--by", default="engine,mode", help=f"comma-separated, of: {', '.join(KEYS)}")
    parser.add_argument("--where", action="append", default=[],
                        help="KEY=TEXT: keep rows whose KEY contains TEXT (repeatable)")
    parser.add_argument("--rows", default=str(serving.ROWS),
                        help="a CSV of measured runs in AIConfigurator's silicon-sample columns (default: %(default)s)")
    args = parser.parse_args()
    keys = args.by.split(",")
    for key in keys + [w.partition("=")[0] for w in args.where]:
        if key not in KEYS:
            parser.error(f"unknown key {key!r}: expected one of {', '.join(KEYS)}")
    wanted = [(w.partition("=")[0], w.partition("=")[2]) for w in args.where]
    try:
        measured = serving.rows(args.rows)
    except SpecError as err:
        parser.error(str(err))
    rows = [r for r in measured if all(text in str(KEYS[key](r)) for key, text in wanted)]
    done, skipped = serving.cases(selected=rows)
    groups = defaultdict(list)
    for item in done:
        groups[tuple(KEYS[key](item[0]) for key in keys)].append(item)
    print(f"{'group (' + ', '.join(keys) + ')':58s}     n  TTFT median  |err| in20  TPOT median  |err| in20")
    for group in sorted(groups, key=lambda g: tuple((0, v, "") if isinstance(v, int) else (1, 0, v) for v in g)):
        print(_line(" ".join(str(v) for v in group), groups[group]))
    if done:
        print(_line("all", done))
    if skipped:
        print(f"not simulated: {len(skipped)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
