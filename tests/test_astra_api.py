"""Python API: argument validation, network files, units, trace replay and the `rapid net` front door."""
import json
import pickle

import numpy as np
import pytest

from astra_backend import (CollectiveSpecError, Dimension, HardFault, Network, NetworkSpecError, SoftFault, Trace,
                           TraceSpecError, load_network_file, netcli)
from astra_backend.trace import ALL_REDUCE, COMPUTE, RECV, SEND
from astra_backend.units import parse_bandwidth, parse_bytes, parse_time

RING4 = [Dimension("ring", 4, 100, 1e-6)]


@pytest.mark.parametrize("text,value", [("64MiB", 64 * 2**20), ("1 GiB", 2**30), ("1GB", 1e9), (4096, 4096),
                                        ("1.5e3 B", 1500)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


def test_parse_bandwidth_and_time():
    assert parse_bandwidth("300 GB/s") == 300e9
    assert parse_bandwidth("400 Gb/s") == 50e9
    assert parse_bandwidth("1 GiB/s") == 2**30
    assert parse_time("0.7 us") == pytest.approx(0.7e-6)
    assert parse_time("500ns") == pytest.approx(5e-7)
    with pytest.raises(ValueError, match="unknown unit"):
        parse_time("5 parsecs")


@pytest.mark.parametrize("dim,message", [
    (Dimension("donut", 4, 100), r"dims\[0\]\.topology: 'donut' is not a topology"),
    (Dimension("ring", 0, 100), r"dims\[0\]\.size: 0 must be an integer"),
    (Dimension("ring", 4, -1), r"dims\[0\]\.bandwidth_gbps: -1"),
    (Dimension("ring", 4, 100, float("nan")), r"latency_s: nan"),
    (Dimension("hypercube", 6, 100), "power of two"),
    (Dimension("mesh2d", 6, 100, shape=(4, 2)), "must multiply to size 6"),
    (Dimension("fattree", 6, 100, npus_per_leaf=4), "must divide size 6"),
    (Dimension("ring", True, 100), "size: True"),
])
def test_bad_dimensions_name_the_field(dim, message):
    with pytest.raises(NetworkSpecError, match=message):
        Network([dim])


def test_bad_faults_name_the_fault():
    with pytest.raises(NetworkSpecError, match=r"soft_faults\[0\]\.factor: 0 must be"):
        Network(RING4, soft_faults=[SoftFault(0, 1, 0)])
    with pytest.raises(NetworkSpecError, match=r"hard_faults\[0\]: there is no link between node 0 and node 2"):
        Network(RING4, hard_faults=[HardFault(0, 2)])
    with pytest.raises(NetworkSpecError, match=r"soft_faults\[0\]\.b: 9"):
        Network(RING4, soft_faults=[SoftFault(0, 9, 0.5)])


@pytest.mark.parametrize("call,message", [
    (lambda n: n.collective("allreduce", 1), "kind: 'allreduce' is not a collective"),
    (lambda n: n.collective("all_reduce", -1), "size_bytes: -1"),
    (lambda n: n.collective("all_reduce", 1, "magic"), "algorithm: 'magic'"),
    (lambda n: n.collective("all_reduce", 1, group=[0, 0]), "lists an NPU twice"),
    (lambda n: n.collective("all_reduce", 1, group=[0, 7]), r"NPU ids in 0\.\.3"),
    (lambda n: n.collective("all_reduce", 1, chunks=0), "chunks: 0"),
    (lambda n: n.collective("reduce_scatter", 1, "double_binary_tree"), "supports all_reduce and broadcast"),
    (lambda n: n.collective("all_reduce", 1, "halving_doubling", group=[0, 1, 2]), "power-of-two group"),
    (lambda n: n.collective("broadcast", 1, group=[1, 2], root=0), "root: 0 must be an NPU of the group"),
])
def test_bad_collectives_raise_clear_errors(call, message):
    with pytest.raises(CollectiveSpecError, match=message):
        call(Network(RING4))


@pytest.mark.parametrize("algorithm", ["ring", "direct", "halving_doubling", "double_binary_tree"])
@pytest.mark.parametrize("kind", ["all_reduce", "broadcast"])
def test_every_algorithm_runs_on_a_subgroup(algorithm, kind):
    network = Network([Dimension("switch", 8, 100, 1e-6)])
    result = network.collective(kind, 2**20, algorithm, group=[1, 3, 5, 7], root=3, chunks=2)
    assert result.time_s > 2**20 / 100e9 / 2 and result.group_size == 4


def test_network_files_ours_and_astra_sim(tmp_path):
    ours = tmp_path / "hw.yaml"
    ours.write_text("network:\n"
                    "  - {name: nvlink, topology: switch, size: 8, link_bandwidth: 300 GB/s, latency: 0.7 us}\n"
                    "  - {name: ib, topology: switch, size: 8, link_bandwidth: 25 GB/s, latency: 5 us}\n")
    dims = load_network_file(ours)
    assert [(d.topology, d.size, d.bandwidth_gbps) for d in dims] == [("switch", 8, 300.0), ("switch", 8, 25.0)]
    assert dims[0].latency_s == pytest.approx(0.7e-6)
    astra = tmp_path / "astra.yml"
    astra.write_text("topology: [ Ring, FullyConnected, Switch ]\nnpus_count: [ 4, 2, 8 ]\n"
                     "bandwidth: [ 50.0, 25.0, 12.5 ]\nlatency: [ 500.0, 500.0, 1000.0 ]\n")
    dims = load_network_file(astra)
    assert Network(dims).num_npus == 64
    assert dims[0].bandwidth_gbps == pytest.approx(50 * 2**30 / 1e9) and dims[2].latency_s == pytest.approx(1e-6)
    bad = tmp_path / "bad.yml"
    bad.write_text("topology: [ Ring ]\nnpus_count: [ 4, 2 ]\nbandwidth: [ 50.0 ]\nlatency: [ 5.0 ]\n")
    with pytest.raises(NetworkSpecError, match="equal lengths"):
        load_network_file(bad)


def test_a_collective_result_pickles_with_its_link_arrays():
    result = Network(RING4).collective("all_reduce", 2**20)
    again = pickle.loads(pickle.dumps(result))
    assert again.time_s == result.time_s and np.array_equal(again.links.bytes_, result.links.bytes_)
    assert again.links.busiest(2) == result.links.busiest(2) and again.links.failed.dtype == bool


def test_a_network_file_in_json_reads_as_its_yaml_twin(tmp_path):
    config = {"topology": ["Ring", "Switch"], "npus_count": [4, 8], "bandwidth": [50.0, 12.5], "latency": [500.0, 1e3]}
    as_json, as_yaml = tmp_path / "net.json", tmp_path / "net.yml"
    as_json.write_text(json.dumps(config))
    as_yaml.write_text("topology: [Ring, Switch]\nnpus_count: [4, 8]\nbandwidth: [50.0, 12.5]\nlatency: [500.0, 1000.0]\n")
    assert load_network_file(as_json) == load_network_file(as_yaml)


def pipeline_trace():
    """Rank 0 computes 1 ms then sends 1 GB to rank 1, which computes 2 ms after receiving;
    then ranks 0-3 all-reduce 4 MB once both are done."""
    return Trace(
        rank=np.array([0, 0, 1, 1, 0, 1, 2, 3]),
        kind=np.array([COMPUTE, SEND, RECV, COMPUTE] + [ALL_REDUCE] * 4),
        duration_s=np.array([1e-3, 0, 0, 2e-3, 0, 0, 0, 0]),
        bytes_=np.array([0, 1e9, 1e9, 0, 4e6, 4e6, 4e6, 4e6]),
        peer=np.array([0, 1, 0, 0, 0, 0, 0, 0]),
        dep_offsets=np.array([0, 0, 1, 1, 2, 3, 4, 4, 4]),
        deps=np.array([0, 2, 1, 3]),
        group=np.zeros(8, dtype=np.int32),
        group_offsets=np.array([0, 4]),
        group_npus=np.array([0, 1, 2, 3]),
    )


def test_replay_runs_ranks_against_each_other():
    network = Network([Dimension("ring_uni", 4, 100, 0.0)])
    result = network.replay(pipeline_trace())
    transfer = 1e9 / 100e9
    all_reduce = 2 * 3 / 4 * 4e6 / 100e9
    assert result.node_end_s[:4] == pytest.approx([1e-3, 1e-3 + transfer, 1e-3 + transfer, 3e-3 + transfer])
    assert result.node_start_s[5] == pytest.approx(3e-3 + transfer)
    assert result.time_s == pytest.approx(3e-3 + transfer + all_reduce)
    assert result.rank_finish_s == pytest.approx([result.time_s] * 4)


def test_a_compute_node_starts_exactly_when_its_last_dependency_ends():
    """A compute node has no join of its own in the simulated graph: its start is read back as the
    latest end among its dependencies, 0 without any."""
    result = Network([Dimension("ring_uni", 4, 100, 0.0)]).replay(pipeline_trace())
    assert result.node_start_s[0] == 0.0
    assert result.node_start_s[3] == result.node_end_s[2]
    assert result.node_end_s[3] - result.node_start_s[3] == pytest.approx(2e-3)


def test_a_ring_all_reduce_waits_step_by_step_for_a_late_member():
    """Rank 0 computes 1 ms first; ranks 1-3 start their first sends at once, but every later send
    needs rank 0's chain of sends, so the ring ends 1 ms after an on-time one (no link is shared)."""
    n, size, latency_s = 4, 4e6, 1e-6
    network = Network([Dimension("ring_uni", n, 100, latency_s)])
    trace = Trace(rank=np.array([0, 0, 1, 2, 3]), kind=np.array([COMPUTE] + [ALL_REDUCE] * 4),
                  duration_s=np.array([1e-3, 0, 0, 0, 0]), bytes_=np.array([0] + [size] * 4),
                  dep_offsets=np.array([0, 0, 1, 1, 1, 1]), deps=np.array([0]), group=np.zeros(5, dtype=np.int32),
                  group_offsets=np.array([0, 4]), group_npus=np.arange(4))
    step_s = size / n / 100e9 + latency_s
    result = network.replay(trace)
    assert result.time_s == pytest.approx(1e-3 + 2 * (n - 1) * step_s)
    assert result.node_end_s[1:] == pytest.approx([1e-3 + 2 * (n - 1) * step_s] * 4)


def test_replay_errors_are_clear():
    network = Network(RING4)
    trace = pipeline_trace()
    trace.kind = trace.kind.copy()
    trace.kind[2] = COMPUTE
    with pytest.raises(TraceSpecError, match=r"node 1 \(rank 0, send\) to rank 1 with tag 0 has no matching recv"):
        network.replay(trace)
    cyclic = pipeline_trace()
    cyclic.deps = np.array([3, 2, 1, 3])
    with pytest.raises(TraceSpecError, match="trace deadlocks"):
        network.replay(cyclic)
    short = pipeline_trace()
    short.bytes_ = short.bytes_[:3]
    with pytest.raises(TraceSpecError, match="bytes_: has 3 entries, expected 8"):
        network.replay(short)
    outsider = pipeline_trace()
    outsider.group_npus = np.array([0, 1, 2, 2])
    with pytest.raises(TraceSpecError, match="lists an NPU twice"):
        network.replay(outsider)


def run_cli(capsys, *argv):
    status = netcli.main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


def test_rapid_net_json_and_text(tmp_path, capsys):
    config = tmp_path / "net.yaml"
    config.write_text("topology: [ Ring ]\nnpus_count: [ 8 ]\nbandwidth: [ 100 ]\nlatency: [ 0 ]\n")
    status, out, _ = run_cli(capsys, "--network", str(config), "--collective", "all_reduce", "--size", "64MiB",
                             "--json")
    record = json.loads(out)
    bandwidth = 100 * 2**30
    assert status == 0
    assert record["time_s"] == pytest.approx(2 * 7 / 8 * 64 * 2**20 / bandwidth)
    assert record["busbw_gbps"] == pytest.approx(bandwidth / 1e9)
    status, out, _ = run_cli(capsys, "--network", str(config), "--collective", "all-gather", "--size", "1GiB",
                             "--group", "0-3", "--fault", "0-1:0.5", "--fault", "4-5:0")
    assert status == 0 and "most loaded links" in out and "0 -> 1" in out


@pytest.mark.parametrize("argv,message", [
    (["--collective", "all_reduce", "--size", "1MiB"], "cannot be read"),
    (["--collective", "gossip", "--size", "1MiB"], "--collective: 'gossip'"),
    (["--collective", "all_reduce", "--size", "lots"], "--size"),
    (["--collective", "all_reduce", "--size", "1MiB", "--fault", "0-2:0.5"],
     "--fault '0-2:0.5': there is no link between node 0 and node 2"),
    (["--collective", "all_reduce", "--size", "1MiB", "--fault", "0-1:0.5", "--fault", "0-9:0"],
     "--fault '0-9:0': 9 must be an integer in [0, 3]"),
    (["--collective", "all_reduce", "--size", "1MiB", "--top", "-1"], "--top: -1 must be an integer >= 0"),
    (["--collective", "all_reduce", "--size", "1MiB", "--fault", "0:0.5"], "SRC-DST:FACTOR"),
    (["--collective", "send_recv", "--size", "1MiB"], "exactly two NPUs"),
    (["--collective", "all_reduce", "--size", "1MiB", "--group", "2"], "two or more distinct NPUs"),
])
def test_rapid_net_errors_are_one_line(tmp_path, capsys, argv, message):
    config = tmp_path / "net.yaml"
    config.write_text("network:\n  - {topology: ring, size: 4, link_bandwidth: 100 GB/s, latency: 1 us}\n")
    network = str(tmp_path / "missing.yaml") if message == "cannot be read" else str(config)
    status, _, err = run_cli(capsys, "--network", network, *argv)
    assert status == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_rapid_net_reads_our_hardware_presets_with_auto_outer_size():
    from astra_backend.configs import load_network_file
    dims = load_network_file("core/model/presets/gpus/a100-sxm4-80gb.yaml", npus=32)
    assert [d.size for d in dims] == [8, 4]
    assert dims[0].bandwidth_gbps == pytest.approx(300 * 0.78)  # link rate times its efficiency
    with pytest.raises(NetworkSpecError, match="auto needs the NPU count"):
        load_network_file("core/model/presets/gpus/a100-sxm4-80gb.yaml")


@pytest.mark.parametrize("preset", ["h100-sxm5-80gb", "h200-sxm-141gb"])
def test_rapid_net_reads_presets_that_describe_nccl_algorithms(preset):
    """switch_reduction, ll_bandwidth and the fill chunks are for the closed forms; the simulator
    reads past them."""
    from astra_backend.configs import load_network_file
    dims = load_network_file(f"core/model/presets/gpus/{preset}.yaml", npus=16)
    assert [d.size for d in dims] == [8, 2]
    assert dims[0].bandwidth_gbps == pytest.approx(450 * 0.884)
