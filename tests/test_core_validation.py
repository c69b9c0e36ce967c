"""Acceptance: predictions against the published A100 measurements, and what `rapid validate`
leaves out."""
import json

import pytest

from core.validation.suites import run_all, summary


@pytest.fixture(scope="module")
def results():
    return run_all()


def test_training_within_8_percent(results):
    assert summary(results[0])["training"]["max_abs_error_pct"] <= 8.0


def test_inference_within_10_percent(results):
    assert summary(results[0])["inference"]["max_abs_error_pct"] <= 10.0


def test_every_memory_figure_within_10_percent(results):
    cases = [c for c in results[0] if c.suite == "memory"]
    assert len(cases) == 16
    assert all(abs(c.error_pct) <= 10.0 for c in cases)


def test_feasibility_verdicts_agree_with_reality(results):
    verdicts = results[1]
    assert len(verdicts) == 8 + 11 + 1 + 8
    assert [v.case for v in verdicts if v.expected_feasible != v.predicted_feasible] == []


def test_rapid_validate_says_which_rows_it_leaves_out_and_why(capsys):
    from sweep.cli import main

    assert main(["validate", "--suite", "memory_h100", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    left_out = report["not_counted"]
    assert len(left_out) == 20 and all(row["suite"] == "memory_h100" and row["reason"] for row in left_out)
    assert "MEM-Moonlight16B-none" in {row["case"] for row in left_out}  # MLA: not expressible
    assert main(["validate", "--suite", "memory_h100"]) == 0
    assert "not counted: 20 rows" in capsys.readouterr().out


def test_a_lent_preset_lends_its_calibration_not_its_gpu():
    """scripts/calibrate.py passes one preset per family: H100 rows keep their own 80 GB even
    when the H200 preset (the same factors, 141 GB) is the one lent."""
    from core.model.loader import load_hardware
    from core.validation.suites import published_cases

    own = published_cases("memory_h100")
    lent = published_cases("memory_h100", load_hardware("h200-sxm-141gb"))
    assert [c.predicted for c in lent[0]] == [c.predicted for c in own[0]]
    assert [v.detail for v in lent[1]] == [v.detail for v in own[1]]
