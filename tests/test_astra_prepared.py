"""A prepared replay: matched once, re-run under other faults and compute durations, with
the answers a fresh replay gives."""
import numpy as np
import pytest

from astra_backend import Dimension, HardFault, Network, NoRouteError, SoftFault, TraceSpecError
from test_astra_api import pipeline_trace

RING = [Dimension("ring", 4, 100, 1e-6)]


def test_a_prepared_replay_answers_as_a_fresh_replay_would():
    network = Network(RING)
    prepared = network.prepare(pipeline_trace())
    assert prepared.run()[0] == network.replay(pipeline_trace()).time_s
    for soft, hard in (([SoftFault(0, 1, 0.25)], []), ([SoftFault(2, 3, 0.5)], [HardFault(0, 1)])):
        assert prepared.run(soft, hard)[0] == network.with_faults(soft, hard).replay(pipeline_trace()).time_s
    slower = pipeline_trace()
    slower.duration_s = slower.duration_s * 3
    assert prepared.run(duration_s=slower.duration_s)[0] == network.replay(slower).time_s
    assert prepared.run()[0] == network.replay(pipeline_trace()).time_s  # runs leave the graph as it was


def test_a_prepared_replay_reports_the_bytes_each_link_carried():
    network = Network(RING)
    _, link_bytes = network.prepare(pipeline_trace()).run()
    stats = network.links()
    sent = {(a, b): x for a, b, x in zip(stats.src.tolist(), stats.dst.tolist(), link_bytes.tolist())}
    assert sent[(0, 1)] >= 1e9 and link_bytes.shape == stats.src.shape


def test_a_prepared_replay_refuses_what_it_cannot_run():
    prepared = Network(RING).prepare(pipeline_trace())
    with pytest.raises(NoRouteError):
        prepared.run(hard_faults=[HardFault(0, 1), HardFault(1, 2)])
    with pytest.raises(TraceSpecError, match="duration_s"):
        prepared.run(duration_s=np.zeros(3))


def test_prepared_replays_of_one_graph_share_a_shape_and_other_sizes_do_not():
    network = Network(RING)
    shape = network.prepare(pipeline_trace()).shape()
    assert np.array_equal(shape, network.prepare(pipeline_trace()).shape())
    bigger = pipeline_trace()
    bigger.bytes_ = np.array([0, 1e9, 1e9, 0, 8e6, 8e6, 8e6, 8e6])  # only the ring all-reduce grows
    assert not np.array_equal(shape, network.prepare(bigger).shape())
