"""Every topology builds the links it should, and dimension-order routing takes the expected hops."""
import pytest

from astra_backend import Dimension, Network


def directed_links(topology, size, **extra):
    return len(Network([Dimension(topology, size, 100, 1e-6, **extra)]).links().src)


@pytest.mark.parametrize("topology,size,links", [
    ("ring_uni", 8, 8), ("ring", 8, 16), ("ring", 2, 2), ("fully_connected", 5, 20), ("switch", 6, 12),
    ("mesh", 5, 8), ("mesh2d", 12, 2 * (3 * 3 + 2 * 4)), ("torus2d", 16, 64), ("kingmesh2d", 9, 2 * (12 + 8)),
    ("hypercube", 8, 24),
])
def test_link_counts(topology, size, links):
    assert directed_links(topology, size) == links


def test_fat_tree_has_leaf_and_spine_links_with_oversubscription():
    network = Network([Dimension("fattree", 16, 100, 1e-6, npus_per_leaf=4, spines=2, oversubscription=2.0)])
    links = network.links()
    assert network.num_nodes == 16 + 4 + 2
    assert len(links.src) == 2 * 16 + 2 * 4 * 2
    uplinks = links.bandwidth_Bps[(links.src >= 16) & (links.src < 20) & (links.dst >= 20)]
    assert set(uplinks.tolist()) == {4 * 100e9 / (2.0 * 2)}


def hops(network, src, dst):
    return int(network.send_recv(src, dst, 1).links.bytes_.astype(bool).sum())


@pytest.mark.parametrize("topology,shape,src,dst,expected", [
    ("mesh2d", (4, 4), 0, 15, 6), ("torus2d", (4, 4), 0, 15, 2), ("kingmesh2d", (4, 4), 0, 15, 3),
    ("torus2d", (4, 4), 0, 10, 4),
])
def test_two_dimensional_routes(topology, shape, src, dst, expected):
    assert hops(Network([Dimension(topology, 16, 100, 0.0, shape=shape)]), src, dst) == expected


def test_hypercube_and_ring_routes():
    assert hops(Network([Dimension("hypercube", 16, 100, 0.0)]), 0, 15) == 4
    assert hops(Network([Dimension("ring", 8, 100, 0.0)]), 0, 6) == 2
    assert hops(Network([Dimension("ring_uni", 8, 100, 0.0)]), 0, 6) == 6
    assert hops(Network([Dimension("fattree", 8, 100, 0.0, npus_per_leaf=4)]), 0, 7) == 4


def test_npu_ids_are_laid_out_dimension_by_dimension():
    # id = i0 + 4 * i1: NPU 6 is (2, 1); 6 -> 7 stays in dim 0, 6 -> 10 crosses dim 1 only.
    network = Network([Dimension("ring", 4, 100, 0.0), Dimension("switch", 3, 10, 0.0)])
    assert network.num_npus == 12 and network.num_nodes == 12 + 4
    dims_used = lambda src, dst: set(network.send_recv(src, dst, 1).links.dim[
        network.send_recv(src, dst, 1).links.bytes_ > 0].tolist())
    assert dims_used(6, 7) == {0}
    assert dims_used(6, 10) == {1}
    assert dims_used(6, 11) == {0, 1}
