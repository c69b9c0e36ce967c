"""Closed-form collective times per network dimension, right for small messages
(per-step latency, launch cost) and large ones (bandwidth), executed hierarchically
across the dimensions a group spans."""
from functools import lru_cache
from math import ceil, log2

from .specs import EngineAllReduce, HardwareSpec, NetworkDim

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")
REDUCING_KINDS = ("all_reduce", "reduce_scatter")

# Parallel links one NPU can drive at once in a dimension, for ring-style algorithms.
_RING_LINKS = {"switch": 1, "ring": 1, "ring-uni": 1, "mesh": 2, "mesh2d": 2, "torus2d": 4,
               "kingmesh2d": 4, "hypercube": 1, "fattree": 1}


def _bandwidth_bps(dim: NetworkDim, ranks: float, efficiency: float) -> float:
    links = (ranks - 1) if dim.topology == "fully-connected" else _RING_LINKS[dim.topology]
    bw = dim.link_bandwidth_bps * dim.efficiency * efficiency * max(1.0, links)
    if dim.topology == "fattree":
        bw /= dim.oversubscription
    if dim.topology == "hypercube":
        bw *= max(1.0, log2(max(ranks, 2)))
    return bw


# NCCL's protocols as its tuning model describes them: (seconds to start, seconds per
# algorithm step on top of the link's own latency, share of the link bandwidth that carries
# data). LL sends 4 data bytes with every 4-byte flag; LL128 keeps 120 of every 128 bytes;
# Simple moves whole chunks behind a fence per step.
PROTOCOLS = {"ll": (6.6e-6, 0.0, 0.5), "ll128": (14e-6, 1.3e-6, 0.92), "simple": (8.4e-6, 2.8e-6, 1.0)}
# NCCL's NVLS all-reduce inside one node (the algorithm of an in-switch reduction, NVLink
# SHARP; src/device/all_reduce.h, src/enqueue.cc, src/transport/nvls.cc, NCCL 2.18 to 2.30).
# Every rank heads the reduction of a 1/n slice of each channel's loop, so channels x ranks
# lanes each move one chunk per step, and a chunk passes three pipelined stages: the scatter
# into the NVLS buffer, the switch's reduce-and-multicast (multimem ld_reduce then st), the
# gather out of it. A step is a Simple-protocol handshake that waits on every rank of the
# group (the heads on all ranks' scatters, the gathers on all heads' multicasts): NCCL's tuning
# prices such fan-in steps on NVLink at its tree's Simple step, 4.0 us (hwLatencies in
# src/graph/tuning.cc) where a ring step costs 3.4 us; beyond the link's own 0.6 us latency:
NVLS_HANDSHAKE_S = 3.4e-6
NVLS_CHANNELS = 16  # NVLS_NCHANNELS_SM90 in src/transport/nvls.cc (Hopper)
NVLS_CHUNK_BYTES = 128 * 1024  # NCCL_NVLS_CHUNKSIZE default, src/transport/nvls.cc
# (rounds, chunk): a message short of `rounds` rounds of every lane's chunk runs on chunks no
# larger than `chunk`, tested in this order (calcCollChunking in src/enqueue.cc).
NVLS_SMALLER_CHUNKS = ((64, 64 * 1024), (8, 32 * 1024), (2, 16 * 1024))
NVLS_STAGES = 3
# NVLS reduces 16-, 32- and 64-bit elements only (ncclNvlsSupported, src/include/device.h): a sum of
# 1-byte elements (int8, uint8, FP8) runs on the ring or tree.
NVLS_MIN_ELEMENT_BYTES = 2
# What the compiled simulator runs: ring or double binary tree (in any dimension) steps at the
# link's latency, whole chunks, no protocol start-up and no in-switch reduction.
BARE = {"simple": (0.0, 0.0, 1.0)}


def one_dim_time(kind: str, bytes_: float, dim: NetworkDim, ranks: float, efficiency: float = 1.0,
                 step_s: float = 0.0, log_tree: bool = True, protocols: dict = PROTOCOLS,
                 element_bytes: int = 2) -> float:
    """Seconds for one collective over `ranks` NPUs of one dimension.

    `bytes_` is the full buffer: the reduced vector for all-reduce, the gathered or
    scattered whole for all-gather / reduce-scatter, each rank's send buffer for
    all-to-all, the message for send/recv. `log_tree` offers the log-depth tree to all-reduce
    (NCCL builds it across nodes; inside a node its tree is a chain, never faster than the ring)."""
    if ranks <= 1 and kind != "send_recv":
        return 0.0
    if kind == "send_recv":
        return dim.latency_s + step_s + bytes_ / (dim.link_bandwidth_bps * dim.efficiency * efficiency)
    if kind == "all_reduce":
        return min(all_reduce_times(bytes_, dim, ranks, efficiency, step_s, log_tree, protocols,
                                    element_bytes).values())
    bw = _bandwidth_bps(dim, ranks, efficiency)
    steps = ranks - 1
    chunks = steps + _fill_chunks(dim, kind, protocols, element_bytes)
    return min(base + steps * (dim.latency_s + extra + step_s)
               + chunks / ranks * bytes_ / _bus_bps(dim, bw, name, share)
               for name, (base, extra, share) in protocols.items())


