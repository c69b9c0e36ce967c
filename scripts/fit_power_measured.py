"""Fit a GPU's power model on the long single-kernel loops we measured ourselves
(core/validation/data/measured/<gpu>/: sustained.csv, curve.csv and their NVML samples), and
print it beside the preset's estimates. It edits nothing.

The power model (core/model/power.py) gives a busy board's watts at clock share r (of the
preset's clock) as

    idle + V(r)^2 * (active * r * busy + sum_dtype(flop_energy * FLOP/s)) + hbm_energy * HBM B/s

with the voltage V(r) = floor + (1 - floor) * r, 1 at the preset's clock (floor 0: voltage in
proportion to the clock). Each loop gives one such equation at the clock it settled at, its
rate and its watts; the idle floor is read off the idle stretches between loops (clocks up,
context alive). For each voltage floor on a grid, least squares over the loops gives active,
the BF16 and FP8 FLOP energies and the HBM byte energy; the floor with the smallest error in
predicted clocks wins. Each loop is then left out in turn, everything refitted, and the clock
the left-out loop settles at under the board's limit predicted (compute scaling with the
clock): that error says whether the model describes the board. A fit on one GPU also
predicts the other's loops (H100 and H200 share a die).

A duty loop (a GEMM, then an idle spin of the SMs in clock cycles) is busy for the share of
its time the GEMM runs: its rate over the rate the same GEMM reaches back to back at that
clock.

    .venv/bin/python scripts/fit_power_measured.py
"""
import json
import statistics
from dataclasses import dataclass

import numpy as np

from core.model import ops
from core.model.loader import load_hardware
from core.model.power import voltage_sq
from core.validation.measured import MEASURED_DIR, PRESET_BY_GPU, loop_activities, rows, settled_samples

FLOORS = np.round(np.arange(0.0, 0.951, 0.01), 2)
UNKNOWNS = ("active_w", "flop_energy bf16 (pJ)", "flop_energy fp8 (pJ)", "hbm_energy (pJ/B)")
CURVE_GEMMS = {"gemm_bf16_2048": ("bf16", 2048), "gemm_bf16_4096": ("bf16", 4096),
               "gemm_fp8_4096": ("fp8", 4096), "gemm_fp8_2048": ("fp8", 2048)}
DUTY = "duty_bf16_8192_sleep"
STREAM = "stream_bf16_m"  # decode-like GEMMs reading their weights from HBM: held out, never fitted


@dataclass(frozen=True)
class Loop:
    name: str
    share: float  # settled SM clock over the preset's clock
    flops: dict  # dtype -> FLOP/s at that clock
    busy: float  # share of the time a kernel other than an idle spin runs
    hbm_bps: float  # HBM bytes/s at that clock
    bytes_follow_clock: bool  # False for a copy, whose rate the clock does not set
    watts: float


def _loops_of(hw, windows, clocks) -> list:
    settled = settled_samples(clocks)
    clock_mhz = hw.gpu.clock_hz / 1e6
    activities = loop_activities(hw)
    for name, (dtype, n) in CURVE_GEMMS.items():
        gemm = ops.gemm(hw, n, n, n, dtype=dtype)
        activities[name] = (dtype, gemm.flops, gemm.hbm_bytes)
    loops, per_mhz = [], None
    for name in dict.fromkeys(w["phase"] for w in windows):
        samples = settled.get(name)
        rates = [w for w in windows if w["phase"] == name][4:]
        if not samples or not rates:
            continue
        mhz = statistics.median(float(s["sm_clock_mhz"]) for s in samples)
        watts = statistics.median(float(s["power_w"]) for s in samples)
        flops_per_s = statistics.median(float(w["tflops"]) for w in rates) * 1e12
        if name.startswith(STREAM):  # the weights' bytes as measured; the GEMM's FLOPs in BF16
            bps = statistics.median(float(w["gbps"]) for w in rates) * 1e9
            loops.append(Loop(name, mhz / clock_mhz, {"bf16": flops_per_s}, 1.0, bps, True, watts))
            continue
        if name == "hbm_copy_1gib":
            bps = statistics.median(float(w["gbps"]) for w in rates) * 1e9
            loops.append(Loop(name, mhz / clock_mhz, {}, 1.0, bps, False, watts))
            continue
        busy = 1.0
        if name.startswith(DUTY):
            per_mhz = per_mhz or flops_per_s / mhz  # the first duty loop spins for 0 cycles
            busy = flops_per_s / (per_mhz * mhz)
            work = activities["gemm_bf16_8192"]
            dtype_flops, call_bytes = work.flops, work.hbm_bytes
        elif isinstance(activities[name], tuple):
            dtype, call_flops, call_bytes = activities[name]
            dtype_flops = ((dtype, call_flops),)
        else:
            work = activities[name]
            dtype_flops, call_bytes = work.flops, work.hbm_bytes
        total = sum(c for _, c in dtype_flops)
        calls_per_s = flops_per_s / total
        flops = {}
        for dtype, count in dtype_flops:
            flops[dtype] = flops.get(dtype, 0.0) + count * calls_per_s
        loops.append(Loop(name, mhz / clock_mhz, flops, busy, call_bytes * calls_per_s, True, watts))
    return loops


