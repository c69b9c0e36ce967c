"""Filter, sort and print a study's results table; `--sql` runs DuckDB over it as `results`."""
import json
import math
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.table import Table

from core import SpecError
from core.units import format_quantity
from sweep.metrics import HIGHER_IS_BETTER

from .parts import part_files, read_metadata

SUMMARY_METRICS = ("step_time_s", "ttft_s", "ttft_p90_s", "tpot_s", "output_tokens_per_s_per_gpu",
                   "output_tokens_per_s_per_user", "mfu", "tokens_per_s", "memory_peak_gib", "energy_per_token_j",
                   "energy_per_output_token_j", "usd_per_million_tokens")
FORMATS = ("table", "csv", "json")
READ_ONLY = {"enable_external_access": False, "lock_configuration": True}  # --sql reads no file, writes none
WIDE_COLUMNS = 240  # when printing to a file or pipe, where rich would otherwise assume 80


def results_folder(ref) -> Path:
    """A results folder as given, or the output folder a study file names."""
    path = Path(ref)
    if path.is_file() and path.suffix in (".yaml", ".yml"):
        from sweep.study.loader import load_study
        path = load_study(path).output
    if not part_files(path):
        raise SpecError("command line", "RESULTS", str(ref), "no results table there (a folder of part-*.parquet, or a study file)")
    return path


def knob_columns(folder) -> list:
    """The study's knob columns, as recorded in the table's metadata."""
    knobs = read_metadata(folder).get("knobs", "")
    return [k for k in knobs.split(",") if k]


def summary_columns(table: pa.Table, knobs: list) -> list:
    """point_id, the knobs that vary in `table`, the headline metrics the mode has, and in a
    faults study the sample and its slowdown."""
    varying = [k for k in knobs if k in table.column_names and len(set(table.column(k).to_pylist())) > 1]
    metrics = [m for m in SUMMARY_METRICS if m in table.column_names and table.column(m).null_count < table.num_rows]
    faults = [c for c in ("fault_sample", "slowdown") if c in table.column_names]
    return ["point_id"] + varying + faults + metrics


def query(table: pa.Table, where: str | None = None, by: str | None = None, top: int | None = None,
          descending: bool | None = None, columns: list | None = None, sql: str | None = None) -> pa.Table:
    """Rows of `table` matching the SQL condition `where`, sorted by `by` (best first), at most
    `top`, restricted to `columns`; or the result of the SQL statement `sql` over `results`."""
    connection = duckdb.connect(config=READ_ONLY)
    connection.register("results", table)
    if sql:
        return _run(connection, sql, "--sql", sql)
    names = set(table.column_names)
    for column in (columns or []) + ([by] if by else []):
        if column not in names:
            raise SpecError("command line", "--by" if column == by else "--columns", column,
                            f"no such column (have: {', '.join(table.column_names)})")
    select = ", ".join(_quoted(c) for c in columns) if columns else "*"
    statement = f"SELECT {select} FROM results"
    if where:
        statement += f" WHERE {where}"
    if by:
        down = by in HIGHER_IS_BETTER if descending is None else descending
        statement += f" ORDER BY {_quoted(by)} {'DESC' if down else 'ASC'} NULLS LAST, {_row_key(names)}"
    else:
        statement += f" ORDER BY {_row_key(names)}" if "point_id" in names and (not columns or "point_id" in columns) else ""
    if top is not None:
        statement += f" LIMIT {int(top)}"
    return _run(connection, statement, "--where", where or "")


