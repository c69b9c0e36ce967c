"""A folder stock ASTRA-sim runs as is: one Chakra `.et` per rank of a replayed graph, the
communicator groups, the network in ASTRA-sim's units, a system file whose collective
algorithms are the ones we simulated, a remote-memory file, and the command line."""
import json
from pathlib import Path

import numpy as np
import yaml
from astra_backend import ALGORITHMS, NODE_KINDS, NetworkSpecError, astra_sim_network

from .encode import comm_size, write_rank_files
from .system import ASTRA_SIM_ALGORITHM, SYSTEM_KEYS
from core.errors import SpecError
from core.replay.network import astra_dims

# ASTRA-sim charges every reduction step of a collective three passes over local memory (two reads,
# one write) at local-mem-bw, a cost we do not model; at this bandwidth (GB/s) each pass rounds to 0 ns.
# The roofline reads the same field: compute nodes sit at the ridge of the real HBM bandwidth, hence
# compute-bound (our time) at any higher one.
REDUCTION_FREE_MEM_GB_S = 1e15
FILES = ("comm_group.json", "network.yml", "system.json", "remote_memory.json", "README.txt")


def carried_bytes(trace, group_sizes) -> dict:
    """{collective: {algorithm: comm_size bytes over all its nodes}} of a replay Trace."""
    kind, algorithm = np.asarray(trace.kind), np.asarray(trace.algorithm)
    carried = {}
    for collective in SYSTEM_KEYS:
        mine = np.flatnonzero(kind == NODE_KINDS[collective])
        sizes = comm_size(kind[mine], np.asarray(trace.bytes_)[mine], np.asarray(trace.group)[mine], group_sizes)
        for name, code in ALGORITHMS.items():
            used = algorithm[mine] == code
            if used.any():
                carried.setdefault(collective, {})[name] = int(sizes[used].sum())
    return carried


def system_config(carried: dict, dims: int, peak_flops: float) -> tuple:
    """(ASTRA-sim system.json mapping, note per collective type on how its algorithm was chosen),
    from the bytes each collective type carried with each algorithm (`carried_bytes`)."""
    config = {"scheduling-policy": "FIFO", "endpoint-delay": 1, "active-chunks-per-dimension": 1,
              "preferred-dataset-splits": 1, "collective-optimization": "localBWAware", "local-reduction-delay": 0,
              "roofline-enabled": 1, "peak-perf": peak_flops / 1e12, "local-mem-bw": REDUCTION_FREE_MEM_GB_S,
              "boost-mode": 0}
    notes = []
    for collective, key in SYSTEM_KEYS.items():
        used = carried.get(collective, {})
        default = "direct" if collective == "all_to_all" else "ring"
        chosen = max(used, key=used.get) if used else default
        config[key] = [ASTRA_SIM_ALGORITHM[chosen]] * dims
        if len(used) > 1:
            shares = ", ".join(f"{name} {b / sum(used.values()):.0%}" for name, b in sorted(used.items()))
            notes.append(f"{collective}: we simulated several algorithms by size ({shares} of the bytes); "
                         f"system.json takes one per type, the one carrying the most bytes ({chosen})")
        elif used:
            notes.append(f"{collective}: {chosen}, as simulated")
    return config, notes


def _network_yaml(hw, gpus: int) -> tuple:
    """(ASTRA-sim network.yml text, number of dimensions in it)."""
    try:
        network = astra_sim_network(astra_dims(hw, gpus))
    except NetworkSpecError as exc:
        raise SpecError(hw.source or hw.name, "network", str(exc), "--emit-traces needs ring, "
                        "fully-connected or switch dimensions, the topologies ASTRA-sim's analytical backend has")
    factor = hw.calibration.network_efficiency
    header = ["# ASTRA-sim analytical network written by rapid-sweep for " + hw.name,
              "# bandwidth: GiB/s per link per direction, EFFECTIVE: link bandwidth x each dimension's",
              f"#   efficiency x the calibrated network efficiency ({factor:g}), as our simulator uses it",
              "# latency: ns per link; a switch step crosses two links, so each carries half of",
              "#   (the dimension's latency + the calibrated per-step collective overhead)"]
    for d, dim in enumerate(hw.dims_for(gpus)):
        header.append(f"#   dimension {d} ({dim.name}): {dim.link_bandwidth_bps / 1e9:g} GB/s x {dim.efficiency:g}"
                      f" x {factor:g}")
    text = "\n".join(header) + "\n" + yaml.safe_dump(network, sort_keys=False, default_flow_style=None)
    return text, len(network["topology"])


