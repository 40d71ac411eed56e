"""Samples the services' Prometheus `/metrics` during a replay.

Only what the services really export is read: the kvstore's per-tier reads
(`agentserve_kvstore_tier_hits{tier}`), each engine's emulated NICs (`agentserve_nic_busy_seconds`
and `agentserve_nic_bytes{nic}`) and any byte counter labelled with a KV `path`. What is absent
stays absent, and the report says so instead of inventing a number.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

Labels = tuple[tuple[str, str], ...]
Sample = dict[tuple[str, Labels], float]  # (sample name, sorted labels) -> value


def parse_metrics(text: str) -> Sample:
    out: Sample = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return out


def fetch(url: str, timeout_s: float = 3.0) -> Sample | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return parse_metrics(response.read().decode())
    except (urllib.error.URLError, OSError, ValueError):
        return None


@dataclass
class Scrape:
    unix_s: float
    by_target: dict[str, Sample]


@dataclass
class PromSampler:
    """Scrapes every target every `interval_s` while `run()` is awaited; `stop()` takes a last one."""

    targets: Mapping[str, str]  # service name -> /metrics URL
    interval_s: float = 2.0
    scrapes: list[Scrape] = field(default_factory=list)
    unreachable: set[str] = field(default_factory=set)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def scrape_once(self) -> None:
        names = list(self.targets)
        results = await asyncio.gather(*(asyncio.to_thread(fetch, self.targets[n]) for n in names))
        by_target = {}
        for name, sample in zip(names, results):
            if sample is None:
                self.unreachable.add(name)
            else:
                by_target[name] = sample
        self.scrapes.append(Scrape(time.time(), by_target))

    async def run(self) -> None:
        if not self.targets:
            return
        while not self._stop.is_set():
            await self.scrape_once()
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        self._stop.set()
        if self.targets:
            await self.scrape_once()


def total(sample: Sample, name: str, **labels: str) -> float | None:
    """Sum of the samples called `name` whose labels include `labels`; None if there are none."""
    values = [v for (n, ls), v in sample.items() if n == name and all((k, v2) in ls for k, v2 in labels.items())]
    return sum(values) if values else None


def label_values(sample: Sample, name: str, label: str) -> set[str]:
    return {dict(ls)[label] for (n, ls), _ in sample.items() if n == name and label in dict(ls)}


def delta(first: Sample, last: Sample, name: str, **labels: str) -> float | None:
    end = total(last, name, **labels)
    if end is None:
        return None
    return end - (total(first, name, **labels) or 0.0)
