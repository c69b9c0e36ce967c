"""The calibration search refines more than the best coarse grid point: a minimax landscape
has several basins, and the best one need not hold the best coarse point."""
import sys
from pathlib import Path

import pytest

from core.model.loader import load_hardware

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import calibrate  # noqa: E402


def two_basins(compute_efficiency: float) -> float:
    """Worst error against one factor: 0.30 left, a narrow basin (0.05) between 0.7 and 0.9
    whose edge the coarse point 1.0 sits beside (0.35), 0.90 in between."""
    if compute_efficiency < 0.45:
        return 0.30
    if 0.7 <= compute_efficiency <= 0.9:
        return 0.05
    return 0.35 if compute_efficiency > 0.9 else 0.90


def test_the_basin_beside_a_worse_coarse_point_is_found(monkeypatch):
    monkeypatch.setattr(calibrate, "_score",
                        lambda hw, group, excluded: (two_basins(hw.calibration.compute_efficiency), 0.0))
    group = calibrate.Group("toy", (), lambda case: True, (("compute_efficiency", (0.0, 0.5, 1.0)),))
    fitted = calibrate.fit_group(load_hardware("h100-sxm5-80gb"), group)
    # the coarse best (0.0, worst 0.30) refines to 0.0 or 0.25, still 0.30; the second-best
    # coarse point (1.0, 0.35) refines to 0.75, inside the basin
    assert fitted["compute_efficiency"] == pytest.approx(0.75)


def test_refined_values_agree_whichever_side_they_are_reached_from():
    from_below = calibrate._refine((0.875, 0.9, 0.925), 0.9, 0.6, 1.0)
    from_above = calibrate._refine((0.9, 0.925, 0.95), 0.925, 0.6, 1.0)
    assert from_below[-1] == from_above[0] == 0.9125