def pareto_front(table: pa.Table, objectives: list) -> pa.Table:
    """The non-dominated rows of `table` over `objectives` [(column, maximize), ...], among rows
    with a value in every objective column; one row per point_id where the table has several
    (a search's repeated trials); sorted by the first objective, best first."""
    for column, _ in objectives:
        if column not in table.column_names:
            raise SpecError("command line", "--pareto", column, f"no such column (have: {', '.join(table.column_names)})")
        if not pa.types.is_integer(table.schema.field(column).type) and not pa.types.is_floating(table.schema.field(column).type):
            raise SpecError("command line", "--pareto", column, "expected a numeric column")
    valid = np.ones(table.num_rows, dtype=bool)
    for column, _ in objectives:
        valid &= pc.fill_null(pc.is_finite(table.column(column).cast(pa.float64())), False).to_numpy(zero_copy_only=False)
    rows = table.filter(pa.array(valid))
    if "point_id" in rows.column_names:
        rows = first_per_point(rows)
    # every objective as a cost to minimise, rows in lexicographic order: a dominator comes first
    costs = np.column_stack([rows.column(c).cast(pa.float64()).to_numpy() * (-1.0 if up else 1.0)
                             for c, up in objectives]) if rows.num_rows else np.zeros((0, len(objectives)))
    # the first row left in lexicographic order is beaten by no row left (a dominator sorts
    # first) nor by the front (each front row took out the rows it beats): it joins the front
    # and takes out the rows it beats, one pass over what is left per front row
    remaining = np.lexsort(costs.T[::-1])
    left, front = costs[remaining], []  # the rows left, in that order, contiguous
    while remaining.size:
        front.append(remaining[0])
        best, rest = left[0], left[1:]
        kept = ~(np.all(best <= rest, axis=1) & np.any(best < rest, axis=1))
        remaining, left = remaining[1:][kept], rest[kept]
    return rows.take(pa.array(front, pa.int64()))


TRIAL_COLUMN = "trial_number"  # a search's rows: the trial that first asked for the point


def front_candidates(table: pa.Table, backend: str | None = None, constraints=()) -> pa.Table:
    """The rows a Pareto front is taken over, as a search's end-of-run front takes them
    (sweep.search.loop.best_rows): feasible rows (where the table says), of `backend` only (a
    refinement's rows replay the search's points on another backend), meeting `constraints`
    [(column, "<=" | ">=", bound)], a search's rows in trial order so that a point is
    represented by its first trial."""
    keep = pa.array(np.ones(table.num_rows, dtype=bool))
    if "feasible" in table.column_names:
        keep = pc.and_(keep, table.column("feasible"))
    if backend is not None and "backend" in table.column_names:
        keep = pc.and_(keep, pc.equal(table.column("backend"), backend))
    if TRIAL_COLUMN in table.column_names:
        keep = pc.and_(keep, pc.is_valid(table.column(TRIAL_COLUMN)))
    for column, op, bound in constraints:
        keep = pc.and_(keep, (pc.less_equal if op == "<=" else pc.greater_equal)(table.column(column), bound))
    rows = table.filter(pc.fill_null(keep, False))
    return rows.sort_by(TRIAL_COLUMN) if TRIAL_COLUMN in rows.column_names else rows


def first_per_point(table: pa.Table) -> pa.Table:
    """The first row of each point_id, in table order (a search repeats points across trials)."""
    seen = {}
    for i, point in enumerate(table.column("point_id").to_pylist()):
        seen.setdefault(point, i)
    return table.take(pa.array(sorted(seen.values()), pa.int64()))  # typed: an empty list is no index


def pareto_objectives(text: str) -> list:
    """`step_time_s,memory_peak_gib` -> [(column, maximize)]: higher is better for mfu and tokens/s."""
    columns = [c.strip() for c in text.split(",") if c.strip()]
    if len(columns) < 2:
        raise SpecError("command line", "--pareto", text, "expected two or more comma-separated metric columns")
    return [(c, c in HIGHER_IS_BETTER) for c in columns]


def _row_key(names) -> str:
    """What identifies a row: point_id, with fault_sample in a faults study."""
    return "point_id, fault_sample" if "fault_sample" in names else "point_id"


def _quoted(column: str) -> str:
    return '"' + column.replace('"', '""') + '"'


