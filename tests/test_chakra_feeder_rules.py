"""Emitted bundles follow the rules ASTRA-sim's Chakra feeder reads fields by (its Workload
reads comm_src/comm_dst as unsigned ranks and requires its own rank on its side, pg_name as a
decimal id of --comm-group-configuration, all-gather comm_size as each rank's input, a
roofline cost from num_ops / tensor_size with tensor_size > 0; sends pair with recvs by
peers and tag), checked on the raw wire values of six layouts."""
import json
from collections import Counter

import pytest
import yaml

from chakra_bundles import LAYOUTS, write_bundles
from core.chakra.bundle import FILES
from core.chakra.trace import node_attrs, read_protos
from core.chakra.schema import COLLECTIVE_TYPES, NODE_TYPES

TYPE_NAME = {v: k for k, v in NODE_TYPES.items()}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, a100):
    return write_bundles(tmp_path_factory.mktemp("bundles"), a100)


def _read_bundle(folder, prefix, gpus):
    files = sorted(folder.glob(f"{prefix}.*.et"))
    assert [f.name for f in files] == sorted(f"{prefix}.{r}.et" for r in range(gpus))
    return {r: read_protos(folder / f"{prefix}.{r}.et")[1] for r in range(gpus)}


def _check_rules(folder, prefix, gpus):
    """Asserts every feeder rule; returns (collective sizes by type, send count) for spot checks."""
    assert all((folder / name).is_file() for name in FILES)
    network = yaml.safe_load((folder / "network.yml").read_text())
    npus = 1
    for size in network["npus_count"]:
        assert size > 1
        npus *= size
    assert npus >= gpus
    gpus = npus  # one workload per NPU
    system = json.loads((folder / "system.json").read_text())
    assert all(len(system[k]) == len(network["topology"]) for k in system if k.endswith("-implementation"))
    peak_flops, memory_bps = system["peak-perf"] * 1e12, system["local-mem-bw"] * 1e9
    groups = json.loads((folder / "comm_group.json").read_text())
    assert all(key.isdigit() and int(key) > 0 for key in groups)
    sends, recvs, issued = Counter(), Counter(), Counter()
    sizes = {}
    for rank, nodes in _read_bundle(folder, prefix, gpus).items():
        ids = set()
        for node in nodes:
            attrs = node_attrs(node)
            kind = TYPE_NAME[node.type]
            assert set(node.data_deps) <= ids  # dependencies come first and are in this file
            assert len(set(node.data_deps)) == len(node.data_deps)  # named twice, the feeder never frees it
            ids.add(node.id)
            if kind == "COMP_NODE":
                assert attrs["num_ops"] > 0 and attrs["tensor_size"] > 0
                assert attrs["num_ops"] / attrs["tensor_size"] * memory_bps >= peak_flops  # compute-bound roofline
            elif kind in ("COMM_SEND_NODE", "COMM_RECV_NODE"):
                src, dst, tag = attrs["comm_src"], attrs["comm_dst"], attrs["comm_tag"]
                assert 0 <= src < gpus and 0 <= dst < gpus and src != dst and tag >= 0
                assert (src if kind == "COMM_SEND_NODE" else dst) == rank
                (sends if kind == "COMM_SEND_NODE" else recvs)[(src, dst, tag, attrs["comm_size"])] += 1
            else:
                assert kind == "COMM_COLL_NODE"
                group = attrs["pg_name"]
                assert group.isdigit() and group in groups and rank in groups[group]
                assert len(groups[group]) > 1
                issued[(group, rank)] += 1
                assert attrs["comm_size"] / memory_bps < 1e-9  # a local reduction pass truncates to 0 ns
                sizes.setdefault(attrs["comm_type"], set()).add(attrs["comm_size"])
    assert sends == recvs  # every send has a recv with the same peers, tag and size
    for group, members in groups.items():  # every member issues the group's collectives
        assert len({issued[(group, r)] for r in members}) == 1
    return sizes, sum(sends.values())


@pytest.mark.parametrize("name", [layout[0] for layout in LAYOUTS])
def test_bundle_follows_the_feeder_rules(bundles, name):
    folder, prefix, record = bundles[name]
    gpus = next(layout[4] for layout in LAYOUTS if layout[0] == name)
    sizes, sends = _check_rules(folder, prefix, gpus)
    if "pp2" in name:
        assert sends > 0
    if name == "train-tp2-dp2":  # sequence-parallel all-gather: each rank's 1 x 512 x 2048 bf16 shard
        assert 512 * 2048 * 2 // 2 in sizes[COLLECTIVE_TYPES["ALL_GATHER"]]
    if name == "train-ep2-dp2":
        assert COLLECTIVE_TYPES["ALL_TO_ALL"] in sizes


def test_readme_gives_the_command_and_system_names_what_we_simulated(bundles):
    folder, prefix, _ = bundles["train-tp2-dp2"]
    readme = (folder / "README.txt").read_text()
    assert f"--workload-configuration=$BUNDLE/{prefix}" in readme
    assert "--comm-group-configuration=$BUNDLE/comm_group.json" in readme
    system = json.loads((folder / "system.json").read_text())
    assert system["all-gather-implementation"] == ["ring"]
    assert system["roofline-enabled"] == 1 and system["peak-perf"] == pytest.approx(312.0)
    assert system["collective-optimization"] == "localBWAware"  # each dimension gets its share, as ours
