"""The power model (core/model/power.py), its preset fields, the power limit's effect on step
times, the energy and cost columns."""
import pytest

import core
from core import InferWorkload, Parallelism, SpecError, TrainWorkload, evaluate
from core.model.power import CLOCK_FLOOR, Activity, clock_under, energy_j, power_w, whole_step_clock
from core.model.specs import PowerSpec, ServeWorkload
from sweep.study.cost_block import CostSpec, cost_fields, parse_cost

# 100 W floor, no SM term, 0.6 pJ per BF16 FLOP: a second of purely compute-bound work doing
# 1e15 FLOPs at the boost clock spends 100 J + 600 J.
POWER = PowerSpec(tdp_w=700.0, limit_w=700.0, idle_w=100.0, active_w=0.0, flop_energy_j=(("bf16", 0.6e-12),),
                  hbm_energy_j_per_byte=0.0, link_energy_j_per_byte=0.0)
GEMMS = Activity(time_s=1.0, busy_s=1.0, flops=(("bf16", 1e15),), hbm_bytes=0.0, compute_bound_s=1.0,
                 busy_compute_bound_s=1.0)


def test_energy_is_the_floor_plus_each_activity_times_its_energy():
    power = PowerSpec(tdp_w=700.0, limit_w=700.0, idle_w=100.0, active_w=50.0,
                      flop_energy_j=(("bf16", 0.6e-12), ("fp8", 0.3e-12)), hbm_energy_j_per_byte=25e-12,
                      link_energy_j_per_byte=10e-12)
    work = Activity(time_s=2.0, busy_s=1.5, flops=(("bf16", 1e15), ("fp8", 2e15)), hbm_bytes=4e12, link_bytes=1e11)
    # 100 W * 2 s + 50 W * 1.5 s + 600 J + 600 J + 100 J + 1 J
    assert energy_j(power, work) == pytest.approx(200 + 75 + 600 + 600 + 100 + 1)
    assert power_w(power, work) == pytest.approx(1576 / 2)


def test_a_lower_clock_stretches_compute_bound_time_and_cuts_the_energy_per_flop_by_v_squared():
    half = GEMMS.at_clock(0.5)
    assert half.time_s == pytest.approx(2.0) and half.busy_s == pytest.approx(2.0)
    assert energy_j(POWER, half) == pytest.approx(100 * 2 + 600 * 0.25)


def test_the_clock_under_a_limit_solves_floor_plus_dynamic_power_in_closed_form():
    # At clock r the work draws 100 + 600 r^3 W (energy 100/r + 600 r^2 over 1/r seconds).
    assert clock_under(POWER, GEMMS, 700.0) == 1.0
    assert clock_under(POWER, GEMMS, 400.0) == pytest.approx(0.5 ** (1 / 3), abs=1e-9)
    assert clock_under(POWER, GEMMS, 100.5) == CLOCK_FLOOR  # below what the floor clock still draws


def test_a_voltage_floor_keeps_the_energy_per_flop_higher_at_a_lower_clock_so_a_limit_bites_deeper():
    floored = PowerSpec(**{**POWER.__dict__, "voltage_floor": 0.5})
    # At half the clock the voltage is 0.5 + 0.5 * 0.5 = 0.75: 600 J * 0.5625, not * 0.25.
    assert energy_j(floored, GEMMS.at_clock(0.5)) == pytest.approx(100 * 2 + 600 * 0.5625)
    # Busy power at clock r: 100 + 600 r (0.5 + 0.5 r)^2 = 400 at r = 0.5 ** (1/3) without the
    # floor (0.794); with it, r (1 + r)^2 = 2 gives r = 0.6956.
    assert clock_under(floored, GEMMS, 400.0) == pytest.approx(0.695620769, abs=1e-8)


def test_relative_clock_keeps_the_fitted_sustained_clock_at_the_default_limit():
    at_tdp = PowerSpec(**{**POWER.__dict__, "tdp_w": 400.0, "limit_w": 400.0})
    assert whole_step_clock(at_tdp, GEMMS, 0.9) == (0.9, pytest.approx(0.5 ** (1 / 3)))
    lower = PowerSpec(**{**at_tdp.__dict__, "limit_w": 175.0})  # 100 + 600 r^3 = 175: r = 0.5
    kernel_clock, physical = whole_step_clock(lower, GEMMS, 0.9)
    assert physical == pytest.approx(0.5) and kernel_clock == pytest.approx(0.9 * 0.5 / 0.5 ** (1 / 3))
    absolute = PowerSpec(**{**lower.__dict__, "clock": "absolute"})
    assert whole_step_clock(absolute, GEMMS, 1.0) == (pytest.approx(0.5), pytest.approx(0.5))


