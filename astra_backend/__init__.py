"""Compiled congestion- and fault-aware network simulator: explicit N-dimensional topologies,
max-min fair flows, collectives, soft/hard link faults and trace replay. Knows nothing about LLMs."""
from .configs import astra_sim_network, load_network_file, network_from_config
from .errors import AstraError, CollectiveSpecError, NetworkSpecError, NoRouteError, TraceSpecError
from .codes import ALGORITHMS, COLLECTIVES, NODE_KINDS
from .network import Network, PreparedReplay
from .results import CollectiveResult, LinkStats, ReplayResult
from .spec import Dimension, HardFault, SoftFault

__all__ = [
    "ALGORITHMS", "COLLECTIVES", "NODE_KINDS", "AstraError", "CollectiveResult", "CollectiveSpecError",
    "Dimension", "HardFault", "LinkStats", "Network", "NetworkSpecError", "NoRouteError", "PreparedReplay",
    "ReplayResult", "SoftFault", "Trace", "TraceSpecError", "astra_sim_network", "load_network_file",
    "network_from_config",
]


def __getattr__(name):
    """Trace needs numpy: it is imported on first use, so `rapid net` starts without numpy."""
    if name == "Trace":
        from .trace import Trace

        return Trace
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
