"""Fixtures every tier shares. `tiny_model_dir` is built once per session: other engine tests reuse
it. `spans` collects the spans of this process."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentserve.common.telemetry import setup_tracing
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model_init import init_model


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