def _run(connection, statement: str, option: str, given: str) -> pa.Table:
    try:
        relation = connection.sql(statement)
    except duckdb.Error as err:
        first = str(err).strip().splitlines()[0]
        raise SpecError("command line", option, given, f"DuckDB could not run it ({first})") from None
    if relation is None:
        raise SpecError("command line", option, given, "expected a query that returns rows (SELECT ...)")
    try:
        return relation.to_arrow_table()
    except duckdb.Error as err:
        first = str(err).strip().splitlines()[0]
        raise SpecError("command line", option, given, f"DuckDB could not run it ({first})") from None


def wide_console() -> Console:
    """A console that does not wrap tables at 80 columns when printing to a file or pipe."""
    console = Console()
    return console if console.is_terminal else Console(width=WIDE_COLUMNS)


def render(table: pa.Table, fmt: str = "table", title: str | None = None, console: Console | None = None,
           caption: str | None = None) -> None:
    """Print `table` as a rich table (numbers with the unit their column name gives, one unit
    per column), CSV or a JSON array (raw numbers in base units, as stored)."""
    console = console or wide_console()
    if fmt == "csv":
        print(table.to_pandas().to_csv(index=False), end="")
        return
    if fmt == "json":
        rows = [{k: _plain(v) for k, v in row.items()} for row in table.to_pylist()]
        print(json.dumps(rows, indent=1))
        return
    # at least as wide as its title, which rich would otherwise wrap to a narrow result's width
    view = Table(title=title, caption=caption, show_edge=False, min_width=min(len(title or ""), console.width))
    columns = [_cells(table.column(name).to_pylist(), column_unit(name)) for name in table.column_names]
    for i, name in enumerate(table.column_names):
        numeric = not pa.types.is_string(table.schema.field(name).type)
        widest = max([len(name)] + [len(c) for c in columns[i]]) if numeric else None
        view.add_column(name, no_wrap=True, min_width=widest,  # numbers are never cut to "1.2…"
                        justify="right" if numeric else "left")
    for row in zip(*columns):
        view.add_row(*row)
    console.print(view)


# what a column's name says about its unit: (test on the name, unit); the first that holds wins
_COLUMN_UNITS = (
    (lambda n: n.endswith("_per_s") or n in ("mfu", "slowdown") or n.startswith("slowdown_"), None),
    (lambda n: n.endswith("_gib"), "GiB"),
    (lambda n: n.endswith("_bps") or n.endswith("bandwidth"), "B/s"),
    (lambda n: n.endswith("_bytes") or n.endswith("_capacity") or n.endswith("registers_per_sm"), "B"),
    (lambda n: n.endswith("_hz") or n.endswith("_clock"), "Hz"),
    (lambda n: n.endswith("_flops") or "peak_flops" in n, "FLOP/s"),
    (lambda n: n.endswith("_s") or n.endswith("_latency") or n.endswith("_overhead"), "s"),
)


def column_unit(name: str) -> str | None:
    """The unit a results column holds its numbers in, from its name: `_s` seconds, `_bps`
    and `..._bandwidth` bytes/s, `_bytes` and `..._capacity` bytes, `_gib` GiB, `_hz` and
    `..._clock` Hz, `_flops` FLOP/s; None for counts, ratios and rates of tokens."""
    for test, unit in _COLUMN_UNITS:
        if test(name.lower()):
            return unit
    return None


def _cells(values: list, unit: str | None) -> list:
    """One column's cells: '-' for no value; with a unit, every number in the prefix its
    largest value needs (core.units.format_quantity), so a column reads in one unit."""
    numbers = [v for v in values if _number(v)]
    if unit is None or not numbers:
        return [_cell(v) for v in values]
    largest = max(abs(v) for v in numbers)
    return [format_quantity(v, unit, largest) if _number(v) else _cell(v) for v in values]


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _plain(value):
    return None if isinstance(value, float) and math.isnan(value) else value


def _cell(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and 1e4 <= abs(value) < 1e15:  # 64,071 tokens/s, not 6.407e+04
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