def _h100(limit: str):
    return core.load_hardware("h100-sxm5-80gb", {"gpu.power_limit": limit})


def test_a_compute_bound_step_slows_under_a_lower_power_cap_and_a_decode_step_hardly():
    model = core.load_model("llama3.1-8b")
    train = TrainWorkload(global_batch=8, seq=8192)
    par = Parallelism(dp=1, tp=8, sp=True, micro_batch=1)
    full, capped = (evaluate(model, _h100(limit), par, train, 8) for limit in ("700 W", "300 W"))
    assert capped["gpu_clock_share"] < 0.8 and capped["power_avg_w"] < 300  # the limit holds while kernels run
    assert capped["step_time_s"] > 1.15 * full["step_time_s"]
    step_slowdown = capped["step_time_s"] / full["step_time_s"] - 1
    decode = InferWorkload(batch=1, prompt=16, decode=256)
    full, capped = (evaluate(model, _h100(limit), Parallelism(), decode, 1) for limit in ("700 W", "300 W"))
    assert capped["gpu_clock_share"] < 1.0  # the cap binds here too, yet HBM sets the pace:
    # only the tile work the GEMVs' pipelines leave exposed slows with the clock
    assert capped["tpot_s"] / full["tpot_s"] - 1 < step_slowdown / 10


def test_energy_columns_of_a_training_step_and_an_inference_request_agree_with_each_other():
    model = core.load_model("llama3.1-8b")
    hw = core.load_hardware("h100-sxm5-80gb", {"gpu.pue": 1.2, "gpu.node_overhead": "50 W"})
    train = TrainWorkload(global_batch=16, seq=4096, tokens_total=1e9)
    record = evaluate(model, hw, Parallelism(dp=2, tp=4, sp=True), train, 8)
    gpu_j = record["power_avg_w"] * record["step_time_s"]
    assert record["energy_per_step_j"] == pytest.approx((gpu_j + 50 * record["step_time_s"]) * 1.2 * 8)
    assert record["energy_per_token_j"] == pytest.approx(record["energy_per_step_j"] / (16 * 4096))
    steps = 1e9 / (16 * 4096)
    assert record["run_days"] == pytest.approx(steps * record["step_time_s"] / 86400)
    assert record["run_mwh"] == pytest.approx(steps * record["energy_per_step_j"] / 3.6e9)
    infer = evaluate(model, hw, Parallelism(dp=2, tp=4), InferWorkload(batch=8, prompt=128, decode=64), 8)
    per_gpu = (infer["power_avg_w"] + 50) * infer["step_time_s"] * 1.2
    assert infer["energy_per_request_j"] == pytest.approx(per_gpu * 4 / 8)
    assert infer["energy_per_output_token_j"] == pytest.approx(per_gpu * 4 / 8 / 64)
    assert infer["energy_per_token_j"] is None and infer["run_days"] is None


def test_cost_is_gpu_hours_plus_energy_at_its_prices():
    record = {"step_time_s": 3600.0, "energy_per_step_j": 3.6e9}  # an hour, 1 MWh
    work = TrainWorkload(global_batch=1000, seq=1000, tokens_total=2e6)
    fields = cost_fields(record, CostSpec(gpu_hour_usd=2.0, kwh_usd=0.1), work, 8, Parallelism(dp=8))
    assert fields == {"usd_per_step": 8 * 2.0 + 1000 * 0.1, "usd_per_million_tokens": 116.0, "run_usd": 232.0}
    assert cost_fields(record, None, work, 8, Parallelism(dp=8))["usd_per_step"] is None


def test_a_served_million_tokens_costs_the_gpu_hours_at_its_rate_and_its_energy():
    record = {"output_tokens_per_s": 1e6 / 3600, "energy_per_output_token_j": 3.6}  # 1 M tokens an hour, 1 kWh
    work = ServeWorkload(isl=128, osl=16, concurrency=4)
    fields = cost_fields(record, CostSpec(gpu_hour_usd=2.0, kwh_usd=0.1), work, 8, Parallelism(dp=8))
    assert fields == {"usd_per_step": None, "usd_per_million_tokens": pytest.approx(8 * 2.0 + 0.1), "run_usd": None}


