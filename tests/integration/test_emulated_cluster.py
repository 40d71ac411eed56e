"""Emulated compute through the whole system: two prefill and four decode engines that load no
weights (`ComputeSettings("emulated")`: DeepSeek-V3.2 on H800, time dilation D) on the DualPath
profile, over the real kvstore and the shaped fabric.

- multi-turn sessions through the scheduler: every reply is the emulated token sequence, every
  later turn hits the whole stored history, handoffs are charged the target's bytes;
- one turn's store hits loaded by path A and the same turn's by path B (relayed by a cold decode
  engine), each at the prefill engine directly: the NICs' byte counters move by exactly the
  target's bytes of the blocks each leg carried, their busy time is those bytes at the dilated
  rate, and the prefill takes at least its load plus the cost model's compute time.
"""

from __future__ import annotations

import asyncio
import random
import time
import urllib.request

import pytest

from agentserve.cluster.settings import ComputeSettings, FabricSettings
from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import InternalTLS
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.emulated_runner import EmulatedRunner
from agentserve.engine.emulation_config import EmulationConfig
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.fabric.profiles import load_profile
from agentserve.kv.block_hash import block_ids_for
from agentserve.kvstore.client import KVStoreClient
from agentserve.sdk import Client
from agentserve.v1 import common_pb2, prefill_pb2, prefill_pb2_grpc
from tests.support.cluster import MeteredCluster, local_cluster
from tests.support.tails import cached_history

pytestmark = pytest.mark.integration

D = 4.0
BLOCK = 16
TARGET_BLOCK_BYTES = 61 * 788 * BLOCK  # DeepSeek-V3.2's KV of one 16-token block: what NICs are charged
COMPUTE = ComputeSettings("emulated", EmulationConfig("deepseek-v3.2", "h800", time_dilation=D))
MAX_TOKENS = 12


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    fabric = FabricSettings("dualpath-h800", "dualpath")
    options = dict(decoders=4, prefill=2, cls=MeteredCluster, fabric=fabric, compute=COMPUTE)
    with local_cluster(tmp_path_factory, "emulated", **options) as c:
        yield c


@pytest.fixture(scope="module")
def emulated() -> LLMEngine:
    """The same emulation in this process: its fingerprint, its tokens, its cost model."""
    config = EngineConfig(compute="emulated", emulation=EmulationConfig(time_dilation=D))
    return LLMEngine.emulated(ensure_default_model(), config)


def expected_tokens(engine: LLMEngine, start: int, count: int) -> list[int]:
    runner = engine.runner
    assert isinstance(runner, EmulatedRunner)
    return [runner.token_at(p) for p in range(start, start + count)]


