"""Compares astra_backend with packet-level ns-3 (ns3==3.44.post0 from PyPI, installed into
build/ns3-venv) on ring all-reduce, flows sharing one link and all-to-all on a switch; MTU 9000.
Prints ours vs ns-3 and the error per case; exits 1 if any case is off by more than 5 %."""
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np

from astra_backend import Dimension, Network, Trace
from astra_backend.trace import RECV, SEND

ROOT = Path(__file__).resolve().parent.parent
NS3_VENV = ROOT / "build" / "ns3-venv"
NS3_PACKAGE = "ns3==3.44.post0"
MIB = 2**20
LINK_GBPS = 12.5  # GB/s: 100 Gb/s links
LATENCY_S = 1e-6
MTU = 9000
TOLERANCE = 0.05


def ns3_python():
    """The ns-3 virtual environment's interpreter, created and filled on first use."""
    python = NS3_VENV / "bin" / "python"
    if not python.exists():
        print(f"installing {NS3_PACKAGE} into {NS3_VENV} ...", flush=True)
        venv.create(NS3_VENV, with_pip=True)
    probe = subprocess.run([str(python), "-c", "import ns"], capture_output=True)
    if probe.returncode != 0:
        subprocess.run([str(python), "-m", "pip", "install", "-q", NS3_PACKAGE], check=True)
    return python


def ns3_case(name, nodes, links, messages, deps=()):
    bits = LINK_GBPS * 8e9
    return {"name": name, "nodes": nodes, "mtu": MTU, "links": [[a, b, bits, LATENCY_S] for a, b in links],
            "messages": [list(m) for m in messages], "deps": [list(d) for d in deps]}


def ring_all_reduce(n, size):
    """Ring all-reduce: 2(n-1) steps; step k on host i waits for its own and its predecessor's step k-1."""
    ours = Network([Dimension("ring", n, LINK_GBPS, LATENCY_S)]).collective("all_reduce", size).time_s
    messages, deps = [], []
    for k in range(2 * (n - 1)):
        for i in range(n):
            messages.append((i, (i + 1) % n, size / n))
            if k:
                deps += [((k - 1) * n + i, k * n + i), ((k - 1) * n + (i - 1) % n, k * n + i)]
    name = f"ring all-reduce {n} hosts {size // MIB} MiB"
    return name, ours, ns3_case(name, n, [(i, (i + 1) % n) for i in range(n)], messages, deps)


def shared_link(k, size):
    """k hosts each send `size` to host 0 through one switch: k flows share host 0's down-link."""
    ranks, kinds, peers = [], [], []
    for sender in range(1, k + 1):
        ranks += [sender, 0]
        kinds += [SEND, RECV]
        peers += [0, sender]
    trace = Trace(rank=np.array(ranks), kind=np.array(kinds), peer=np.array(peers),
                  bytes_=np.full(len(ranks), float(size)))
    ours = Network([Dimension("switch", k + 1, LINK_GBPS, LATENCY_S)]).replay(trace).time_s
    name = f"{k} flows through one link {size // MIB} MiB"
    switch = k + 1
    return name, ours, ns3_case(name, k + 2, [(h, switch) for h in range(k + 1)],
                                [(s, 0, size) for s in range(1, k + 1)])


def switch_all_to_all(n, size):
    """Direct all-to-all: host i sends size/n to i+1, i+2, ... in that order, all at once."""
    network = Network([Dimension("switch", n, LINK_GBPS, LATENCY_S)])
    ours = network.collective("all_to_all", size, "direct").time_s
    name = f"all-to-all {n} hosts on a switch {size // MIB} MiB"
    messages = [(i, (i + j) % n, size / n) for i in range(n) for j in range(1, n)]
    return name, ours, ns3_case(name, n + 1, [(h, n) for h in range(n)], messages)


def main():
    cases = [ring_all_reduce(n, s * MIB) for n in (4, 8) for s in (1, 16)]
    cases += [shared_link(k, 16 * MIB) for k in (4, 8)]
    cases += [switch_all_to_all(8, s * MIB) for s in (1, 16)]
    request = json.dumps({"cases": [c[2] for c in cases]})
    run = subprocess.run([str(ns3_python()), str(ROOT / "scripts" / "ns3_cases.py")], input=request,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""})
    if run.returncode != 0:
        print(f"ns-3 run failed:\n{run.stderr[-2000:]}", file=sys.stderr)
        return 1
    ns3_times = json.loads(run.stdout.strip().splitlines()[-1])
    print(f"{'case':<42} {'ours_s':>12} {'ns3_s':>12} {'error':>8}")
    worst = 0.0
    for name, ours, _ in cases:
        theirs = ns3_times[name]
        error = abs(ours - theirs) / theirs if theirs > 0 else float("inf")
        worst = max(worst, error)
        print(f"{name:<42} {ours:>12.6e} {theirs:>12.6e} {error:>7.2%}")
    print(f"worst error {worst:.2%} (tolerance {TOLERANCE:.0%})")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    sys.exit(main())
