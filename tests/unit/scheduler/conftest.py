"""Scheduler test fixtures: the tiny model's real tokenizer and a core wired to fakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentserve.engine.model_init import init_model
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.config import SchedulerConfig
from agentserve.scheduler.core import SchedulerCore
from agentserve.scheduler.registry import EngineRegistry, Role
from tests.unit.scheduler.fakes import FakeEngines, FakeStore, status


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return init_model(tmp_path_factory.mktemp("tiny"), "tiny", seed=0)


@pytest.fixture(scope="session")
def tokenizer(model_dir: Path) -> Tokenizer:
    return Tokenizer.from_dir(model_dir)


@pytest.fixture
def engines() -> FakeEngines:
    return FakeEngines()


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def make_core(tokenizer, engines, store):
    """`make_core(prefill=1, decode=2, registry=None, **config)`: a core with that many fake engines
    registered (prefill p0.., decode d0..; addresses 127.0.0.1:600x and :700x), in `registry` if
    given (one on a fake clock)."""

    def make(prefill: int = 1, decode: int = 2, registry: EngineRegistry | None = None, **config) -> SchedulerCore:
        core = SchedulerCore(
            SchedulerConfig(http_port=0, **config), tokenizer, store=store, engines=engines, registry=registry
        )
        for i in range(prefill):
            core.register(status(f"p{i}", Role.PREFILL, 6000 + i))
        for i in range(decode):
            core.register(status(f"d{i}", Role.DECODE, 7000 + i))
        return core

    return make