def _fill_chunks(dim: NetworkDim, kind: str, protocols: dict, element_bytes: int = 2) -> float:
    """NCCL's pipeline fill in per-rank chunks (NetworkDim.ring_fill_chunks and
    all_to_all_fill_chunks, and a reduction of 1-byte elements its byte_reduce_fill_chunks on
    top); the compiled simulator's bare algorithms (BARE) have none."""
    if protocols is BARE:
        return 0.0
    if kind == "all_to_all":
        return dim.all_to_all_fill_chunks
    byte_sums = kind in REDUCING_KINDS and element_bytes < NVLS_MIN_ELEMENT_BYTES
    return dim.ring_fill_chunks + (dim.byte_reduce_fill_chunks if byte_sums else 0.0)


def all_reduce_times(bytes_: float, dim: NetworkDim, ranks: float, efficiency: float = 1.0,
                     step_s: float = 0.0, log_tree: bool = True, protocols: dict = PROTOCOLS,
                     element_bytes: int = 2) -> dict:
    """Seconds of an all-reduce by each algorithm and protocol NCCL could pick, keyed
    "algorithm/protocol"; NCCL runs the fastest. Ring: 2(n-1) steps, each rank sending and
    receiving 2(n-1)/n of the buffer. Tree: log-depth reduce then broadcast, the whole buffer
    up and down. NVLS where the switch reduces elements of its width (see nvls_all_reduce_s)."""
    bw = _bandwidth_bps(dim, ranks, efficiency)
    steps = ranks - 1
    fill = _fill_chunks(dim, "all_reduce", protocols, element_bytes)
    times = {}
    for name, (base, extra, share) in protocols.items():
        hop = dim.latency_s + extra + step_s
        bus = _bus_bps(dim, bw, name, share)
        times[f"ring/{name}"] = base + 2 * steps * hop + (2 * steps + fill) / ranks * bytes_ / bus
        if log_tree:
            times[f"tree/{name}"] = base + 2 * ceil(log2(ranks)) * hop + 2 * bytes_ / bus
    if (dim.switch_reduction > 0 and dim.topology == "switch" and protocols is PROTOCOLS
            and element_bytes >= NVLS_MIN_ELEMENT_BYTES):
        times["nvls/simple"] = nvls_all_reduce_s(bytes_, dim, ranks, efficiency, step_s)
    return times


def _bus_bps(dim: NetworkDim, bandwidth_bps: float, protocol: str, share: float) -> float:
    """One GPU's bus bandwidth under a protocol: its share of the link, and for LL no more than
    the GPU's ceiling on flag-and-data stores (NCCL's llMaxBw) where the dimension sets one."""
    bus_bps = bandwidth_bps * share
    if protocol == "ll" and dim.ll_bandwidth_bps > 0:
        return min(bus_bps, dim.ll_bandwidth_bps)
    return bus_bps


def nvls_chunk_bytes(bytes_: float, lanes: int) -> int:
    """NCCL's NVLS chunk for a message over `lanes` (channels x ranks): the default 128 KiB,
    halved down to 16 KiB as the message falls short of 64, 8, then 2 rounds of all lanes."""
    chunk = NVLS_CHUNK_BYTES
    for rounds, smaller in NVLS_SMALLER_CHUNKS:
        if bytes_ < rounds * lanes * chunk:
            chunk = min(chunk, smaller)
    return chunk


def nvls_all_reduce_s(bytes_: float, dim: NetworkDim, ranks: float, efficiency: float = 1.0,
                      step_s: float = 0.0) -> float:
    """Seconds of NCCL's NVLS all-reduce on one switch: the Simple protocol's start-up, then
    one step per round of chunks plus NVLS_STAGES - 1 steps to fill the pipeline. A step is a
    handshake plus one round's data: each rank writes its share of the round into the switch
    and reads the reduced result back, (1 + 1/n) of the round each way, at the share of the
    link rate the switch's reduction sustains. Small chunks (small messages) pay the handshake
    more often per byte, which is why the bus bandwidth climbs up to 1 GiB."""
    lanes = int(NVLS_CHANNELS * ranks)
    rounds = max(1.0, bytes_ / (lanes * nvls_chunk_bytes(bytes_, lanes)))
    hop_s = dim.latency_s + NVLS_HANDSHAKE_S + step_s
    link_bps = dim.link_bandwidth_bps * dim.efficiency * efficiency * dim.switch_reduction
    round_s = (1 + 1 / ranks) * bytes_ / rounds / link_bps
    fill = NVLS_STAGES - 1
    return PROTOCOLS["simple"][0] + (ceil(rounds) + fill) * hop_s + (rounds + fill) * round_s


