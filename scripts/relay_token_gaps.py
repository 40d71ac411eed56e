"""Decode token gaps of one emulated decode engine while path-B relays run on it, in one process.

The engine (deepseek-v3.2 on h800, 256-token blocks, time dilation 10: a decode step is ~91 ms
local) decodes 3 sequences of 60 tokens while relays of 120 store blocks run back to back on it
(`RelaySender` with an in-memory store; the pool's copies dropped after each relay, so every block
is kept anew). Modes: `none` (no relay), `paced` (the bench's NICs: 5 Gbps storage, 40 Gbps compute,
local; the storage NIC busy all the time), `unpaced` (as fast as the CPU goes), and either with
`-nokeep` (the relay imports nothing). No gRPC: what this shows is the engine thread and the event
loop of one process, not the network stack or other processes.

    PYTHONPATH=services .venv/bin/python scripts/relay_token_gaps.py paced
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agentserve.contracts import SamplingParams
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.emulation_config import EmulationConfig
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model_init import init_model
from agentserve.engine_service import relay
from agentserve.engine_service.kv_moves import KVMover
from agentserve.fabric.nic import EmulatedNIC

BLOCKS = 120


class MemoryStore:
    """Serves blocks like `ShardedKVStoreClient.get`."""

    def __init__(self, blocks: dict[bytes, bytes]) -> None:
        self.blocks = blocks

    async def get(self, fingerprint, ids):
        for block_id in ids:
            yield block_id, self.blocks[block_id]


def stored_blocks(model_dir: Path) -> tuple[list[bytes], dict[bytes, bytes]]:
    fast = EmulationConfig(time_dilation=1e-4, kv_blocks=BLOCKS + 8)
    source = LLMEngine.emulated(model_dir, EngineConfig(compute="emulated", block_size=256, emulation=fast))
    prompt = [(7 * i) % 8000 + 5 for i in range(BLOCKS * 256 + 1)]
    source.generate(prompt, SamplingParams(max_tokens=1))
    ids = source.block_ids_for(prompt)[:BLOCKS]
    return ids, {block_id: bytes(source.export_blocks([block_id])) for block_id in ids}


async def measure(decode: AsyncEngine, ids: list[bytes], datas: dict[bytes, bytes], mode: str) -> str:
    stop = asyncio.Event()
    relays = 0

    async def relay_loop() -> None:
        nonlocal relays
        nics = (
            {"snic": EmulatedNIC("snic", 5.0), "cnic": EmulatedNIC("cnic", 40.0)} if mode.startswith("paced") else None
        )
        sender = relay.RelaySender(KVMover(decode, "decode-0", MemoryStore(datas), "store:0", nics=nics))  # type: ignore[arg-type]
        while not stop.is_set():
            async for _ in sender.relay(ids, "prefill-0"):
                await asyncio.sleep(0)
            await decode.call(lambda e: e.blocks.drop(ids))
            relays += 1

    gaps: list[float] = []

    async def generate(k: int) -> None:
        last = None
        async for _ in decode.generate([5 + k, 6, 7, 8] * 50, SamplingParams(max_tokens=60, ignore_eos=True)):
            now = time.monotonic()
            if last is not None:
                gaps.append(now - last)
            last = now

    relaying = asyncio.create_task(relay_loop()) if mode != "none" else None
    await asyncio.gather(*(generate(k) for k in range(3)))
    stop.set()
    if relaying is not None:
        await relaying
    gaps.sort()
    p50, p90 = statistics.median(gaps) * 1e3, gaps[int(0.9 * len(gaps))] * 1e3
    return f"{mode}: {relays} relays of {BLOCKS} blocks, {len(gaps)} token gaps, p50 {p50:.1f} ms, p90 {p90:.1f} ms"


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "paced"
    if mode not in ("none", "paced", "unpaced", "paced-nokeep", "unpaced-nokeep"):
        raise SystemExit(f"mode must be none, paced, unpaced, paced-nokeep or unpaced-nokeep, got {mode!r}")
    if mode.endswith("-nokeep"):
        relay._Keeper.keep = lambda self, block_id, data: None  # type: ignore[method-assign]
    model_dir = init_model(Path(tempfile.mkdtemp()), "tiny", seed=0)
    ids, datas = stored_blocks(model_dir)
    emulation = EmulationConfig(time_dilation=10, kv_blocks=2000)
    decode = AsyncEngine(
        LLMEngine.emulated(model_dir, EngineConfig(compute="emulated", block_size=256, emulation=emulation))
    )
    decode.start()
    try:
        print(asyncio.run(measure(decode, ids, datas, mode)))
    finally:
        decode.stop()


if __name__ == "__main__":
    main()
