"""What every kernel model shares: the time record and the launch and bandwidth figures."""
from dataclasses import dataclass, replace

from ..specs import HardwareSpec


@dataclass(frozen=True)
class KernelTime:
    time_s: float
    flops: float
    hbm_bytes: float


def launch_s(hw: HardwareSpec) -> float:
    return hw.gpu.launch_overhead_s + hw.calibration.kernel_overhead_s


# The calibration share each low-precision GEMM format takes relative to compute_efficiency:
# MXFP8's block-scaled MMA runs at the FP8 peak, its scales read beside the tiles.
LOW_PRECISION_SHARE = {"fp8": "fp8_efficiency", "mxfp8": "fp8_efficiency", "nvfp4": "nvfp4_efficiency"}


def tensor_rate_flops(hw: HardwareSpec, dtype: str) -> float:
    """FLOP/s a step's GEMMs reach in `dtype`: the peak at the clock the step holds, times the
    share kernels reach alone (compute_efficiency; FP8's and MXFP8's fp8_efficiency, block-scaled
    FP8's fp8_block_efficiency beside it, NVFP4's nvfp4_efficiency) and the share a whole step
    keeps of that (step_efficiency; the low-precision formats' fp8_step_efficiency)."""
    cal = hw.calibration
    rate = hw.gpu.flops(dtype) * cal.sustained_clock * cal.compute_efficiency * cal.step_efficiency
    low_precision_share = LOW_PRECISION_SHARE.get(dtype)
    if low_precision_share is None:
        return rate
    rate *= getattr(cal, low_precision_share) * cal.fp8_step_efficiency
    return rate * cal.fp8_block_efficiency if dtype == "fp8" and hw.recipe == "block-scaled" else rate


def at_kernel_rates(hw: HardwareSpec) -> HardwareSpec:
    """The hardware with GEMMs and attention at the rates kernels reach alone: without what a
    whole training step loses beyond them (step_efficiency, fp8_step_efficiency). The kernel
    tables measure kernels so; serving engines run them so, their own overheads simulated."""
    if hw.calibration.step_efficiency == hw.calibration.fp8_step_efficiency == 1.0:
        return hw
    return replace(hw, calibration=replace(hw.calibration, step_efficiency=1.0, fp8_step_efficiency=1.0))


def kernels_alone(hw: HardwareSpec) -> HardwareSpec:
    """The hardware as a kernel benchmark measures it: each kernel timed on its own at full
    clock, back to back on the device, with none of what a whole step adds: its clock
    throttling (sustained_clock), what the step keeps of the kernels' rate (step_efficiency,
    fp8_step_efficiency) and host time per kernel (kernel_overhead)."""
    alone = at_kernel_rates(hw)
    return replace(alone, calibration=replace(alone.calibration, sustained_clock=1.0, kernel_overhead_s=0.0))


def stream_bandwidth_bps(hw: HardwareSpec) -> float:
    """HBM bandwidth a long read stream reaches (a weight matrix, a KV-cache sweep)."""
    return hw.gpu.hbm.bandwidth_bps * hw.calibration.stream_efficiency


def fp8_cache_kernels(hw: HardwareSpec, kv_bytes_per_element: float) -> bool:
    """Whether an engine's attention over a cache of `kv_bytes_per_element` runs its FP8 kernels:
    the cache narrower than the activations, on a GPU with an FP8 peak."""
    return 0 < kv_bytes_per_element < hw.act_bytes and "fp8" in dict(hw.gpu.peak_flops)


def store_bandwidth_bps(hw: HardwareSpec) -> float:
    """HBM bandwidth a GEMM's output stores reach when they alone set its time."""
    return hw.gpu.hbm.bandwidth_bps * hw.calibration.store_efficiency


def mixed_bandwidth_bps(hw: HardwareSpec) -> float:
    """HBM bandwidth of traffic that mixes reads with writes (elementwise kernels, outputs)."""
    return hw.gpu.hbm.bandwidth_bps * hw.calibration.memory_efficiency
