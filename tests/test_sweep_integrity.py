"""A results folder that cannot be wrong quietly: one writer at a time, temporaries only
removed when their writer is gone, unreadable or foreign parts named, and rows of another
study definition (an edited hardware file, an edited workload) never mixed in."""
import json
import os
import re
import shutil
import threading
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from core import SpecError
from core.model.loader import PRESET_DIR
from sweep.cli import main
from sweep.execution.engine import run_study, study_metadata
from sweep.store.parts import ResultStore, part_files, read_results
from sweep.study.loader import load_study

TINY = {"tp": [1, 2], "pp": [1], "cp": [1], "zero": [0], "micro_batch": [1], "recompute": ["none"],
        "hardware.gpu.hbm.bandwidth": ["2039 GB/s"]}


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def tiny(write_study):
    return write_study(name="tiny", gpus=2, space=TINY)


def test_a_second_writer_is_refused_naming_the_holder(tiny, capsys):
    study = load_study(tiny)
    with ResultStore(study.output, study_metadata(study)):
        assert main(["sweep", str(tiny), "--local", "--quiet"]) == 2
    err = one_error_line(capsys)
    assert f"pid {os.getpid()} on host" in err and "--wait" in err
    assert not part_files(study.output)


def test_wait_queues_behind_the_writer_saying_whom_it_waits_for(tiny, capsys):
    study = load_study(tiny)
    holder = ResultStore(study.output, study_metadata(study))
    threading.Timer(0.3, holder.close).start()
    assert run_study(study, executor="inprocess", progress=False, wait=True).evaluated == 2
    assert capsys.readouterr().err == f"waiting for the rapid sweep writing {study.output} (pid {os.getpid()} on host {os.uname().nodename}) to finish\n"


def test_temporaries_of_a_live_writer_stay_and_of_a_dead_one_go(tiny):
    study = load_study(tiny)
    run_study(study, executor="inprocess", progress=False)
    store_dir = Path(study.output)
    live = store_dir / f".part-000007.parquet.{os.uname().nodename.replace('.', '-')}.{os.getpid()}.abc123.tmp"
    dead = store_dir / f".part-000008.parquet.{os.uname().nodename.replace('.', '-')}.999999999.abc123.tmp"
    live.write_bytes(b"being written")
    dead.write_bytes(b"left by a killed run")
    ResultStore(study.output, study_metadata(study)).close()
    assert live.exists() and not dead.exists()


def test_parts_get_unique_temporary_names(tiny, monkeypatch):
    import sweep.store.parts as store

    names = []
    real = store.pq.write_table
    monkeypatch.setattr(store.pq, "write_table", lambda table, path, **kw: (names.append(Path(path).name), real(table, path, **kw)))
    run_study(load_study(tiny), executor="inprocess", part_rows=1, progress=False)
    assert len(names) == len(set(names)) == 2
    assert all(re.search(rf"\.{os.getpid()}\.[0-9a-f]+\.tmp$", n) for n in names)


def test_a_corrupt_part_is_named_with_the_way_out(tiny, capsys):
    study = load_study(tiny)
    run_study(study, executor="inprocess", progress=False)
    part = part_files(study.output)[0]
    part.write_bytes(part.read_bytes()[:100])  # truncated, as a crashed copy would leave it
    assert main(["sweep", str(tiny), "--local", "--quiet"]) == 2
    err = one_error_line(capsys)
    assert part.name in err and "--fresh" in err
    assert main(["query", str(study.output)]) == 2
    assert part.name in one_error_line(capsys)


