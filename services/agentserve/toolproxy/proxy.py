"""One proxied tool call: predict, report Started, run the tool, learn, report Finished.

Plain logic, no HTTP: `http_app` translates requests into `ToolProxy.call` and back.

Each call is a `tool.call` span of OpenInference kind TOOL (arguments in, answer out). It joins
whatever trace is current: the caller's `traceparent` (the SDK sends its session's latest turn, so
the tool shows under the turn that asked for it), else a trace of its own; `session.id` ties it to
its session either way.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agentserve.common import openinference as oi
from agentserve.common.errors import NotFoundError
from agentserve.common.telemetry import tracer
from agentserve.contracts import ToolCall
from agentserve.toolproxy import metrics
from agentserve.toolproxy.predictor import ToolDurationPredictor
from agentserve.toolproxy.tools import JSON, ToolRegistry, ToolResult

log = logging.getLogger(__name__)


class EventSink(Protocol):
    """Where tool wait events go (`SchedulerReporter`, or a recording fake in tests). Never blocks."""

    def started(self, record: ToolCall) -> None: ...

    def finished(self, record: ToolCall) -> None: ...


@dataclass(frozen=True)
class ToolSummary:
    name: str
    kind: str
    predicted_duration_s: float
    calls: int


class ToolProxy:
    def __init__(self, registry: ToolRegistry, predictor: ToolDurationPredictor, events: EventSink) -> None:
        self._registry = registry
        self._predictor = predictor
        self._events = events
        self._calls: Counter[str] = Counter()

    def tools(self) -> list[ToolSummary]:
        return [
            ToolSummary(t.name, t.kind, self._predictor.predict(t.name), self._calls[t.name]) for t in self._registry
        ]

    async def call(
        self,
        name: str,
        args: Mapping[str, Any],
        session_id: str = "",
        call_id: str = "",
        caller_predicted_s: float = 0.0,
    ) -> tuple[ToolResult, ToolCall]:
        """Run tool `name`; NotFoundError if there is none. Bad arguments come back as a 400 result.
        `caller_predicted_s` (the caller's own duration estimate, 0 = none) travels with the events.

        Events are reported only for calls tied to a session (the scheduler has nothing to
        offload otherwise). The predictor learns from every call whose tool actually ran.
        """
        tool = self._registry.get(name)
        if tool is None:
            raise NotFoundError(f"unknown tool {name!r}")
        self._calls[name] += 1
        record = ToolCall(
            session_id,
            name,
            call_id or uuid.uuid4().hex,
            time.time(),
            self._predictor.predict(name),
            ok=False,
            caller_predicted_s=caller_predicted_s,
        )
        if session_id:
            self._events.started(record)
        result = ToolResult.error(499, "tool call cancelled", "cancelled")
        ran = True
        start = time.perf_counter()
        with tracer().start_as_current_span("tool.call") as span:
            arguments = oi.bounded(json.dumps(dict(args), default=str))
            span.set_attributes(
                {
                    oi.SPAN_KIND: oi.TOOL,
                    oi.TOOL_NAME: name,
                    oi.INPUT_VALUE: arguments,
                    oi.INPUT_MIME_TYPE: oi.JSON,
                    "tool.call_id": record.call_id,
                    "tool.predicted_duration_s": record.predicted_duration_s,
                }
            )
            if session_id:  # an empty one would read as a session of its own in the UI
                span.set_attribute(oi.SESSION_ID, session_id)
            try:
                result = await tool.call(args, session_id)
            except ValueError as exc:
                ran = False
                result = ToolResult.error(400, str(exc), "invalid_request_error")
            except Exception:
                log.exception("tool %s failed", name)
                result = ToolResult.error(500, f"tool {name} failed", "tool_error")
            finally:
                actual = time.perf_counter() - start
                if ran:
                    self._predictor.observe(name, actual)
                    metrics.TOOL_SECONDS.labels(name).observe(actual)
                    metrics.PREDICTION_ERROR_SECONDS.labels(name).observe(abs(actual - record.predicted_duration_s))
                metrics.TOOL_CALLS.labels(name, str(result.ok).lower()).inc()
                record = replace(record, actual_duration_s=actual, ok=result.ok)
                if session_id:
                    self._events.finished(record)
                span.set_attributes(
                    {
                        "tool.actual_duration_s": actual,
                        "tool.ok": result.ok,
                        "http.status_code": result.status,
                        oi.OUTPUT_VALUE: oi.bounded(result.body.decode(errors="replace")),
                        oi.OUTPUT_MIME_TYPE: oi.JSON if result.content_type == JSON else oi.TEXT,
                    }
                )
        return result, record
