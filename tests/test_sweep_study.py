"""Study files: what a valid one resolves to, and one-line errors for malformed ones."""
import pytest

from sweep.cli import main
from sweep.study.space import AUTO
from sweep.study.loader import load_study

MALFORMED = {
    "unknown key": ({"speed": 3}, "speed", "3"),
    "bad unit": ({"space": {"hardware.gpu.hbm.bandwidth": ["2039 GB/h"]}}, "space.hardware.gpu.hbm.bandwidth", "2039 GB/h"),
    "empty grid": ({"space": {"tp": []}}, "space.tp", "[]"),
    "impossible gpus": ({"gpus": 7}, "gpus", "7"),
    "negative gpus": ({"gpus": -4}, "gpus", "-4"),
    "unknown model preset": ({"model": "llama9-1t"}, "model", "llama9-1t"),
    "unknown hardware preset": ({"hardware": "b300"}, "hardware", "b300"),
    "unknown knob": ({"space": {"tpp": [1]}}, "space.tpp", "[1]"),
    "unknown hardware field": ({"space": {"hardware.gpu.hbm.bandwith": ["1 TB/s"]}}, "space.hardware.gpu.hbm.bandwith", "1 TB/s"),
    "bad recompute": ({"space": {"recompute": ["sometimes"]}}, "space.recompute", "sometimes"),
    "duplicate value": ({"space": {"tp": [2, 2]}}, "space.tp", "[2, 2]"),
    "derived tp": ({"space": {"tp": "auto"}}, "space.tp", "auto"),
    "bad workload mode": ({"workload": {"mode": "simulate"}}, "workload.mode", "simulate"),
    "missing seq": ({"workload": {"mode": "train", "global_batch": 64}}, "workload.seq", "<missing>"),
    "bad backend": ({"backend": "ns3"}, "backend", "ns3"),
    "override without prefix": ({"overrides": {"gpu.hbm.bandwidth": "1 TB/s"}}, "overrides.gpu.hbm.bandwidth", "1 TB/s"),
    "bad override unit": ({"overrides": {"hardware.gpu.hbm.capacity": "80 parsecs"}}, "overrides.hardware.gpu.hbm.capacity", "80 parsecs"),
    "bad name": ({"name": "my study/1"}, "name", "my study/1"),
}


def test_valid_study_resolves_defaults_and_derived_knobs(write_study):
    study = load_study(write_study())
    space = study.space.choices()
    assert space["tp"] == (1, 2, 4, 8) and space["dp"] == (AUTO,) and space["schedule"] == ("1f1b",)
    assert study.mode == "train" and study.workload.global_batch == 64
    assert study.hardware_spec((("gpu.hbm.bandwidth", "1555 GB/s"),)).gpu.hbm.bandwidth_bps == 1555e9


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_study_gets_one_line_error_and_writes_nothing(kind, write_study, tmp_path, capsys):
    changes, field, value = MALFORMED[kind]
    path = write_study(**changes)
    assert main(["sweep", str(path), "--local", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rapid sweep: error: ")
    assert str(path) in err and f"'{field}'" in err and value in err
    assert "Traceback" not in err
    assert not (tmp_path / "results").exists()


def test_study_that_is_not_yaml(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("name: [unclosed\n")
    assert main(["sweep", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not valid YAML" in err


def test_missing_study_file(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nope.yaml")]) == 2
    assert "no such study file" in capsys.readouterr().err
