"""Where a dualpath run's turns spent their time: the client's turn cycle from the records, the
services' phase means for later turns, each prefill engine's compute / layer-wait shares, and the
bounds each limit alone allows."""

import pytest

from agentserve.bench.papers.dualpath.phases import breakdown
from agentserve.bench.papers.replay.records import TurnRecord

pytestmark = pytest.mark.unit


def _turn(session: str, index: int, sent: float, first_token: float, done: float) -> TurnRecord:
    return TurnRecord(session, index, index == 0, sent, first_token_s=first_token, last_token_s=done, done_s=done)


def test_breakdown_means_over_later_turns_and_bounds():
    turns = [
        _turn("a", 0, 0.0, 5.0, 6.0),
        _turn("a", 1, 6.5, 8.5, 9.5),  # ttft 2, output 1, gap 0.5
        _turn("a", 2, 10.0, 14.0, 15.0),  # ttft 4, output 1, gap 0.5
        _turn("b", 0, 0.0, 6.0, 7.0),
        _turn("b", 1, 8.0, 11.0, 12.0),  # ttft 3, output 1, gap 1.0
        _turn("b", 2, 13.0, 16.0, 18.0),  # ttft 3, output 2, gap 1.0
    ]
    phases = {
        "scheduler": {
            "later": {"decode": {"sum_s": 5.0, "count": 4.0}, "prefill": {"sum_s": 10.0, "count": 4.0}},
            "first": {"decode": {"sum_s": 2.0, "count": 2.0}},
        },
        "prefill": {
            "later": {"forward": {"sum_s": 4.0, "count": 4.0}, "queue": {"sum_s": 0.0, "count": 0.0}},
            "first": {"forward": {"sum_s": 8.0, "count": 2.0}},
        },
    }
    summary = {
        "duration_s": 20.0,
        "service_seconds": {
            "phases": phases,
            "forward_s": {
                "prefill-0": {"compute": 8.0, "layer_wait": 2.0},
                "prefill-1": {"compute": 6.0, "layer_wait": 0.0},
                "decode-0": {"compute": 3.0, "layer_wait": 0.0},
            },
            "elapsed_s": 20.0,
        },
    }
    snic = {"utilization": {"prefill-0": 0.5, "prefill-1": 0.25, "decode-0": 0.9}}
    out = breakdown(summary, turns, snic)
    assert out["client"] == {"turns": 4, "ttft_s": 3.0, "output_s": 1.25, "gap_s": 0.75, "cycle_s": 5.0}
    assert out["scheduler"] == {"decode": 1.25, "prefill": 2.5}
    assert out["prefill"] == {"forward": 1.0, "queue": None}
    assert out["prefill_engines"] == {
        "prefill-0": {"compute_share": 0.4, "layer_wait_share": 0.1, "other_share": 0.5},
        "prefill-1": {"compute_share": 0.3, "layer_wait_share": 0.0, "other_share": 0.7},
    }
    # Three turns an agent, each its mean forward (1.0), decode (1.25) and gap (0.75).
    assert out["bounds"] == {
        "jct_s": 20.0,
        "prefill_compute_s": 8.0,
        "prefill_snic_s": 10.0,
        "agent_chain_s": 3 * (1.0 + 1.25 + 0.75),
    }


def test_breakdown_without_service_metrics_gives_the_clients_view_and_no_bounds_it_cannot_compute():
    turns = [_turn("a", 0, 0.0, 1.0, 2.0), _turn("a", 1, 2.0, 3.0, 4.0)]
    out = breakdown({"duration_s": 4.0}, turns, {})
    assert out["client"] == {"turns": 1, "ttft_s": 1.0, "output_s": 1.0, "gap_s": 0.0, "cycle_s": 2.0}
    assert out["scheduler"] == {} and out["prefill"] == {} and out["prefill_engines"] == {}
    assert out["bounds"] == {"jct_s": 4.0, "prefill_compute_s": None, "prefill_snic_s": None, "agent_chain_s": None}
