"""The simulator releases the GIL: collectives run from several threads give the same answers."""
from concurrent.futures import ThreadPoolExecutor

from astra_backend import Dimension, Network


def test_concurrent_collectives_match_sequential_ones():
    network = Network([Dimension("ring", 4, 100, 1e-6), Dimension("switch", 16, 25, 2e-6)])
    sizes = [2**20 * (k + 1) for k in range(6)]
    sequential = [network.collective("all_reduce", s).time_s for s in sizes]
    with ThreadPoolExecutor(max_workers=3) as pool:
        concurrent = list(pool.map(lambda s: network.collective("all_reduce", s).time_s, sizes))
    assert concurrent == sequential
