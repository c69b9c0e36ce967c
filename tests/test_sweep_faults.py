"""Monte Carlo link-fault and straggler studies: the replay reused per sample, the rows
a faults study writes, its determinism and resume, and its validation."""
import subprocess
import sys

import numpy as np
import pyarrow.compute as pc
import pytest
import yaml

import core
from core.replay.faults import FaultReplay, Unroutable
from core.replay.network import astra_dims
from core import SpecError
from sweep.cli import main
from sweep.execution.engine import run_study
from sweep.faults.summary import fault_aggregates, faults_summary
from sweep.faults.draws import fault_blocks
from sweep.store.parts import read_results
from sweep.study.loader import load_study
from killing import sigkill_after_parts

PAIR = [{"name": "pair", "topology": "ring", "size": 2, "link_bandwidth": "50 GB/s", "latency": "1 us"}]
# 8 GPUs: tp over the inner pair, pp over the outer ring of 4 (stage 3 never talks to stage 0)
TWO_LEVEL = [{"name": "inner", "topology": "ring", "size": 2, "link_bandwidth": "100 GB/s", "latency": "1 us"},
             {"name": "outer", "topology": "ring", "size": 4, "link_bandwidth": "25 GB/s", "latency": "1 us"}]
ROOMY = {"gpu.hbm.capacity": "1000 GB"}  # memory is not what these tests are about


def hardware(network):
    return core.load_hardware("a100-sxm4-80gb", {"network": network, **ROOMY})


def fault_study(tmp_path, name="f", faults=None, space=None, gpus=8, network=TWO_LEVEL, **fields):
    study = {"name": name, "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb",
             "overrides": {"hardware.network": network, "hardware.gpu.hbm.capacity": "1000 GB"},
             "gpus": gpus, "workload": {"mode": "train", "global_batch": 8, "seq": 512},
             "space": space or {"tp": [2], "pp": [4]}, "backend": "astra-hierarchical",
             "output": str(tmp_path / "results" / name),
             "faults": {"samples": 4, "seed": 3, **(faults or {})}, **fields}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    return path


def rows(folder):
    return read_results(folder).drop_columns(["eval_time_s"])


def test_a_soft_fault_never_makes_a_step_faster():
    replay = FaultReplay(core.load_model("llama3.1-8b"), hardware(TWO_LEVEL), core.Parallelism(tp=2, pp=2, dp=2),
                         core.TrainWorkload(8, 512), 8, "astra-hierarchical")
    rng = np.random.default_rng(0)
    for _ in range(6):
        links = [replay.links[i] for i in rng.choice(len(replay.links), 2, replace=False)]
        factors = {(link.a, link.b): float(rng.uniform(0.2, 1.0)) for link in links}
        assert replay.run(factors, {}) >= replay.baseline_s


def test_a_fault_on_the_link_a_pipeline_transfer_crosses_costs_the_closed_form():
    """Two stages on two GPUs, one micro-batch: the activation goes over the link and the
    gradient comes back, each taking bytes / (bandwidth * factor) instead of bytes / bandwidth."""
    hw = hardware(PAIR)
    replay = FaultReplay(core.load_model("llama3.1-8b"), hw, core.Parallelism(pp=2), core.TrainWorkload(1, 512), 2,
                         "astra-hierarchical")
    bandwidth = astra_dims(hw, 2)[0].bandwidth_gbps * 1e9
    transfer_s = replay.step.message_bytes / bandwidth
    factor = 0.3
    expected = (replay.baseline_s + 2 * transfer_s * (1 / factor - 1)) / replay.baseline_s
    assert replay.run({(0, 1): factor}, {}) / replay.baseline_s == pytest.approx(expected, rel=1e-9)
    with pytest.raises(Unroutable):
        replay.run({(0, 1): 0.0}, {})


