"""Compaction: many small parts become a few of a sensible size, with the same rows, columns,
metadata and order, and a kill at any step leaves a table with every row exactly once. A
finished study's re-run answers from its record without planning."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pyarrow as pa
import pytest

from sweep.cli import main
from sweep.execution.engine import PART_ROWS, run_study
from sweep.search.loop import run_search
from sweep.search.storage import reader_storage
from sweep.store.parts import ResultStore, part_files, read_metadata, read_results
from sweep.study.loader import load_study
from killing import sigkill_after_parts

REPO = Path(__file__).resolve().parents[1]
RAPID = [sys.executable, "-m", "sweep.cli"]
METADATA = {"study": "name: tiny", "definition": json.dumps({"model": "abc", "spec_knobs": [], "variants": {}})}
SPACE = {"tp": [1, 2, 4], "pp": [1, 2], "cp": [1], "zero": [0, 1], "micro_batch": [1, 2],
         "recompute": ["none", "full"], "hardware.gpu.hbm.bandwidth": ["2039 GB/s"]}


def write_trial_parts(folder: Path, parts: int, rows: int) -> None:
    """`parts` parts of `rows` rows each, as a search's rounds write them: point ids repeat
    across rounds (two trials on one point) and later rounds add a breakdown column."""
    with ResultStore(folder, METADATA) as store:
        for part in range(parts):
            trials = range(part * rows, (part + 1) * rows)
            columns = {"point_id": [f"p{t * 7 % 97:03d}" for t in trials], "trial_number": list(trials),
                       "step_time_s": [float(t) for t in trials]}
            if part % 2:
                columns["breakdown_comm_ib_s"] = [0.5] * rows
            store.write_part([pa.table(columns)])


def raw_parts(folder: Path) -> list:
    return sorted(folder.glob("part-*.parquet"))


def test_ten_thousand_trials_in_tiny_parts_compact_into_one_part_with_the_same_table(tmp_path):
    write_trial_parts(tmp_path, parts=500, rows=20)
    before, metadata = read_results(tmp_path), read_metadata(tmp_path)
    with ResultStore(tmp_path, METADATA) as store:
        store.compact(PART_ROWS)
    assert len(part_files(tmp_path)) == len(raw_parts(tmp_path)) == 1  # acceptance: <= 20
    after = read_results(tmp_path)
    assert after.num_rows == 10_000 and after.equals(before)  # rows, columns, order (ties too)
    assert after.schema.metadata == before.schema.metadata and read_metadata(tmp_path) == metadata


def test_runs_of_small_parts_merge_up_to_the_row_limit_and_a_large_part_stays(tmp_path):
    with ResultStore(tmp_path, METADATA) as store:
        for start, rows in ((0, 30), (30, 5), (35, 5), (40, 5), (45, 30), (75, 5)):
            store.write_part([pa.table({"point_id": [f"p{i:03d}" for i in range(start, start + rows)]})])
        large = raw_parts(tmp_path)[0].stat().st_mtime_ns
        store.compact(20)
    assert [p.name for p in raw_parts(tmp_path)] == ["part-000000.parquet", "part-000003.parquet",
                                                     "part-000004.parquet", "part-000005.parquet"]
    assert raw_parts(tmp_path)[0].stat().st_mtime_ns == large  # not rewritten
    assert read_results(tmp_path).column("point_id").to_pylist() == [f"p{i:03d}" for i in range(80)]


KILL_AT = {
    # the merged part half written under its temporary name
    "writing": "real = parts.pq.write_table\n"
               "def write(table, where, **kw):\n"
               "    real(table, where, **kw); Path(where).write_bytes(Path(where).read_bytes()[:100]); die()\n"
               "parts.pq.write_table = write",
    # written and synced, not yet renamed in
    "renaming": "parts.os.replace = lambda *a: die()",
    # renamed over the run's last part, none of the others removed
    "removing": "Path.unlink = lambda self, *a, **k: die()",
    # one of the replaced parts removed, the rest left
    "removed one": "real = Path.unlink\nPath.unlink = lambda self, *a, **k: (real(self, *a, **k), die())",
}


@pytest.mark.parametrize("step", KILL_AT)
def test_a_kill_at_any_step_of_a_compaction_loses_and_repeats_no_row(tmp_path, step):
    write_trial_parts(tmp_path, parts=12, rows=10)
    with ResultStore(tmp_path, METADATA) as store:
        store.harmonise()  # so the kill lands in the merge, not in harmonising
    before = read_results(tmp_path)
    script = ("import os, signal, sys\nfrom pathlib import Path\nimport sweep.store.parts as parts\n"
              "def die(): os.kill(os.getpid(), signal.SIGKILL)\n"
              f"store = parts.ResultStore(Path(sys.argv[1]), {{}})\n{KILL_AT[step]}\nstore.compact(1000)\n")
    killed = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert raw_parts(tmp_path) != part_files(tmp_path) or list(tmp_path.glob(".*.tmp"))  # it left something
    assert read_results(tmp_path).equals(before)  # a reader sees every row once, whatever was left
    ResultStore(tmp_path, METADATA).close()  # the next writer removes what the kill left
    assert raw_parts(tmp_path) == part_files(tmp_path) and not list(tmp_path.glob(".*.tmp"))
    assert read_results(tmp_path).equals(before)
    with ResultStore(tmp_path, METADATA) as store:
        store.compact(1000)
    assert len(raw_parts(tmp_path)) == 1 and read_results(tmp_path).equals(before)


def test_a_compacted_study_resumes_and_adds_rows(write_study, capsys):
    path = write_study(name="grown", gpus=8, space=SPACE)
    first = run_study(load_study(path), executor="inprocess", part_rows=3, progress=False)
    output = load_study(path).output
    assert first.parts == len(part_files(output)) > 3
    assert main(["sweep", str(path), "--compact", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["rows"], summary["parts_before"], summary["parts_after"]) == (first.evaluated, first.parts, 1)

    grown = load_study(write_study(name="grown", gpus=8, space={**SPACE, "zero": [0, 1, 2]}))
    again = run_study(grown, executor="inprocess", progress=False)
    assert again.skipped == first.evaluated and again.evaluated > 0
    one_shot = load_study(write_study(name="one-shot", gpus=8, space={**SPACE, "zero": [0, 1, 2]}))
    run_study(one_shot, executor="inprocess", progress=False)
    resumed = read_results(grown.output).drop_columns(["eval_time_s"])
    assert resumed.equals(read_results(one_shot.output).drop_columns(["eval_time_s"]))


def test_compact_without_a_table_says_so(write_study, capsys):
    assert main(["sweep", str(write_study(name="nothing", gpus=8, space=SPACE)), "--compact"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no results table to compact" in err


def test_a_chunked_compacted_killed_and_resumed_study_equals_a_one_shot_local_run(write_study):
    space = {**SPACE, "zero": [0, 1, 2, 3], "micro_batch": [1, 2, 4]}
    path = write_study(name="chunked", gpus=8, space=space)
    chunked = RAPID + ["sweep", str(path), "--local", "--workers", "1", "--batch-points", "3", "--part-rows", "6",
                       "--quiet"]
    sigkill_after_parts(chunked, load_study(path).output, 4)
    assert subprocess.run(RAPID + ["sweep", str(path), "--compact", "--quiet"], capture_output=True).returncode == 0
    assert subprocess.run(chunked, capture_output=True).returncode == 0
    one_shot = write_study(name="one-shot", gpus=8, space=space)
    assert subprocess.run(RAPID + ["sweep", str(one_shot), "--local", "--quiet"], capture_output=True).returncode == 0
    table = read_results(load_study(path).output).drop_columns(["eval_time_s"])
    assert len(set(table.column("point_id").to_pylist())) == table.num_rows
    assert table.equals(read_results(load_study(one_shot).output).drop_columns(["eval_time_s"]))


def test_a_search_ends_with_its_rounds_compacted_and_resumes_from_them(write_study):
    search = {"sampler": "random", "trials": 20, "parallel": 2, "seed": 0}
    study = load_study(write_study(name="rounds", gpus=8, space=SPACE, search=search))
    report = run_search(study, executor="inprocess", progress=False)
    assert report.parts > 1 and len(part_files(study.output)) == 1
    longer = load_study(write_study(name="rounds", gpus=8, space=SPACE, search={**search, "trials": 30}))
    again = run_search(longer, executor="inprocess", progress=False)
    assert (again.before, again.trials) == (20, 30) and len(part_files(study.output)) == 1
    trials = optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).get_trials()
    rows = read_results(study.output).column("trial_number").to_pylist()
    told = [t.number for t in trials if "illegal_reason" not in t.user_attrs]
    assert sorted(rows) == sorted(told) and len(trials) == 30


def test_a_finished_study_reruns_from_its_record_without_planning(write_study, monkeypatch):
    import sweep.execution.engine as engine

    path = write_study(name="finished", gpus=8, space=SPACE)
    first = run_study(load_study(path), executor="inprocess", part_rows=10, progress=False)
    monkeypatch.setattr(engine, "plan_study", lambda study: pytest.fail("a finished study was planned again"))
    again = run_study(load_study(path), executor="inprocess", progress=False)
    assert (again.evaluated, again.skipped, again.legal) == (0, first.evaluated, first.legal)
    assert (again.plan.total, again.plan.illegal, again.plan.illegal_examples) == \
        (first.plan.total, first.plan.illegal, first.plan.illegal_examples)

    monkeypatch.undo()  # a part gone, or the study edited: the record no longer answers
    part_files(load_study(path).output)[-1].unlink()
    assert run_study(load_study(path), executor="inprocess", progress=False).evaluated > 0
    grown = run_study(load_study(write_study(name="finished", gpus=8, space={**SPACE, "zero": [0, 1, 2]})),
                      executor="inprocess", progress=False)
    assert grown.skipped == first.evaluated and grown.evaluated > 0