def nic_counters(cluster: MeteredCluster, engine: str) -> dict[tuple[str, str], float]:
    """{(metric, nic): value} of agentserve_nic_bytes_total and agentserve_nic_busy_seconds_total."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{cluster.metrics[engine]}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        for metric in ("agentserve_nic_bytes_total", "agentserve_nic_busy_seconds_total"):
            if line.startswith(metric + "{"):
                nic = line.split('nic="')[1].split('"')[0]
                out[(metric, nic)] = float(line.rsplit(" ", 1)[1])
    return out


def delta(after: dict, before: dict, metric: str, nic: str) -> float:
    return after[(metric, nic)] - before[(metric, nic)]


def test_engines_load_no_weights_and_report_the_targets_pool(cluster):
    for name in ("prefill-0", "decode-3"):
        log = (cluster.log_dir / f"{name}.log").read_text()
        assert "emulated compute: deepseek-v3.2 on h800, 73256 KV blocks of 769088 target bytes" in log
        assert "fabric profile dualpath-h800 (time dilation 4): snic 12.5 Gbps" in log  # 400 / 8 / 4


def test_multi_turn_sessions_through_the_scheduler(cluster, emulated):
    rng = random.Random(5)
    with Client(f"127.0.0.1:{cluster.ports.scheduler}", timeout_s=240) as client:
        for s in range(3):
            history: list[int] = []
            with client.open_session(tenant=f"emu-{s}", agent="coder") as session:
                for turn in range(3):
                    new = [rng.randrange(5, 8000) for _ in range(300 if turn == 0 else 40)]
                    result = session.turn(token_ids=new, max_tokens=MAX_TOKENS, ignore_eos=True).result()
                    prompt = history + new
                    meta = result.metadata
                    assert meta is not None
                    assert result.token_ids == expected_tokens(emulated, len(prompt), MAX_TOKENS)
                    assert meta.prompt_tokens == len(prompt)
                    # An earlier turn stored every full block of the history and its partial last
                    # block (a tail): all of it hits but the last token sampled, whose KV the decode
                    # engine computed only if it completed a block.
                    assert meta.cached_tokens == cached_history(len(history), BLOCK)
                    assert meta.kv_path in ("A", "B", "SPLIT")
                    assert meta.handoff_bytes == meta.handoff_blocks * TARGET_BLOCK_BYTES
                    history = prompt + result.token_ids


async def _prefill(
    address: str, tls: InternalTLS | None, tokens: list[int], tenant: str, hits: int, path: int, relay: str = ""
):
    async with open_channel(address, tls) as channel:
        return await prefill_pb2_grpc.PrefillStub(channel).Prefill(
            prefill_pb2.PrefillRequest(
                token_ids=tokens,
                sampling=common_pb2.SamplingParams(max_tokens=1, ignore_eos=True),
                tenant=tenant,
                store_hit_blocks=hits,
                kv_path=path,
                relay_address=relay,
            )
        )


def test_hits_by_path_a_and_b_are_charged_the_targets_bytes_at_the_dilated_rate(cluster, emulated):
    """One 1024-token prompt stored from prefill-0, then its 64-block prefix plus 20 new tokens
    prefilled on prefill-1 twice, under two tenants: by path A, and by path B relayed by decode-3."""
    prefill0 = f"127.0.0.1:{cluster.ports.prefill_port(0)}"
    prefill1 = f"127.0.0.1:{cluster.ports.prefill_port(1)}"
    relay = f"127.0.0.1:{cluster.ports.decode_ports[3]}"
    tls = cluster.internal_client("scheduler")  # prefills are the scheduler's to ask for (internal_roles.py)
    rng = random.Random(9)
    prompt = [rng.randrange(5, 8000) for _ in range(1024)]
    turn = prompt + [rng.randrange(5, 8000) for _ in range(20)]
    cost = EmulationConfig(time_dilation=D).cost()
    snic_rate = load_profile("dualpath-h800").dilated(D).engines["prefill"].snic.gbps * 1e9 / 8
    cnic_rate = load_profile("dualpath-h800").dilated(D).engines["prefill"].cnic.gbps * 1e9 / 8

    for tenant, path in (("path-a", prefill_pb2.KV_PATH_A), ("path-b", prefill_pb2.KV_PATH_B)):
        first = asyncio.run(_prefill(prefill0, tls, prompt, tenant, 0, prefill_pb2.KV_PATH_A))
        assert first.persisted_blocks == 64

        async def lookup(tenant: str) -> int:
            async with KVStoreClient(f"127.0.0.1:{cluster.ports.kvstore}", tls=tls) as store:
                return await store.lookup(block_ids_for(turn, BLOCK, emulated.fingerprint, tenant))

        assert asyncio.run(lookup(tenant)) == 64
        before = {n: nic_counters(cluster, n) for n in ("prefill-1", "decode-3")}
        start = time.monotonic()
        relayed = relay if path == prefill_pb2.KV_PATH_B else ""
        result = asyncio.run(_prefill(prefill1, tls, turn, tenant, 64, path, relayed))
        wall = time.monotonic() - start
        after = {n: nic_counters(cluster, n) for n in ("prefill-1", "decode-3")}

        assert result.first_token == expected_tokens(emulated, len(turn), 1)[0]
        assert (result.loaded_blocks, result.cached_tokens, result.persisted_blocks) == (64, 1024, 1)
        loaded = 64 * TARGET_BLOCK_BYTES
        persisted = 1 * TARGET_BLOCK_BYTES  # the one new full block (1044 tokens = 65 blocks + 4)
        pre_snic = delta(after["prefill-1"], before["prefill-1"], "agentserve_nic_bytes_total", "snic")
        pre_cnic = delta(after["prefill-1"], before["prefill-1"], "agentserve_nic_bytes_total", "cnic")
        relay_snic = delta(after["decode-3"], before["decode-3"], "agentserve_nic_bytes_total", "snic")
        relay_cnic = delta(after["decode-3"], before["decode-3"], "agentserve_nic_bytes_total", "cnic")
        if path == prefill_pb2.KV_PATH_A:
            assert (result.kv_path, result.relayed_blocks) == (prefill_pb2.KV_PATH_A, 0)
            assert (pre_snic, pre_cnic, relay_snic, relay_cnic) == (loaded + persisted, 0, 0, 0)
            load_s = loaded / snic_rate
        else:
            assert (result.kv_path, result.relayed_blocks) == (prefill_pb2.KV_PATH_B, 64)
            assert (pre_snic, relay_snic) == (persisted, loaded)
            # Relayed runs are charged by their share of the payload: each chunk rounds to a byte.
            assert abs(relay_cnic - loaded) <= 64 and abs(pre_cnic - loaded) <= 64
            load_s = loaded / cnic_rate
        busy = delta(after["prefill-1"], before["prefill-1"], "agentserve_nic_busy_seconds_total", "snic")
        assert busy == pytest.approx(pre_snic / snic_rate)
        compute_s = cost.prefill_s(1024, 20) * D
        # Load, then compute (not layerwise), then persist: never faster than the cost model allows.
        assert wall >= load_s + compute_s - 0.005
        assert wall < load_s + compute_s + persisted / snic_rate + 2.0
