"""Fit a GPU's power-model energies on the long single-kernel loops we measured ourselves
(core/validation/data/measured/<gpu>/: sustained.csv and clocks.csv), and print them beside
the preset's estimates. It edits nothing.

The power model (core/model/power.py) gives a busy board's watts at clock share r (of the
preset's clock) as

    idle + active * r^3 + r^2 * sum_dtype(flop_energy * FLOP/s) + hbm_energy * HBM bytes/s

Each loop gives one such equation at its settled clock, rate and watts; the idle floor is read
off the idle stretches between loops (clocks up, context alive). Least squares over the
loops gives active, the BF16 and FP8 FLOP energies and the HBM byte energy. Each loop is then
left out in turn, the rest refitted, and the clock the left-out loop would settle at under the
board's limit predicted (its rate scaling with the clock, as compute-bound work does): the
error against the measured clock is the figure that says whether four numbers describe the
board. The fit on one GPU also predicts the other's loops (H100 and H200 share a die).

    .venv/bin/python scripts/fit_power_measured.py
"""
import json
import statistics

import numpy as np

from core.model.loader import load_hardware
from core.validation.measured import MEASURED_DIR, PRESET_BY_GPU, loop_activities, rows, settled_samples

UNKNOWNS = ("active_w", "flop_energy bf16 (pJ)", "flop_energy fp8 (pJ)", "hbm_energy (pJ/B)")
LOOP_DTYPE = {"gemm_bf16_8192": "bf16", "gemm_fp8_8192": "fp8", "attention_fwd_bwd_cudnn": "bf16",
              "gemm_gelu_add_bf16": "bf16", "hbm_copy_1gib": None}


def loops(gpu: str) -> tuple:
    """(idle W, power limit W, preset clock MHz, highest clock share the board reaches,
    {loop: (clock share, dtype, FLOP/s, HBM B/s, W)}, hardware)."""
    folder = MEASURED_DIR / gpu
    hw = load_hardware(PRESET_BY_GPU[gpu])
    windows = rows(folder / "sustained.csv")
    settled = settled_samples(rows(folder / "clocks.csv"))
    idle_w = statistics.median(float(r["power_w"]) for r in settled["idle"] if int(r["sm_clock_mhz"]) > 1000)
    clock_mhz = hw.gpu.clock_hz / 1e6
    activities = loop_activities(hw)
    out = {}
    for phase, dtype in LOOP_DTYPE.items():
        samples = settled.get(phase)
        rates = [w for w in windows if w["phase"] == phase][4:]
        if not samples or not rates:
            continue
        flops_per_s = statistics.median(float(w["tflops"]) for w in rates) * 1e12
        work = activities[phase]
        call_s = 1.0 / (flops_per_s / sum(c for _, c in work.flops)) if work.flops else None
        if call_s is None:  # the copy: its bytes are its rate
            hbm_per_s = statistics.median(float(w["gbps"]) for w in rates) * 1e9
        else:
            hbm_per_s = work.hbm_bytes / call_s
        share = statistics.median(float(s["sm_clock_mhz"]) for s in samples) / clock_mhz
        out[phase] = (share, dtype, flops_per_s, hbm_per_s, statistics.median(float(s["power_w"]) for s in samples))
    top = json.loads((folder / "environment.json").read_text())["max_sm_clock_mhz"] / clock_mhz
    return idle_w, hw.gpu.power.limit_w, clock_mhz, top, out, hw


def design(idle_w: float, loops_: dict) -> tuple:
    """Least-squares system: one row per loop over UNKNOWNS (energies in J)."""
    a, b = [], []
    for share, dtype, flops, hbm, watts in loops_.values():
        a.append([share**3, share**2 * flops if dtype == "bf16" else 0.0,
                  share**2 * flops if dtype == "fp8" else 0.0, hbm])
        b.append(watts - idle_w)
    return np.array(a), np.array(b)


def fit(idle_w: float, loops_: dict) -> np.ndarray:
    a, b = design(idle_w, loops_)
    return np.linalg.lstsq(a, b, rcond=None)[0]


def settled_share(params, idle_w: float, limit_w: float, top: float, loop: tuple) -> float:
    """The clock share at which the loop draws the limit (rate scaling with the clock), or the
    board's highest clock share `top` where the limit does not bind there."""
    share0, dtype, flops0, hbm0, _ = loop
    active, e_bf16, e_fp8, e_hbm = params
    energy = {"bf16": e_bf16, "fp8": e_fp8}.get(dtype, 0.0)

    def watts(r):
        scale = r / share0 if dtype else 1.0
        return idle_w + active * r**3 + r**2 * energy * flops0 * scale + e_hbm * hbm0 * scale

    low, high = 0.3, top
    if watts(high) <= limit_w:
        return high
    for _ in range(40):
        mid = (low + high) / 2
        low, high = (mid, high) if watts(mid) <= limit_w else (low, mid)
    return low


def report(gpu: str, other: str) -> None:
    idle_w, limit_w, clock_mhz, top, loops_, hw = loops(gpu)
    params = fit(idle_w, loops_)
    power = hw.gpu.power
    preset = (power.active_w, power.flop_energy("bf16"), power.flop_energy("fp8"), power.hbm_energy_j_per_byte)
    print(f"\n{gpu} ({hw.gpu.name}, preset clock {clock_mhz:.0f} MHz, limit {limit_w:.0f} W): "
          f"idle with clocks up {idle_w:.0f} W (preset idle_power {power.idle_w:.0f} W)")
    for name, value, was in zip(UNKNOWNS, params, preset):
        scale = 1.0 if name == "active_w" else 1e12
        print(f"  {name:22s} fitted {value * scale:7.3f}   preset {was * scale:7.3f}")
    print("  loop                       clock share  W measured  W fitted  left-out clock (MHz) measured / predicted")
    for phase, loop in loops_.items():
        rest = {p: v for p, v in loops_.items() if p != phase}
        left_out = fit(idle_w, rest) if len(rest) >= len(UNKNOWNS) else params
        a, _ = design(idle_w, {phase: loop})
        predicted = settled_share(left_out, idle_w, limit_w, top, loop) * clock_mhz
        print(f"  {phase:26s} {loop[0]:10.3f} {loop[4]:11.0f} {idle_w + float(a[0] @ params):9.0f}"
              f"   {loop[0] * clock_mhz:6.0f} / {predicted:6.0f} ({predicted / (loop[0] * clock_mhz) - 1:+.1%})")
    other_idle, other_limit, other_clock, other_top, other_loops, _ = loops(other)
    print(f"  fitted here, {other}'s loops (its own idle {other_idle:.0f} W):")
    for phase, loop in other_loops.items():
        predicted = settled_share(params, other_idle, other_limit, other_top, loop) * other_clock
        print(f"  {phase:26s} measured {loop[0] * other_clock:6.0f} MHz, predicted {predicted:6.0f} "
              f"({predicted / (loop[0] * other_clock) - 1:+.1%})")


def main() -> None:
    print(__doc__.split("\n\n")[0])
    report("h100_sxm", "h200_sxm")
    report("h200_sxm", "h100_sxm")


if __name__ == "__main__":
    main()
