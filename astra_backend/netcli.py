"""`rapid net`: simulate one collective on a network file and print time, bandwidths and busiest links."""
import argparse
import json
import re
import sys

from .codes import ALGORITHMS, COLLECTIVES
from .configs import load_network_file
from .errors import AstraError, NetworkSpecError
from .network import Network
from .spec import HardFault, SoftFault
from .units import parse_bytes

KINDS = (*COLLECTIVES, "send_recv")


def add_arguments(parser: argparse.ArgumentParser):
    """Adds the `net` options to `parser` (also used by the `rapid` CLI)."""
    parser.add_argument("--network", required=True, metavar="FILE",
                        help="our hardware YAML (network: list of dimensions) or an ASTRA-sim network YAML")
    parser.add_argument("--npus", metavar="N", help="total NPUs, for a network whose outer size is auto")
    parser.add_argument("--collective", required=True, metavar="KIND", help=f"one of {', '.join(KINDS)}")
    parser.add_argument("--size", required=True, metavar="SIZE", help="bytes per rank, e.g. 1048576, 64MiB, 1GB")
    parser.add_argument("--algorithm", default="ring", metavar="A", help=f"one of {', '.join(ALGORITHMS)}")
    parser.add_argument("--group", nargs="+", metavar="NPU",
                        help="NPU ids or ranges (0-7, 0,2,4); default all; send_recv takes SRC DST")
    parser.add_argument("--root", default="0", metavar="NPU", help="broadcast root (default 0)")
    parser.add_argument("--chunks", default="1", metavar="N", help="chunks pipelined across dimensions")
    parser.add_argument("--flat", action="store_true", help="run multi-dimension groups flat, not per dimension")
    parser.add_argument("--fault", action="append", default=[], metavar="SRC-DST:FACTOR",
                        help="degrade link SRC-DST to FACTOR of its bandwidth (0 removes it); repeatable")
    parser.add_argument("--top", default="5", metavar="K", help="how many of the busiest links to show")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _integer(text, field):
    try:
        return int(text)
    except ValueError:
        raise AstraError(f"{field}: {text!r} must be an integer") from None


def _parse_group(tokens):
    ids = []
    for token in tokens:
        for part in str(token).split(","):
            if not part:
                continue
            if "-" in part.strip("-"):
                low, high = part.split("-", 1)
                ids.extend(range(_integer(low, "--group"), _integer(high, "--group") + 1))
            else:
                ids.append(_integer(part, "--group"))
    return ids


def parse_fault(text):
    link, sep, factor_text = text.partition(":")
    ends = link.split("-")
    if not sep or len(ends) != 2:
        raise AstraError(f"--fault: {text!r} must look like SRC-DST:FACTOR, e.g. 0-1:0.5 (FACTOR 0 removes the link)")
    a, b = (_integer(e, "--fault") for e in ends)
    try:
        factor = float(factor_text)
    except ValueError:
        raise AstraError(f"--fault: factor {factor_text!r} in {text!r} must be a number in [0, 1]") from None
    if not 0 <= factor <= 1:
        raise AstraError(f"--fault: factor {factor_text!r} in {text!r} must be in [0, 1] (0 removes the link)")
    return HardFault(a, b) if factor == 0 else SoftFault(a, b, factor)


def top_links(text) -> int:
    """--top K: how many busiest links to list, an integer >= 0."""
    top = _integer(text, "--top")
    if top < 0:
        raise AstraError(f"--top: {top} must be an integer >= 0")
    return top


def network_with_faults(spec, fault_texts) -> Network:
    """The network of `spec` with the --fault options applied; a fault the network refuses is
    reported with the option as the user wrote it, not the simulator's internal field name."""
    faults = [(text, parse_fault(text)) for text in fault_texts]
    soft = [(text, f) for text, f in faults if isinstance(f, SoftFault)]
    hard = [(text, f) for text, f in faults if isinstance(f, HardFault)]
    try:
        return Network(spec, [f for _, f in soft], [f for _, f in hard])
    except NetworkSpecError as exc:
        internal = re.match(r"(soft|hard)_faults\[(\d+)\](?:\.(?:a|b))?: (.*)", str(exc))
        if internal is None:
            raise
        text = (soft if internal[1] == "soft" else hard)[int(internal[2])][0]
        raise AstraError(f"--fault {text!r}: {internal[3]} (link ends are node ids: the NPUs from 0, then the "
                         "switches)") from None


def _simulate(args):
    kind = args.collective.lower().replace("-", "_")
    kind = {"allreduce": "all_reduce", "reducescatter": "reduce_scatter", "allgather": "all_gather",
            "alltoall": "all_to_all", "sendrecv": "send_recv"}.get(kind, kind)
    if kind not in KINDS:
        raise AstraError(f"--collective: {args.collective!r} is not known; allowed: {', '.join(KINDS)}")
    try:
        size = parse_bytes(args.size)
    except ValueError as exc:
        raise AstraError(f"--size: {exc}") from None
    npus = _integer(args.npus, "--npus") if args.npus is not None else None
    if npus is not None and npus < 1:
        raise AstraError(f"--npus: {npus} must be an integer >= 1")
    network = network_with_faults(load_network_file(args.network, npus), args.fault)
    group = _parse_group(args.group) if args.group else None
    chunks = _integer(args.chunks, "--chunks")
    if kind == "send_recv":
        if group is None or len(group) != 2:
            raise AstraError(f"--group: send_recv needs exactly two NPUs, SRC DST; got {args.group!r}")
        return network, network.send_recv(group[0], group[1], size, chunks=chunks)
    if group is not None and len(set(group)) < 2:
        raise AstraError(f"--group: a collective needs two or more distinct NPUs; got {args.group!r}")
    result = network.collective(kind, size, args.algorithm.lower().replace("-", "_"), group,
                                root=_integer(args.root, "--root"), chunks=chunks, hierarchical=not args.flat)
    return network, result


def _format_bytes(n):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _format_time(t):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if t >= scale:
            return f"{t / scale:.3f} {unit}"
    return f"{t * 1e9:.1f} ns"


def run(args) -> int:
    """Runs `rapid net`; returns the exit status (2 on bad input, with one line on stderr)."""
    try:
        top = top_links(args.top)
        network, result = _simulate(args)
    except (AstraError, ValueError) as exc:
        print(f"rapid net: error: {exc}", file=sys.stderr)
        return 2
    busiest = result.links.busiest(top)
    if args.json:
        print(json.dumps({"time_s": result.time_s, "algbw_gbps": result.algbw_gbps, "busbw_gbps": result.busbw_gbps,
                          "kind": result.kind, "algorithm": result.algorithm, "size_bytes": result.size_bytes,
                          "group_size": result.group_size, "num_npus": network.num_npus, "flows": result.flows,
                          "busiest_links": busiest}))
        return 0
    print(f"{result.kind} of {_format_bytes(result.size_bytes)} on {result.group_size} NPUs "
          f"({result.algorithm}, {len(network.dims)} dimension(s)): {_format_time(result.time_s)}")
    print(f"  algbw {result.algbw_gbps:.2f} GB/s   busbw {result.busbw_gbps:.2f} GB/s   ({result.flows} flows)")
    if busiest:
        print("  most loaded links (node ids; switches follow the NPUs):")
        for link in busiest:
            print(f"    {link['src']:>6} -> {link['dst']:<6} dim {link['dim']}  {_format_bytes(link['bytes']):>11}  "
                  f"busy {_format_time(link['busy_s'])}  peak {link['peak_flows']} flow(s)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="rapid net", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