def test_a_fault_on_a_link_no_flow_uses_is_answered_from_the_baseline(tmp_path):
    # NPUs 0 and 6 sit on stages 0 and 3, which never exchange anything
    study = load_study(fault_study(tmp_path, faults={"links": [[0, 6]], "factor": [0.25]}))
    run_study(study, executor="inprocess", progress=False)
    table = rows(study.output)
    faulted = table.filter(pc.greater(table.column("fault_sample"), 0))
    assert faulted.column("fault_links").to_pylist() == [["0-6"]] * 4
    assert faulted.column("slowdown").to_pylist() == [1.0] * 4
    assert faulted.column("fault_replayed").to_pylist() == [False] * 4


def test_a_hard_fault_with_no_detour_gives_a_row_with_a_reason(tmp_path):
    study = load_study(fault_study(tmp_path, gpus=2, network=PAIR, space={"pp": [2]},
                                   faults={"samples": 2, "hard": 1.0}))
    run_study(study, executor="inprocess", progress=False)
    table = rows(study.output).to_pylist()
    assert [r["fault_sample"] for r in table] == [0, 1, 2]
    assert table[0]["fault_reason"] is None and table[0]["slowdown"] == 1.0
    for row in table[1:]:
        assert row["fault_factors"] == [0.0] and row["fault_links"] == ["0-1"]
        assert row["step_time_s"] is None and row["slowdown"] is None
        assert row["fault_reason"].startswith("no route")


@pytest.mark.parametrize("change", [{"seed": 4}, {"factor": [0.01]}, {"count": 2}, {"links": ["outer"]}])
def test_other_fault_settings_are_refused_on_a_table_of_the_old_ones(tmp_path, change):
    run_study(load_study(fault_study(tmp_path, "same", faults={"samples": 1})), executor="inprocess", progress=False)
    with pytest.raises(SpecError, match=r"another study definition \(faults changed\)"):
        run_study(load_study(fault_study(tmp_path, "same", faults={"samples": 1, **change})),
                  executor="inprocess", progress=False)


def test_a_grid_study_and_a_faults_study_do_not_share_a_table(tmp_path):
    run_study(load_study(fault_study(tmp_path, "shared", faults={"samples": 1})), executor="inprocess", progress=False)
    grid = yaml.safe_load((tmp_path / "shared.yaml").read_text())
    grid.pop("faults")
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    with pytest.raises(SpecError, match=r"another study definition \(faults changed\)"):
        run_study(load_study(tmp_path / "grid.yaml"), executor="inprocess", progress=False)


def test_points_that_differ_only_in_hardware_meet_the_same_faults(tmp_path):
    study = load_study(fault_study(tmp_path, "paired", space={"tp": [2], "pp": [4],
                                                              "hardware.gpu.hbm.bandwidth": ["2039 GB/s", "1000 GB/s"]}))
    run_study(study, executor="inprocess", progress=False)
    table = rows(study.output).to_pylist()
    draws = {}
    for row in table:
        draws.setdefault(row["hardware_gpu_hbm_bandwidth"], []).append((row["fault_sample"], row["fault_links"], row["fault_factors"]))
    # both columns filled: an earlier test's baseline row of the 2039 GB/s point (same point_id,
    # no bandwidth column) must not be served from the worker's cache
    assert set(draws) == {"2039 GB/s", "1000 GB/s"}
    assert len({r["point_id"] for r in table}) == 2 and sorted(draws["2039 GB/s"]) == sorted(draws["1000 GB/s"])
    assert sum(1 for _, links, _ in draws["1000 GB/s"] if links) == 4  # every sample but the baseline has a fault


def test_faults_are_drawn_per_layout_by_the_fields_it_sets():
    from sweep.faults.draws import layout_text
    from sweep.study.plan import PARALLELISM_FIELDS

    layout = core.Parallelism(tp=2, pp=4, zero=1, sp=False, overlap_grad_reduce=False, overlap_param_gather=False)
    assert layout_text(tuple(getattr(layout, f) for f in PARALLELISM_FIELDS)) == '{"pp": 4, "tp": 2, "zero": 1}'


