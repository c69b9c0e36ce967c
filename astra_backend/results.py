"""Results of a simulation: times, bandwidths and per-link statistics as numpy arrays (those of
a collective made on first use, so that `rapid net` never imports numpy)."""
from collections import namedtuple
from functools import cached_property


def _column(key, as_bool=False):
    """A LinkStats array read from the simulator's buffer `key` on first use."""

    def read(self):
        import numpy as np

        values = np.asarray(self._buffers[key])
        return values.astype(bool) if as_bool else values

    return cached_property(read)


class LinkStats:
    """One entry per directed link: endpoints (node ids; switches follow the NPUs), its dimension,
    effective bandwidth and latency, whether it failed, and what it carried (numpy arrays)."""

    src = _column("src")
    dst = _column("dst")
    dim = _column("dim")
    bandwidth_Bps = _column("bandwidth_Bps")
    latency_s = _column("latency_s")
    failed = _column("failed", as_bool=True)
    bytes_ = _column("bytes")
    busy_s = _column("busy_s")
    peak_flows = _column("peak_flows")

    def __init__(self, buffers):
        self._buffers = buffers  # the simulator's mapping of 1-D buffers (memoryviews or arrays)

    @classmethod
    def from_dict(cls, d):
        return cls(d)

    def __reduce__(self):
        """Pickled as numpy arrays (memoryviews do not pickle), e.g. to come back from a worker."""
        import numpy as np

        return LinkStats, ({key: np.asarray(values) for key, values in self._buffers.items()},)

    def busiest(self, count=5):
        """The `count` links that were busy longest (then carried most), as dicts, busiest first."""
        busy_s, sent = self._buffers["busy_s"].tolist(), self._buffers["bytes"].tolist()
        order = sorted(range(len(busy_s)), key=lambda i: (-busy_s[i], -sent[i]))[:count]
        src, dst, dim, peak = (self._buffers[k] for k in ("src", "dst", "dim", "peak_flows"))
        return [{"src": int(src[i]), "dst": int(dst[i]), "dim": int(dim[i]), "bytes": float(sent[i]),
                 "busy_s": float(busy_s[i]), "peak_flows": int(peak[i])} for i in order if sent[i] > 0]


# nccl-tests bus-bandwidth factors: busbw = algbw * factor(n).
BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
}


class CollectiveResult(namedtuple("CollectiveResult", "kind algorithm size_bytes group_size time_s flows links")):
    """One collective: `time_s` from first send to last arrival; algbw = size / time (GB/s, 1e9 B/s);
    `links` a LinkStats. Immutable records here are named tuples: `rapid net` starts without the
    dataclasses and typing modules."""

    __slots__ = ()

    @property
    def algbw_gbps(self):
        return self.size_bytes / self.time_s / 1e9 if self.time_s > 0 else float("inf")

    @property
    def busbw_gbps(self):
        return self.algbw_gbps * BUS_FACTORS[self.kind](self.group_size)


class ReplayResult(namedtuple("ReplayResult", "time_s rank_finish_s node_start_s node_end_s flows links")):
    """A replayed trace: makespan, per-rank finish, per-node start/end (seconds, numpy arrays) and
    per-link statistics (a LinkStats)."""

    __slots__ = ()
