"""`rapid replay`: run any Chakra ET set on the compiled simulator, with link faults, and print
each rank's end time, its exposed communication and the busiest links."""
import argparse
import json
import sys

import numpy as np
from astra_backend import AstraError, load_network_file
from astra_backend.netcli import network_with_faults, top_links

from .replay import build_trace, exposed_comm_s, load_comm_groups, trace_files
from .system import load_system_algorithms
from core.errors import SpecError


def add_arguments(parser: argparse.ArgumentParser):
    parser.add_argument("prefix", metavar="TRACE_PREFIX", help="files TRACE_PREFIX.<rank>.et, ranks 0..n-1")
    parser.add_argument("--network", required=True, metavar="NET.yml",
                        help="ASTRA-sim analytical network YAML, or our hardware YAML")
    parser.add_argument("--comm-groups", metavar="FILE", help='ASTRA-sim communicator groups {"1": [ranks], ...}')
    parser.add_argument("--system", metavar="FILE",
                        help="ASTRA-sim system.json: collective algorithms for nodes that do not name one "
                             "(default ring)")
    parser.add_argument("--fault", action="append", default=[], metavar="SRC-DST:FACTOR",
                        help="degrade link SRC-DST to FACTOR of its bandwidth (0 removes it); repeatable")
    parser.add_argument("--top", default="5", metavar="K", help="how many of the busiest links to show")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def replay(args) -> dict:
    """The replay's report as a plain dict (what --json prints)."""
    top = top_links(args.top)
    files = trace_files(args.prefix)
    groups = load_comm_groups(args.comm_groups) if args.comm_groups else None
    algorithms = load_system_algorithms(args.system) if args.system else None
    chakra = build_trace(files, groups, algorithms)
    network = network_with_faults(load_network_file(args.network, chakra.ranks), args.fault)
    if network.num_npus < chakra.ranks:
        raise SpecError(str(args.network), "npus", network.num_npus,
                        f"at least the trace's {chakra.ranks} ranks ({files[0].parent}: {len(files)} rank files)")
    result = network.replay(chakra.trace)
    exposed = exposed_comm_s(chakra.trace.rank, result.node_end_s, chakra.is_comm, chakra.ranks)
    return {"end_time_s": float(result.time_s), "ranks": chakra.ranks, "nodes": int(chakra.trace.rank.size),
            "rank_end_s": [float(t) for t in result.rank_finish_s[:chakra.ranks]],
            "rank_exposed_comm_s": [float(t) for t in exposed],
            "num_npus": network.num_npus, "busiest_links": result.links.busiest(top)}


def run(args) -> int:
    try:
        report = replay(args)
    except AstraError as exc:
        print(f"rapid replay: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report))
        return 0
    ends, exposed = np.array(report["rank_end_s"]), np.array(report["rank_exposed_comm_s"])
    print(f"{args.prefix}: {report['ranks']} ranks, {report['nodes']} nodes on {report['num_npus']} NPUs: "
          f"end {report['end_time_s'] * 1e3:.6f} ms")
    print("  rank   end (ms)      exposed comm (ms)")
    for rank, (end, comm) in enumerate(zip(ends, exposed)):
        print(f"  {rank:>4}   {end * 1e3:<12.6f}  {comm * 1e3:.6f}")
    if report["busiest_links"]:
        print("  busiest links (node ids; switches follow the NPUs):")
        for link in report["busiest_links"]:
            print(f"    {link['src']:>6} -> {link['dst']:<6} dim {link['dim']}  {link['bytes'] / 2**20:10.2f} MiB  "
                  f"busy {link['busy_s'] * 1e3:.6f} ms")
    return 0
