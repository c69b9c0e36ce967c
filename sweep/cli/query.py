"""`rapid query RESULTS`: filter, sort and print a study's table, its Pareto front, or run SQL over it."""
from dataclasses import dataclass

import yaml

from core import SpecError

from .args import POSITIVE
from sweep.faults.summary import faults_summary
from sweep.store.query import (FORMATS, TRIAL_COLUMN, front_candidates, knob_columns, pareto_front, pareto_objectives,
                               query, render, results_folder, summary_columns)
from sweep.search.fault_rows import per_point
from sweep.store.parts import part_files, read_metadata, read_results, results_dataset


def add_arguments(parser) -> None:
    parser.add_argument("results", metavar="RESULTS", help="a study's results folder, or its study file")
    parser.add_argument("--where", metavar="EXPR", help="SQL condition, e.g. \"feasible and tp >= 4\"")
    parser.add_argument("--top", type=POSITIVE, metavar="N", help="at most N rows")
    parser.add_argument("--by", metavar="COLUMN", help="sort by COLUMN, best first (highest for mfu and tokens_per_s)")
    order = parser.add_mutually_exclusive_group()
    order.add_argument("--asc", dest="descending", action="store_false", default=None, help="sort ascending")
    order.add_argument("--desc", dest="descending", action="store_true", help="sort descending")
    parser.add_argument("--columns", nargs="+", metavar="COLUMN",
                        help="columns to show (default: knobs that vary and headline metrics for tables, all for csv/json)")
    parser.add_argument("--sql", metavar="SELECT", help="SQL over the table, which is called results")
    parser.add_argument("--pareto", metavar="COL,COL", help="only the non-dominated rows over these metrics "
                        "(minimised; mfu and tokens_per_s maximised), e.g. step_time_s,memory_peak_gib; on a "
                        "faults table also slowdown_p50/p95/max and step_time_p95_s, per point")
    parser.add_argument("--format", choices=FORMATS, default="table")
    parser.add_argument("--faults-summary", action="store_true",
                        help="per point of a faults study: slowdown p50/p95/max and the links whose faults hurt most")


def run(args) -> int:
    folder = results_folder(args.results)
    if args.sql and not args.faults_summary:
        given = [option for option, value in (("--where", args.where), ("--by", args.by), ("--top", args.top),
                                              ("--columns", args.columns), ("--asc/--desc", args.descending),
                                              ("--pareto", args.pareto)) if value is not None]
        if given:
            raise SpecError("command line", given[0], "with --sql",
                            "the SELECT says which rows, columns and order; write them in it")
        if _sql_as_scanned(folder, args):
            return 0
    whole = read_results(folder)
    if args.faults_summary:
        render(_faults_summary(whole, folder, args), args.format,
               title=f"{folder}: slowdown under faults per point, most fragile first")
        return 0
    columns = args.columns
    if columns is None and args.format == "table" and not args.sql:
        columns = summary_columns(whole, knob_columns(folder))
    table, by, title = whole, args.by, f"{folder}"
    if args.pareto:
        objectives = pareto_objectives(args.pareto)
        search = search_settings(folder) if TRIAL_COLUMN in whole.column_names else None
        if search is not None:  # a search's front is over its own trials, within its constraints
            objectives = [(c, search.directions.get(c, up)) for c, up in objectives]
        rows = per_point(whole) if "fault_sample" in whole.column_names else whole  # one row a point
        rows = query(rows, where=args.where)
        rows = front_candidates(rows, *((search.backend, search.constraints) if search else ()))
        table = pareto_front(rows, objectives)
        columns = columns and columns + [c for c, _ in objectives if c not in columns]
        by = by or objectives[0][0]
        title += f": Pareto front over {', '.join(c for c, _ in objectives)} of {_front_of(search)}"
    result = query(table, where=args.where, by=by, top=args.top, descending=args.descending,
                   columns=columns, sql=args.sql)
    counted = _sql_count(result, whole.num_rows) if args.sql else f"{result.num_rows} of {whole.num_rows} rows"
    render(result, args.format, title=f"{title} ({counted})")
    return 0


def _sql_as_scanned(folder, args) -> bool:
    """Run --sql over the table as DuckDB scans it (the columns and rows it asks for, not the
    whole table in memory) and print the result; False to read the table whole instead: no
    parts, parts of different columns, or a compaction that changed the parts meanwhile."""
    parts = part_files(folder)
    dataset = results_dataset(parts)
    if dataset is None:
        return False
    try:
        result, total = query(dataset, sql=args.sql), dataset.count_rows()
    except FileNotFoundError:
        return False
    except SpecError:
        if part_files(folder) != parts:
            return False
        raise  # the statement's own error
    if part_files(folder) != parts:
        return False
    render(result, args.format, title=f"{folder} ({_sql_count(result, total)})")
    return True


def _sql_count(result, total: int) -> str:
    return f"SQL: {result.num_rows} row{'' if result.num_rows == 1 else 's'} over a table of {total}"


@dataclass(frozen=True)
class SearchSettings:
    """What a search's end-of-run front is taken over, from its study as the table records it."""
    backend: str
    constraints: tuple  # ((column, "<=" | ">=", bound), ...)
    directions: dict  # objective column -> maximised


def search_settings(folder) -> SearchSettings | None:
    """The search block of the study that wrote the table (its newest part's copy of the study
    file); None when the table does not record one."""
    from sweep.study import search_block  # the study's own parsers: a constraint means what it meant there

    try:
        data = yaml.safe_load(read_metadata(folder).get("study", "")) or {}
    except yaml.YAMLError:
        return None
    search = data.get("search") if isinstance(data, dict) else None
    if not isinstance(search, dict):
        return None
    source, faults = str(folder), data.get("faults") is not None
    try:
        constraints = search_block._constraints(search.get("constraints", []), source, faults)
        objectives = search_block._objectives(search.get("objectives", ["minimize step_time_s"]), source, faults)
    except SpecError:
        return None
    return SearchSettings(data.get("backend", "analytical"), constraints,
                          {column: direction == "maximize" for column, direction in objectives})


def _front_of(search: SearchSettings | None) -> str:
    if search is None:
        return "the feasible rows"
    bounds = " and ".join(f"{c} {op} {bound:g}" for c, op, bound in search.constraints)
    return f"the search's feasible {search.backend} trials" + (f" within {bounds}" if bounds else "")


def _faults_summary(whole, folder, args):
    """The per-point fault summary of the rows --where keeps, sorted (most fragile first unless
    --by), cut to --top and --columns."""
    if args.sql or args.pareto:
        raise SpecError("command line", "--faults-summary", "--sql" if args.sql else "--pareto",
                        "summarises fault samples per point; use --where, --by, --top and --columns with it")
    if "fault_sample" not in whole.column_names:
        raise SpecError("command line", "--faults-summary", str(folder), "this table has no fault samples (no faults: block)")
    rows = query(whole, where=args.where)
    if rows.num_rows == 0:
        raise SpecError("command line", "--where", args.where, "no row matches, so there is nothing to summarise")
    if not any(sample >= 1 for sample in rows.column("fault_sample").to_pylist() if sample is not None):
        raise SpecError("command line", "--where", args.where,
                        "no fault sample (a row with fault_sample >= 1) matches, so there is nothing to summarise")
    summary = faults_summary(rows, knob_columns(folder))
    by, descending = (args.by, args.descending) if args.by else ("slowdown_p95", True)
    return query(summary, by=by, top=args.top, descending=descending, columns=args.columns)
