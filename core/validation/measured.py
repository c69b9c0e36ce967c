"""`rapid validate --suite measured`: the operator and power models against kernels we timed
ourselves on a lent H100 and H200 (scripts/measure_gpu_kernels.py; data/measured/README.md).

These rows hold what no published table does: the fused attention backward of training, the
share of HBM bandwidth elementwise and normalisation kernels reach, and the clock and power a
700 W board holds under long loops of one kernel. Kernels are timed as the kernel tables are
(each alone, at whatever clock the board runs in a short burst); the sustained loops against
the power model's clock under the board's limit. Nothing is fitted to these rows here."""
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from core.model import ops
from core.model.loader import load_hardware, with_dtype
from core.model.ops.attention import flash_attention
from core.model.power import Activity, clock_under, power_w

from .kernels import error_summary, flop_bucket, kernels_alone
from .systems import PRESET_BY_GPU

SUITE = "measured"
MEASURED_DIR = Path(__file__).parent / "data" / "measured"
GEMM_DTYPES = {"bfloat16": "bf16", "fp8": "fp8"}
# scaled_dot_product_attention's backends and the kernel each is in our model: cuDNN's fused
# Hopper kernel (warpgroup MMA, as FlashAttention-3) and FlashAttention-2 (mma.sync).
ATTENTION_KERNELS = {"CUDNN_ATTENTION": "flash", "FLASH_ATTENTION": "flash2"}
SETTLE_S = 2.0  # the first seconds of a loop, while the clock falls to where the limit holds it
SUSTAINED_GEMM = 8192  # the loops' GEMMs are square, this size (scripts/measure_gpu_kernels.py)
MIXED_TOKENS = 16384
ATTENTION_LOOP = (4, 8192, 32, 128)  # batch, sequence, heads, head dim
COPY_ELEMENTS = 2**29


def rows(path: Path) -> list:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _gemm_records(hw, rows) -> dict:
    groups = defaultdict(lambda: ([], []))
    for row in rows:
        if not row.get("latency_ms"):
            continue
        m, n, k = int(row["m"]), int(row["n"]), int(row["k"])
        dtype = GEMM_DTYPES[row["dtype"]]
        group = groups[("gemm", dtype, flop_bucket(2.0 * m * n * k))]
        group[0].append(ops.gemm(hw, m, n, k, dtype=dtype).time_s)
        group[1].append(float(row["latency_ms"]) * 1e-3)
    return groups


def _pointwise_records(hw, rows) -> dict:
    groups = defaultdict(lambda: ([], []))
    for row in rows:
        group = groups[("pointwise", row["op"], "all sizes")]
        group[0].append(ops.pointwise(hw, float(row["bytes"])).time_s)
        group[1].append(float(row["latency_ms"]) * 1e-3)
    return groups


def _attention_records(hw, rows) -> dict:
    groups = defaultdict(lambda: ([], []))
    for row in rows:
        if not row.get("fwd_ms"):
            continue
        kernel = ATTENTION_KERNELS[row["backend"]]
        batch, seq, heads, dim = (int(row[c]) for c in ("batch", "seq", "heads", "head_dim"))
        bucket = flop_bucket(float(row["fwd_flop"]))
        for direction, column in (("forward", "fwd_ms"), ("backward", "bwd_ms")):
            time_s = flash_attention(hw, batch * heads, seq, seq, dim, 1, True, direction == "backward", kernel).time_s
            group = groups[(f"attention {direction} ({row['backend'].split('_')[0].lower()})", "bf16", bucket)]
            group[0].append(time_s)
            group[1].append(float(row[column]) * 1e-3)
    return groups


