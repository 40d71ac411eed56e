"""`agentserve bench layerwise`: time to first token of a cached prefill, layerwise on vs off.

One real kvstore process on loopback holds a prompt's cached prefix (written by a warm engine). A
prefill engine (the tiny model, in this process) whose storage NIC is shaped to `snic_gbps` then
prefills the prompt through the serving path (`PrefillWorker`, path A): with layerwise off it loads
every block into its pool, then computes; on, it reads the store layer-major and computes layer l
while layer l+1 arrives. Each mode runs `repeats` times, alternating, on a fresh engine (nothing
resident); the median (and the fastest run) is reported beside the two parts measured alone: the
load (layerwise off, load only) and the compute (the same prefill with the prefix resident). The
best overlap can do is max(load + compute / layers, load / layers + compute); the baseline is
load + compute.

What the overlap is: path A reads the store layer-major (layer l of every block, then l+1), so the
engine starts after ~1/layers of the bytes. Each layer read costs the store a per-block overhead
whatever the bytes (~0.3-0.4 ms a block here, as much for one 16 KB layer as for a 64 KB block),
so layer-major reads cost ~layers times the CPU of whole-block reads: layerwise pays off only when
the storage NIC, not that overhead, bounds the load.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentserve.bench.micro.kvstore.disk import KVStoreProcess
from agentserve.contracts import PrefillRequest, SamplingParams
from agentserve.engine.async_engine import AsyncEngine
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.loader import load_model
from agentserve.engine_service.kv_moves import KVMover
from agentserve.engine_service.layer_loads import MIN_READ_BYTES, layers_per_read
from agentserve.fabric.nic import EmulatedNIC
from agentserve.kvstore.sharded import ShardedKVStoreClient
from agentserve.prefill.worker import PrefillWorker

if TYPE_CHECKING:
    from agentserve.engine.model import CausalLM

FIRST = SamplingParams(max_tokens=1, ignore_eos=True)


def run(
    cached_tokens: int = 3072,
    new_tokens: int = 64,
    snic_gbps: float = 2.0,
    repeats: int = 5,
    min_read_kb: int = MIN_READ_BYTES >> 10,
    model_dir: str | None = None,
) -> dict:
    if cached_tokens % 16 or cached_tokens <= 0 or new_tokens <= 0:
        raise ValueError("cached_tokens must be a positive multiple of 16 and new_tokens positive")
    model, fingerprint = load_model(model_dir or ensure_default_model(), "fp32")
    rng = random.Random(5)
    prompt = [rng.randrange(5, 8000) for _ in range(cached_tokens + new_tokens)]
    blocks = cached_tokens // 16
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "kv"
        data_dir.mkdir()
        with KVStoreProcess(data_dir) as store:
            return asyncio.run(
                _measure(model, fingerprint, store.address, prompt, blocks, snic_gbps, repeats, min_read_kb << 10)
            )


async def _measure(
    model: CausalLM,
    fingerprint: str,
    address: str,
    prompt: list[int],
    blocks: int,
    snic_gbps: float,
    repeats: int,
    min_read_bytes: int,
) -> dict:
    kvstore = ShardedKVStoreClient(address)
    config = EngineConfig(kv_cache_bytes=512 << 20)

    def engine(layerwise: bool) -> AsyncEngine:
        return AsyncEngine(LLMEngine(model, fingerprint, replace(config, layerwise=layerwise)))

    warm = engine(False)
    warm.start()
    try:
        await warm.call(lambda e: e.generate(prompt, FIRST))
        mover = KVMover(warm, "warm", kvstore, address)
        group = layers_per_read(mover, min_read_bytes)
        ids = await warm.call(lambda e: e.block_ids_for(prompt))
        await mover.persist(ids[:blocks])
    finally:
        warm.stop()

    async def once(layerwise: bool, resident: bool = False, load_only: bool = False) -> float:
        prefill = engine(layerwise)
        prefill.start()
        try:
            nics = {"snic": EmulatedNIC("snic", snic_gbps), "cnic": EmulatedNIC("cnic", 0)}
            mover = KVMover(prefill, "prefill", kvstore, address, nics)
            if resident:  # the same request then finds nothing to load
                await KVMover(prefill, "prefill", kvstore, address).load_from_store(ids[:blocks])
            request = PrefillRequest("bench", "bench", "", prompt, FIRST, store_hit_blocks=blocks)
            start = time.perf_counter()
            if load_only:
                await mover.load_from_store(ids[:blocks])
            else:
                await PrefillWorker(prefill, mover, min_read_bytes).prefill(request)
            return (time.perf_counter() - start) * 1000
        finally:
            prefill.stop()

    await once(False)  # warm-up: page cache, allocator, kernels
    await once(True)
    off, on = [], []
    for _ in range(repeats):
        off.append(await once(False))
        on.append(await once(True))
    loads = [await once(False, load_only=True) for _ in range(repeats)]
    computes = [await once(False, resident=True) for _ in range(repeats)]
    load, compute = statistics.median(loads), statistics.median(computes)
    layers = model.config.num_hidden_layers
    result: dict[str, Any] = {
        "regime": {
            "model_layers": layers,
            "cached_tokens": blocks * 16,
            "new_tokens": len(prompt) - blocks * 16,
            "snic_gbps": snic_gbps,
            "repeats": repeats,
            "path": "A",
            "layers_per_read": group,
        },
        "ttft_ms_layerwise_off": round(statistics.median(off), 1),
        "ttft_ms_layerwise_on": round(statistics.median(on), 1),
        "load_ms_alone": round(load, 1),
        "compute_ms_alone": round(compute, 1),
        # layer l computes once it has arrived and layer l-1 is done: the slower side sets the pace
        "ideal_overlap_ms": round(max(load + compute / layers, load / layers + compute), 1),
        # Other processes share this machine's cores: the fastest run is the least disturbed one.
        "fastest_ms": {
            "off": round(min(off), 1),
            "on": round(min(on), 1),
            "load": round(min(loads), 1),
            "compute": round(min(computes), 1),
        },
        "runs_ms": {"off": [round(x, 1) for x in off], "on": [round(x, 1) for x in on]},
    }
    result["speedup_on_over_off"] = round(result["ttft_ms_layerwise_off"] / result["ttft_ms_layerwise_on"], 3)
    await kvstore.close()
    return result
