"""Service-level objectives: `"ttft_p90=2000ms,tpot_p90=150ms"`.

Each term bounds one per-turn latency (ttft, tt2t, tpot, e2e; ms unless suffixed `s` or `ms`)
and names the share of turns that must meet it (p90: 90%). A turn meets the SLO when it succeeded
and every bounded latency is within its bound; the run meets it when at least the strictest named
share of turns does (capacity search's predicate). Goodput is turns meeting it per second.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from agentserve.bench.papers.replay.records import TurnRecord

METRICS = ("ttft", "tt2t", "tpot", "e2e")
_TERM = re.compile(r"^(ttft|tt2t|tpot|e2e)_p(\d{1,2}(?:\.\d+)?)=(\d+(?:\.\d+)?)(ms|s)?$")


@dataclass(frozen=True)
class SLO:
    bounds_s: tuple[tuple[str, float], ...]  # (metric, seconds)
    attainment: float  # share of turns that must meet every bound

    @classmethod
    def parse(cls, text: str) -> SLO:
        bounds, shares = [], []
        for term in filter(None, (t.strip() for t in text.split(","))):
            m = _TERM.match(term)
            if not m:
                raise ValueError(
                    f"bad SLO term {term!r}: expected e.g. ttft_p90=2000ms (metrics {', '.join(METRICS)}; ms or s)"
                )
            metric, share, value, unit = m.groups()
            if not 0 < float(share) < 100:
                raise ValueError(f"SLO percentile must be in (0, 100), got {share} in {term!r}")
            bounds.append((metric, float(value) / (1 if unit == "s" else 1000)))
            shares.append(float(share) / 100)
        if not bounds:
            raise ValueError("an SLO needs at least one term, e.g. ttft_p90=2000ms,tpot_p90=150ms")
        if len({m for m, _ in bounds}) != len(bounds):
            raise ValueError(f"each metric may appear once in an SLO: {text!r}")
        return cls(tuple(bounds), max(shares))

    def met_by(self, record: TurnRecord) -> bool:
        if not record.ok:
            return False
        for metric, bound in self.bounds_s:
            value = getattr(record, f"{metric}_s")
            if value is not None and value > bound:
                return False
            if value is None and metric != "tpot":  # a one-token turn has no TPOT to violate
                return False
        return True

    def attained(self, records: Sequence[TurnRecord]) -> float:
        """Share of turns meeting the SLO (0 for no turns)."""
        return sum(self.met_by(r) for r in records) / len(records) if records else 0.0

    def to_json(self) -> dict:
        return {"bounds_ms": {m: b * 1000 for m, b in self.bounds_s}, "attainment": self.attainment}

    def __str__(self) -> str:
        share = f"p{self.attainment * 100:g}"
        return ",".join(f"{m}_{share}={b * 1000:g}ms" for m, b in self.bounds_s)
