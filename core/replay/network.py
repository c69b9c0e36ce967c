"""The hardware spec's network as the compiled simulator sees it, and where each rank's
parallel groups are: rank r runs on NPU r, ranks numbered with the first axis of the
placement fastest, NPUs with network dimension 0 fastest."""
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from astra_backend import Dimension, HardFault, Network, SoftFault
from astra_backend.errors import AstraError

from core.errors import SpecError
from core.model.layout import expert_grid, uses_experts
from core.model.specs import HardwareSpec, Parallelism

_TOPOLOGY = {"switch": "switch", "ring": "ring", "ring-uni": "ring_uni", "fully-connected": "fully_connected",
             "mesh": "mesh", "mesh2d": "mesh2d", "torus2d": "torus2d", "kingmesh2d": "kingmesh2d",
             "hypercube": "hypercube", "fattree": "fattree"}
_SWITCHED = ("switch", "fattree")  # a step crosses two links: NPU to switch, switch to NPU


def astra_dims(hw: HardwareSpec, gpus: int) -> tuple:
    """Simulator dimensions with the same achievable bandwidth and per-step latency the
    closed forms use, so the two agree wherever no link is shared."""
    dims = []
    for dim in hw.dims_for(gpus):
        bandwidth = dim.link_bandwidth_bps * dim.efficiency * hw.calibration.network_efficiency
        hops = 2 if dim.topology in _SWITCHED else 1
        latency = (dim.latency_s + hw.calibration.collective_step_s) / hops
        dims.append(Dimension(_TOPOLOGY[dim.topology], dim.size, bandwidth / 1e9, latency,
                              oversubscription=dim.oversubscription))
    return tuple(dims)


@lru_cache(maxsize=64)
def astra_network(hw: HardwareSpec, gpus: int) -> Network:
    """The simulated network of `gpus` GPUs with the hardware spec's link faults; a fault on a
    link the network does not have is a SpecError naming it."""
    soft = [SoftFault(f.src, f.dst, f.factor, f.extra_latency_s) for f in hw.faults if f.factor > 0]
    hard = [HardFault(f.src, f.dst) for f in hw.faults if f.factor == 0]
    try:
        return Network(astra_dims(hw, gpus), soft, hard)
    except AstraError as err:
        links = [[f.src, f.dst] for f in hw.faults]
        raise SpecError(f"hardware {hw.name}", "faults", links,
                        f"not links of this {gpus}-GPU network ({err}); node ids are the NPUs, then the switches") from None


@dataclass(frozen=True)
class RankGroups:
    """Every communicator of a layout: `members[g]` lists group g's ranks; `of[axis][r]` is
    the group rank r uses for that axis (tp, cp, ep, dp = data-parallel gradients over dp*cp,
    pp = the ranks of one pipeline, edp = the expert data-parallel ranks, which hold the same
    experts and reduce their gradients, etp = expert tensor parallelism)."""
    members: tuple
    of: dict
    coords: dict  # axis -> np.ndarray of each rank's index along it
    strides: dict  # axis -> rank distance between neighbours along it


# For each communicator, the rank coordinates its members share. The expert communicators
# (ep, edp and, folded, etp) take theirs from Megatron-Core's expert grid
# (core.model.layout.expert_grid); without experts each rank is its own ep group.
_SHARED_COORDS = {"tp": ("cp", "dp", "pp"), "cp": ("tp", "dp", "pp"), "ep": ("tp", "cp", "pp", "dp"),
                  "dp": ("tp", "pp"), "pp": ("tp", "cp", "dp")}
_EXPERT_COORDS = {"ep": ("pp", "etp", "edp"), "edp": ("pp", "etp", "ep"), "etp": ("pp", "ep", "edp")}
_EXPERT_AXES = {"tp": "etp", "ep": "ep", "dp": "edp"}


def rank_groups(par: Parallelism) -> RankGroups:
    degrees = {"tp": par.tp, "cp": par.cp, "dp": par.dp, "pp": par.pp}
    ranks = np.arange(par.gpus)
    coords, strides, stride = {}, {}, 1
    for axis in par.placement:
        coords[axis] = (ranks // stride) % degrees[axis]
        strides[axis] = stride
        stride *= degrees[axis]
    shared = dict(_SHARED_COORDS)
    folded = par.expert_tp != par.tp
    if uses_experts(par):
        stride = 1
        for axis, degree in expert_grid(par):
            if axis in _EXPERT_AXES:
                coords[_EXPERT_AXES[axis]] = (ranks // stride) % degree
            stride *= degree
        shared.update({axis: fixed for axis, fixed in _EXPERT_COORDS.items() if axis != "etp" or folded})
    members, of = [], {}
    for axis, fixed in shared.items():
        key = np.zeros(par.gpus, dtype=np.int64)
        for other in fixed:
            key = key * 1024 + coords[other]
        _, group_index = np.unique(key, return_inverse=True)
        of[axis] = group_index + len(members)
        for g in range(group_index.max() + 1):
            members.append(tuple(ranks[group_index == g].tolist()))
    of.setdefault("edp", of["dp"])  # every rank holds every expert: the data-parallel group itself
    of.setdefault("etp", of["tp"])  # experts split like the dense layers
    return RankGroups(tuple(members), of, coords, strides)