def test_a_throttled_gpu_averages_its_limit_at_most():
    """A prefill at the boost clock would draw more than H100's 700 W: the limit's clock holds it,
    in a request and in a served load whose engine does the prefills faster than the static model."""
    model, hw = core.load_model("llama3.1-8b"), core.load_hardware("h100-sxm5-80gb")
    record = evaluate(model, hw, Parallelism(), InferWorkload(batch=8, prompt=4096, decode=1), 1)
    assert record["gpu_clock_share"] < 1 and record["power_avg_w"] <= 700.0 + 1e-9
    served = evaluate(model, hw, Parallelism(), ServeWorkload(isl=2048, osl=16, concurrency=8, requests=64), 1)
    assert served["power_avg_w"] <= 700.0 + 1e-9


@pytest.mark.parametrize("data, field", [
    ({"gpu_hour_usd": 2.0}, "cost.kwh_usd"),
    ({"gpu_hour_usd": -1, "kwh_usd": 0.1}, "cost.gpu_hour_usd"),
    ({"gpu_hour_usd": 2.0, "kwh_usd": 0.1, "tax": 1}, "cost.tax"),
])
def test_a_bad_cost_block_is_refused_naming_the_field(data, field):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        parse_cost(data, "study.yaml")


@pytest.mark.parametrize("overrides, field", [
    ({"gpu.power_limit": "100 W"}, "gpu.power_limit"),  # below the idle floor
    ({"gpu.power_limit": 500}, "gpu.power_limit"),  # no unit
    ({"gpu.power_limit": "1000 W"}, "gpu.power_limit"),  # above the TDP (700 W)
    ({"gpu.pue": 0.8}, "gpu.pue"),
    ({"gpu.flop_energy": {"bf16": "0.7 pJ"}}, "gpu.flop_energy"),  # fp32, tf32, fp16, fp8 missing
    ({"gpu.hbm_energy": "25 W"}, "gpu.hbm_energy"),
    ({"gpu.idle_power": None}, "gpu.idle_power"),
    ({"gpu.voltage_floor": 1.0}, "gpu.voltage_floor"),  # the line must fall below the boost voltage
])
def test_bad_power_fields_are_refused_in_one_line(overrides, field):
    with pytest.raises(SpecError, match=field.replace(".", r"\.")):
        core.load_hardware("h100-sxm5-80gb", overrides)


def _bare_hardware(tmp_path) -> str:
    """The A100 preset without its power fields, as a file."""
    text = (core.model.loader.PRESET_DIR / "gpus" / "a100-sxm4-80gb.yaml").read_text()
    fields = tuple(f"{name}:" for name in core.model.loader.POWER_FIELDS)
    path = tmp_path / "bare.yaml"
    path.write_text("\n".join(line for line in text.splitlines() if not line.strip().startswith(fields)))
    return str(path)


def test_a_hardware_file_without_power_figures_has_no_energy_columns(tmp_path):
    hw = core.load_hardware(_bare_hardware(tmp_path))
    assert hw.gpu.power is None
    record = evaluate(core.load_model("llama3.1-8b"), hw, Parallelism(tp=8), TrainWorkload(8, 2048), 8)
    assert record["step_time_s"] > 0 and record["power_avg_w"] is None and record["energy_per_token_j"] is None


def test_a_study_sweeps_the_power_limit_and_writes_energy_and_cost_columns(write_study):
    from sweep.execution.engine import run_study
    from sweep.store.parts import read_results
    from sweep.study.loader import load_study

    path = write_study(hardware="h100-sxm5-80gb", workload={"mode": "train", "global_batch": 8, "seq": 2048,
                                                             "tokens_total": 1e9},
                       cost={"gpu_hour_usd": 2.0, "kwh_usd": 0.1},
                       space={"tp": [4, 8], "pp": [1, 2], "cp": [1], "zero": [1], "micro_batch": [1],
                              "recompute": ["none"], "hardware.gpu.hbm.bandwidth": ["3350 GB/s"],
                              "hardware.gpu.power_limit": ["700 W", "300 W"]})
    study = load_study(path)
    run_study(study, executor="inprocess", progress=False)
    rows = read_results(study.output).to_pandas()
    timed = rows[rows.feasible]
    assert not timed.empty and sorted(timed.hardware_gpu_power_limit_w.unique()) == [300.0, 700.0]
    for column in ("power_avg_w", "energy_per_token_j", "run_mwh", "usd_per_million_tokens", "run_usd"):
        assert timed[column].notna().all(), column
    capped = timed[timed.hardware_gpu_power_limit_w == 300.0]
    assert (capped.power_avg_w < 300).all()
    from sweep.report.page import build_report

    section = next(s for s in build_report(study.output).sections if s.title == "Power and energy")
    points = section.figures[0].data[1]  # the trade-off's layouts (data[0] is its front)
    assert points.marker.colorbar.title.text == "power limit (W)" and len(points.x) == len(timed)


