"""The workload model: dependency order, subsets, token scaling, jobs; the synthetic generator."""

import pytest

from agentserve.bench.common.workloads.generator import GeneratorSpec, generate, parse_distribution
from agentserve.bench.common.workloads.model import (
    Session,
    Turn,
    Workload,
    components,
    parse_ref,
    scaled,
    subset,
    topological_turns,
)

pytestmark = pytest.mark.unit


def _t(after=(), **kw) -> Turn:
    return Turn(output_tokens=kw.pop("output_tokens", 4), new_tokens=kw.pop("new_tokens", 10), after=after, **kw)


def _w(*sessions: Session, **kw) -> Workload:
    return Workload("w", sessions, **kw).validate()


def test_refs_name_a_session_or_one_of_its_turns():
    assert parse_ref("lead") == ("lead", None)
    assert parse_ref("lead#3") == ("lead", 3)
    assert parse_ref("a#b") == ("a#b", None)


def test_topological_order_respects_session_order_and_dependencies():
    w = _w(
        Session("lead", (_t(), _t(after=("w1#0", "w2")))),
        Session("w1", (_t(after=("lead#0",)), _t())),
        Session("w2", (_t(after=("lead#0",)),)),
    )
    order = topological_turns(w)
    pos = {t: i for i, t in enumerate(order)}
    assert len(order) == 5
    assert pos[("lead", 0)] < pos[("w1", 0)] < pos[("w1", 1)]
    assert pos[("w2", 0)] < pos[("lead", 1)] and pos[("w1", 0)] < pos[("lead", 1)]


def test_a_turn_waiting_on_its_own_later_turn_is_a_cycle():
    with pytest.raises(ValueError, match="cycle"):
        _w(Session("a", (_t(after=("a#1",)), _t())))
    with pytest.raises(ValueError, match="missing turn"):
        _w(Session("a", (_t(),)), Session("b", (_t(after=("a#4",)),)))


def test_subset_takes_first_arrivals_and_drops_sessions_whose_dependencies_were_cut():
    w = _w(
        Session("a", (_t(),), arrival_s=0),
        Session("b", (_t(),), arrival_s=5, after=("c",)),
        Session("c", (_t(),), arrival_s=3),
        Session("d", (_t(),), arrival_s=1, after=("a",)),
    )
    assert [s.id for s in subset(w, max_sessions=3).sessions] == ["a", "d", "c"]
    assert [s.id for s in subset(w, max_sessions=2).sessions] == ["a", "d"]
    assert [s.id for s in subset(w, arrival_before_s=4).sessions] == ["a", "d", "c"]
    assert [s.id for s in subset(w, max_sessions=2, arrival_before_s=0.5).sessions] == ["a"]
    cut = _w(Session("x", (_t(),), arrival_s=9), Session("y", (_t(),), arrival_s=0, after=("x",)))
    assert subset(cut, max_sessions=1).sessions == ()


def test_scaling_divides_lengths_and_keeps_hash_blocks_aligned():
    w = _w(
        Session(
            "a",
            (
                Turn(output_tokens=100, hash_ids=(1, 2), input_tokens=700),
                Turn(output_tokens=1, new_tokens=33, reuse_tokens=31),
            ),
            prefix="p",
        ),
        hash_block_tokens=512,
        prefixes={"p": 100},
    )
    s = scaled(w, 16)
    t0, t1 = s.sessions[0].turns
    assert (s.hash_block_tokens, t0.input_tokens, t0.output_tokens) == (32, 44, 6)
    assert (t1.new_tokens, t1.reuse_tokens, t1.output_tokens) == (3, 1, 2)
    assert s.prefixes == {"p": 6}
    assert scaled(w, 1) is w
    with pytest.raises(ValueError, match="divide"):
        scaled(w, 3)


def test_jobs_are_sessions_connected_by_dependencies():
    w = _w(
        Session("a", (_t(),), arrival_s=2),
        Session("b", (_t(after=("a#0",)),), arrival_s=2),
        Session("c", (_t(),), arrival_s=1),
        Session("d", (_t(),), arrival_s=3, after=("b",)),
    )
    assert [[s.id for s in job] for job in components(w)] == [["c"], ["a", "b", "d"]]


def test_fanout_lead_hands_out_and_gathers_every_round():
    w = generate(GeneratorSpec(pattern="fanout", teams=1, agents=2, turns=2, tool_prob=0, seed=1))
    by = w.by_id()
    lead = by["t000-lead"]
    assert len(lead.turns) == 3 and [len(by[f"t000-w{i}"].turns) for i in (0, 1)] == [2, 2]
    assert [t.after for t in lead.turns] == [(), ("t000-w0#0", "t000-w1#0"), ("t000-w0#1", "t000-w1#1")]
    assert [t.after for t in by["t000-w1"].turns] == [("t000-lead#0",), ("t000-lead#1",)]
    assert all(s.prefix == "system" for s in w.sessions) and w.prefixes == {"system": 2048}


def test_allgather_peers_receive_the_same_gathered_content():
    w = generate(GeneratorSpec(pattern="allgather", teams=1, agents=3, turns=3, output_tokens=50, seed=2))
    peers = w.sessions
    for r in (1, 2):
        assert {p.turns[r].content_key for p in peers} == {f"t000-gather-{r - 1}"}
        assert {p.turns[r].new_tokens for p in peers} == {150}
        assert peers[0].turns[r].after == (f"t000-w1#{r - 1}", f"t000-w2#{r - 1}")


def test_generator_arrivals_tools_and_bad_specs():
    w = generate(
        GeneratorSpec(
            pattern="independent",
            teams=5,
            agents=2,
            turns=3,
            tool_prob=1.0,
            tool_time="const:1.5",
            arrival_rate=2.0,
            seed=9,
        )
    )
    arrivals = sorted({s.arrival_s for s in w.sessions})
    assert len(arrivals) == 5 and arrivals[0] == 0.0
    assert all([t.tool_time_s() for t in s.turns] == [1.5, 1.5, 0.0] for s in w.sessions)
    assert generate(GeneratorSpec(seed=4)) == generate(GeneratorSpec(seed=4))
    with pytest.raises(ValueError, match="tool time"):
        parse_distribution("normal:1")
    with pytest.raises(ValueError, match="pattern"):
        GeneratorSpec(pattern="ring")
