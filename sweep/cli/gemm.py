"""`rapid gemm`: the time of one GEMM, or of every row of a CSV, on one GPU preset, optionally
sharded over tensor-parallel ranks with the collective that sharding needs. Timed by the functions
`rapid run` uses (core.model.ops.gemm for a linear layer, core.model.collectives), so a user can
check the operator model shape by shape against their own measurements."""
import csv
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from core import SpecError
from core.model import ops
from core.model.collectives import collective_time
from core.model.layout import group_spans
from core.model.loader import load_hardware, with_dtype
from core.model.specs import COMPUTE_DTYPES, DTYPE_BYTES, MAX_WORKLOAD_SIZE, Parallelism, activation_dtype
from core.units import format_quantity

from .args import POSITIVE, int_in

SHARDS = ("m", "n", "k")
CSV_COLUMNS = ("m", "n", "k", "dtype")
DIMENSION = int_in(1, MAX_WORKLOAD_SIZE)  # int32, as cuBLAS's dimensions
DIMENSION_ALLOWED = f"expected a positive integer up to {MAX_WORKLOAD_SIZE:,}"


def add_arguments(parser) -> None:
    parser.add_argument("--hardware", help="GPU preset name or hardware YAML")
    for dim, text in (("m", "rows of A and C"), ("n", "columns of B and C"), ("k", "the reduced dimension")):
        parser.add_argument(f"--{dim}", type=DIMENSION, help=f"{text} (C[m,n] = A[m,k] B[k,n])")
    parser.add_argument("--dtype", choices=COMPUTE_DTYPES, help="operand dtype (default: the hardware file's)")
    parser.add_argument("--shapes", help="CSV with columns m, n, k and optionally dtype: time every row")
    parser.add_argument("--tp", type=POSITIVE, default=1, help="tensor-parallel ranks the GEMM is split over")
    parser.add_argument("--shard", choices=SHARDS,
                        help="dimension split over --tp ranks: k all-reduces C; m or n leave C sharded")
    parser.add_argument("--gather", action="store_true", help="with --shard m or n: all-gather C onto every rank")
    parser.add_argument("--alone", action="store_true",
                        help="time each GEMM as a kernel benchmark does (alone, at full clock), not inside a "
                             "training step as rapid run does")
    parser.add_argument("--json", action="store_true", help="print one JSON record per GEMM, in input order")


def run(args) -> int:
    if not args.hardware:
        raise SpecError("command line", "--hardware", "<missing>", "give a preset name or a file")
    if args.tp > 1 and not args.shard:
        raise SpecError("command line", "--shard", "<missing>", f"with --tp {args.tp}, give one of m, n, k")
    if args.shard and args.tp < 2:
        raise SpecError("command line", "--shard", args.shard, "needs --tp 2 or more (a GEMM on one rank is not split)")
    if args.gather and args.shard not in ("m", "n"):
        raise SpecError("command line", "--gather", "set", "needs --shard m or n (k all-reduces C already)")
    hw = load_hardware(args.hardware)
    if args.alone:
        hw = ops.kernels_alone(hw)
    shapes = _shapes(args, hw)
    for m, n, k, _ in shapes:
        size = {"m": m, "n": n, "k": k}.get(args.shard, args.tp)
        if args.tp > size:
            raise SpecError("command line", "--tp", args.tp, f"more ranks than the {size:,} {args.shard} splits into "
                            f"(GEMM {m} x {n} x {k}): at most {size:,}")
    records = [{**gemm_record(row_hw, m, n, k, args.tp, args.shard or "", args.gather), "alone": args.alone}
               for m, n, k, row_hw in shapes]
    if args.json:
        for record in records:
            print(json.dumps(record))
        return 0
    _print(records, hw.name + (" alone, at full clock" if args.alone else ", inside a training step"))
    return 0


def _shapes(args, hw) -> list:
    """(m, n, k, hardware in the row's dtype) per GEMM: the command line's, or the CSV's rows."""
    given = [f"--{d}" for d in ("m", "n", "k") if getattr(args, d) is not None]
    if args.shapes:
        if given:
            raise SpecError("command line", given[0], getattr(args, given[0][2:]), "give --shapes or --m/--n/--k, not both")
        return _csv_shapes(Path(args.shapes), hw, args.dtype)
    if len(given) < 3:
        missing = next(f"--{d}" for d in ("m", "n", "k") if getattr(args, d) is None)
        raise SpecError("command line", missing, "<missing>", "give --m, --n and --k, or --shapes FILE.csv")
    row_hw = with_dtype(hw, args.dtype, "command line", "--dtype") if args.dtype else hw
    return [(args.m, args.n, args.k, row_hw)]


