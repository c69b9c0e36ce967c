"""studies/deepseek_v3_256gpu.yaml: DeepSeek-V3 on 256 GPUs swept over tp, pp, ep, etp and its
MTP module on the analytical backend, written whole, resumed exactly after losing parts, and
its bad knobs refused in one line."""
from pathlib import Path

import pyarrow.compute as pc
import pytest
import yaml

from sweep.cli import main
from sweep.execution.engine import run_study
from sweep.store.parts import part_files, read_results
from sweep.study import grid as grid_module
from sweep.study.loader import load_study

STUDY = Path(__file__).resolve().parent.parent / "studies" / "deepseek_v3_256gpu.yaml"


def _copy(tmp_path, name, **space):
    data = yaml.safe_load(STUDY.read_text())
    data.update(name=name, output=str(tmp_path / name))
    data["space"].update(space)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _table(folder):
    return read_results(folder).drop_columns(["eval_time_s"]).replace_schema_metadata(None)


def test_the_study_sweeps_every_axis_and_resumes_to_the_one_shot_table(tmp_path, monkeypatch):
    one_shot = load_study(_copy(tmp_path, "one-shot"))
    report = run_study(one_shot, executor="inprocess", progress=False)
    table = _table(one_shot.output)
    assert report.legal == table.num_rows == 120  # 192 combinations, those with ep x etp dividing dp x tp
    for axis, values in (("tp", {1, 2, 4, 8}), ("pp", {4, 8, 16}), ("ep", {8, 16, 32, 64}), ("etp", {1, 2}),
                         ("model_mtp_layers", {0, 1})):
        assert set(table.column(axis).to_pylist()) == values
    feasible = table.filter(pc.field("feasible"))
    assert feasible.num_rows > 10
    rows = feasible.to_pylist()
    steps = {(r["tp"], r["pp"], r["ep"], r["etp"], r["model_mtp_layers"]): r["step_time_s"] for r in rows}
    paired = [(steps[key[:4] + (1,)], s) for key, s in steps.items() if key[4] == 0 and key[:4] + (1,) in steps]
    assert paired and all(with_mtp > without for with_mtp, without in paired)  # the module costs time

    chunked = load_study(_copy(tmp_path, "chunked"))
    monkeypatch.setattr(grid_module, "CHUNK_COMBINATIONS", 16)
    first = run_study(chunked, executor="inprocess", batch_points=8, progress=False, part_rows=16)
    for part in part_files(chunked.output)[::2]:  # lose every other part, as a killed run loses the unwritten
        part.unlink()
    (chunked.output / "_finished.json").unlink()
    again = run_study(chunked, executor="inprocess", batch_points=8, progress=False)
    assert 0 < again.evaluated < first.evaluated and again.skipped + again.evaluated == first.legal
    assert _table(chunked.output).equals(table)


@pytest.mark.parametrize("knob, value, field", [
    ("model.mtp_layers", [1, -1], "space.model.mtp_layers"),
    ("etp", [1, "two"], "space.etp"),
    ("ep", [8, 0], "space.ep"),
])
def test_a_bad_knob_is_one_line_and_nothing_is_written(tmp_path, capsys, knob, value, field):
    path = _copy(tmp_path, "bad", **{knob: value})
    assert main(["sweep", str(path), "--local", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()
