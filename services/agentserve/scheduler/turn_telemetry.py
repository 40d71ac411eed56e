"""What a turn reports: its span (`TurnSpans`), its metadata for the client (`TurnMeta`) and the
scheduler's metrics (phases, placements, KV paths, failures, outcomes).

Reporting only: nothing here changes how a turn runs.
"""

from __future__ import annotations

import logging
import time

from opentelemetry.trace import Span, Status, StatusCode

from agentserve.contracts import PrefillResult, TurnMeta
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler import metrics
from agentserve.scheduler.placement import Placement
from agentserve.scheduler.registry import Engine
from agentserve.scheduler.running_turn import RunningTurn
from agentserve.scheduler.tracing import TurnSpans

log = logging.getLogger(__name__)


def phase(name: str, turn_index: int, since: float) -> float:
    """Observe phase `name` of a turn as the time since `since` (perf_counter); returns now."""
    now = time.perf_counter()
    metrics.TURN_PHASE_SECONDS.labels(name, _label(turn_index)).observe(now - since)
    return now


def _label(turn_index: int) -> str:
    return "first" if turn_index == 0 else "later"


class TurnTelemetry:
    def __init__(self, tokenizer: Tokenizer, model_name: str) -> None:
        self.spans = TurnSpans(tokenizer, model_name)

    @staticmethod
    def first_event(turn: RunningTurn, started: float) -> None:
        """The turn's first event reached the caller, `started` (perf_counter) after its request."""
        metrics.TIME_TO_FIRST_TOKEN.labels(_label(turn.index)).observe(time.perf_counter() - started)

    @staticmethod
    def outcome(done: bool, failure: BaseException | None) -> None:
        metrics.TURNS.labels("ok" if done else metrics.outcome_of(failure)).inc()

    @staticmethod
    def placed(turn: RunningTurn, placed: Placement) -> None:
        turn.span.set_attributes(placed.attributes())
        metrics.record_placement(placed)

    def prefilled(self, turn: RunningTurn, placed: Placement, response: PrefillResult, hits: int) -> TurnMeta:
        """Record the prefill's outcome; the turn's metadata for its first event."""
        prefill, decode, path = placed.prefill, placed.decode, response.kv_path
        span_context = turn.span.get_span_context()
        trace_id = format(span_context.trace_id, "032x") if span_context.is_valid else ""
        span_id = format(span_context.span_id, "016x") if span_context.is_valid else ""
        meta = TurnMeta(
            turn.turn_id,
            turn.index,
            len(turn.prompt),
            response.cached_tokens,
            prefill.engine_id,
            decode.engine_id,
            trace_id,
            span_id=span_id,
            relay_engine=placed.relay.engine_id if placed.relay and response.relayed_blocks else "",
            kv_path=path.value,
            loaded_blocks=response.loaded_blocks,
            relayed_blocks=response.relayed_blocks,
            handoff_blocks=response.handoff_blocks,
            handoff_bytes=response.handoff_bytes,
            handoff_held_blocks=response.handoff_held_blocks,
        )
        metrics.KV_PATHS.labels(path.value).inc()
        metrics.HANDOFF_BYTES.inc(response.handoff_bytes)
        self.spans.prefilled(turn.span, response.cached_tokens)
        turn.span.set_attributes(
            {
                "turn.cached_tokens": response.cached_tokens,
                "turn.store_hit_blocks": hits,
                "turn.prefill_engine": prefill.engine_id,
                "turn.decode_engine": decode.engine_id,
                "turn.kv_path": path.value,
                "turn.relayed_blocks": response.relayed_blocks,
                "turn.handoff_bytes": response.handoff_bytes,
                "turn.handoff_held_blocks": response.handoff_held_blocks,
            }
        )
        return meta

    @staticmethod
    def engine_failed(engine: Engine, exc: Exception) -> None:
        log.warning("dropping %s engine %s at %s: %s", engine.status.role.value, engine.engine_id, engine.address, exc)
        metrics.ENGINE_FAILURES.labels(engine.status.role.value).inc()

    @staticmethod
    def failed(span: Span, exc: Exception) -> None:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, str(exc)))

    def end(self, turn: RunningTurn) -> None:
        """The turn's span ends with its output so far (at most once: `TurnSpans.end`)."""
        self.spans.end(turn.span, len(turn.prompt), turn.output)
