"""`rapid query RESULTS`: filter, sort and print a study's table, or run SQL over it."""
from .args import POSITIVE
from .query import FORMATS, knob_columns, query, render, results_folder, summary_columns
from .store import read_results


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
    parser.add_argument("--format", choices=FORMATS, default="table")


def run(args) -> int:
    folder = results_folder(args.results)
    table = read_results(folder)
    columns = args.columns
    if columns is None and args.format == "table" and not args.sql:
        columns = summary_columns(table, knob_columns(folder))
    result = query(table, where=args.where, by=args.by, top=args.top, descending=args.descending,
                   columns=columns, sql=args.sql)
    render(result, args.format, title=f"{folder} ({result.num_rows} of {table.num_rows} rows)")
    return 0
