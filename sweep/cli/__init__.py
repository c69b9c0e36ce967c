"""The `rapid` command: one subcommand per module, each with `add_arguments` and `run`."""
import argparse
import os
import signal
import sys
import threading

from astra_backend import netcli
from core import SpecError
from core.chakra import cli as replaycli

from . import query as cmd_query, report as cmd_report, run as cmd_run, sweep as cmd_sweep, validate as cmd_validate

COMMANDS = {
    "run": (cmd_run, "predict one configuration (training step or inference request)"),
    "validate": (cmd_validate, "compare predictions with published measurements"),
    "sweep": (cmd_sweep, "run a study file: enumerate, prune, evaluate, write a Parquet table"),
    "query": (cmd_query, "filter, sort and print a study's results table, or run SQL over it"),
    "report": (cmd_report, "draw a study's results as one self-contained HTML page (plotly)"),
    "net": (netcli, "simulate one collective on a network (microbenchmark)"),
    "replay": (replaycli, "replay a Chakra ET set (ours or another tool's) on the network simulator"),
}


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line naming the argument, not a usage dump."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="rapid", description="Design-space exploration for LLM training and inference.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, (module, help_text) in COMMANDS.items():
        module.add_arguments(sub.add_parser(name, help=help_text, description=help_text))
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    module = COMMANDS[args.command][0]
    previous = _stop_on_sigterm()
    try:
        return module.run(args) or 0
    except SpecError as err:
        print(f"rapid {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rapid {args.command}: interrupted (finished results are kept)", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader (head, less) left: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _stop_on_sigterm():
    """SIGTERM unwinds like Ctrl-C, so buffered rows are flushed and workers stopped; returns
    the handler it replaced (None off the main thread, where signals cannot be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _interrupt)

