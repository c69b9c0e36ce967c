"""Digest of the network simulator's results, to show that a change to it leaves them
byte-identical: 600 random collectives (1-3 dimensions of every topology, soft and hard faults,
groups, chunks, flat or hierarchical) and the six bench_network all-reduce cases, each as the
repr of its time, its flow count and a hash of its per-link bytes, busy time and peak flows
(or its error). Run it on two builds and compare the files:

    .venv/bin/python scripts/netsim_digest.py before.json   # on the old build
    .venv/bin/python scripts/netsim_digest.py after.json    # on the new one
    cmp before.json after.json
    .venv/bin/python scripts/netsim_digest.py --compare before.json after.json  # when they differ

--compare prints how many cases differ and the largest relative change in a collective time (the
link figures are hashed: a change there shows only as a differing case).
"""
import hashlib
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_network import NETWORKS  # noqa: E402  (the benchmark's ASTRA-sim networks)

from astra_backend import AstraError, Dimension, HardFault, Network, SoftFault, network_from_config  # noqa: E402

SIZES = {"ring": [2, 3, 5, 8], "ring_uni": [2, 4], "fully_connected": [2, 3, 4], "switch": [2, 4, 5, 16],
         "mesh": [2, 3], "mesh2d": [4, 6], "torus2d": [4, 9], "kingmesh2d": [4, 6], "hypercube": [2, 4, 8],
         "fattree": [4, 8]}
CASES = 600
BENCH = [("Switch(1024)", "ring", 2**26), ("Switch(1024)", "direct", 2**26), ("Ring(8)xSwitch(128)", "ring", 2**30),
         ("Ring(8)xSwitch(128)", "direct", 2**26), ("Ring(64)", "ring", 2**26), ("Ring(64)", "direct", 2**30)]


def digest(result) -> list:
    links = result.links._buffers
    h = hashlib.sha1()
    for key in ("bytes", "busy_s", "peak_flows"):
        h.update(repr(list(links[key])).encode())
    return [repr(result.time_s), result.flows, h.hexdigest()[:16]]


def random_case(rng) -> list:
    dims = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        topology = rng.choice(sorted(SIZES))
        extra = {"npus_per_leaf": 2, "oversubscription": rng.choice([1.0, 2.0])} if topology == "fattree" else {}
        dims.append(Dimension(topology, rng.choice(SIZES[topology]), rng.choice([10, 50, 100]),
                              rng.choice([0.0, 1e-6, 3e-6]), **extra))
    try:
        links = Network(dims).links()
        pairs = sorted({(min(a, b), max(a, b)) for a, b in zip(links.src.tolist(), links.dst.tolist())})
        soft = [SoftFault(*rng.choice(pairs), rng.choice([0.1, 0.5])) for _ in range(rng.choice([0, 0, 1, 2]))]
        hard = [HardFault(*rng.choice(pairs)) for _ in range(rng.choice([0, 0, 0, 1]))]
        network = Network(dims, soft, hard)
        p = network.num_npus
        group = None if rng.random() < 0.6 else rng.sample(range(p), rng.randint(2, p)) if p >= 2 else None
        result = network.collective(rng.choice(["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast"]),
                                    rng.choice([0, 1, 4096, 2**20, 1e9]),
                                    rng.choice(["ring", "direct", "halving_doubling", "double_binary_tree"]), group,
                                    chunks=rng.randint(1, 3), hierarchical=rng.random() < 0.7)
        return digest(result)
    except AstraError as exc:
        return ["error", type(exc).__name__, str(exc)]


def compare(before_file: str, after_file: str) -> None:
    """Prints the cases that differ between two digest files and the largest relative time change."""
    before, after = (json.loads(Path(f).read_text()) for f in (before_file, after_file))
    changed = [(b, a) for b, a in zip(before, after) if b != a]
    largest, worst = 0.0, None
    for b, a in changed:
        if "error" in (b[0], a[0]) or b[-2] != a[-2]:
            print(f"not a rounding change: {b} -> {a}")
            continue
        t_before, t_after = float(b[-3]), float(a[-3])
        change = abs(t_after - t_before) / abs(t_before) if t_before else float(t_after != 0.0)
        if change >= largest:
            largest, worst = change, (b, a)
    print(f"{len(changed)} of {len(before)} cases differ; largest relative change in a collective time: {largest:.3g}"
          + (f" ({worst[0][-3]} -> {worst[1][-3]})" if worst else ""))


def main() -> None:
    if sys.argv[1] == "--compare":
        compare(*sys.argv[2:4])
        return
    rng = random.Random(7)
    out = [random_case(rng) for _ in range(CASES)]
    for name, algorithm, size in BENCH:
        network = Network(network_from_config(NETWORKS[name], name))
        out.append([name, algorithm] + digest(network.collective("all_reduce", size, algorithm)))
    Path(sys.argv[1]).write_text(json.dumps(out))
    print(f"{len(out)} digests ({sum(o[0] == 'error' for o in out)} errors) written to {sys.argv[1]}")


if __name__ == "__main__":
    main()
