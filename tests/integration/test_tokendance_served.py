"""Two all-gather rounds of four agents through the served system (`up --local`'s processes, the
SDK's round-aware turns) with shared blocks reused (TokenDance, docs/tokendance.md).

Each round's prefill takes the collective path on the prefill engine: the round's first agent
leads (it computes the masters), the others reuse them; each reused prompt's KV is persisted in
the KV store as the round's masters plus a diff per agent, the decode engine restores the prompt
from them and decodes over it, and the second round restores each agent's history (the first
round's prompt) from the store instead of computing it. The prefill spans say which path each
prompt took; the store holds the masters and the diffs the spans name; every token each agent
decodes is what this process decodes from the same blended KV, computed here from scratch
(`CollectiveReuse` over the same prompts, in the same order, the second round over the first
round's KV).

The gathered blocks are held-out text (each agent's message of the round) rather than the agents'
outputs: the tiny model's outputs are short and repetitive, and blocks that deviate past the
engine's threshold fall back to exact recompute (a path of its own, tested in the engine).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from agentserve.contracts import SamplingParams
from agentserve.contracts.segments import PrivateSegment, SegmentedPrompt, SharedBlock
from agentserve.contracts.segments import ReusePolicy as EngineReusePolicy
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.runner import block_prefix
from agentserve.engine.shared_context import CollectiveReuse, PrefixKV, ReusedPrefill
from agentserve.kv.block_format import read_header
from agentserve.kvstore.client import KVStoreClient
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.sdk import Client, ReusePolicy, SharedRef, TurnSegments
from agentserve.training.corpus import split_corpus, token_stream
from tests.support.cluster import local_cluster

pytestmark = pytest.mark.integration

AGENTS, MAX_TOKENS, BLOCK_TOKENS, FRACTION = 4, 10, 48, 0.15


class _Spans(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP trace receiver: the attributes of every `prefill` span the cluster exports."""

    def __init__(self) -> None:
        self.prefills: list[dict] = []
        self.lock = threading.Lock()

    def Export(self, request, context):
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    if span.name == "prefill":
                        attributes = {a.key: _value(a.value) for a in span.attributes}
                        with self.lock:
                            self.prefills.append(attributes)
        return trace_service_pb2.ExportTraceServiceResponse()


def _value(value):
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@pytest.fixture(scope="module")
def spans() -> Iterator[tuple[_Spans, int]]:
    receiver = _Spans()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield receiver, port
    server.stop(0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, spans):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{spans[1]}", "OTEL_BSP_SCHEDULE_DELAY": "200"}
    with local_cluster(tmp_path_factory, "tokendance-served", decoders=2, env=env) as running:
        yield running


@pytest.fixture(scope="module")
def text() -> list[int]:
    return token_stream(Tokenizer.from_dir(ensure_default_model()), split_corpus().held_out)


def _wait_for(spans: _Spans, count: int, timeout_s: float = 60.0) -> list[dict]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with spans.lock:
            found = [s for s in spans.prefills if "prefill.reuse" in s]
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{len(found)} reusing prefill spans arrived, {count} expected")


def _reference(
    model_engine: LLMEngine, prompts: list[SegmentedPrompt], prefixes: list[PrefixKV | None]
) -> tuple[list[ReusedPrefill], list[list[int]]]:
    """The round's blended prefill, computed here (agent 0 leads, then the others in turn), and
    each agent's greedy tokens decoded over the KV it left."""
    reuse = CollectiveReuse(model_engine.model)  # the engine's default threshold and selection
    result = reuse.prefill_round(prompts, {}, prefixes=prefixes)
    outputs = []
    for prompt, prefill in zip(prompts, result.prefills):
        first = int(prefill.logits[-1].argmax())
        tokens = list(prompt.token_ids)
        params = SamplingParams(max_tokens=MAX_TOKENS - 1, ignore_eos=True)
        prefix = block_prefix(prefill.k.clone(), prefill.v.clone(), model_engine.block_size)
        seq = model_engine.add_request(
            tokens + [first], params, external_prefix=prefix, generated=1, exact_prefix=False
        )
        while not seq.finished:
            model_engine.step()
        outputs.append([first, *seq.output_token_ids])
    return result.prefills, outputs


