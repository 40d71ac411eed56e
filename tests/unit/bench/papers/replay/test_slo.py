"""SLO terms: first-turn and later-turn TTFT judged apart, each term at its own percentile, which
term binds, and the per-turn reading goodput uses."""

import pytest

from agentserve.bench.papers.replay.records import TurnRecord
from agentserve.bench.papers.replay.slo import SLO

pytestmark = pytest.mark.unit


def _turn(first: bool, ttft_ms: float, tpot_ms: float = 10.0, tokens: int = 5, error: str = "") -> TurnRecord:
    record = TurnRecord("s", 0 if first else 1, first, 0.0, output_tokens=tokens, error=error)
    if not error:
        record.first_token_s = ttft_ms / 1000
        record.second_token_s = record.first_token_s + tpot_ms / 1000
        record.last_token_s = record.first_token_s + (tokens - 1) * tpot_ms / 1000
    return record


def test_parse_keeps_each_terms_percentile_and_prints_it_back():
    slo = SLO.parse("ttft_first_p90=4s,ttft_later_p99=1000ms,tpot_p50=50")
    assert [(t.metric, t.share, t.bound_s) for t in slo.terms] == [
        ("ttft_first", 0.9, 4.0),
        ("ttft_later", 0.99, 1.0),
        ("tpot", 0.5, 0.05),
    ]
    assert slo.attainment == 0.99
    assert str(slo) == "ttft_first_p90=4000ms,ttft_later_p99=1000ms,tpot_p50=50ms"
    assert SLO.parse(str(slo)) == slo
    assert slo.to_json()["terms"] == {"ttft_first_p90": 4000.0, "ttft_later_p99": 1000.0, "tpot_p50": 50.0}


@pytest.mark.parametrize(
    "text, message",
    [
        ("ttft_middle_p90=1s", "bad SLO term"),
        ("ttft_first_p0=1s", r"percentile must be in \(0, 100\)"),
        ("ttft_later_p90=1s,ttft_later_p50=2s", "each metric may appear once"),
        ("", "at least one term"),
    ],
)
def test_bad_slos_are_refused_naming_the_problem(text, message):
    with pytest.raises(ValueError, match=message):
        SLO.parse(text)


def test_first_and_later_turns_are_judged_apart():
    slo = SLO.parse("ttft_first_p50=1000ms,ttft_later_p50=200ms")
    turns = [_turn(True, 900), _turn(True, 950), _turn(False, 150), _turn(False, 300), _turn(False, 350)]
    check = slo.check(turns)
    first, later = check.terms
    assert (first.turns, first.value_s, first.met) == (2, pytest.approx(0.925), True)
    assert (later.turns, later.value_s, later.met) == (3, pytest.approx(0.3), False)
    assert not check.meets
    assert check.binding is later  # 1.5x its bound against the first turns' 0.925x


def test_a_term_binds_by_how_close_it_is_to_its_bound_even_when_everything_passes():
    slo = SLO.parse("ttft_first_p90=2000ms,ttft_later_p90=500ms,tpot_p90=20ms")
    turns = [_turn(True, 1000, tpot_ms=18), _turn(False, 200, tpot_ms=18)]
    check = slo.check(turns)
    assert check.meets
    assert check.binding.term.name == "tpot_p90"  # 0.9 of its bound; ttft_first 0.5, ttft_later 0.4
    assert check.to_json()["binding"] == "tpot_p90"


def test_failed_turns_miss_every_bound_and_a_term_without_turns_holds():
    slo = SLO.parse("ttft_first_p50=1000ms,ttft_later_p90=500ms")
    turns = [_turn(True, 100), _turn(True, 0, error="UNAVAILABLE"), _turn(True, 0, error="UNAVAILABLE")]
    first, later = slo.check(turns).terms
    assert (first.turns, first.failed, first.met) == (3, 2, False)
    assert first.to_json()["value_ms"] is None and first.to_json()["ratio"] is None
    assert (later.turns, later.value_s, later.met) == (0, None, True)
    assert later.to_json()["value_ms"] is None and later.to_json()["ratio"] == 0.0
    assert slo.check(turns).binding.term.name == "ttft_first_p50"


def test_tpot_skips_successful_one_token_turns_but_counts_failed_ones():
    slo = SLO.parse("tpot_p50=20ms")
    turns = [_turn(True, 100, tokens=1), _turn(True, 100, tpot_ms=10), _turn(False, 100, error="x")]
    (tpot,) = slo.check(turns).terms
    assert (tpot.turns, tpot.failed) == (2, 1)


def test_a_turn_meets_the_slo_on_the_terms_that_apply_to_it():
    slo = SLO.parse("ttft_first_p90=1000ms,ttft_later_p90=200ms,tpot_p90=20ms")
    assert slo.met_by(_turn(True, 900))  # a first turn is not held to the later turns' bound
    assert not slo.met_by(_turn(False, 900))
    assert not slo.met_by(_turn(True, 100, tpot_ms=30))
    assert not slo.met_by(_turn(True, 100, error="x"))
    assert slo.attained([_turn(True, 900), _turn(False, 900)]) == 0.5


def test_an_slo_built_from_bounds_alone_holds_every_term_at_its_attainment():
    slo = SLO((("ttft", 1.0), ("tpot", 0.05)), 0.9)
    assert [t.name for t in slo.terms] == ["ttft_p90", "tpot_p90"]
    with pytest.raises(ValueError, match="one share per bound"):
        SLO((("ttft", 1.0),), 0.9, (0.9, 0.5))
