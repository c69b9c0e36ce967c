"""The grid planned as arrays (sweep.study.grid) against the per-point path it replaces for
grids: on random small spaces, the same legal points (ids, values, layouts), the same reasons
with the same counts and examples, and the same study error for a space without a legal point."""
import ast
import inspect
import textwrap
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from core import SpecError, check_layout
from core.model.layout_masks import REASON_INPUTS
from sweep.cli import main
from sweep.execution.engine import run_study
from sweep.store.parts import part_files, read_results
from sweep.study import grid as grid_module
from sweep.study.grid import DoneIds, GridPlanner, plan_study
from sweep.study.loader import load_study
from sweep.study.plan import Planner, group_reason, reason_pattern, _NUMBER


def per_point_plan(study):
    """The grid planned one combination at a time through Planner.point, as plan_study did."""
    planner = Planner(study)
    points, illegal, shared, first, total = {}, Counter(), {}, {}, 0
    for choice in study.space.grid():
        total += 1
        point = planner.point(choice)
        if isinstance(point, str):
            pattern = reason_pattern(point)
            illegal[pattern] += 1
            numbers = _NUMBER.findall(point)
            kept = shared.get(pattern, numbers)
            shared[pattern] = [mine if mine == theirs else None for mine, theirs in zip(kept, numbers)]
            first.setdefault(pattern, point)
        else:
            points[point.point_id] = point
    models, hardware = planner.specs()
    examples = {pattern: group_reason(first[pattern], shared[pattern]) for pattern in illegal}
    return points, models, hardware, illegal, examples, total, first


def assert_same_plan(study):
    points, models, hardware, illegal, examples, total, first = per_point_plan(study)
    if not points:
        with pytest.raises(SpecError) as refused:
            plan_study(study)
        assert f"most common reason: {first[illegal.most_common(1)[0][0]]}" in str(refused.value)
        return
    plan = plan_study(study)
    assert plan.total == total and plan.legal == len(points)
    assert [p.point_id for p in plan.points] == sorted(points)
    for mine in plan.points:
        theirs = points[mine.point_id]
        assert (mine.values, mine.parallelism) == (theirs.values, theirs.parallelism)
        assert plan.models[mine.model_index] == models[theirs.model_index]
        assert plan.hardware[mine.hardware_index] == hardware[theirs.hardware_index]
    assert plan.illegal == illegal
    assert plan.illegal_examples == examples


TRAIN_SPACE = {
    "tp": st.lists(st.sampled_from([1, 2, 3, 4, 8]), min_size=1, max_size=3, unique=True),
    "pp": st.lists(st.sampled_from([1, 2, 3, 4, 5]), min_size=1, max_size=3, unique=True),
    "cp": st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2, unique=True),
    "ep": st.lists(st.sampled_from([1, 2, 4, 3]), min_size=1, max_size=2, unique=True),
    "etp": st.lists(st.sampled_from([0, 1, 2, 64]), min_size=1, max_size=2, unique=True),
    "sp": st.sampled_from(["auto", [True, False], [False]]),
    "zero": st.lists(st.sampled_from([0, 1, 3]), min_size=1, max_size=2, unique=True),
    "micro_batch": st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2, unique=True),
    "schedule": st.lists(st.sampled_from(["1f1b", "interleaved", "gpipe"]), min_size=1, max_size=2, unique=True),
    "virtual_stages": st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2, unique=True),
    "first_stage_layers": st.lists(st.sampled_from([0, 3, 7]), min_size=1, max_size=2, unique=True),
    "last_stage_layers": st.lists(st.sampled_from([0, 4]), min_size=1, max_size=2, unique=True),
    "placement": st.lists(st.sampled_from(["tp,cp,dp,pp", "tp,cp,pp,dp", "dp,tp,cp,pp"]), min_size=1, max_size=2,
                          unique=True),
    "overlap_p2p_comm": st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
    "overlap_tp_comm": st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
    "overlap_param_gather": st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
    "fp8_params": st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
    "dtype": st.lists(st.sampled_from(["bf16", "fp8"]), min_size=1, max_size=2, unique=True),
}


@st.composite
def train_studies(draw):
    knobs = draw(st.lists(st.sampled_from(sorted(TRAIN_SPACE)), min_size=3, max_size=7, unique=True))
    space = {name: draw(TRAIN_SPACE[name]) for name in knobs}
    if draw(st.booleans()):
        space["dp"] = draw(st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=2, unique=True))
    if draw(st.booleans()):
        space["model.layers"] = draw(st.lists(st.sampled_from([30, 32]), min_size=1, max_size=2, unique=True))
    model = draw(st.sampled_from(["llama3.1-8b", "mixtral-8x7b"]))
    gpus = draw(st.sampled_from([8, 16, 24]))
    batch = draw(st.sampled_from([24, 64]))
    return {"model": model, "hardware": "h100-sxm5-80gb", "gpus": gpus, "workload": {"mode": "train", "global_batch": batch, "seq": 4096},
            "space": space}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(train_studies())