@pytest.mark.timeout(900)
def test_two_reused_rounds_take_the_collective_path_store_diffs_and_decode_the_blended_kv(cluster, spans, text) -> None:
    receiver, _ = spans
    passages = iter(range(0, len(text) - BLOCK_TOKENS, BLOCK_TOKENS + 16))

    def passage(n: int = BLOCK_TOKENS) -> list[int]:
        at = next(passages)
        return text[at : at + n]

    histories = [passage(40 + 9 * a) for a in range(AGENTS)]
    model_engine = LLMEngine.from_dir(ensure_default_model(), EngineConfig(prefix_cache=False))
    with Client(f"127.0.0.1:{cluster.ports.scheduler}") as client:
        sessions = [client.open_session(tenant="td-served", agent=f"agent{a}") for a in range(AGENTS)]
        for a, session in enumerate(sessions):  # each agent's first turn: its own history, computed exactly
            result = session.turn(token_ids=histories[a], max_tokens=MAX_TOKENS, ignore_eos=True).result()
            histories[a] = histories[a] + result.token_ids

        prefixes: list[PrefixKV | None] = [None] * AGENTS
        seen = 0
        for r in (1, 2):
            messages = [passage() for _ in range(AGENTS)]
            prompts, news = [], []
            for a in range(AGENTS):
                order = [(a + i) % AGENTS for i in range(AGENTS)]
                head, tail = [7 + a, 5 + r], [11, 12 + a, 13]
                news.append((head, order, tail))
                segments = (
                    PrivateSegment(tuple(histories[a] + head)),
                    *(SharedBlock(f"r{r}/agent{b}", r, tuple(messages[b])) for b in order),
                    PrivateSegment(tuple(tail)),
                )
                prompts.append(SegmentedPrompt(segments, EngineReusePolicy(recompute_fraction=FRACTION)))

            def turn(a: int, r: int = r, messages: list[list[int]] = messages, news: list = news):
                head, order, tail = news[a]
                refs = tuple(SharedRef(f"r{r}/agent{b}", tuple(messages[b])) for b in order)
                segments = TurnSegments(r, refs, ReusePolicy(recompute_fraction=FRACTION))
                new = head + [t for b in order for t in messages[b]] + tail
                return sessions[a].turn(token_ids=new, max_tokens=MAX_TOKENS, ignore_eos=True, segments=segments)

            # The round's first agent arrives first and leads; the others reuse its masters.
            results = [turn(0).result()]
            with ThreadPoolExecutor(AGENTS - 1) as pool:
                results += [t.result() for t in pool.map(turn, range(1, AGENTS))]

            prefills, expected = _reference(model_engine, prompts, prefixes)
            for a, result in enumerate(results):
                assert result.prompt_tokens == len(prompts[a].token_ids)
                assert result.token_ids == expected[a], f"round {r}, agent {a}"
            reused = _wait_for(receiver, seen + AGENTS)[seen:]
            seen += AGENTS
            paths = sorted(s["prefill.reuse"] for s in reused)
            assert paths == ["collective"] * (AGENTS - 1) + ["lead"], paths
            restored = {s["prefill.reuse_context"] for s in reused}
            assert restored == ({"none"} if r == 1 else {"restored"}), restored
            if r == 2:  # the history came from the store: only the tokens after it ran
                assert all(s["prefill.context_tokens"] == len(p.token_ids) for s, p in zip(reused, prompts))
            _assert_store_holds(cluster, reused, model_engine.fingerprint)
            for a in range(AGENTS):
                histories[a] = list(prompts[a].token_ids) + results[a].token_ids
                prefixes[a] = PrefixKV(prefills[a].k, prefills[a].v)
        for session in sessions:
            session.close()