def test_two_layouts_of_one_study_meet_different_faults(tmp_path):
    study = load_study(fault_study(tmp_path, "apart", space={"tp": [2], "pp": [2, 4]}))
    run_study(study, executor="inprocess", progress=False)
    draws = {}
    for row in rows(study.output).to_pylist():
        draws.setdefault(row["pp"], []).append((row["fault_sample"], row["fault_links"], row["fault_factors"]))
    assert sorted(draws[2]) != sorted(draws[4])


def test_same_seed_same_table_and_more_samples_extend_it(tmp_path):
    space = {"tp": [2], "pp": [2, 4]}
    stragglers = {"count": 1, "factor": {"uniform": [0.7, 0.9]}}
    first = load_study(fault_study(tmp_path, "a", space=space, faults={"samples": 3, "stragglers": stragglers}))
    again = load_study(fault_study(tmp_path, "b", space=space, faults={"samples": 3, "stragglers": stragglers}))
    for study in (first, again):
        run_study(study, executor="inprocess", progress=False)
    assert rows(first.output).equals(rows(again.output))
    three = rows(first.output)
    more = load_study(fault_study(tmp_path, "a", space=space, faults={"samples": 6, "stragglers": stragglers}))
    run_study(more, executor="inprocess", progress=False)
    six = rows(more.output)
    assert six.num_rows == 2 * 7
    assert six.filter(pc.less_equal(six.column("fault_sample"), 3)).equals(three)
    assert all(s >= 1.0 for s in six.column("slowdown").to_pylist())


@pytest.mark.parametrize("faults, field", [
    ({"samples": 0}, "faults.samples"),
    ({"seed": -1}, "faults.seed"),
    ({"links": "some"}, "faults.links"),
    ({"links": ["nvlink"]}, "faults.links"),
    ({"links": [[0, 99]]}, "faults.links"),
    ({"links": [[0, 3]]}, "faults.links"),
    ({"count": -1}, "faults.count"),
    ({"count": 10**9}, "faults.count"),
    ({"stragglers": {"count": 10**9}}, "faults.stragglers.count"),
    ({"count": {"poisson": -2}}, "faults.count.poisson"),
    ({"factor": {"normal": {"mean": 0.5}}}, "faults.factor.normal"),
    ({"factor": {"uniform": [0.9, 0.1]}}, "faults.factor.uniform"),
    ({"factor": [1.5]}, "faults.factor"),
    ({"hard": 2}, "faults.hard"),
    ({"stragglers": {"count": -1}}, "faults.stragglers.count"),
    ({"stragglers": {"slow": 1}}, "faults.stragglers.slow"),
    ({"links_all": True}, "faults.links_all"),
])
def test_a_malformed_faults_field_is_one_line_naming_it(tmp_path, faults, field):
    with pytest.raises(core.SpecError) as err:
        load_study(fault_study(tmp_path, faults=faults))
    assert err.value.field == field and "\n" not in str(err.value)


def test_a_faults_study_needs_an_astra_backend_and_nothing_is_written(tmp_path, capsys):
    path = fault_study(tmp_path, backend="analytical")
    assert main(["sweep", str(path), "--local"]) == 2
    assert "backend" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_a_faults_study_on_ray_matches_the_in_process_table(tmp_path):
    local = load_study(fault_study(tmp_path, "here"))
    remote = load_study(fault_study(tmp_path, "ray"))
    run_study(local, executor="inprocess", progress=False)
    run_study(remote, executor="ray", workers=2, progress=False)
    assert rows(remote.output).equals(rows(local.output))


