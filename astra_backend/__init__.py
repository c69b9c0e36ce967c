"""Compiled congestion- and fault-aware network simulator: explicit N-dimensional topologies,
max-min fair flows, collectives, soft/hard link faults and trace replay. Knows nothing about LLMs."""
from .configs import astra_sim_network, load_network_file, network_from_config
from .errors import AstraError, CollectiveSpecError, NetworkSpecError, NoRouteError, TraceSpecError
from .network import COLLECTIVES, Network
from .results import CollectiveResult, LinkStats, ReplayResult
from .spec import Dimension, HardFault, SoftFault
from .trace import ALGORITHMS, NODE_KINDS, Trace

__all__ = [
    "ALGORITHMS", "COLLECTIVES", "NODE_KINDS", "AstraError", "CollectiveResult", "CollectiveSpecError",
    "Dimension", "HardFault", "LinkStats", "Network", "NetworkSpecError", "NoRouteError", "ReplayResult",
    "SoftFault", "Trace", "TraceSpecError", "astra_sim_network", "load_network_file", "network_from_config",
]
