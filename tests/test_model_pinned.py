"""The model's numbers cannot move silently: a fixed set of configurations is pinned with
the MODEL_VERSION it was recorded under (point ids include that version, so a bump is what
makes resumed tables recompute)."""
import importlib.util
import json
from pathlib import Path

import pytest

import core

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "pin_model_outputs.py"
HOW = ("if the change is deliberate: bump MODEL_VERSION in core/version.py, then run "
       "`.venv/bin/python scripts/pin_model_outputs.py` and commit both")


def pinning():
    spec = importlib.util.spec_from_file_location("pin_model_outputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_outputs_match_the_fixture_of_this_model_version():
    module = pinning()
    pinned = json.loads(module.FIXTURE.read_text())
    assert pinned["model_version"] == core.MODEL_VERSION, (
        f"the fixture was recorded under MODEL_VERSION {pinned['model_version']}, the code is "
        f"{core.MODEL_VERSION}: run `.venv/bin/python scripts/pin_model_outputs.py` and commit the fixture")
    now = module.outputs()
    assert set(now) == set(pinned["outputs"]), f"the pinned cases changed: {HOW}"
    for name, metrics in pinned["outputs"].items():
        for key, value in metrics.items():
            moved = now[name][key] != pytest.approx(value, rel=1e-9) if value is not None else now[name][key] is not None
            assert not moved, (f"{name}.{key} moved from {value} to {now[name][key]} while MODEL_VERSION stayed "
                               f"{core.MODEL_VERSION}: {HOW}")