def test_array_planning_equals_the_per_point_path_on_random_training_spaces(write_study, drawn):
    study = load_study(write_study(**{k: v for k, v in drawn.items() if k != "space"}, space=drawn["space"]))
    assert_same_plan(study)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.fixed_dictionaries({
    "tp": st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3, unique=True),
    "cp": st.lists(st.sampled_from([1, 2]), min_size=1, max_size=2, unique=True),
    "zero": st.lists(st.sampled_from([0, 1]), min_size=1, max_size=2, unique=True),
    "micro_batch": st.lists(st.sampled_from([1, 2]), min_size=1, max_size=2, unique=True),
    "recompute": st.lists(st.sampled_from(["none", "full"]), min_size=1, max_size=2, unique=True),
    "sp": st.sampled_from(["auto", [True, False]]),
}))
def test_array_planning_equals_the_per_point_path_in_inference(write_study, space):
    study = load_study(write_study(workload={"mode": "infer", "batch": 8, "prompt": 1024, "decode": 128},
                                   space={"pp": [1, 2], **space}, drop=()))
    assert_same_plan(study)


def test_the_small_study_plans_alike_in_chunks_of_any_size(write_study):
    study = load_study(write_study())
    whole = GridPlanner(study)
    ids = [i for chunk in whole.chunks(ids=True) for i in chunk.ids]
    pieces = GridPlanner(study)
    assert [i for chunk in pieces.chunks(size=7, ids=True) for i in chunk.ids] == ids
    assert pieces.reasons() == whole.reasons() and pieces.legal == whole.legal == len(ids)
    assert_same_plan(study)


def test_verdicts_gathered_in_any_order_plan_as_the_whole_grid(write_study):
    """The count pass's Verdicts (what workers send back), of 7 combinations each and gathered
    backwards, give the grid's legal count and reasons; the points picked from them (in
    dispatch order) are the chunks' points, with their ids."""
    study = load_study(write_study())
    whole = GridPlanner(study)
    ids = sorted(i for chunk in whole.chunks(ids=True) for i in chunk.ids)
    pieces = GridPlanner(study)
    verdicts = [pieces.verdict(part) for part in pieces.ranges(size=7)]
    for verdict in reversed(verdicts):
        pieces.add(verdict)
    assert pieces.legal == whole.legal == len(ids)
    assert list(pieces.reasons()[0].items()) == list(whole.reasons()[0].items())  # counts, in the order shown
    assert pieces.reasons()[1] == whole.reasons()[1]
    picked = [i for v in verdicts for i in pieces.block(pieces.picked(v.numbers())).ids]
    assert sorted(picked) == ids


def test_a_block_skips_the_ids_a_table_holds(write_study):
    study = load_study(write_study())
    grid = GridPlanner(study)
    chunk = next(grid.chunks(ids=True))
    held = DoneIds(chunk.ids[::3])
    assert len(held) == len(chunk.ids[::3])
    assert sorted(grid.block(chunk, held).ids) == sorted(set(chunk.ids) - set(chunk.ids[::3]))


def test_a_space_without_a_legal_point_is_refused_as_before(write_study):
    study = load_study(write_study(gpus=48, space={"tp": [3, 5], "pp": [1], "cp": [1]}))
    with pytest.raises(SpecError) as raised:
        plan_study(study)
    assert "no legal layout" in str(raised.value)


def comparable(folder):
    table = read_results(folder)
    return table.drop_columns(["eval_time_s"]).replace_schema_metadata(None)


def test_a_run_planned_in_small_chunks_and_resumed_writes_the_one_shot_table(write_study, monkeypatch):
    one_shot = load_study(write_study(name="one-shot"))
    run_study(one_shot, executor="inprocess", progress=False)
    chunked = load_study(write_study(name="chunked"))
    monkeypatch.setattr(grid_module, "CHUNK_COMBINATIONS", 7)
    first = run_study(chunked, executor="inprocess", batch_points=16, progress=False, part_rows=32)
    for part in part_files(chunked.output)[::2]:  # lose every other part, as a killed run loses the unwritten
        part.unlink()
    (chunked.output / "_finished.json").unlink()
    again = run_study(chunked, executor="inprocess", batch_points=16, progress=False)
    assert first.evaluated == first.legal and again.skipped + again.evaluated == again.legal == first.legal
    assert 0 < again.evaluated < first.evaluated
    assert comparable(chunked.output).equals(comparable(one_shot.output))


def test_a_grid_above_the_limit_needs_yes(write_study, capsys):
    huge = {"micro_batch": list(range(1, 101)), "virtual_stages": list(range(1, 101)),
            "first_stage_layers": list(range(100)), "last_stage_layers": list(range(100)), "tp": [1, 2]}
    path = write_study(space=huge)
    assert main(["sweep", str(path), "--dry-run", "--json"]) == 2
    err = capsys.readouterr().err
    # 100**4 * tp 2 * the small study's pp 3, cp 2, zero 2, recompute 2 and bandwidth 2
    assert err.count("\n") == 1 and "9,600,000,000 combinations" in err and "--yes" in err


def test_the_masks_have_one_rule_per_reason_check_layout_gives():
    """A rule added to check_layout without its mask (core/model/layout_masks.py) fails here."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(check_layout)))
    reasons = [node for node in ast.walk(tree) if isinstance(node, ast.Return)
               and not (isinstance(node.value, ast.Constant) and node.value.value is None)]
    assert len(reasons) == len(REASON_INPUTS)
