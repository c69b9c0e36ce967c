"""`rapid net`: simulate one collective on a network file and print time, bandwidths and busiest links.

The command itself (option checks, the network file, the report in text or JSON) is compiled
(src/netcli.cpp): the `rapid` launcher runs it without Python where it can, and this module
runs the same code, reading in Python only what the compiled reader leaves to it (our hardware
YAML), so both print the same bytes."""
import argparse
import sys

from . import _netsim
from .configs import load_network_file
from .errors import AstraError
from .network import Network
from .spec import HardFault, SoftFault, dims_arrays


def add_arguments(parser: argparse.ArgumentParser):
    """Adds the `net` options to `parser` (also used by the `rapid` CLI), from the compiled table."""
    for flag, kind, required, metavar, default, help_text in _netsim.net_options():
        if kind == "flag":
            parser.add_argument(flag, action="store_true", help=help_text)
        elif kind == "list":
            parser.add_argument(flag, nargs="+", metavar=metavar, help=help_text)
        elif kind == "append":
            parser.add_argument(flag, action="append", default=[], metavar=metavar, help=help_text)
        else:
            parser.add_argument(flag, required=required, default=default, metavar=metavar, help=help_text)


def _cli_error(function, *args):
    """A compiled CLI check, its ValueError as our AstraError."""
    try:
        return function(*args)
    except ValueError as exc:
        raise AstraError(str(exc)) from None


def top_links(text) -> int:
    """--top K: how many busiest links to list, an integer >= 0."""
    return _cli_error(_netsim.top_links, text)


def network_with_faults(spec, fault_texts) -> Network:
    """The network of `spec` with the --fault options applied; a fault the network refuses is
    reported with the option as the user wrote it."""
    faults = _cli_error(_netsim.cli_faults, records(spec), list(fault_texts))
    soft = [SoftFault(a, b, factor) for a, b, factor in faults if factor > 0]
    hard = [HardFault(a, b) for a, b, factor in faults if factor == 0]
    return Network(spec, soft, hard)


def records(dims) -> list:
    """Validated dimensions as the compiled code's records (NetworkSpecError otherwise)."""
    arrays = dims_arrays(dims)
    return [{key: values[d] for key, values in arrays.items()} for d in range(len(dims))]


def read_network(path, npus) -> list:
    """A network file this package reads (a `network:` list of ours, or ASTRA-sim's format) as
    the compiled command's records."""
    return records(load_network_file(path, npus))


def run(args, reader=read_network) -> int:
    """Runs `rapid net`; returns the exit status (2 on bad input, with one line on stderr).
    `reader(path, npus)` gives the records of a network file the compiled reader leaves to Python."""
    status, out, err = _netsim.rapid_net(vars(args), reader)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rapid net", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
