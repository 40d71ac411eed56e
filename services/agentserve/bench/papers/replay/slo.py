"""Service-level objectives: `"ttft_first_p90=4000ms,ttft_later_p90=1000ms,tpot_p99=150ms"`.

Each term bounds one per-turn latency at a stated percentile, over the turns it applies to:

    ttft        time to first token, every turn
    ttft_first  time to first token of first turns (no reusable context of their own)
    ttft_later  time to first token of later turns (their context is mostly cached)
    tt2t        time to the second token, every turn
    tpot        time per output token after the first, turns of two tokens or more
    e2e         time to the last token, every turn

Bounds are in ms unless suffixed `s` or `ms`. First and later turns are apart because an agent's
later turns hit the cache and wait on KV loads, its first turns compute their whole prompt: one
TTFT bound over both hides which of the two a deployment runs out of first.

The SLO is read two ways, each defined once here:
- `check(records)`: every term holds at its own percentile (`ttft_later_p90=1000ms`: the 90th
  percentile of later turns' TTFT is at most 1 s; a failed turn counts as missing every bound).
  `SLOCheck.binding` is the term closest to (or furthest past) its bound: the one that fails first
  as load rises. Capacity searches (`bench capacity`, the planner) use this.
- `met_by(record)` / `attained(records)`: a turn meets the SLO when it succeeded and is within every
  bound that applies to it; goodput is such turns per second, and `attainment` (the strictest term's
  share) is the share of turns that must meet it (the DualPath bench's predicate).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agentserve.bench.common.stats import percentile
from agentserve.bench.papers.replay.records import TurnRecord

METRICS = ("ttft", "ttft_first", "ttft_later", "tt2t", "tpot", "e2e")
_TERM = re.compile(r"^(ttft_first|ttft_later|ttft|tt2t|tpot|e2e)_p(\d{1,2}(?:\.\d+)?)=(\d+(?:\.\d+)?)(ms|s)?$")


@dataclass(frozen=True)
class SLOTerm:
    """One bound: `metric`'s `share` quantile (0.9 for p90) over the turns it applies to, in seconds."""

    metric: str
    share: float
    bound_s: float

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.share * 100:g}"

    def applies_to(self, record: TurnRecord) -> bool:
        """First-turn terms judge first turns, later-turn terms later ones; a successful one-token
        turn has no TPOT to judge."""
        if self.metric == "ttft_first":
            return record.first
        if self.metric == "ttft_later":
            return not record.first
        return not (self.metric == "tpot" and record.ok and record.tpot_s is None)

    def value_s(self, record: TurnRecord) -> float:
        """The turn's latency for this term; infinite for a failed turn (it misses any bound)."""
        value = getattr(record, f"{self.metric.split('_')[0]}_s") if record.ok else None
        return math.inf if value is None else value

    def met_by(self, record: TurnRecord) -> bool:
        return not self.applies_to(record) or self.value_s(record) <= self.bound_s

    def check(self, records: Sequence[TurnRecord]) -> TermCheck:
        values = [self.value_s(r) for r in records if self.applies_to(r)]
        value = percentile(values, self.share * 100)
        return TermCheck(self, len(values), sum(math.isinf(v) for v in values), value)


@dataclass(frozen=True)
class TermCheck:
    """One term over a run: its percentile value (None without turns to judge; infinite when failed
    turns reach the percentile) against its bound."""

    term: SLOTerm
    turns: int
    failed: int
    value_s: float | None

    @property
    def met(self) -> bool:
        """Within the bound; a term without turns to judge (no later turns in a run) holds."""
        return self.value_s is None or self.value_s <= self.term.bound_s

    @property
    def ratio(self) -> float:
        """Value over bound: above 1 the term fails; the largest ratio binds."""
        return 0.0 if self.value_s is None else self.value_s / self.term.bound_s

    def to_json(self) -> dict[str, Any]:
        finite = self.value_s is not None and not math.isinf(self.value_s)
        return {
            "term": self.term.name,
            "metric": self.term.metric,
            "percentile": self.term.share * 100,
            "bound_ms": self.term.bound_s * 1000,
            "value_ms": self.value_s * 1000 if finite and self.value_s is not None else None,
            "ratio": self.ratio if finite or self.value_s is None else None,
            "turns": self.turns,
            "failed_turns": self.failed,
            "met": self.met,
        }


@dataclass(frozen=True)
class SLOCheck:
    terms: tuple[TermCheck, ...]

    @property
    def meets(self) -> bool:
        return all(t.met for t in self.terms)

    @property
    def binding(self) -> TermCheck:
        """The term nearest its bound, or furthest past it: the one that fails first as load rises."""
        return max(self.terms, key=lambda t: t.ratio)

    def to_json(self) -> dict[str, Any]:
        return {"meets": self.meets, "binding": self.binding.term.name, "terms": [t.to_json() for t in self.terms]}


@dataclass(frozen=True)
class SLO:
    bounds_s: tuple[tuple[str, float], ...]  # (metric, seconds)
    attainment: float  # share of turns that must meet every bound (`attained`): the strictest term's
    shares: tuple[float, ...] = ()  # each term's percentile as a share; () = every term at `attainment`

    def __post_init__(self) -> None:
        if self.shares and len(self.shares) != len(self.bounds_s):
            raise ValueError(f"an SLO needs one share per bound, got {len(self.shares)} for {len(self.bounds_s)}")

    @classmethod
    def parse(cls, text: str) -> SLO:
        bounds, shares = [], []
        for term in filter(None, (t.strip() for t in text.split(","))):
            m = _TERM.match(term)
            if not m:
                raise ValueError(
                    f"bad SLO term {term!r}: expected e.g. ttft_later_p90=2s (metrics {', '.join(METRICS)}; ms or s)"
                )
            metric, share, value, unit = m.groups()
            if not 0 < float(share) < 100:
                raise ValueError(f"SLO percentile must be in (0, 100), got {share} in {term!r}")
            bounds.append((metric, float(value) / (1 if unit == "s" else 1000)))
            shares.append(float(share) / 100)
        if not bounds:
            raise ValueError("an SLO needs at least one term, e.g. ttft_first_p90=4000ms,ttft_later_p90=1000ms")
        if len({m for m, _ in bounds}) != len(bounds):
            raise ValueError(f"each metric may appear once in an SLO: {text!r}")
        return cls(tuple(bounds), max(shares), tuple(shares))

    @property
    def terms(self) -> tuple[SLOTerm, ...]:
        shares = self.shares or (self.attainment,) * len(self.bounds_s)
        return tuple(SLOTerm(m, share, b) for (m, b), share in zip(self.bounds_s, shares, strict=True))

    def check(self, records: Sequence[TurnRecord]) -> SLOCheck:
        """Every term at its own percentile over the turns it applies to (see the module docstring)."""
        return SLOCheck(tuple(term.check(records) for term in self.terms))

    def met_by(self, record: TurnRecord) -> bool:
        return record.ok and all(term.met_by(record) for term in self.terms)

    def attained(self, records: Sequence[TurnRecord]) -> float:
        """Share of turns meeting the SLO (0 for no turns)."""
        return sum(self.met_by(r) for r in records) / len(records) if records else 0.0

    def to_json(self) -> dict:
        return {
            "bounds_ms": {m: b * 1000 for m, b in self.bounds_s},
            "attainment": self.attainment,
            "terms": {t.name: t.bound_s * 1000 for t in self.terms},
        }

    def __str__(self) -> str:
        return ",".join(f"{t.name}={t.bound_s * 1000:g}ms" for t in self.terms)
