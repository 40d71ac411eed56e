"""The demo's last line: where to see the last turn's trace."""

from __future__ import annotations

import pytest

from agentserve.cli.demo import trace_line
from agentserve.sdk import TurnMetadata, TurnResult
from tests.support.processes import free_port

pytestmark = pytest.mark.integration


def turn(trace_id: str, span_id: str) -> TurnResult:
    meta = TurnMetadata("t", 2, 90, 64, "p0", "d0", trace_id, span_id=span_id)
    return TurnResult("ok", [5], "stop", 1, meta)


def test_without_a_tracing_ui_the_line_says_why_there_is_no_link():
    ui = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    line = trace_line(ui, turn("ab" * 16, "cd" * 8))
    assert line.startswith(f"last turn's trace: not shown, tracing UI at {ui} is unreachable: ")
    assert line.endswith(
        "(services export spans only when OTEL_EXPORTER_OTLP_ENDPOINT is set; `docker compose up` sets it)"
    )


def test_a_turn_without_trace_context_points_at_the_ui():
    assert trace_line("http://ui:6006", turn("", "")) == "traces: http://ui:6006 (project 'agentserve')"