def test_a_foreign_parquet_file_is_named_not_read(tiny, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    study = load_study(tiny)
    study.output.mkdir(parents=True)
    pq.write_table(pa.table({"x": [1]}), study.output / "part-000000.parquet")
    assert main(["sweep", str(tiny), "--local", "--quiet"]) == 2
    assert "part-000000.parquet" in one_error_line(capsys)


def test_editing_the_hardware_file_is_refused_not_served_stale(write_study, tmp_path, capsys):
    hardware = tmp_path / "cluster.yaml"
    shutil.copy(PRESET_DIR / "gpus" / "a100-sxm4-80gb.yaml", hardware)
    path = write_study(name="edited-hw", gpus=2, hardware=str(hardware), model="qwen2.5-3b", space=TINY,
                       workload={"mode": "train", "global_batch": 8, "seq": 2048})
    data = yaml.safe_load(path.read_text())
    data["space"].pop("hardware.gpu.hbm.bandwidth")  # the file alone sets the bandwidth
    path.write_text(yaml.safe_dump(data))
    first = run_study(load_study(path), executor="inprocess", progress=False)
    before = read_results(load_study(path).output).column("step_time_s").to_pylist()
    spec = yaml.safe_load(hardware.read_text())
    spec["gpu"]["hbm"]["bandwidth"] = "500 GB/s"
    hardware.write_text(yaml.safe_dump(spec))
    assert main(["sweep", str(path), "--local", "--quiet"]) == 2
    err = one_error_line(capsys)
    assert "another study definition (hardware changed)" in err and "--fresh" in err
    again = run_study(load_study(path), executor="inprocess", fresh=True, progress=False)
    assert again.evaluated == first.evaluated == 2
    after = read_results(load_study(path).output).column("step_time_s").to_pylist()
    assert None not in before and all(a > b for a, b in zip(after, before))


def test_editing_the_workload_is_refused(write_study, capsys):
    path = write_study(name="edited-work", gpus=2, space=TINY)
    run_study(load_study(path), executor="inprocess", progress=False)
    longer = write_study(name="edited-work", gpus=2, space=TINY,
                         workload={"mode": "train", "global_batch": 64, "seq": 2048})
    with pytest.raises(SpecError, match=r"another study definition \(workload changed\)"):
        run_study(load_study(longer), executor="inprocess", progress=False)


def test_a_narrower_space_keeps_the_wider_runs_rows_and_says_so(write_study, capsys):
    wide = write_study(name="narrowed", gpus=2, space=TINY)
    run_study(load_study(wide), executor="inprocess", progress=False)
    narrow = write_study(name="narrowed", gpus=2, space={**TINY, "tp": [1]})
    assert main(["sweep", str(narrow), "--local", "--workers", "1", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "(2 rows, " in out and "1 of those rows are of points outside this study's space" in out


def test_a_search_and_a_grid_do_not_share_a_folder(write_study):
    from sweep.search.loop import run_search

    grid = write_study(name="shared", gpus=2, space=TINY)
    search = write_study(name="shared", gpus=2, space=TINY, search={"trials": 2, "sampler": "random"})
    run_study(load_study(grid), executor="inprocess", progress=False)
    with pytest.raises(SpecError, match="holds a grid's rows, which a search's would mix with"):
        run_search(load_study(search), executor="inprocess", progress=False)
    run_search(load_study(search), executor="inprocess", fresh=True, progress=False)
    with pytest.raises(SpecError, match="holds a search's rows, which a grid's would mix with"):
        run_study(load_study(grid), executor="inprocess", progress=False)


def without_bandwidth_knob(path: Path) -> Path:
    """The study at `path` with no hardware.gpu.hbm.bandwidth knob (the preset's value)."""
    data = yaml.safe_load(path.read_text())
    data["space"].pop("hardware.gpu.hbm.bandwidth")
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_variant_redefined_under_its_name_is_refused_and_a_new_variant_resumes(write_study):
    def run(**variants):
        path = without_bandwidth_knob(write_study(name="variants", gpus=2, space=TINY, variants=variants))
        return run_study(load_study(path), executor="inprocess", progress=False)

    run(base={}, fast={"hardware.gpu.hbm.bandwidth": "4000 GB/s"})
    with pytest.raises(SpecError, match=r"another study definition \(variant 'fast' changed\)"):
        run(base={}, fast={"hardware.gpu.hbm.bandwidth": "1000 GB/s"})
    grown = run(base={}, fast={"hardware.gpu.hbm.bandwidth": "4000 GB/s"}, slow={"hardware.gpu.hbm.bandwidth": "1000 GB/s"})
    assert (grown.skipped, grown.evaluated) == (4, 2)


def test_a_knob_that_sets_a_spec_field_cannot_join_a_table_written_without_it(write_study):
    # the rows already there would have no value in its column, though one of its values is theirs
    narrow = without_bandwidth_knob(write_study(name="knobs", gpus=2, space=TINY))
    run_study(load_study(narrow), executor="inprocess", progress=False)
    wide = write_study(name="knobs", gpus=2, space={**TINY, "hardware.gpu.hbm.bandwidth": ["2039 GB/s", "1555 GB/s"]})
    with pytest.raises(SpecError, match=r"another study definition \(spec_knobs changed\)"):
        run_study(load_study(wide), executor="inprocess", progress=False)


def test_variants_added_to_a_study_without_them_are_refused_and_one_spelled_otherwise_resumes(write_study):
    def run(**variants):
        path = without_bandwidth_knob(write_study(name="respelled", gpus=2, space=TINY, variants=variants))
        data = yaml.safe_load(path.read_text())
        if not variants:
            data.pop("variants")
        path.write_text(yaml.safe_dump(data))
        return run_study(load_study(path), executor="inprocess", progress=False)

    run()
    with pytest.raises(SpecError, match=r"another study definition \(variants changed\)"):
        run(base={}, fast={"hardware.gpu.hbm.bandwidth": "4000 GB/s"})
    run_study(load_study(without_bandwidth_knob(write_study(name="spelled", gpus=2, space=TINY,
                                                            variants={"fast": {"hardware.gpu.hbm.bandwidth": "4000 GB/s"}}))),
              executor="inprocess", progress=False)
    again = run_study(load_study(without_bandwidth_knob(write_study(name="spelled", gpus=2, space=TINY,
                                                                    variants={"fast": {"hardware.gpu.hbm.bandwidth": "4 TB/s"}}))),
                      executor="inprocess", progress=False)
    assert (again.skipped, again.evaluated) == (2, 0)


def test_a_table_written_before_the_definition_held_knobs_and_variants_resumes(write_study):
    study = load_study(write_study(name="legacy", gpus=2, space=TINY))
    run_study(study, executor="inprocess", progress=False)
    part = part_files(study.output)[0]
    table = pq.read_table(part)
    metadata = dict(table.schema.metadata)
    definition = json.loads(metadata[b"rapid.definition"])
    for key in ("spec_knobs", "variants", "faults"):
        definition.pop(key)
    metadata[b"rapid.definition"] = json.dumps(definition, sort_keys=True).encode()
    pq.write_table(table.replace_schema_metadata(metadata), part)
    again = run_study(study, executor="inprocess", progress=False)
    assert (again.skipped, again.evaluated) == (2, 0)


def test_variants_may_override_a_list_valued_field_such_as_the_network(write_study):
    def ring(bandwidth):
        return [{"name": "nvlink", "topology": "switch", "size": 8, "link_bandwidth": bandwidth, "latency": "1 us"},
                {"name": "ib", "topology": "switch", "size": "auto", "link_bandwidth": "200 Gb/s", "latency": "5 us"}]

    path = without_bandwidth_knob(write_study(name="fabrics", gpus=2, space=TINY, model="qwen2.5-3b",
                                              workload={"mode": "train", "global_batch": 8, "seq": 2048}, variants={
        "slow": {"hardware.network": ring("100 GB/s")}, "fast": {"hardware.network": ring("600 GB/s")}}))
    run_study(load_study(path), executor="inprocess", progress=False)
    times = {}
    for row in read_results(load_study(path).output).to_pylist():
        times.setdefault(row["variant"], {})[row["tp"]] = row["step_time_s"]
    assert all(times["fast"][tp] < times["slow"][tp] for tp in (1, 2))  # dp or tp traffic crosses NVLink


def test_a_wider_space_resumes_into_the_same_table(write_study):
    run_study(load_study(write_study(name="grown", gpus=2, space=TINY)), executor="inprocess", progress=False)
    grown = run_study(load_study(write_study(name="grown", gpus=2, space={**TINY, "zero": [0, 1]})),
                      executor="inprocess", progress=False)
    assert (grown.skipped, grown.evaluated) == (2, 2)


def test_output_override_dry_run_and_json_summary(tiny, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    assert main(["sweep", str(tiny), "--output", str(elsewhere), "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert (planned["legal"], planned["illegal"], planned["output"]) == (2, 0, str(elsewhere))
    assert not elsewhere.exists()
    assert main(["sweep", str(tiny), "--output", str(elsewhere), "--local", "--workers", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["evaluated"], summary["rows"]) == (2, 2) and summary["points_per_s"] > 0
    assert len(part_files(elsewhere)) == 1
