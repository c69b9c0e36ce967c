"""`rapid report RESULTS`: one self-contained HTML page of the views the table supports."""
from pathlib import Path

from core import SpecError

from .args import check_folder_path
from sweep.store.query import results_folder
from sweep.report.page import build_report, write_html


def add_arguments(parser) -> None:
    parser.add_argument("results", metavar="RESULTS", help="a study's results folder, or its study file")
    parser.add_argument("--out", metavar="FILE.html", help="where to write the page (default: RESULTS/_report.html; the leading _ keeps the folder readable as one Parquet dataset)")
    parser.add_argument("--png", metavar="DIR", help="also write every figure as a PNG into DIR (matplotlib)")


def run(args) -> int:
    _check_destinations(args)
    folder = results_folder(args.results)
    report = build_report(folder)
    out = write_html(report, Path(args.out) if args.out else folder / "_report.html")
    print(f"report: {out} ({len(report.figures)} figures in {len(report.sections)} sections)")
    if args.png:
        from sweep.report.png import write_pngs  # matplotlib only when PNGs are asked for
        paths = write_pngs(report.figures, args.png)
        print(f"png: {len(paths)} files in {args.png}")
    return 0


def _check_destinations(args) -> None:
    """Refuse an --out that is a folder and a --png that is a file before anything is drawn."""
    if args.out and Path(args.out).is_dir():
        raise SpecError("command line", "--out", args.out, "is a folder; expected the page's file path, e.g. report.html")
    if args.out:
        check_folder_path("--out", args.out, Path(args.out).parent)
    if args.png:
        check_folder_path("--png", args.png)
