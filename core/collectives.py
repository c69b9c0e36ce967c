"""Closed-form collective times per network dimension, right for small messages
(per-step latency, launch cost) and large ones (bandwidth), executed hierarchically
across the dimensions a group spans."""
from math import ceil, log2

from .specs import HardwareSpec, NetworkDim

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv")

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


def one_dim_time(kind: str, bytes_: float, dim: NetworkDim, ranks: float, efficiency: float = 1.0,
                 step_s: float = 0.0) -> float:
    """Seconds for one collective over `ranks` NPUs of one dimension.

    `bytes_` is the full buffer: the reduced vector for all-reduce, the gathered or
    scattered whole for all-gather / reduce-scatter, each rank's send buffer for
    all-to-all, the message for send/recv."""
    if ranks <= 1 and kind != "send_recv":
        return 0.0
    bw, alpha = _bandwidth_bps(dim, ranks, efficiency), dim.latency_s + step_s
    steps = ranks - 1
    if kind == "send_recv":
        return alpha + bytes_ / (dim.link_bandwidth_bps * dim.efficiency * efficiency)
    if kind in ("reduce_scatter", "all_gather"):
        return steps * alpha + steps / ranks * bytes_ / bw
    if kind == "all_to_all":
        return steps * alpha + steps / ranks * bytes_ / bw
    return min(_all_reduce_times(bytes_, ranks, bw, alpha).values())


def _all_reduce_times(bytes_: float, ranks: float, bw: float, alpha: float) -> dict:
    """All-reduce by ring (bandwidth-optimal) and by tree (log-depth latency)."""
    steps = ranks - 1
    return {"ring": 2 * steps * alpha + 2 * steps / ranks * bytes_ / bw,
            "double_binary_tree": 2 * ceil(log2(ranks)) * alpha + 2 * bytes_ / bw}


def collective_time(hw: HardwareSpec, dims: tuple, kind: str, bytes_: float, span: tuple) -> dict:
    """Seconds per dimension name for a collective over a group spanning `span`
    ((dim_index, ranks), ...), composed hierarchically: reduce-scatter inward-out,
    the outermost step on the shrunken buffer, all-gather back."""
    if not span:
        return {}
    times = {}

    def add(index, seconds):
        name = dims[index].name
        times[name] = times.get(name, 0.0) + seconds

    eff, step = hw.calibration.network_efficiency, hw.calibration.collective_step_s
    if kind == "all_reduce":
        size = bytes_
        for index, ranks in span[:-1]:
            add(index, 2 * one_dim_time("reduce_scatter", size, dims[index], ranks, eff, step))
            size /= ranks
        index, ranks = span[-1]
        add(index, one_dim_time("all_reduce", size, dims[index], ranks, eff, step))
    elif kind in ("reduce_scatter", "all_gather"):
        size = bytes_
        for index, ranks in span:
            add(index, one_dim_time(kind, size, dims[index], ranks, eff, step))
            size /= ranks
    else:
        for index, ranks in span:
            add(index, one_dim_time(kind, bytes_, dims[index], ranks, eff, step))
    return times