def measured_loops(gpu: str) -> tuple:
    """(hardware, idle W, highest clock share the board reaches, loops fitted on, loops held out)."""
    folder = MEASURED_DIR / gpu
    hw = load_hardware(PRESET_BY_GPU[gpu])
    loops = _loops_of(hw, rows(folder / "sustained.csv"), rows(folder / "clocks.csv"))
    if (folder / "curve.csv").exists():
        loops += _loops_of(hw, rows(folder / "curve.csv"), rows(folder / "curve_clocks.csv"))
    held = []
    if (folder / "stream.csv").exists():
        held = _loops_of(hw, rows(folder / "stream.csv"), rows(folder / "stream_clocks.csv"))
    idle = settled_samples(rows(folder / "clocks.csv"))["idle"]
    idle_w = statistics.median(float(r["power_w"]) for r in idle if int(r["sm_clock_mhz"]) > 1000)
    top = json.loads((folder / "environment.json").read_text())["max_sm_clock_mhz"] / (hw.gpu.clock_hz / 1e6)
    return hw, idle_w, top, loops, held


def watts(params, floor: float, idle_w: float, loop: Loop, share: float) -> float:
    """The loop's draw at clock share `share` (its rates scaled from the settled clock)."""
    active, e_bf16, e_fp8, e_hbm = params
    scale = share / loop.share
    flop_w = (e_bf16 * loop.flops.get("bf16", 0.0) + e_fp8 * loop.flops.get("fp8", 0.0)) * scale
    bytes_w = e_hbm * loop.hbm_bps * (scale if loop.bytes_follow_clock else 1.0)
    return idle_w + voltage_sq(share, floor) * (active * share * loop.busy + flop_w) + bytes_w


def fit(loops: list, floor: float, idle_w: float) -> np.ndarray:
    """Least-squares energies at one voltage floor, active power held at 0 W or above."""
    a = np.array([[voltage_sq(l.share, floor) * l.share * l.busy, voltage_sq(l.share, floor) * l.flops.get("bf16", 0.0),
                   voltage_sq(l.share, floor) * l.flops.get("fp8", 0.0), l.hbm_bps] for l in loops])
    b = np.array([l.watts - idle_w for l in loops])
    params = np.linalg.lstsq(a, b, rcond=None)[0]
    if params[0] < 0:
        params = np.concatenate([[0.0], np.linalg.lstsq(a[:, 1:], b, rcond=None)[0]])
    return params


def settled_share(params, floor: float, idle_w: float, limit_w: float, top: float, loop: Loop) -> float:
    """The clock share at which the loop draws the limit, or `top` where it stays under."""
    if watts(params, floor, idle_w, loop, top) <= limit_w:
        return top
    low, high = 0.3, top
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if watts(params, floor, idle_w, loop, mid) <= limit_w else (low, mid)
    return low