def loop_activities(hw) -> dict:
    """phase -> the power model's Activity for one call of that loop at the boost clock."""
    size, tokens = SUSTAINED_GEMM, MIXED_TOKENS
    activities = {}
    for phase, dtype in (("gemm_bf16_8192", "bf16"), ("gemm_fp8_8192", "fp8")):
        gemm = ops.gemm(hw, size, size, size, dtype=dtype)
        activities[phase] = Activity(gemm.time_s, gemm.time_s, ((dtype, gemm.flops),), gemm.hbm_bytes,
                                     compute_bound_s=gemm.time_s, busy_compute_bound_s=gemm.time_s)
    batch, seq, heads, dim = ATTENTION_LOOP
    parts = [flash_attention(hw, batch * heads, seq, seq, dim, 1, True, backward) for backward in (False, True)]
    time_s = sum(p.time_s for p in parts)
    activities["attention_fwd_bwd_cudnn"] = Activity(time_s, time_s, (("bf16", sum(p.flops for p in parts)),),
                                                     sum(p.hbm_bytes for p in parts), compute_bound_s=time_s,
                                                     busy_compute_bound_s=time_s)
    gemm = ops.gemm(hw, tokens, size, size, dtype="bf16")
    elementwise = [ops.pointwise(hw, 2 * 2 * tokens * size), ops.pointwise(hw, 3 * 2 * tokens * size)]
    time_s = gemm.time_s + sum(p.time_s for p in elementwise)
    activities["gemm_gelu_add_bf16"] = Activity(time_s, time_s, (("bf16", gemm.flops),),
                                                gemm.hbm_bytes + sum(p.hbm_bytes for p in elementwise),
                                                compute_bound_s=gemm.time_s, busy_compute_bound_s=gemm.time_s)
    copy = ops.pointwise(hw, 2 * 2 * COPY_ELEMENTS)
    activities["hbm_copy_1gib"] = Activity(copy.time_s, copy.time_s, (), copy.hbm_bytes)
    return activities


def settled_samples(clocks: list) -> dict:
    """phase -> the NVML samples taken after its first SETTLE_S seconds."""
    start = defaultdict(lambda: float("inf"))
    for row in clocks:
        start[row["phase"]] = min(start[row["phase"]], float(row["t_s"]))
    settled = defaultdict(list)
    for row in clocks:
        if float(row["t_s"]) >= start[row["phase"]] + SETTLE_S:
            settled[row["phase"]].append(row)
    return settled


def _sustained_records(hw, clocks) -> dict:
    """Per loop: the SM clock (MHz) and board power (W) the power model gives under the
    board's limit against the medians measured once the clock settled."""
    settled = settled_samples(clocks)
    power, groups = hw.gpu.power, {}
    for phase, work in loop_activities(hw).items():
        samples = settled.get(phase)
        if not samples:
            continue
        share = clock_under(power, work, power.limit_w)
        clock_mhz = statistics.median(float(s["sm_clock_mhz"]) for s in samples)
        watts = statistics.median(float(s["power_w"]) for s in samples)
        groups[("sustained SM clock", phase, "loop")] = ([share * hw.gpu.clock_hz / 1e6], [clock_mhz])
        groups[("sustained power", phase, "loop")] = ([power_w(power, work.at_clock(share))], [watts])
    return groups


def measured_groups(root: Path = MEASURED_DIR) -> tuple:
    """(records, skipped): error figures (predicted / measured - 1) per GPU, kernel, dtype and
    bucket, the records of `rapid validate --suite kernels`."""
    records = []
    for gpu_dir in sorted(p for p in Path(root).iterdir() if p.is_dir() and p.name in PRESET_BY_GPU):
        preset = PRESET_BY_GPU[gpu_dir.name]
        hw = kernels_alone(with_dtype(load_hardware(preset), "bf16", preset, "dtype"))
        environment = json.loads((gpu_dir / "environment.json").read_text())
        framework = f"PyTorch {environment['torch'].split('+')[0]}"
        groups = {**_gemm_records(hw, rows(gpu_dir / "gemm.csv")),
                  **_pointwise_records(hw, rows(gpu_dir / "pointwise.csv")),
                  **_attention_records(hw, rows(gpu_dir / "attention.csv")),
                  **_sustained_records(hw, rows(gpu_dir / "clocks.csv"))}
        for (kernel, dtype, bucket), (predicted, measured) in groups.items():
            records.append({"suite": SUITE, "gpu": gpu_dir.name, "hardware": preset, "framework": framework,
                            "kernel": kernel, "dtype": dtype, "bucket": bucket,
                            **error_summary(predicted, measured)})
    return records, []


__all__ = ["MEASURED_DIR", "loop_activities", "measured_groups", "rows", "settled_samples"]
