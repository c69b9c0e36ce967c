"""Results of a simulation: times, bandwidths and per-link statistics as numpy arrays."""
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LinkStats:
    """One entry per directed link: endpoints (node ids; switches follow the NPUs), its dimension,
    effective bandwidth and latency, whether it failed, and what it carried."""

    src: np.ndarray
    dst: np.ndarray
    dim: np.ndarray
    bandwidth_Bps: np.ndarray
    latency_s: np.ndarray
    failed: np.ndarray
    bytes_: np.ndarray
    busy_s: np.ndarray
    peak_flows: np.ndarray

    @classmethod
    def from_dict(cls, d):
        return cls(d["src"], d["dst"], d["dim"], d["bandwidth_Bps"], d["latency_s"], d["failed"].astype(bool),
                   d["bytes"], d["busy_s"], d["peak_flows"])

    def busiest(self, count=5):
        """The `count` links that were busy longest, as dicts, busiest first."""
        order = np.lexsort((-self.bytes_, -self.busy_s))[:count]
        return [{"src": int(self.src[i]), "dst": int(self.dst[i]), "dim": int(self.dim[i]),
                 "bytes": float(self.bytes_[i]), "busy_s": float(self.busy_s[i]),
                 "peak_flows": int(self.peak_flows[i])} for i in order if self.bytes_[i] > 0]


# nccl-tests bus-bandwidth factors: busbw = algbw * factor(n).
BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


@dataclass(frozen=True)
class CollectiveResult:
    """One collective: `time_s` from first send to last arrival; algbw = size / time (GB/s, 1e9 B/s)."""

    kind: str
    algorithm: str
    size_bytes: float
    group_size: int
    time_s: float
    flows: int
    links: LinkStats

    @property
    def algbw_gbps(self):
        return self.size_bytes / self.time_s / 1e9 if self.time_s > 0 else float("inf")

    @property
    def busbw_gbps(self):
        return self.algbw_gbps * BUS_FACTORS[self.kind](self.group_size)


@dataclass(frozen=True)
class ReplayResult:
    """A replayed trace: makespan, per-rank finish, per-node start/end (seconds) and per-link statistics."""

    time_s: float
    rank_finish_s: np.ndarray
    node_start_s: np.ndarray
    node_end_s: np.ndarray
    flows: int
    links: LinkStats
