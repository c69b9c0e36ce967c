"""The accuracy reached so far, per validation suite: a change that makes any suite's
worst or mean error larger, or turns a verdict that agrees into one that does not, fails
here. Bounds sit just above the figures measured when they were set (see the commit that
set them) and only ever move down."""
import pytest

from core.validation import SUITES, available_suites, summary

# suite: (max |error| %, mean |error| %, verdicts allowed to disagree)
REACHED = {
    "training": (4.0, 2.7, 0),
    "inference": (6.5, 3.3, 0),
    "memory": (9.0, 2.7, 0),
    "h100_dense": (46.5, 9.3, 4),
    "moe": (27.0, 11.7, 1),
    "memory_h100": (21.5, 14.3, 1),
}


@pytest.mark.parametrize("suite", sorted(REACHED))
def test_no_suite_gets_less_accurate(suite):
    if suite not in available_suites():
        pytest.skip(f"{suite}: its data is not here")
    cases, verdicts = SUITES[suite]()
    worst, mean, disagree = REACHED[suite]
    figures = summary(cases)[suite]
    assert figures["max_abs_error_pct"] <= worst
    assert figures["mean_abs_error_pct"] <= mean
    wrong = [v.case for v in verdicts if v.expected_feasible != v.predicted_feasible]
    assert len(wrong) <= disagree, wrong
