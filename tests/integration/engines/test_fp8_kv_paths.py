"""DualPath at the engines with FP8 KV (`--kv-dtype fp8_e4m3` on every engine): the store keeps FP8
blocks, the handoff carries FP8 bytes, and a turn's store hits loaded by path A, by path B, split
over both, or staged layer by layer give the tokens of a full recompute with FP8 KV."""

from __future__ import annotations

import asyncio

import pytest
import torch

from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.kv.block_format import read_header, serialize_blocks
from agentserve.kvstore.client import KVStoreClient
from agentserve.v1 import prefill_pb2
from tests.integration.engines.test_kv_paths import BLOCK, STORED, _conversation
from tests.support.processes import free_port, start_service, wait_serving

pytestmark = pytest.mark.integration

FP8 = ["--kv-dtype", "fp8_e4m3"]


@pytest.fixture(scope="module")
def fp8_cluster(tmp_path_factory):
    """The package cluster's shape (`conftest.cluster`), every engine with FP8 KV."""
    kv_port, prefill_port, layerwise_port, decode_port, decode2_port, scheduler_port = (free_port() for _ in range(6))
    data_dir = tmp_path_factory.mktemp("kv-fp8")
    kv = start_service(
        "kvstore-fp8", "agentserve.kvstore", ["--grpc-port", str(kv_port), "--data-dir", str(data_dir)], kv_port
    )
    common = ["--peer-allowlist", "false", "--advertise-host", "127.0.0.1", *FP8]
    common += ["--scheduler-address", f"127.0.0.1:{scheduler_port}", "--kvstore-address", kv.address]
    procs = [kv]
    try:
        layerwise = ["--layerwise", "true", "--layerwise-min-read-kb", "0"]
        for name, module, port, extra in (
            ("prefill", "agentserve.prefill", prefill_port, []),
            ("prefill-layerwise", "agentserve.prefill", layerwise_port, layerwise),
            ("decode", "agentserve.decode", decode_port, []),
            ("decode2", "agentserve.decode", decode2_port, []),
        ):
            args = ["--grpc-port", str(port), *common, *extra]
            procs.append(start_service(f"{name}-fp8", module, args, port, wait=False))
        for proc in procs[1:]:
            wait_serving(proc.address, 180, proc.proc, proc.log)
        yield {
            name: proc for name, proc in zip(("kvstore", "prefill", "prefill-layerwise", "decode", "decode2"), procs)
        }
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture(scope="module")
def fp8_reference() -> LLMEngine:
    """A full recompute with FP8 KV: the parity anchor of every path here."""
    return LLMEngine.from_dir(ensure_default_model(), EngineConfig(prefix_cache=False, kv_dtype="fp8_e4m3"))


def _native_block_bytes(engine: LLMEngine, kv_dtype: str) -> int:
    config = engine.model_config
    zeros = torch.zeros((config.num_hidden_layers, 1, BLOCK, config.num_key_value_heads, config.head_dim))
    return len(serialize_blocks(zeros, zeros, [bytes(16)], engine.fingerprint, kv_dtype=kv_dtype))


def test_every_path_gives_the_fp8_recompute_tokens_and_moves_fp8_bytes(fp8_cluster, fp8_reference):
    decode2 = fp8_cluster["decode2"].address
    by_a, tokens_a, ids = _conversation(fp8_cluster, fp8_reference, "fp8-a", prefill_pb2.KV_PATH_A)
    _, tokens_b, _ = _conversation(fp8_cluster, fp8_reference, "fp8-b", prefill_pb2.KV_PATH_B, decode2)
    _, tokens_split, _ = _conversation(
        fp8_cluster, fp8_reference, "fp8-split", prefill_pb2.KV_PATH_SPLIT, decode2, relay_blocks=STORED // 2
    )
    assert tokens_a == tokens_b == tokens_split

    async def stored():
        async with KVStoreClient(fp8_cluster["kvstore"].address) as client:
            return [data async for _, data in client.get(fp8_reference.fingerprint, ids[:STORED])]

    blocks = asyncio.run(stored())
    assert len(blocks) == STORED and {read_header(b).kv_dtype for b in blocks} == {"fp8_e4m3"}
    fp8_bytes, fp32_bytes = (_native_block_bytes(fp8_reference, d) for d in ("fp8_e4m3", "native"))
    assert {len(b) for b in blocks} == {fp8_bytes} and fp8_bytes < 0.3 * fp32_bytes
    assert by_a.handoff_bytes < 0.3 * by_a.handoff_blocks * fp32_bytes


def test_layerwise_prefill_gives_the_fp8_recompute_tokens(fp8_cluster, fp8_reference):
    decode2 = fp8_cluster["decode2"].address
    for tenant, kv_path, relay in (
        ("fp8-lw-a", prefill_pb2.KV_PATH_A, ""),
        ("fp8-lw-b", prefill_pb2.KV_PATH_B, decode2),
    ):
        pre, _, _ = _conversation(fp8_cluster, fp8_reference, tenant, kv_path, relay, 0, "prefill-layerwise")
        assert pre.cached_tokens == STORED * BLOCK, tenant
