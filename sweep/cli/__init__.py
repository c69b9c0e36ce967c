"""The `rapid` command: one subcommand per module, each with `add_arguments` and `run`.

A command's module is imported only when that command runs, so `rapid run` never pays for
Optuna, plotly, pandas or Ray, which only `sweep`, `search` and `report` need."""
import argparse
import importlib
import os
import signal
import sys
import threading

from core.errors import SpecError

COMMANDS = {
    "run": ("sweep.cli.run", "predict one configuration (training step or inference request)"),
    "validate": ("sweep.cli.validate", "compare predictions with published measurements"),
    "sweep": ("sweep.cli.sweep", "run a study file: enumerate, prune, evaluate, write a Parquet table"),
    "query": ("sweep.cli.query", "filter, sort and print a study's results table, or run SQL over it"),
    "report": ("sweep.cli.report", "draw a study's results as one self-contained HTML page (plotly)"),
    "net": ("astra_backend.netcli", "simulate one collective on a network (microbenchmark)"),
    "replay": ("core.chakra.cli", "replay a Chakra ET set (ours or another tool's) on the network simulator"),
}


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line naming the argument, not a usage dump."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand is listed; only `command`'s module is imported to give its options
    (argparse reads no other subcommand's options in one call)."""
    parser = OneLineParser(prog="rapid", description="Design-space exploration for LLM training and inference.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, (module_name, help_text) in COMMANDS.items():
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module_name).add_arguments(command_parser)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((word for word in argv if not word.startswith("-")), None)
    args = build_parser(command).parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
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

