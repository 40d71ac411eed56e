"""What a serving system's processes hold and burn while it serves: the process trees under named
root pids (a local cluster's services, llama-server).

Memory is sampled and summed over all trees. Two sums are kept: RSS (what `top` shows; pages
shared between processes, such as a model file mapped by several engines, count once per
process) and PSS (each shared page divided among the
processes that map it, so the sum is what the system really holds). Peak and mean over samples.
CPU is user + system seconds per named tree from the start of `run` to its end: which process
spent the cores, and how much per generated token.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1 << 20
PROC = Path("/proc")
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (which may hold spaces): fields 3 onwards."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def tree(pids: Iterable[int]) -> list[int]:
    """The live pids rooted at `pids`, descendants included (parents read from /proc/*/stat)."""
    children: dict[int, list[int]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: list[int] = []
    todo = [p for p in pids if (PROC / str(p)).exists()]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def cpu_seconds(pids: Iterable[int]) -> float:
    """User + system CPU seconds used so far by the trees under `pids` (utime and stime, fields
    14 and 15 of /proc/<pid>/stat)."""
    total = 0
    for pid in tree(pids):
        fields = _stat_fields(pid)
        if fields is not None:
            total += int(fields[11]) + int(fields[12])
    return total / TICKS_PER_S


def rss_pss(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of one process in bytes, from /proc/<pid>/smaps_rollup; (0, 0) once it exited."""
    rss = pss = 0
    try:
        lines = (PROC / str(pid) / "smaps_rollup").read_text().splitlines()
    except OSError:
        return 0, 0
    for line in lines:
        key, _, rest = line.partition(":")
        if key == "Rss":
            rss = int(rest.split()[0]) * 1024
        elif key == "Pss":
            pss = int(rest.split()[0]) * 1024
    return rss, pss


def sample(pids: Iterable[int]) -> tuple[int, int]:
    """(RSS, PSS) in bytes summed over the trees under `pids`; processes that exit are skipped."""
    rss = pss = 0
    for pid in tree(pids):
        r, p = rss_pss(pid)
        rss += r
        pss += p
    return rss, pss


@dataclass
class ResourceSampler:
    """Samples memory of `roots()` (name -> pid) every `interval_s` while `run()` is awaited,
    until `stop()`; CPU seconds per name from the start of `run` to its end."""

    roots: Callable[[], dict[str, int]]
    interval_s: float = 1.0
    samples: list[tuple[int, int]] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=dict)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    def _cpu(self) -> dict[str, float]:
        return {name: cpu_seconds([pid]) for name, pid in self.roots().items()}

    async def run(self) -> None:
        before = await asyncio.to_thread(self._cpu)
        while not self._stop.is_set():
            self.samples.append(await asyncio.to_thread(sample, self.roots().values()))
            try:
                await asyncio.wait_for(self._stop.wait(), self.interval_s)
            except TimeoutError:
                pass
        after = await asyncio.to_thread(self._cpu)
        self.cpu_s = {name: after[name] - before.get(name, 0.0) for name in after}

    def stop(self) -> None:
        self._stop.set()

    def summary(self) -> dict:
        return {**summarize_samples(self.samples), "cpu_s": self.cpu_s, "cpu_s_total": sum(self.cpu_s.values())}


def summarize_samples(samples: list[tuple[int, int]]) -> dict[str, float | int | None]:
    """Peak and mean RSS and PSS in MiB over `samples`."""
    if not samples:
        return {"samples": 0, "rss_peak_mib": None, "rss_mean_mib": None, "pss_peak_mib": None, "pss_mean_mib": None}
    rss = [r for r, _ in samples]
    pss = [p for _, p in samples]
    return {
        "samples": len(samples),
        "rss_peak_mib": max(rss) / MIB,
        "rss_mean_mib": sum(rss) / len(rss) / MIB,
        "pss_peak_mib": max(pss) / MIB,
        "pss_mean_mib": sum(pss) / len(pss) / MIB,
    }
