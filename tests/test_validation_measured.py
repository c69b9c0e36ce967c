"""The suite of kernels we measured ourselves: every shipped row is compared, each record
carries the kernel suite's fields, and the arithmetic is the model's own. No accuracy
threshold: the suite reports our errors, it does not judge them."""
import csv
import json

import pytest

from core.model.loader import load_hardware
from core.validation.kernels import kernels_alone
from core.validation.measured import MEASURED_DIR, _pointwise_records, measured_groups
from sweep.cli import main

FIELDS = {"suite", "gpu", "kernel", "dtype", "bucket", "n", "median_error_pct", "mean_abs_error_pct",
          "p90_abs_error_pct"}


def _count(gpu: str, name: str, column: str) -> int:
    with open(MEASURED_DIR / gpu / name, newline="") as handle:
        return sum(1 for row in csv.DictReader(handle) if row.get(column))


def test_every_measured_row_is_compared_once():
    records, skipped = measured_groups()
    assert skipped == []
    assert all(FIELDS <= r.keys() and r["suite"] == "measured" for r in records)
    for gpu in ("h100_sxm", "h200_sxm"):
        mine = [r for r in records if r["gpu"] == gpu]
        assert sum(r["n"] for r in mine if r["kernel"] == "gemm") == _count(gpu, "gemm.csv", "latency_ms")
        assert sum(r["n"] for r in mine if r["kernel"] == "pointwise") == _count(gpu, "pointwise.csv", "latency_ms")
        attention = _count(gpu, "attention.csv", "fwd_ms")
        assert sum(r["n"] for r in mine if r["kernel"].startswith("attention forward")) == attention
        assert sum(r["n"] for r in mine if r["kernel"].startswith("attention backward")) == attention


def test_an_elementwise_row_is_timed_as_bytes_over_the_elementwise_bandwidth():
    hw = kernels_alone(load_hardware("h100-sxm5-80gb"))  # 3350 GB/s at memory_efficiency 1; a 3 us launch
    [(predicted, measured)] = _pointwise_records(hw, [{"op": "copy", "bytes": "3.35e12", "latency_ms": "1250"}]).values()
    assert predicted == [pytest.approx(1.0 + 3e-6)]
    assert measured == [1.25]


def test_a_copy_loop_under_the_limit_is_predicted_at_the_preset_clock():
    """The model keeps a copy below 700 W, so at its 1830 MHz; the H100 held 1980 MHz."""
    records, _ = measured_groups()
    [clock] = [r for r in records if r["gpu"] == "h100_sxm" and r["kernel"] == "sustained SM clock"
               and r["dtype"] == "hbm_copy_1gib"]
    assert clock["median_error_pct"] == pytest.approx(100 * (1830 / 1980 - 1))


def test_validate_prints_the_suite_per_gpu(capsys):
    assert main(["validate", "--suite", "measured"]) == 0
    out = capsys.readouterr().out
    assert "measured on h100_sxm" in out and "measured on h200_sxm" in out
    assert main(["validate", "--suite", "measured", "--json"]) == 0
    groups = json.loads(capsys.readouterr().out)["groups"]
    assert {g["gpu"] for g in groups} == {"h100_sxm", "h200_sxm"}
