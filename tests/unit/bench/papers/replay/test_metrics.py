"""SLOs and the summary of turn records (first vs later turns, goodput, cache)."""

import pytest

from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord
from agentserve.bench.papers.replay.slo import SLO
from agentserve.bench.papers.replay.summary import summarize

pytestmark = pytest.mark.unit


def _turn(  # noqa: PLR0913 - a test record's fields, keyword defaults
    sid, index, first, ttft, tpot=0.01, n=11, cached=0, prompt=100, expected=None, error=""
):
    r = TurnRecord(
        sid,
        index,
        first,
        sent_s=1.0,
        prompt_tokens=prompt,
        output_tokens=n,
        cached_tokens=cached,
        expected_cached_tokens=cached if expected is None else expected,
        trace_cached_tokens=cached,
        error=error,
        prefill_engine="p0",
        decode_engine="d1",
    )
    if not error:
        r.first_token_s = 1.0 + ttft
        r.second_token_s = r.first_token_s + tpot
        r.last_token_s = r.first_token_s + tpot * (n - 1)
        r.done_s = r.last_token_s
    return r


def test_slo_parsing_and_per_turn_predicate():
    slo = SLO.parse("ttft_p90=2000ms, tpot_p99=0.05s")
    assert slo.bounds_s == (("ttft", 2.0), ("tpot", 0.05)) and slo.attainment == 0.99
    assert str(SLO.parse("ttft_p90=250")) == "ttft_p90=250ms"
    assert slo.met_by(_turn("a", 0, True, 1.9, tpot=0.04))
    assert not slo.met_by(_turn("a", 0, True, 2.1, tpot=0.04))
    assert not slo.met_by(_turn("a", 0, True, 1.0, tpot=0.06))
    assert slo.met_by(_turn("a", 0, True, 1.0, n=1))  # one token: no TPOT to violate
    assert not slo.met_by(_turn("a", 0, True, 1.0, error="boom"))
    for bad in ("ttft=1", "foo_p90=1", "ttft_p100=1", "ttft_p90=1,ttft_p99=2", ""):
        with pytest.raises(ValueError):
            SLO.parse(bad)


def test_summary_splits_first_and_later_turns_and_counts_goodput_and_cache():
    turns = [
        _turn("a", 0, True, 1.0),
        _turn("a", 1, False, 0.1, cached=80),
        _turn("a", 2, False, 0.3, cached=96),
        _turn("b", 0, True, 3.0, expected=16),
        _turn("b", 1, False, 0, error="RetryableError: gone"),
    ]
    sessions = [SessionRecord("a", 0.0, 10.0, 3, 0, tool_s=4.0), SessionRecord("b", 0.0, 6.0, 2, 1, tool_s=0.0)]
    s = summarize(turns, sessions, duration_s=10.0, slo=SLO.parse("ttft_p90=2000ms"))
    assert (s["turns_total"], s["turns_ok"], s["turns_failed"], s["sessions_failed"]) == (5, 4, 1, 1)
    assert s["ttft_p50_first_turn_ms"] == pytest.approx(2000.0)
    assert s["ttft_p90_first_turn_ms"] == pytest.approx(2800.0)
    assert s["ttft_p90_later_turns_ms"] == pytest.approx(280.0)
    assert s["tpot_p90_ms"] == pytest.approx(10.0)
    assert s["e2e_p50_later_turns_ms"] == pytest.approx(200.0 + 100.0)
    assert s["goodput"]["turns_meeting_slo"] == 3 and s["goodput"]["turns_per_s"] == pytest.approx(0.3)
    assert s["goodput"]["attainment"] == pytest.approx(0.6) and s["goodput"]["meets_slo"] is False
    assert s["hit_ratio"] == pytest.approx(176 / 400)
    assert s["hit_ratio_later_turns"] == pytest.approx(176 / 200) and s["hit_ratio_first_turn"] == 0.0
    assert s["cache_match"]["turns_exact"] == 3 and s["cache_match"]["turns_below_expected"] == 1
    assert s["tool_wait_share"] == pytest.approx(4.0 / 16.0)
    assert s["session_completion_s"]["count"] == 1
    assert s["engines"] == {"prefill": {"p0": 4}, "decode": {"d1": 4}}
    assert s["failures"] == {"RetryableError: gone": 1}
    assert summarize([], [], 1.0, None)["goodput"]["reason"] == "no --slo given"


def test_itl_is_the_gap_after_the_second_token_and_tpot_carries_the_hand_off():
    r = _turn("s", 0, True, ttft=0.5, n=16)
    r.second_token_s = r.first_token_s + 0.46  # the hand-off to the decode engine and its first step
    r.last_token_s = r.second_token_s + 14 * 0.09
    assert r.itl_s == pytest.approx(0.09)
    assert r.tpot_s == pytest.approx((0.46 + 14 * 0.09) / 15)
    two = _turn("s", 1, False, ttft=0.5, n=2)
    assert two.itl_s is None and two.tpot_s == pytest.approx(0.01)
    summary = summarize([r], [], 10.0, None)
    assert summary["itl_p50_ms"] == pytest.approx(90.0)
