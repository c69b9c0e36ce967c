"""Enumeration, legality and point ids (the same space driven by Optuna: test_sweep_search.py)."""
import subprocess
import sys

import pytest

from core import SpecError
from sweep.study.grid import plan_study
from sweep.study.plan import PARALLELISM_FIELDS, Planner, group_reason
from sweep.study.loader import load_study


def test_grid_counts_every_combination_and_keeps_only_legal_points(write_study):
    plan = plan_study(load_study(write_study()))
    assert plan.total == 4 * 3 * 2 * 2 * 2 * 2 * 2
    assert len(plan.points) + plan.illegal_count == plan.total
    assert [p.point_id for p in plan.points] == sorted(p.point_id for p in plan.points)
    assert len({p.point_id for p in plan.points}) == len(plan.points)
    for pattern, example in plan.illegal_examples.items():
        assert plan.illegal[pattern] >= 1 and example


def test_a_group_of_illegal_points_keeps_the_numbers_its_members_share(write_study):
    plan = plan_study(load_study(write_study(gpus=96, workload={"mode": "train", "global_batch": 192, "seq": 4096},
                                             space={"tp": [1, 2, 3, 4, 6, 8], "pp": [1], "cp": [1], "micro_batch": [1]})))
    assert list(plan.illegal_examples.values()) == ["heads (32) not divisible by tp (N)"]  # 32 heads in each, tp 3 or 6
    assert group_reason("gpus (16) not divisible by tp (3)", ["16", None]) == "gpus (16) not divisible by tp (N)"


def test_illegal_points_carry_their_reason(write_study):
    planner = Planner(load_study(write_study(space={"tp": [3, 8], "pp": [1, 5]})))
    base = {name: values[0] for name, values in planner.study.space.choices().items()}
    assert "not divisible by tp*pp*cp" in planner.point({**base, "tp": 3, "pp": 1})
    heads = Planner(load_study(write_study(gpus=48, space={"tp": [3]}))).point({**base, "tp": 3})
    assert heads == "heads (32) not divisible by tp (3)"
    study = load_study(write_study(gpus=40, space={"tp": [8], "pp": [5]}))
    # 32 layers on 5 stages split unevenly as Megatron does (5, 7, 7, 7, 6): a legal point
    assert not isinstance(Planner(study).point({**base, "tp": 8, "pp": 5}), str)


def test_point_id_is_stable_across_processes(write_study):
    path = write_study()
    ids = [p.point_id for p in plan_study(load_study(path)).points]
    script = ("import sys; from sweep.study.grid import plan_study; from sweep.study.loader import load_study; "
              "print(','.join(p.point_id for p in plan_study(load_study(sys.argv[1])).points))")
    other = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True)
    assert other.stdout.strip().split(",") == ids


def test_point_id_changes_with_anything_that_changes_the_prediction(write_study):
    first = {p.values: p.point_id for p in plan_study(load_study(write_study())).points}
    longer = {p.values: p.point_id for p in plan_study(load_study(write_study(
        workload={"mode": "train", "global_batch": 64, "seq": 8192}))).points}
    assert not set(first.values()) & set(longer.values())


def test_placement_is_a_knob(write_study):
    from sweep.study.grid import plan_study
    from sweep.study.loader import load_study

    plan = plan_study(load_study(write_study(space={"tp": [8], "pp": [1], "cp": [1], "zero": [1],
                                                    "placement": ["tp,cp,dp,pp", "dp,tp,cp,pp"]})))
    orders = {p.parallelism[PARALLELISM_FIELDS.index("placement")] for p in plan.points}
    assert orders == {("tp", "cp", "dp", "pp"), ("dp", "tp", "cp", "pp")}


def test_new_parallelism_fields_are_knobs_with_todays_defaults(write_study):
    plan = plan_study(load_study(write_study(space={"tp": [2], "overlap_tp_comm": [False, True],
                                                    "grad_dtype": ["bf16"]})))
    fields = [dict(zip(PARALLELISM_FIELDS, p.parallelism)) for p in plan.points]
    assert {f["overlap_tp_comm"] for f in fields} == {False, True}
    assert {(f["grad_dtype"], f["etp"], f["overlap_grad_reduce"], f["fp8_params"]) for f in fields} == \
        {("bf16", 0, True, False)}


def test_training_knobs_default_to_megatron_core_recipes_and_each_turns_off():
    """Distributed optimizer with both overlaps, and sequence parallelism whenever tp > 1."""
    from sweep.study.space import parse_space
    names = ("sp", "zero", "overlap_grad_reduce", "overlap_param_gather", "reshard_after_forward")

    def resolved(space, mode="train"):
        parsed = parse_space(space, "study.yaml", mode, 16)
        return {tuple(getattr(parsed.resolve(choice).parallelism, n) for n in names) for choice in parsed.grid()}

    assert resolved({"tp": [1]}) == {(False, 1, True, True, True)}
    assert resolved({"tp": [2]}) == {(True, 1, True, True, True)}
    assert resolved({"tp": [2]}, "infer") == {(False, 1, True, True, True)}  # no SP in inference
    off = {"tp": [2], "sp": [False], "zero": [0], "overlap_grad_reduce": [False]}
    assert resolved(off) == {(False, 0, False, False, True)}  # param gather follows zero: nothing to gather
    assert resolved({"zero": [3], "reshard_after_forward": [False]}) == {(False, 3, True, True, False)}  # prefetch


def test_optimizer_state_knobs_default_to_megatron_and_reject_unknown_kinds(write_study):
    plan = plan_study(load_study(write_study(space={"tp": [2], "master_weights": ["fp32", "remainders"],
                                                    "optimizer_dtype": ["bf16"]})))
    fields = [dict(zip(PARALLELISM_FIELDS, p.parallelism)) for p in plan.points]
    assert {(f["master_weights"], f["optimizer_dtype"]) for f in fields} == {("fp32", "bf16"), ("remainders", "bf16")}
    defaults = [dict(zip(PARALLELISM_FIELDS, p.parallelism)) for p in plan_study(load_study(write_study())).points]
    assert {(f["master_weights"], f["optimizer_dtype"]) for f in defaults} == {("fp32", "fp32")}
    with pytest.raises(SpecError, match="master_weights"):
        load_study(write_study(space={"master_weights": ["fp16"]}))


def test_framework_kernel_knobs_default_to_megatron_and_take_booleans(write_study):
    plan = plan_study(load_study(write_study(space={"tp": [2], "fused_cross_entropy": [True, False],
                                                    "grad_accumulation_fusion": [False]})))
    fields = [dict(zip(PARALLELISM_FIELDS, p.parallelism)) for p in plan.points]
    assert {(f["fused_cross_entropy"], f["grad_accumulation_fusion"]) for f in fields} == {(True, False),
                                                                                             (False, False)}
    defaults = [dict(zip(PARALLELISM_FIELDS, p.parallelism)) for p in plan_study(load_study(write_study())).points]
    assert {(f["fused_cross_entropy"], f["grad_accumulation_fusion"]) for f in defaults} == {(False, True)}
    with pytest.raises(SpecError, match="fused_cross_entropy"):
        load_study(write_study(space={"fused_cross_entropy": ["yes please"]}))
