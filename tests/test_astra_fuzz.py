"""Random small networks, faults and collectives: each run finishes no faster than the data a rank
must receive allows through its incoming links, or raises a clear astra_backend error."""
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from astra_backend import AstraError, Dimension, HardFault, Network, SoftFault

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


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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


@settings(max_examples=150, deadline=None)
@given(topology=st.one_of(st.sampled_from(sorted(SIZES)), ANYTHING), size=ANYTHING, bandwidth=ANYTHING,
       latency=ANYTHING, shape=ANYTHING)
def test_arbitrary_dimension_fields_build_or_raise_network_spec_error(topology, size, bandwidth, latency, shape):
    try:
        network = Network([Dimension(topology, size, bandwidth, latency, shape=shape)])
    except AstraError as exc:
        assert "\n" not in str(exc)
        return
    assert network.num_npus == size