def test_sigkill_midway_then_rerun_gives_the_uninterrupted_fault_table(tmp_path):
    space = {"tp": [1, 2], "pp": [2, 4]}
    killed = load_study(fault_study(tmp_path, "killed", space=space, faults={"samples": 200}))
    reference = load_study(fault_study(tmp_path, "reference", space=space, faults={"samples": 200}))
    command = [sys.executable, "-m", "sweep.cli", "sweep", killed.path, "--local", "--workers", "1",
               "--batch-points", "1", "--part-rows", "10", "--quiet"]
    sigkill_after_parts(command, killed.output, 3)
    partial = read_results(killed.output).num_rows
    assert 0 < partial < 4 * 201
    rerun = subprocess.run(command, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    run_study(reference, executor="inprocess", progress=False)
    assert rows(killed.output).equals(rows(reference.output))


def test_the_faults_summary_ranks_points_by_their_tail(tmp_path, capsys):
    study = load_study(fault_study(tmp_path, space={"tp": [1, 2], "pp": [2]}, faults={"samples": 6}))
    run_study(study, executor="inprocess", progress=False)
    table = read_results(study.output)
    aggregates = fault_aggregates(table)
    assert sorted(aggregates) == sorted(set(table.column("point_id").to_pylist()))
    for stats in aggregates.values():
        assert 1.0 <= stats["slowdown_p50"] <= stats["slowdown_p95"] <= stats["slowdown_max"]
    assert fault_aggregates(table.to_pylist()) == aggregates
    summary = faults_summary(table, ["tp"])
    assert summary.column("slowdown_p95").to_pylist() == sorted((s["slowdown_p95"] for s in aggregates.values()),
                                                               reverse=True)
    assert main(["query", str(study.output), "--faults-summary"]) == 0
    assert "slowdown_p95" in capsys.readouterr().out


def test_work_is_the_missing_samples_in_near_equal_blocks(tmp_path):
    spec = load_study(fault_study(tmp_path, faults={"samples": 100})).faults
    point = type("Point", (), {"point_id": "p"})()
    spans = lambda done, fits=True: [(b.start, b.stop) for b in fault_blocks([point], spec, done, lambda _: fits)]
    assert spans(set()) == [(0, 34), (34, 68), (68, 101)]
    assert spans({("p", i) for i in range(30)} | {("p", 60)}) == [(30, 60), (61, 101)]
    assert spans(set(), fits=False) == [(0, 1)]  # a point that does not fit: its baseline row only
    assert spans({("p", i) for i in range(101)}) == []


def test_the_faults_summary_honours_where_by_top_and_columns(tmp_path, capsys):
    """--where picks the points summarised and --by/--top/--columns shape the summary, rather
    than being dropped silently."""
    study = load_study(fault_study(tmp_path, space={"tp": [1, 2], "pp": [2]}, faults={"samples": 4}))
    run_study(study, executor="inprocess", progress=False)
    table = read_results(study.output)
    tp2 = {r["point_id"] for r in table.to_pylist() if r["tp"] == 2}
    argv = ["query", str(study.output), "--faults-summary", "--format", "csv"]
    assert main(argv + ["--where", "tp = 2", "--columns", "point_id", "slowdown_max"]) == 0
    lines = capsys.readouterr().out.split()
    assert lines[0] == "point_id,slowdown_max" and {line.split(",")[0] for line in lines[1:]} == tp2
    assert main(argv + ["--by", "baseline_step_s", "--top", "1", "--columns", "baseline_step_s"]) == 0
    fastest = min(r["step_time_s"] for r in table.to_pylist() if r["fault_sample"] == 0)
    assert float(capsys.readouterr().out.split()[1]) == pytest.approx(fastest)
    assert main(argv + ["--where", "tp = 3"]) == 2
    assert "no row matches" in capsys.readouterr().err


def test_a_fault_study_is_cut_in_fault_blocks_about_eight_batches_a_worker(tmp_path):
    """Four layouts of 20 samples each are four blocks of 21 rows (the baseline with them): one
    worker gets them one block a batch, so a part of at most one row per batch is written per block."""
    path = fault_study(tmp_path, space={"tp": [1, 2], "pp": [2, 4]}, faults={"samples": 20})
    report = run_study(load_study(path), executor="inprocess", progress=False, part_rows=1)
    assert (report.evaluated, report.parts) == (4 * 21, 4)
