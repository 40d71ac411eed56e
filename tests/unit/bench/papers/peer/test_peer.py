"""The peer bench's pure parts: llama-server's command line, the copied workload, the OpenAI
completions session's accounting, the per-session SLO, and the result's table."""

import asyncio
from pathlib import Path

import pytest

from agentserve.bench.common.workloads.model import Session, ToolCall, Turn, Workload
from agentserve.bench.common.workloads.tokens import TokenSynth
from agentserve.bench.papers.peer.bench import headline, sessions_within_slo
from agentserve.bench.papers.peer.llama_server import LlamaServerConfig
from agentserve.bench.papers.peer.openai_client import CompletionsClient
from agentserve.bench.papers.peer.report import markdown, table
from agentserve.bench.papers.peer.resources import MIB, summarize_samples
from agentserve.bench.papers.peer.workload import PeerWorkloadSpec, copied, describe, peer_workload
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord
from agentserve.bench.papers.replay.slo import SLO
from agentserve.bench.papers.replay.summary import summarize

pytestmark = pytest.mark.unit


def _config(**overrides):
    return LlamaServerConfig(binary=Path("/opt/llama-server"), model=Path("/m/smol.gguf"), port=8111, **overrides)


def test_llama_server_command_sets_slots_unified_kv_prompt_cache_and_reuse():
    args = _config(parallel=32, ctx_per_slot=2048, cache_reuse=256, threads=2).args()
    flags = dict(zip(args[1::2], args[2::2]))  # pairs after the binary, up to the first bare flag
    assert args[0] == "/opt/llama-server"
    assert flags["--model"] == "/m/smol.gguf"
    assert flags["--port"] == "8111"
    assert flags["--parallel"] == "32"
    assert "--kv-unified" in args and "--cache-prompt" in args and "--cont-batching" in args
    assert args[args.index("--kv-unified-per-slot") + 1] == "2048"
    assert args[args.index("--ctx-size") + 1] == str(32 * 2048)
    assert args[args.index("--cache-reuse") + 1] == "256"
    assert args[args.index("--cache-ram") + 1] == "8192"
    assert args[args.index("--threads") + 1] == "2" and args[args.index("--threads-batch") + 1] == "2"


def test_llama_server_config_dict_carries_the_rendered_command():
    config = _config(parallel=4, ctx_per_slot=512)
    d = config.to_dict()
    assert d["ctx_size"] == 2048 and d["parallel"] == 4 and d["kv_unified"] is True
    assert d["command"] == " ".join(config.args())
    assert d["binary"] == "/opt/llama-server"


@pytest.mark.parametrize(
    ("field", "value"),
    [("parallel", 0), ("ctx_per_slot", 0), ("threads", 0), ("cache_reuse", -1), ("cache_ram_mib", -2)],
)
def test_llama_server_config_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        _config(**{field: value})


def _trace() -> Workload:
    tool = ToolCall("Bash", 1.5)
    a = Session(
        "a", (Turn(10, new_tokens=64, tools=(tool,)), Turn(4, new_tokens=32), Turn(2, new_tokens=8)), 5.0, prefix="p"
    )
    b = Session("b", (Turn(6, new_tokens=16), Turn(3, new_tokens=16)), 9.0, prefix="p")
    return Workload("t", (a, b), prefixes={"p": 128})


def test_copied_cycles_sessions_cuts_turns_and_starts_all_at_zero():
    w = copied(_trace(), sessions=5, turns=2)
    assert [s.id for s in w.sessions] == ["a-0", "b-0", "a-1", "b-1", "a-2"]
    assert [len(s.turns) for s in w.sessions] == [2, 2, 2, 2, 2]
    assert {s.arrival_s for s in w.sessions} == {0.0}
    assert {s.prefix for s in w.sessions} == {"p"}
    d = describe(w)
    assert d["sessions"] == 5 and d["turns_total"] == 10
    assert d["output_tokens_total"] == 3 * (10 + 4) + 2 * (6 + 3)
    assert d["tool_calls"] == 3
    assert d["tool_seconds_per_session"] == {"min": 0.0, "mean": 3 * 1.5 / 5, "max": 1.5}


def test_copied_refuses_sessions_with_dependencies():
    w = _trace()
    dependent = Workload(
        "t", (w.sessions[0], Session("c", (Turn(1, new_tokens=1),), after=("a",))), prefixes=w.prefixes
    )
    with pytest.raises(ValueError, match="dependencies"):
        copied(dependent, 2, 1)