def collective_time(hw: HardwareSpec, dims: tuple, kind: str, bytes_: float, span: tuple,
                    protocols: dict = PROTOCOLS, outer_share: float = 1.0, element_bytes: int = 2) -> dict:
    """Seconds per dimension name for a collective over a group spanning `span`
    ((dim_index, ranks), ...), composed hierarchically: reduce-scatter inward-out,
    the outermost step on the shrunken buffer, all-gather back. An all-to-all sends to
    every peer at once, so its dimensions move their bytes concurrently and the slowest
    sets its time (charged to that dimension); beyond the first dimension it moves
    `outer_share` of the buffer (group-limited routing). `protocols`: NCCL's (PROTOCOLS)
    or the compiled simulator's bare ring/tree (BARE). `element_bytes`: the width of the
    elements a reduction sums (NCCL's datatype); the 16-bit default stands for every wider one."""
    if not span:
        return {}
    return dict(_collective_items(hw, dims, kind, bytes_, span, protocols is BARE, outer_share, element_bytes))


@lru_cache(maxsize=65536)
def _collective_items(hw: HardwareSpec, dims: tuple, kind: str, bytes_: float, span: tuple, bare: bool,
                      outer_share: float, element_bytes: int) -> tuple:
    protocols = BARE if bare else PROTOCOLS
    times = {}

    def add(index, seconds):
        name = dims[index].name
        times[name] = times.get(name, 0.0) + seconds

    eff, step = hw.calibration.network_efficiency, hw.calibration.collective_step_s
    if kind == "all_reduce":
        size = bytes_
        for index, ranks in span[:-1]:
            add(index, one_dim_time("reduce_scatter", size, dims[index], ranks, eff, step, protocols=protocols,
                                    element_bytes=element_bytes)
                + one_dim_time("all_gather", size, dims[index], ranks, eff, step, protocols=protocols))
            size /= ranks
        index, ranks = span[-1]
        log_tree = index > 0 or protocols is BARE  # the simulator offers its tree in every dimension
        add(index, one_dim_time("all_reduce", size, dims[index], ranks, eff, step, log_tree, protocols,
                                element_bytes))
    elif kind in ("reduce_scatter", "all_gather"):
        size = bytes_
        for index, ranks in span:
            add(index, one_dim_time(kind, size, dims[index], ranks, eff, step, protocols=protocols,
                                    element_bytes=element_bytes))
            size /= ranks
    elif kind == "all_to_all":
        per_dim = [(index, one_dim_time(kind, bytes_ * (outer_share if n else 1.0), dims[index], ranks, eff, step,
                                        protocols=protocols)) for n, (index, ranks) in enumerate(span)]
        add(*max(per_dim, key=lambda item: item[1]))
    else:
        for index, ranks in span:
            add(index, one_dim_time(kind, bytes_, dims[index], ranks, eff, step, protocols=protocols))
    return tuple(times.items())


def protocol_startup_s(hw: HardwareSpec, dims: tuple, kind: str, bytes_: float, span: tuple) -> float:
    """Seconds NCCL's protocols add to the bare ring/tree model the compiled simulator runs (the
    closed form's time less the bare one's, not below zero: the replay lacks NVLS's saving)."""
    full = sum(collective_time(hw, dims, kind, bytes_, span).values())
    return max(0.0, full - sum(collective_time(hw, dims, kind, bytes_, span, BARE).values()))


def custom_all_reduce_s(spec: EngineAllReduce, gpus: int, bytes_: float) -> float:
    """An engine's own all-reduce of `bytes_` over `gpus` GPUs of one NVLink domain: the faster
    of its one-shot and two-shot kernels (EngineAllReduce)."""
    start_s = spec.floor_s + spec.per_peer_s * (gpus - 1)
    one_shot_s = start_s + (gpus - 1) * bytes_ / spec.bandwidth_bps
    two_shot_s = 2 * start_s + 2 * (gpus - 1) / gpus * bytes_ / spec.bandwidth_bps
    return min(one_shot_s, two_shot_s)


def engine_all_reduce_s(hw: HardwareSpec, dims: tuple, engine: str, bytes_: float, span: tuple) -> dict:
    """Seconds per dimension name of an inference engine's all-reduce over `span`: its own
    kernel (hw.calibration.allreduce_of) where the group sits inside the first network dimension
    (one NVLink domain), has at most the kernel's max_gpus GPUs and that is faster than NCCL's,
    else NCCL's (collective_time)."""
    nccl = collective_time(hw, dims, "all_reduce", bytes_, span)
    spec = hw.calibration.allreduce_of(engine) if engine else None
    if spec is None or len(span) != 1 or span[0][0] != 0 or not 2 <= span[0][1] <= spec.max_gpus:
        return nccl
    own_s = custom_all_reduce_s(spec, span[0][1], bytes_)
    return {dims[0].name: own_s} if own_s < sum(nccl.values()) else nccl
