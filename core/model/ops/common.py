"""What every kernel model shares: the time record and the launch and bandwidth figures."""
from dataclasses import dataclass

from ..specs import HardwareSpec


@dataclass(frozen=True)
class KernelTime:
    time_s: float
    flops: float
    hbm_bytes: float


def launch_s(hw: HardwareSpec) -> float:
    return hw.gpu.launch_overhead_s + hw.calibration.kernel_overhead_s


def stream_bandwidth_bps(hw: HardwareSpec) -> float:
    """HBM bandwidth a long read stream reaches (a weight matrix, a KV-cache sweep)."""
    return hw.gpu.hbm.bandwidth_bps * hw.calibration.stream_efficiency


def mixed_bandwidth_bps(hw: HardwareSpec) -> float:
    """HBM bandwidth of traffic that mixes reads with writes (elementwise kernels, outputs)."""
    return hw.gpu.hbm.bandwidth_bps * hw.calibration.memory_efficiency
