"""Fixtures every tier shares. `tiny_model_dir` is built once per session: other engine tests reuse
it. `spans` collects the spans of this process.

Every test process, and every process a test starts, runs torch on one intra-op thread
(`OMP_NUM_THREADS`, unless the environment sets it). The tiers, the integration tier's workers and
the engines of their clusters share two cores, so a second torch thread per process finds its core
taken; torch's OpenMP threads then wait at each operator's barrier for a thread that is not
running, which turns an operator on a tiny model into milliseconds. A test about thread counts sets
them itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentserve.common.telemetry import setup_tracing
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model_init import init_model


def pytest_configure(config: pytest.Config) -> None:
    threads = os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(int(threads))


@pytest.fixture(scope="session")
def reference() -> LLMEngine:
    """The default model recomputing every prompt in this process (no prefix cache): the parity
    anchor that cached, relayed, handed-off and restored KV must match token for token."""
    return LLMEngine.from_dir(ensure_default_model(), EngineConfig(prefix_cache=False))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default tiny Llama model (seed 0) in Hugging Face format. Treat it as read-only."""
    return init_model(tmp_path_factory.mktemp("tiny"), "tiny", seed=0)


@pytest.fixture(scope="session")
def span_exporter() -> InMemorySpanExporter:
    """Finished spans of this process, exported synchronously (reset per test by `spans`)."""
    exporter = InMemorySpanExporter()
    setup_tracing("agentserve-test").add_span_processor(SimpleSpanProcessor(exporter))
    return exporter


@pytest.fixture
def spans(span_exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    span_exporter.clear()
    return span_exporter