def test_energy_columns_are_search_objectives():
    from sweep.study.search_block import objective_column

    assert objective_column("energy_per_token_j", "study.yaml", "search.objectives") == "energy_per_token_j"
    assert objective_column("usd_per_million_tokens", "study.yaml", "search.objectives") == "usd_per_million_tokens"


def test_the_energy_model_meets_the_20_percent_target_on_ml_energy_with_and_without_the_measured_pace():
    from core.validation.suites import SUITES, summary

    at_pace, _ = SUITES["energy_at_pace"]()
    whole, unfit = SUITES["energy"]()
    assert len(at_pace) == len(whole) == 314 and unfit == []
    assert summary(at_pace)["energy_at_pace"]["mean_abs_error_pct"] <= 20.0
    # time modelled too: the GPU's batch time plus vLLM 0.5's fitted host time (docs/energy.md)
    assert summary(whole)["energy"]["mean_abs_error_pct"] <= 20.0


def test_vllm_0_5_host_time_grows_with_the_running_sequences_and_the_tensor_parallel_ranks():
    from dataclasses import replace

    from core.serving.engines import LEGACY_ENGINES

    engine = replace(LEGACY_ENGINES[("vllm-0.5", "h100")], iteration_overhead_s=0.005,
                     sequence_overhead_s=0.0004, rank_overhead_s=0.01)
    assert engine.host_s(1, 1) == pytest.approx(0.0054)
    assert engine.host_s(256, 4) == pytest.approx(0.005 + 256 * 0.0004 + 3 * 0.01)


def test_a_cost_block_on_hardware_without_power_figures_is_refused(write_study, tmp_path):
    from sweep.study.loader import load_study

    path = write_study(hardware=_bare_hardware(tmp_path), cost={"gpu_hour_usd": 2.0, "kwh_usd": 0.1},
                       space={"hardware.gpu.hbm.bandwidth": ["2039 GB/s"]})
    with pytest.raises(SpecError, match="needs power figures"):
        load_study(path)


def test_power_and_energy_units():
    from core.units import parse_energy, parse_power

    assert (parse_power("700 W"), parse_power("1.2 kW"), parse_energy("0.6 pJ")) == (700.0, 1200.0, 0.6e-12)
    with pytest.raises(SpecError, match="expected a power"):
        parse_power("5 J")


def test_a_fault_samples_slower_step_idles_through_its_extra_time():
    from core.evaluation import ENERGY, slowed_energy_fields

    hw = core.load_hardware("h100-sxm5-80gb", {"gpu.pue": 1.5, "gpu.node_overhead": "20 W"})  # idle floor 170 W
    record = {key: None for key in ENERGY}
    record.update(step_time_s=10.0, power_avg_w=500.0, gpu_clock_share=0.9, energy_per_step_j=4 * 5200 * 1.5,
                  energy_per_token_j=1.0, run_days=2.0, run_mwh=3.0)
    slowed = slowed_energy_fields(record, hw, 4, 1.5)  # 5 s more at (170 + 20) W x 1.5, on 4 GPUs
    scale = (4 * 5200 * 1.5 + 190 * 1.5 * 5 * 4) / (4 * 5200 * 1.5)
    assert slowed["energy_per_step_j"] == pytest.approx(4 * 5200 * 1.5 * scale)
    assert slowed["energy_per_token_j"] == pytest.approx(scale) and slowed["run_mwh"] == pytest.approx(3 * scale)
    assert slowed["power_avg_w"] == pytest.approx((500 * 10 + 170 * 5) / 15) and slowed["run_days"] == 3.0
    assert slowed["energy_per_request_j"] is None and slowed["gpu_clock_share"] == 0.9


def test_a_served_rows_energy_is_its_power_over_its_own_output_rate():
    """The static batch its energy is counted on takes longer than the simulated engine emits it:
    the work is done in the engine's time, so power x time and the joules agree."""
    hw = core.load_hardware("h100-sxm5-80gb")
    record = evaluate(core.load_model("llama3.1-8b"), hw, Parallelism(tp=2),
                      ServeWorkload(isl=512, osl=128, concurrency=1, requests=10), 2)
    facility = hw.gpu.power.pue * (record["power_avg_w"] + hw.gpu.power.node_overhead_w)
    assert record["energy_per_output_token_j"] == pytest.approx(2 * facility / record["output_tokens_per_s"])