def _csv_shapes(path: Path, hw, default_dtype: str | None) -> list:
    """Rows of a shapes CSV; a bad cell is one line naming the file, row, column, value and what is allowed."""
    if not path.is_file():
        raise SpecError("command line", "--shapes", str(path), "a folder, not a CSV file" if path.is_dir() else "no such file")
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # a spreadsheet's byte-order mark dropped
    except UnicodeDecodeError:
        raise SpecError("command line", "--shapes", str(path), "expected UTF-8 text (a CSV of m, n, k[, dtype])") from None
    reader = csv.reader(lines)
    header = [name.strip() for name in next(reader, [])]
    missing = [c for c in CSV_COLUMNS[:3] if c not in header]
    if missing:
        raise SpecError(str(path), missing[0], "<missing>", f"the header needs columns {', '.join(CSV_COLUMNS[:3])} "
                        "(dtype optional)")
    unknown = [c for c in header if c not in CSV_COLUMNS]
    if unknown:
        raise SpecError(str(path), unknown[0], "<header>", f"unknown column (allowed: {', '.join(CSV_COLUMNS)})")
    repeated = [c for i, c in enumerate(header) if c in header[:i]]
    if repeated:
        raise SpecError(str(path), repeated[0], "<header>", "a column named twice (each of m, n, k, dtype at most once)")
    shapes = []
    for number, cells in enumerate(reader, start=1):
        if not any(cell.strip() for cell in cells):
            continue  # a blank line
        where = f"{path} row {number}"
        if len(cells) != len(header):
            raise SpecError(where, "cells", len(cells), f"expected {len(header)} values, one per header column")
        row = dict(zip(header, (cell.strip() for cell in cells)))
        dims = []
        for column in CSV_COLUMNS[:3]:
            text = row[column]
            if not (text.isascii() and text.isdigit()) or not 1 <= int(text) <= MAX_WORKLOAD_SIZE:
                raise SpecError(where, column, text or "<empty>", DIMENSION_ALLOWED)
            dims.append(int(text))
        dtype = row.get("dtype") or default_dtype
        shapes.append((*dims, with_dtype(hw, dtype, where, "dtype") if dtype else hw))
    if not shapes:
        raise SpecError("command line", "--shapes", str(path), "no data rows under the header")
    return shapes


def gemm_record(hw, m: int, n: int, k: int, tp: int = 1, shard: str = "", gather: bool = False) -> dict:
    """One GEMM in `hw`'s compute dtype, split over `tp` ranks along `shard`: the largest shard's
    time on one GPU, then the collective its output needs (k: all-reduce of C; m or n: none, or
    an all-gather of C with `gather`), over the ranks' network dimensions as `rapid run` places tp."""
    local = {"m": m, "n": n, "k": k}
    if shard:
        local[shard] = -(-local[shard] // tp)
    gemm_s = ops.gemm(hw, local["m"], local["n"], local["k"]).time_s
    kind = "all_reduce" if shard == "k" and tp > 1 else "all_gather" if gather and tp > 1 else ""
    out_bytes = float(m * n * DTYPE_BYTES[activation_dtype(hw.dtype)])
    comm = {}
    if kind:
        dims = hw.dims_for(tp)
        comm = collective_time(hw, dims, kind, out_bytes, group_spans(Parallelism(tp=tp), dims)["tp"])
    collective_s = sum(comm.values())
    return {"m": m, "n": n, "k": k, "dtype": hw.dtype, "hardware": hw.name, "tp": tp, "shard": shard or None,
            "flops": 2.0 * m * n * k, "gemm_time_s": gemm_s, "collective": kind or None,
            "collective_bytes": out_bytes if kind else 0.0, "collective_time_s": collective_s,
            "collective_time_s_by_dim": comm, "time_s": gemm_s + collective_s}


def _print(records: list, where: str) -> None:
    """One line per GEMM; each time column in one unit (its largest value's)."""
    table = Table(title=f"GEMMs on {where}", show_edge=False)
    for column in ("m", "n", "k", "dtype", "tp", "shard", "GEMM", "collective", "comm.", "total", "TFLOP/s per GPU"):
        table.add_column(column, justify="left" if column in ("dtype", "shard", "collective") else "right",
                         no_wrap=True)
    top = {key: max(r[key] for r in records) or 1.0 for key in ("gemm_time_s", "collective_time_s", "time_s")}
    for r in records:
        comm = format_quantity(r["collective_time_s"], "s", top["collective_time_s"]) if r["collective"] else "–"
        table.add_row(f"{r['m']:,}", f"{r['n']:,}", f"{r['k']:,}", r["dtype"], str(r["tp"]), r["shard"] or "–",
                      format_quantity(r["gemm_time_s"], "s", top["gemm_time_s"]), r["collective"] or "–", comm,
                      format_quantity(r["time_s"], "s", top["time_s"]),
                      f"{r['flops'] / r['tp'] / r['time_s'] / 1e12:,.1f}")
    console = Console()
    (console if console.is_terminal else Console(width=200)).print(table)