def test_default_workload_is_32_tracelab_sessions_of_4_turns():
    w = peer_workload(PeerWorkloadSpec())
    assert len(w.sessions) == 32 and {len(s.turns) for s in w.sessions} == {4}
    assert w.prefixes == {"claude-system": 27217 // 32, "codex-system": 6912 // 32}


@pytest.mark.parametrize(("field", "value"), [("sessions", 0), ("turns", 0), ("token_scale", 0)])
def test_workload_spec_names_the_bad_field(field, value):
    with pytest.raises(ValueError, match=field):
        PeerWorkloadSpec(**{field: value})


class _ScriptedClient(CompletionsClient):
    """The completions client with the HTTP stream replaced by scripted events."""

    def __init__(self, events: list[dict]) -> None:
        super().__init__("http://unused", TokenSynth(100, 8192))
        self.script = events
        self.bodies: list[dict] = []

    async def events(self, body, tenant):
        self.bodies.append(body)
        for event in self.script:
            yield event


def _text(piece: str) -> dict:
    return {"choices": [{"index": 0, "text": piece}]}


def test_session_counts_pieces_then_usage_and_keeps_the_history():
    async def run():
        client = _ScriptedClient(
            [
                _text("He"),
                _text(""),
                _text("llo"),
                {"choices": [], "usage": {"completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 2}}},
            ]
        )
        try:
            session = await client.open_session("t", "agent")
            chunks = [c async for c in session.turn([7, 8, 9], 4)]
            first_history = list(session.history)
            more = [c async for c in session.turn([5], 4)]
            return client, chunks, first_history, more
        finally:
            await client.close()

    client, chunks, history, more = asyncio.run(run())
    reply = client.reply_ids([7, 8, 9], 4)
    # Two text pieces stream as one token each; the usage's remaining two come in one chunk.
    assert [c.token_ids for c in chunks[:3]] == [(reply[0],), (reply[1],), tuple(reply[2:4])]
    assert (chunks[3].token_ids, chunks[3].cached_tokens, chunks[3].prompt_tokens) == ((), 2, 3)
    assert history == [7, 8, 9, *reply]
    body = client.bodies[1]
    assert body["prompt"] == [7, 8, 9, *reply, 5]
    assert body["ignore_eos"] is True and body["stream"] is True and body["max_tokens"] == 4
    assert more[-1].prompt_tokens == 8


def test_reply_ids_depend_on_the_prompt_only():
    async def run():
        one, two = (
            CompletionsClient("http://a", TokenSynth(100, 8192)),
            CompletionsClient("http://b", TokenSynth(100, 8192)),
        )
        try:
            return one.reply_ids([1, 2, 3], 5), two.reply_ids([1, 2, 3], 5), one.reply_ids([1, 2, 4], 5)
        finally:
            await one.close()
            await two.close()

    same, again, other = asyncio.run(run())
    assert same == again and same != other and len(same) == 5 and all(100 <= t < 8192 for t in same)


def _turn(session: str, index: int, ttft: float, tpot: float, error: str = "") -> TurnRecord:
    return TurnRecord(
        session,
        index,
        index == 0,
        sent_s=0.0,
        output_tokens=3,
        first_token_s=ttft,
        last_token_s=ttft + 2 * tpot,
        error=error,
    )


def test_a_session_is_within_the_slo_only_when_every_turn_is():
    slo = SLO.parse("ttft_p90=2000ms,tpot_p90=200ms")
    turns = [
        _turn("ok", 0, 1.0, 0.1),
        _turn("ok", 1, 0.5, 0.2),
        _turn("slow", 0, 1.0, 0.1),
        _turn("slow", 1, 2.5, 0.1),
        _turn("failed", 0, 0.1, 0.1, error="boom"),
    ]
    sessions = [SessionRecord("ok", 0, 5, 2), SessionRecord("slow", 0, 5, 2), SessionRecord("failed", 0, 5, 1, 1)]
    assert sessions_within_slo(turns, sessions, slo) == 1
    unfinished = [SessionRecord("ok", 0, None, 2)]
    assert sessions_within_slo(turns, unfinished, slo) == 0


def _result() -> dict:
    slo = SLO.parse("ttft_p90=2000ms,tpot_p90=200ms")
    turns = [_turn("s", 0, 1.0, 0.1), _turn("s", 1, 0.5, 0.05)]
    sessions = [SessionRecord("s", 0, 4, 2)]
    summary = summarize(turns, sessions, 4.0, slo)
    resources = {
        **summarize_samples([(100 * MIB, 60 * MIB), (300 * MIB, 200 * MIB)]),
        "cpu_s": {"x": 3.0},
        "cpu_s_total": 3.0,
    }
    system = {
        "config": {"command": "llama-server --parallel 1"},
        "startup_s": 1.0,
        "headline": headline(summary, 1, 6, resources),
        "resources": resources,
        "summary": summary,
    }
    regime = {
        "model": "m.gguf",
        "workload": {"sessions": 1, "turns": 2, "trace": "t.jsonl", "token_scale": 32},
        "load": "1 session",
        "api": "completions",
        "slo": {"text": str(slo), "judged": "per session"},
    }
    return {"bench": "peer", "regime": regime, "systems": {"agentserve": system, "llama-server": system}}


def test_headline_takes_later_turn_ttft_tpot_memory_and_cpu_per_token():
    h = _result()["systems"]["agentserve"]["headline"]
    assert (h["sessions_within_slo"], h["sessions_total"], h["turns_ok"]) == (1, 1, 2)
    assert h["ttft_later_p50_ms"] == pytest.approx(500.0) and h["ttft_first_p50_ms"] == pytest.approx(1000.0)
    assert h["tpot_p50_ms"] == pytest.approx(75.0)
    assert h["output_tokens_per_s"] == pytest.approx(6 / 4.0)
    assert (h["rss_peak_mib"], h["pss_peak_mib"]) == (300.0, 200.0)
    assert h["cpu_ms_per_output_token"] == pytest.approx(3000.0 / 6)


def test_table_has_a_column_per_system_and_the_slo_count_over_the_total():
    text = table(_result())
    lines = text.splitlines()
    assert lines[0] == "| | agentserve | llama-server |"
    assert "| sessions within SLO | 1 / 1 | 1 / 1 |" in lines
    assert "| later-turn TTFT p50 (ms) | 500 | 500 |" in lines
    assert "| resident memory, PSS peak (MiB) | 200 | 200 |" in lines
    md = markdown(_result())
    assert "llama-server --parallel 1" in md and "ttft_p90=2000ms,tpot_p90=200ms" in md
    assert "1 sessions x 2 turns from `t.jsonl`, token scale 32" in md


def test_memory_summary_of_no_samples_is_empty_not_zero():
    assert summarize_samples([]) == {
        "samples": 0,
        "rss_peak_mib": None,
        "rss_mean_mib": None,
        "pss_peak_mib": None,
        "pss_mean_mib": None,
    }
