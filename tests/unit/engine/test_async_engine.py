"""AsyncEngine: the engine thread streams tokens to asyncio callers and survives bad requests."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from agentserve.contracts import SamplingParams
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig

pytestmark = pytest.mark.unit

PARAMS = SamplingParams(max_tokens=6, ignore_eos=True)


@pytest.fixture(scope="module")
def base_engine(tiny_model_dir):
    return LLMEngine.from_dir(tiny_model_dir, EngineConfig(kv_cache_bytes=16 << 20))


def _run(base_engine, coro_fn):
    engine = AsyncEngine(LLMEngine(base_engine.model, base_engine.fingerprint, EngineConfig(kv_cache_bytes=16 << 20)))
    engine.start()
    try:
        return asyncio.run(coro_fn(engine))
    finally:
        engine.stop()


def test_concurrent_streams_equal_direct_generation(base_engine):
    prompts = [[5, 6, 7, 8, 9], list(range(10, 60))]
    expected = [base_engine.generate(p, PARAMS).output_token_ids for p in prompts]

    async def main(engine):
        async def collect(p):
            return [e.token_id async for e in engine.generate(p, PARAMS)]

        return await asyncio.gather(*(collect(p) for p in prompts))

    assert _run(base_engine, main) == expected


def test_bad_request_raises_and_engine_keeps_serving(base_engine):
    async def main(engine):
        with pytest.raises(ValueError, match="out of range"):
            async for _ in engine.generate([5, 10**6], PARAMS):
                pass
        return [e.token_id async for e in engine.generate([5, 6], PARAMS)]

    assert len(_run(base_engine, main)) == 6


def test_abandoned_stream_is_aborted(base_engine):
    async def main(engine):
        stream = engine.generate([5, 6, 7], SamplingParams(max_tokens=200, ignore_eos=True))
        async for _ in stream:
            break
        await stream.aclose()
        return await engine.call(lambda e: (len(e.running), len(e.waiting)))

    assert _run(base_engine, main) == (0, 0)


def test_posted_commands_run_in_order_after_calls_and_a_failing_one_is_only_logged(base_engine, caplog):
    async def main(engine):
        seen = []
        call = asyncio.ensure_future(engine.call(lambda e: seen.append("call")))
        await asyncio.sleep(0)  # the call is queued first
        engine.post(lambda e: seen.append("post"))
        engine.post(lambda e: 1 / 0)
        await call
        return seen, await engine.call(lambda e: list(seen))

    first, after = _run(base_engine, main)
    assert after == ["call", "post"]
    assert "posted engine command failed" in caplog.text


def test_pins_taken_under_pinning_are_freed_on_exit_even_by_an_error(base_engine):
    async def main(engine):
        ids = await engine.call(lambda e: e.block_ids_for(list(range(4 * e.block_size))))
        await engine.call(lambda e: e.generate(list(range(4 * e.block_size + 1)), SamplingParams(max_tokens=1)))
        with pytest.raises(RuntimeError, match="boom"), engine.pinning() as pinned:
            await engine.call(lambda e: pinned.extend(e.blocks.pin(ids)))
            assert await engine.call(lambda e: e.blocks.stats()["used"]) == len(ids)
            raise RuntimeError("boom")
        return await engine.call(lambda e: (e.blocks.stats()["used"], e.blocks.cached_prefix(ids)))

    assert _run(base_engine, main) == (0, 4)  # unpinned, still cached


def test_serve_commands_returns_once_it_ran_a_command_or_was_woken(base_engine):
    # Called on the engine thread mid-forward (a layerwise prefill waiting for a layer): it runs
    # what is queued and returns, so the caller looks at what it waits for again; `wake` ends a
    # wait with nothing to run. Not started here: this thread plays the engine thread.
    engine = AsyncEngine(LLMEngine(base_engine.model, base_engine.fingerprint, EngineConfig(kv_cache_bytes=16 << 20)))
    ran: list[int] = []
    engine.post(lambda e: ran.append(1))
    engine.post(lambda e: ran.append(2))
    started = time.monotonic()
    engine.serve_commands(5.0)
    assert ran == [1, 2] and time.monotonic() - started < 1.0
    threading.Timer(0.05, engine.wake).start()
    started = time.monotonic()
    engine.serve_commands(5.0)
    assert ran == [1, 2] and 0.04 < time.monotonic() - started < 1.0
    started = time.monotonic()
    engine.serve_commands(0.05)  # nothing comes: returns when the time is up
    assert 0.04 < time.monotonic() - started < 1.0