def write_bundle(directory, prefix: str, trace, context, backend: str) -> list:
    """Writes the `.et` files (every NPU of the network gets one, a single zero-time op where the
    replay gave it nothing: ASTRA-sim runs one workload per NPU) and the files in FILES."""
    directory = Path(directory)
    hw, gpus, groups = context.hw, context.gpus, context.groups
    peak, memory = hw.gpu.flops(hw.dtype), hw.gpu.hbm.bandwidth_bps
    network, dims = _network_yaml(hw, gpus)
    group_sizes = np.array([len(members) for members in groups.members], np.int64)
    npus = int(np.prod([dim.size for dim in context.dims]))
    metadata = {"generator": "rapid-sweep", "backend": backend, "ranks": npus}
    paths = write_rank_files(directory, prefix, trace, group_sizes, (peak, memory), npus, metadata)
    collective = np.asarray(trace.kind) > NODE_KINDS["recv"]
    comm_groups = {str(g + 1): list(groups.members[g]) for g in np.unique(np.asarray(trace.group)[collective])}
    system, notes = system_config(carried_bytes(trace, group_sizes), dims, peak)
    texts = {"comm_group.json": json.dumps(comm_groups, indent=1), "network.yml": network,
             "system.json": json.dumps(system, indent=1), "remote_memory.json": json.dumps({"memory-type": "NO_MEMORY_EXPANSION"}),
             "README.txt": _readme(prefix, npus, gpus, backend, notes)}
    for name, text in texts.items():
        path = directory / name
        temp = path.with_name(path.name + ".tmp")
        temp.write_text(text + "\n", encoding="utf-8")
        temp.replace(path)
        paths.append(path)
    return paths


def astra_sim_command(binary: str, folder: str, prefix: str) -> list:
    """The stock ASTRA-sim command line that runs a bundle."""
    return [binary, f"--workload-configuration={folder}/{prefix}", f"--comm-group-configuration={folder}/comm_group.json",
            f"--system-configuration={folder}/system.json", f"--network-configuration={folder}/network.yml",
            f"--remote-memory-configuration={folder}/remote_memory.json"]


def _readme(prefix: str, npus: int, gpus: int, backend: str, notes: list) -> str:
    command = " \\\n    ".join(astra_sim_command("$ASTRA_SIM_BIN", "$BUNDLE", prefix))
    lines = [f"Chakra traces of one {backend} replay by rapid-sweep: {prefix}.<rank>.et for the {npus} NPUs of",
             f"the network ({gpus} GPUs in the layout; an NPU outside it, or outside the one replica an inference",
             "replay runs, has one zero-time op). system.json's endpoint-delay is 1 ns per message (0 trips an",
             "assertion in ASTRA-sim's event queue); we model none.",
             "",
             "Run on stock ASTRA-sim (analytical backend; congestion-unaware or congestion-aware) from any folder:",
             "",
             "  BUNDLE=<this folder>  ASTRA_SIM_BIN=<build>/bin/AstraSim_Analytical_Congestion_Unaware",
             "  " + command,
             "",
             "Compute nodes: duration_micros is rounded to whole microseconds, so system.json enables the roofline:",
             "num_ops is each op's modelled time as FLOPs at peak-perf, tensor_size puts it at the ridge of the GPU's",
             "HBM bandwidth, and ASTRA-sim gets our time back to the nanosecond; our exact seconds are also in the",
             "attribute rapid_duration_s.",
             f"local-mem-bw is {REDUCTION_FREE_MEM_GB_S:g} GB/s, not the HBM bandwidth: ASTRA-sim charges each reduction",
             "step of a collective three passes over local memory at that bandwidth, which we do not model (at the",
             "HBM bandwidth it adds about 17 % to a ring reduce-scatter or all-reduce alone); the roofline keeps",
             "every compute node compute-bound at any bandwidth above the HBM one.",
             "Overlap ASTRA-sim cannot express: its workload layer keeps at most one collective or send in flight",
             "per NPU (a recv does not count), so a collective or send that we run beside another one (a tensor-",
             "parallel all-gather or a pipeline send during a data-parallel gradient all-reduce) waits there until",
             "the first finishes; with --overlap-grad-reduce training steps therefore end later on ASTRA-sim than",
             "in our simulator (without it the gradient buckets run after the backward and both agree).",
             "The congestion-aware backend forwards each message whole, link by link: a switch hop pays the",
             "serialisation on both links, twice what we (and the congestion-unaware backend) model.",
             "On a one-dimensional network ASTRA-sim may abort at exit (double free in ~CollectivePlan) when an NPU",
             "ran one collective type on two communicator groups; every NPU has reported 'finished' by then.",
             "Collectives: pg_name is the communicator id in comm_group.json; comm_size is each rank's input.",
             "collective-optimization is localBWAware: on a network of several dimensions, a collective over all",
             "NPUs then passes each dimension its share of the data, as ours does ('baseline' passes every",
             "dimension the whole size: 3.3x our time on a 1 GiB all-reduce over Ring(8) x Switch(8)).",
             "ASTRA-sim runs a collective on a group smaller than all ranks as a ring over the group whenever",
             "the network has more than one dimension. Algorithms per collective type:"]
    lines += [f"  {note}" for note in notes] or ["  (no collectives)"]
    return "\n".join(lines)
