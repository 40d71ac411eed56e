"""ToolDurationModel: per-tool quantiles learned online, and where a first estimate comes from."""

from __future__ import annotations

import pytest

from agentserve.scheduler.tool_durations import ToolDurationModel, parse_seeds

pytestmark = pytest.mark.unit


def test_quantiles_of_the_observed_durations_nearest_rank():
    model = ToolDurationModel()
    for seconds in (5.0, 1.0, 3.0, 2.0, 4.0, 10.0, 6.0, 7.0, 8.0, 9.0):
        model.observe("search", seconds)
    assert model.predict("search") == 5.0
    assert model.predict("search", 0.1) == 1.0
    assert model.predict("search", 0.9) == 9.0
    assert model.predict("search", 1.0) == 10.0
    assert model.predict("search", 0.0) == 1.0


def test_the_window_forgets_old_durations():
    model = ToolDurationModel(window=3)
    for seconds in (100.0, 1.0, 2.0, 3.0):
        model.observe("t", seconds)
    assert (model.observations("t"), model.predict("t", 1.0)) == (3, 3.0)


def test_first_estimate_caller_then_history_then_seed_then_proxy_then_default():
    model = ToolDurationModel(seeds={"compile": 30.0}, default_s=2.0)
    assert model.predict("compile", caller_s=4.0, proxy_s=9.0) == 4.0
    assert model.predict("compile", proxy_s=9.0) == 30.0
    assert model.predict("fetch", proxy_s=9.0) == 9.0
    assert model.predict("fetch") == 2.0
    model.observe("compile", 12.0)
    assert model.predict("compile", proxy_s=9.0) == 12.0
    assert model.predict("compile", caller_s=4.0) == 4.0  # the caller knows this call's arguments


def test_parse_seeds():
    assert parse_seeds(" search=2.5, compile=30 ,") == {"search": 2.5, "compile": 30.0}
    assert parse_seeds("") == {}


@pytest.mark.parametrize(
    "text, match",
    [
        ("search", r"^tool_seeds: 'search' is not name=seconds$"),
        ("=3", r"^tool_seeds: '=3' is not name=seconds$"),
        ("search=soon", r"^tool_seeds: search must be a finite number of seconds >= 0, got -1.0$"),
        ("search=inf", r"^tool_seeds: search must be a finite number"),
    ],
)
def test_bad_seeds_name_the_setting(text, match):
    with pytest.raises(ValueError, match=match):
        parse_seeds(text)


def test_bad_inputs():
    with pytest.raises(ValueError, match="^duration_s must be a finite number"):
        ToolDurationModel().observe("t", -1.0)
    with pytest.raises(ValueError, match=r"^quantile must be in \[0, 1\]"):
        ToolDurationModel().predict("t", 1.5)
    with pytest.raises(ValueError, match="^window must be positive"):
        ToolDurationModel(window=0)
