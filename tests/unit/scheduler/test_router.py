"""LeastLoadedRouter: fewest queued sequences, ties by engine id."""

from __future__ import annotations

import pytest

from agentserve.scheduler.registry import Engine, Role
from agentserve.scheduler.router import LeastLoadedRouter
from tests.unit.scheduler.fakes import status

pytestmark = pytest.mark.unit


def engine(engine_id: str, running: int = 0, waiting: int = 0, inflight: int = 0) -> Engine:
    return Engine(status(engine_id, Role.DECODE, 7000, running=running, waiting=waiting), 0.0, inflight)


def test_picks_fewest_running_plus_waiting() -> None:
    engines = [engine("a", running=2, waiting=1), engine("b", running=1, waiting=1), engine("c", running=0, waiting=4)]
    assert LeastLoadedRouter().pick(engines, None).engine_id == "b"


def test_ties_go_to_the_lowest_id_whatever_the_order() -> None:
    engines = [engine("d2", running=1), engine("d0", running=1), engine("d1", running=1)]
    assert LeastLoadedRouter().pick(engines, None).engine_id == "d0"
    assert LeastLoadedRouter().pick(list(reversed(engines)), None).engine_id == "d0"


def test_own_inflight_calls_count_before_the_next_heartbeat() -> None:
    # Both reported idle, but this scheduler already sent two turns to d0.
    engines = [engine("d0", inflight=2), engine("d1")]
    assert LeastLoadedRouter().pick(engines, None).engine_id == "d1"


def test_empty_list_is_an_error() -> None:
    with pytest.raises(ValueError):
        LeastLoadedRouter().pick([], None)