def clock_errors(params, floor, idle_w, limit_w, top, loops) -> list:
    return [settled_share(params, floor, idle_w, limit_w, top, l) / l.share - 1.0 for l in loops]


def best_fit(loops, idle_w, limit_w, top) -> tuple:
    """(floor, energies) with the smallest mean |clock error| over `loops`."""
    def score(floor):
        params = fit(loops, floor, idle_w)
        return np.mean(np.abs(clock_errors(params, floor, idle_w, limit_w, top, loops))), floor, params

    _, floor, params = min((score(f) for f in FLOORS), key=lambda s: s[0])
    return floor, params


def report(gpu: str, other: str) -> None:
    hw, idle_w, top, loops, held = measured_loops(gpu)
    power, limit_w = hw.gpu.power, hw.gpu.power.limit_w
    floor, params = best_fit(loops, idle_w, limit_w, top)
    preset = (power.active_w, power.flop_energy("bf16"), power.flop_energy("fp8"), power.hbm_energy_j_per_byte)
    clock_mhz = hw.gpu.clock_hz / 1e6
    print(f"\n{gpu} ({hw.gpu.name}; preset clock {clock_mhz:.0f} MHz, limit {limit_w:.0f} W, {len(loops)} loops): "
          f"idle with clocks up {idle_w:.0f} W (preset idle_power {power.idle_w:.0f} W)")
    print(f"  voltage floor          fitted {floor:7.2f}   preset {power.voltage_floor:7.2f}")
    for name, value, was in zip(UNKNOWNS, params, preset):
        scale = 1.0 if name == "active_w" else 1e12
        print(f"  {name:22s} fitted {value * scale:7.3f}   preset {was * scale:7.3f}")
    preset_errors = clock_errors(preset, power.voltage_floor, power.idle_w, limit_w, top, loops)
    print("  loop                          MHz   W    fitted    left out   the preset as it is")
    left_out = []
    for i, loop in enumerate(loops):
        rest = loops[:i] + loops[i + 1:]
        rest_floor, rest_params = best_fit(rest, idle_w, limit_w, top)
        error = settled_share(rest_params, rest_floor, idle_w, limit_w, top, loop) / loop.share - 1.0
        left_out.append(error)
        fitted = settled_share(params, floor, idle_w, limit_w, top, loop) / loop.share - 1.0
        print(f"  {loop.name:28s} {loop.share * clock_mhz:5.0f} {loop.watts:4.0f}   {fitted:+7.1%}   {error:+7.1%}"
              f"   {preset_errors[i]:+7.1%}")
    mean = lambda errors: 100 * float(np.mean(np.abs(errors)))
    print(f"  mean |clock error|: fitted {mean(clock_errors(params, floor, idle_w, limit_w, top, loops)):.1f} %, "
          f"left out {mean(left_out):.1f} %, the preset as it is {mean(preset_errors):.1f} %")
    for loop in held:
        predicted = settled_share(params, floor, idle_w, limit_w, top, loop)
        print(f"  held out: {loop.name:18s} {loop.share * clock_mhz:5.0f} MHz {loop.watts:4.0f} W measured;"
              f" predicted {predicted * clock_mhz:5.0f} MHz ({predicted / loop.share - 1:+.1%}),"
              f" {watts(params, floor, idle_w, loop, loop.share):4.0f} W at the measured clock"
              f" ({watts(params, floor, idle_w, loop, loop.share) / loop.watts - 1:+.1%})")
    _, other_idle, other_top, other_loops, _ = measured_loops(other)
    errors = clock_errors(params, floor, other_idle, limit_w, other_top, other_loops)
    print(f"  fitted here, {other}'s {len(other_loops)} loops (its own idle {other_idle:.0f} W): mean |clock error| "
          f"{mean(errors):.1f} % (" + ", ".join(f"{l.name} {e:+.1%}" for l, e in zip(other_loops, errors)) + ")")


def main() -> None:
    print(__doc__.split("\n\n")[0])
    report("h100_sxm", "h200_sxm")
    report("h200_sxm", "h100_sxm")


if __name__ == "__main__":
    main()
