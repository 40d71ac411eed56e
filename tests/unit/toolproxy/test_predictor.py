"""The running-mean tool duration predictor."""

from __future__ import annotations

import pytest

from agentserve.toolproxy.predictor import ToolDurationPredictor, ToolStats

pytestmark = pytest.mark.unit


def test_running_mean_per_tool():
    predictor = ToolDurationPredictor(default_s=5.0)
    assert predictor.predict("search") == 5.0
    for duration in (1.0, 2.0, 6.0):
        predictor.observe("search", duration)
    predictor.observe("fetch", 11.0)
    assert predictor.predict("search") == pytest.approx(3.0)
    assert predictor.predict("fetch") == 11.0
    assert predictor.stats("search") == ToolStats(3, pytest.approx(3.0))


def test_unseen_tool_borrows_the_mean_of_all_tools():
    predictor = ToolDurationPredictor(default_s=5.0)
    predictor.observe("a", 1.0)
    predictor.observe("b", 3.0)
    assert predictor.predict("new") == 2.0
    assert predictor.stats("new") == ToolStats(0, 0.0)


@pytest.mark.parametrize("duration", [-1.0, float("inf"), float("nan")])
def test_bad_observations_are_rejected(duration):
    with pytest.raises(ValueError, match="duration_s"):
        ToolDurationPredictor().observe("a", duration)


def test_bad_default():
    with pytest.raises(ValueError, match="default_s"):
        ToolDurationPredictor(default_s=-1)
