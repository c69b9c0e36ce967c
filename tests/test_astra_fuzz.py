"""Random small networks, faults and collectives: each run finishes no faster than the data a rank
must receive allows through its incoming links, or raises a clear astra_backend error."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_backend import AstraError, Dimension, HardFault, Network, SoftFault, Trace
from astra_backend.trace import ALL_REDUCE, BROADCAST, COMPUTE, RECV, SEND

SIZES = {
    "ring": [2, 3, 5], "ring_uni": [2, 4], "fully_connected": [2, 3, 4], "switch": [2, 4, 5], "mesh": [2, 3],
    "mesh2d": [4, 6], "torus2d": [4, 9], "kingmesh2d": [4, 6], "hypercube": [2, 4, 8], "fattree": [4, 6],
}


@st.composite
def dimensions(draw):
    topology = draw(st.sampled_from(sorted(SIZES)))
    size = draw(st.sampled_from(SIZES[topology]))
    extra = {"npus_per_leaf": 2, "oversubscription": draw(st.sampled_from([1.0, 2.0]))} if topology == "fattree" else {}
    return Dimension(topology, size, draw(st.sampled_from([10, 50, 100])), draw(st.sampled_from([0.0, 1e-6])), **extra)


@st.composite
def cases(draw):
    dims = draw(st.lists(dimensions(), min_size=1, max_size=2))
    links = Network(dims).links()
    pairs = sorted({(min(a, b), max(a, b)) for a, b in zip(links.src.tolist(), links.dst.tolist())})
    soft = [SoftFault(*pairs[i], draw(st.sampled_from([0.1, 0.5, 1.0])))
            for i in draw(st.lists(st.integers(0, len(pairs) - 1), max_size=3))]
    hard = [HardFault(*pairs[i]) for i in draw(st.lists(st.integers(0, len(pairs) - 1), max_size=2))]
    npus = Network(dims).num_npus
    group = draw(st.lists(st.integers(0, npus - 1), min_size=1, max_size=npus, unique=True))
    return {
        "network": Network(dims, soft, hard),
        "kind": draw(st.sampled_from(["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast"])),
        "algorithm": draw(st.sampled_from(["ring", "direct", "halving_doubling", "double_binary_tree"])),
        "group": draw(st.one_of(st.none(), st.just(group))),
        "size": draw(st.sampled_from([0, 1, 4096, 2**20, 1e9])),
        "chunks": draw(st.integers(1, 3)),
        "hierarchical": draw(st.booleans()),
    }


def received_bytes_lower_bound(kind, p, size):
    """Bytes every non-root member must at least receive, whatever the algorithm."""
    if p < 2:
        return 0.0
    return {"all_reduce": (p - 1) / p * size, "reduce_scatter": size / p, "all_gather": (p - 1) / p * size,
            "all_to_all": (p - 1) / p * size, "broadcast": size}[kind]


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_collectives_respect_lower_bound_or_fail_cleanly(case):
    network = case["network"]
    group = list(range(network.num_npus)) if case["group"] is None else case["group"]
    try:
        result = network.collective(case["kind"], case["size"], case["algorithm"], case["group"], root=group[0],
                                    chunks=case["chunks"], hierarchical=case["hierarchical"])
    except AstraError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    links = network.links()
    need = received_bytes_lower_bound(case["kind"], len(group), case["size"])
    bound = 0.0
    for npu in group:
        if need == 0 or (case["kind"] == "broadcast" and npu == group[0]):
            continue
        capacity = links.bandwidth_Bps[(links.dst == npu) & ~links.failed].sum()
        bound = max(bound, need / capacity if capacity > 0 else np.inf)
    assert np.isfinite(result.time_s)
    assert result.time_s >= bound * (1 - 1e-9)


ANYTHING = st.one_of(st.none(), st.booleans(), st.integers(-5, 5000), st.floats(allow_nan=True), st.text(max_size=6),
                     st.lists(st.integers(-2, 5), max_size=3))


@settings(max_examples=150, deadline=None, derandomize=True)
@given(topology=st.one_of(st.sampled_from(sorted(SIZES)), ANYTHING), size=ANYTHING, bandwidth=ANYTHING,
       latency=ANYTHING, shape=ANYTHING)
def test_arbitrary_dimension_fields_build_or_raise_network_spec_error(topology, size, bandwidth, latency, shape):
    try:
        network = Network([Dimension(topology, size, bandwidth, latency, shape=shape)])
    except AstraError as exc:
        assert "\n" not in str(exc)
        return
    assert network.num_npus == size


GROUPS = [[0, 1, 2, 3], [1, 2]]


@st.composite
def traces(draw):
    """Random matched events (compute, send/recv pairs, collectives on a group), each depending on
    earlier nodes only; sometimes one field is then spoiled to exercise the error paths."""
    rank, kind, duration, bytes_, group, peer, algorithm, deps = [], [], [], [], [], [], [], []
    earlier = [0]  # nodes of previous events: the only ones a node may depend on

    def node(r, k, g=0, p=0, a=0, size=0.0, seconds=0.0):
        deps.append(draw(st.lists(st.integers(0, earlier[0] - 1), max_size=2, unique=True)) if earlier[0] else [])
        for column, value in ((rank, r), (kind, k), (group, g), (peer, p), (algorithm, a), (bytes_, size),
                              (duration, seconds)):
            column.append(value)

    for _ in range(draw(st.integers(1, 6))):
        earlier[0] = len(rank)
        event = draw(st.sampled_from(["compute", "p2p", "collective"]))
        if event == "compute":
            node(draw(st.integers(0, 3)), COMPUTE, seconds=draw(st.sampled_from([0.0, 1e-6, 1e-3])))
        elif event == "p2p":
            src, dst = draw(st.lists(st.integers(0, 3), min_size=2, max_size=2, unique=True))
            size = draw(st.sampled_from([0.0, 1e3, 1e6]))
            node(src, SEND, p=dst, size=size)
            node(dst, RECV, p=src, size=size)
        else:
            g = draw(st.integers(0, 1))
            k, a = draw(st.sampled_from([ALL_REDUCE, BROADCAST])), draw(st.integers(0, 3))
            size = draw(st.sampled_from([0.0, 1e3, 1e6]))
            for member in GROUPS[g]:
                node(member, k, g=g, p=GROUPS[g][-1], a=a, size=size)
    columns = {"rank": rank, "kind": kind, "duration_s": duration, "bytes_": bytes_, "group": group, "peer": peer,
               "algorithm": algorithm}
    spoil = draw(st.one_of(st.none(), st.sampled_from(sorted(columns))))
    if spoil:
        columns[spoil][draw(st.integers(0, len(rank) - 1))] = draw(st.sampled_from([-1, 2, 7, 1e9]))
    trace = Trace(**{k: np.array(v) for k, v in columns.items()},
                  dep_offsets=np.cumsum([0] + [len(d) for d in deps]),
                  deps=np.array([i for d in deps for i in d], dtype=np.int64),
                  group_offsets=np.array([0, 4, 6]), group_npus=np.array(GROUPS[0] + GROUPS[1]))
    return trace, spoil is not None


@settings(max_examples=150, deadline=None, derandomize=True)
@given(traces())
def test_random_traces_replay_consistently_or_fail_cleanly(case):
    trace, spoiled = case
    try:
        result = Network([Dimension("ring", 4, 100, 1e-6)]).replay(trace)
    except AstraError as exc:
        assert spoiled and str(exc) and "\n" not in str(exc)
        return
    start, end = result.node_start_s, result.node_end_s
    for i in range(len(trace.rank)):
        for d in trace.deps[trace.dep_offsets[i]:trace.dep_offsets[i + 1]]:
            assert start[i] >= end[d]
        assert end[i] >= start[i]
        if trace.kind[i] == COMPUTE:
            assert end[i] - start[i] == pytest.approx(trace.duration_s[i], abs=1e-15)
    assert result.time_s == pytest.approx(end.max())
