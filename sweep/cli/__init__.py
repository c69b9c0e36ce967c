"""The `rapid` command: one subcommand per module, each with `add_arguments` and `run`.

A command's module is imported only when that command runs, so `rapid run` never pays for
Optuna, plotly, pandas or Ray, which only `sweep`, `search` and `report` need."""
import argparse
import importlib
import os
import signal
import sys

COMMANDS = {
    "run": ("sweep.cli.run", "predict one configuration (training step or inference request)"),
    "validate": ("sweep.cli.validate", "compare predictions with published measurements"),
    "gemm": ("sweep.cli.gemm", "time one GEMM or a CSV of shapes on a GPU, optionally sharded with its collective"),
    "sweep": ("sweep.cli.sweep", "run a study file: enumerate, prune, evaluate, write a Parquet table"),
    "query": ("sweep.cli.query", "filter, sort and print a study's results table, or run SQL over it"),
    "report": ("sweep.cli.report", "draw a study's results as one self-contained HTML page (plotly)"),
    "net": ("sweep.cli.net", "simulate one collective on a network (microbenchmark)"),
    "replay": ("core.chakra.cli", "replay a Chakra ET set (ours or another tool's) on the network simulator"),
}


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line naming the argument, not a usage dump."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command` alone when it is one (argparse reads no other subcommand's
    options in one call, and each parser costs start-up time), else of every subcommand, for
    `rapid --help` and for the error that lists them; only `command`'s module is imported."""
    parser = OneLineParser(prog="rapid", description="Design-space exploration for LLM training and inference.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for name, (module_name, help_text) in COMMANDS.items():
        if command in COMMANDS and name != command:
            continue
        command_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == command:
            importlib.import_module(module_name).add_arguments(command_parser)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = argv[0] if argv and not argv[0].startswith("-") else None  # a leading option is --help's
    args = build_parser(command).parse_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    stop = _Stop(args.command)
    previous = stop.install()
    try:
        return module.run(args) or 0
    except ValueError as err:
        if not _is_spec_error(err):
            raise
        print(f"rapid {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        stop.say()  # once: at the signal already, unless the interrupt came another way
        return 130
    except BrokenPipeError:  # the reader (head, less) left: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _is_spec_error(err: Exception) -> bool:
    """Whether `err` is a core.errors.SpecError; a command that never imported core.errors (as
    `rapid net`) cannot have raised one, so the CLI does not import it either."""
    errors = sys.modules.get("core.errors")
    return errors is not None and isinstance(err, errors.SpecError)


class _Stop:
    """Ctrl-C and SIGTERM: say so in one line at once ("rapid sweep: stopping; finished results
    are kept"), then unwind as KeyboardInterrupt, so buffered rows are flushed and workers
    stopped (without waiting for their batches) on the way out. A second signal while that
    runs ends the process at once (rows already written are whole: parts are renamed into
    place)."""

    def __init__(self, command: str):
        self.command = command
        self.said = False

    def line(self) -> str:
        what = "stopping; finished results are kept" if self.command == "sweep" else "interrupted"
        return f"rapid {self.command}: {what}\n"

    def say(self) -> None:
        if self.said:
            return
        self.said = True
        try:
            fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):  # a captured stderr (pytest) has no descriptor
            print(self.line(), end="", file=sys.stderr)
            return
        # on a terminal, over the progress bar's line (the bar draws itself again below)
        os.write(fd, (("\r\x1b[2K" if os.isatty(fd) else "") + self.line()).encode())  # not print: safe in a handler

    def handle(self, signum, frame):
        if self.said:
            os._exit(130)
        self.say()
        raise KeyboardInterrupt

    def install(self) -> dict:
        """Puts the handler on SIGINT and SIGTERM; returns the handlers it replaced (none off
        the main thread, where signal.signal refuses with ValueError)."""
        try:
            previous = {signal.SIGINT: signal.signal(signal.SIGINT, self.handle)}
        except ValueError:
            return {}
        previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self.handle)
        return previous