def _chat(cluster, session_id: str, messages: list[dict], segments: dict | None = None) -> dict:
    body: dict = {"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0}
    if segments is not None:
        body["agentserve_segments"] = segments
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.ports.http}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "X-Session-Id": session_id},
    )
    with urllib.request.urlopen(request, timeout=300) as reply:
        return json.loads(reply.read())


@pytest.mark.timeout(900)  # the module's cluster may start in this test (900 s: as the test above)
def test_rounds_over_the_chat_route_with_agentserve_segments_reuse_and_restore(cluster, spans) -> None:
    """The same two rounds over the OpenAI chat route, each block marked by its text in the
    `agentserve_segments` field: the second round's prefills take the collective path over
    histories restored from the store."""
    receiver, _ = spans
    with receiver.lock:
        seen = len([s for s in receiver.prefills if "prefill.reuse" in s])
    prose = [" ".join(block.split()) for block in split_corpus().held_out if block[:1].isalpha()]
    lines = iter(prose)
    conversations = [[{"role": "user", "content": next(lines)}] for _ in range(AGENTS)]
    for a, messages in enumerate(conversations):
        reply = _chat(cluster, f"td-http-{a}", messages)
        messages.append({"role": "assistant", "content": reply["choices"][0]["message"]["content"]})
    for r in (1, 2):
        statements = [f"agent{b}: {next(lines)}\n" for b in range(AGENTS)]

        def turn(a: int, r: int = r, statements: list[str] = statements) -> None:
            order = [(a + i) % AGENTS for i in range(AGENTS)]
            content = f"Round {r}. The others said:\n" + "".join(statements[b] for b in order) + "Your move?"
            conversations[a].append({"role": "user", "content": content})
            segments = {
                "round": r,
                "shared": [{"content_id": f"http/r{r}/agent{b}", "text": statements[b]} for b in order],
                "reuse": "reuse",
                "recompute_fraction": FRACTION,
            }
            reply = _chat(cluster, f"td-http-{a}", conversations[a], segments)
            conversations[a].append({"role": "assistant", "content": reply["choices"][0]["message"]["content"]})

        turn(0)
        with ThreadPoolExecutor(AGENTS - 1) as pool:
            list(pool.map(turn, range(1, AGENTS)))
        reused = _wait_for(receiver, seen + AGENTS)[seen:]
        seen += AGENTS
        assert sorted(s["prefill.reuse"] for s in reused) == ["collective"] * (AGENTS - 1) + ["lead"]
        assert {s["prefill.reuse_context"] for s in reused} == ({"none"} if r == 1 else {"restored"})
        assert all(s["prefill.context_diffs_stored"] > 0 for s in reused if s["prefill.reuse"] == "collective")


def _assert_store_holds(cluster, spans: list[dict], fingerprint: str) -> None:
    """Every diff a follower's span names is in the store, a diff against a master the store holds."""
    followers = [s for s in spans if s["prefill.reuse"] == "collective"]
    diff_ids = [bytes.fromhex(h) for s in followers for h in s["prefill.context_diff_ids"]]
    master_ids = {bytes.fromhex(h) for s in spans for h in s["prefill.context_master_ids"]}
    assert diff_ids and master_ids
    assert sum(s["prefill.context_masters_stored"] for s in spans) >= AGENTS  # the round's masters, once

    async def fetch(ids: list[bytes]) -> dict[bytes, bytes]:
        async with KVStoreClient(f"127.0.0.1:{cluster.ports.kvstore}", tls=cluster.internal_client("decode")) as store:
            return {bytes(i): bytes(d) for block_id in ids async for i, d in store.get(fingerprint, [block_id])}

    held = asyncio.run(fetch(diff_ids + sorted(master_ids)))
    assert master_ids <= set(held)
    for block_id in diff_ids:
        header = read_header(held[block_id])
        assert header.diff is not None and header.diff.master_id in master_ids
