"""`agentserve bench powerloss`: simulated power cuts under the real kvstore and session database.

Method (record and replay, the persistence model of LazyFS and ALICE):
1. A writer runs the real store code, unchanged, under an LD_PRELOAD recorder
   (`powerloss_recorder`) that logs every file-system call under its root with the data, in the
   order they took effect, and the writer's `begin`/`ack` markers between them.
2. A crash point k is chosen in the log; the state a power cut after the first k calls leaves
   is built by `powerloss_model`: file data not fsynced and directory entries not made durable by
   fsync of their directory are lost (mode "lose"); or, every other trial, a random prefix of the
   pending changes survives, the last write cut at a random byte (mode "torn").
3. That state is written to a fresh directory, the real store restarts on it, and
   `powerloss_targets` checks every acknowledged item (and every readable one).

Crash points are spread over four windows, named by the last durability step before the crash:
after a write, after a file fsync, after a rename, after a directory fsync (`sync`/`syncfs`
counts as a file fsync before renames, a directory fsync after them). Trials take the windows in
turn, a random point within each; a window with no point (SQLite renames nothing) gets none.
Each recording serves up to TRIALS_PER_RECORDING trials; kvstore recordings alternate fsync per
block and group commit, except with a planted bug (a group commit has no fsync to drop: it syncs
the whole file system).
"""

from __future__ import annotations

import logging
import math
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agentserve.bench.micro.powerloss_log import OPEN_DIRECTORY, Kind, Op
from agentserve.bench.micro.powerloss_model import materialize, replay
from agentserve.bench.micro.powerloss_recorder import PLANTS, record
from agentserve.bench.micro.powerloss_targets import CHECKS, Outcome, marks_of

WINDOWS = ("after_write", "after_fsync", "after_rename", "after_dir_fsync")
TRIALS_PER_RECORDING = 50
MECHANISM = "ld-preload record/replay (LazyFS persistence model)"
MAX_PROBLEMS = 10


@dataclass(frozen=True)
class PowerlossConfig:
    trials: int = 200
    target: str = "kvstore"
    plant: str | None = None  # a bug planted by the recorder (PLANTS): the check must then find losses
    seed: int = 0

    def __post_init__(self) -> None:
        if self.trials < 1:
            raise ValueError(f"trials must be at least 1, got {self.trials}")
        if self.target not in CHECKS:
            raise ValueError(f"target must be one of {', '.join(CHECKS)}, got {self.target!r}")
        if self.plant is not None and self.plant not in PLANTS:
            raise ValueError(f"plant must be one of {', '.join(PLANTS)}, got {self.plant!r}")


def windows_of(ops: list[Op]) -> list[str | None]:
    """The window of a crash after each prefix `ops[:k]`, k = 0..len(ops) (None before any write)."""
    dir_fds: set[int] = set()
    current: str | None = None
    windows: list[str | None] = [None]
    for op in ops:
        if op.kind is Kind.OPEN:
            (dir_fds.add if op.b & OPEN_DIRECTORY else dir_fds.discard)(op.fd)
        elif op.kind is Kind.CLOSE:
            dir_fds.discard(op.fd)
        elif op.kind in (Kind.WRITE, Kind.TRUNC):
            current = "after_write"
        elif op.kind is Kind.FSYNC:
            current = "after_dir_fsync" if op.fd in dir_fds else "after_fsync"
        elif op.kind is Kind.RENAME:
            current = "after_rename"
        elif op.kind is Kind.SYNCALL:
            current = "after_dir_fsync" if current == "after_rename" else "after_fsync"
        windows.append(current)
    return windows


def crash_points(windows: list[str | None], trials: int, rng: random.Random) -> list[tuple[int, str]]:
    """`trials` crash points (k, window): the windows that have points in turn, a random point in each."""
    candidates: dict[str, list[int]] = {w: [] for w in WINDOWS}
    for k, window in enumerate(windows):
        if window is not None:
            candidates[window].append(k)
    present = [w for w in WINDOWS if candidates[w]]
    if not present:
        raise ValueError("the recording has no write to crash after")
    return [(rng.choice(candidates[w]), w) for w in (present[i % len(present)] for i in range(trials))]


def run(config: PowerlossConfig) -> dict:
    # The store logs each torn file it drops; the report counts them (`torn_refused`) instead.
    store_log = logging.getLogger("agentserve.kvstore")
    level = store_log.level
    store_log.setLevel(logging.ERROR)
    try:
        return _run(config)
    finally:
        store_log.setLevel(level)


def _run(config: PowerlossConfig) -> dict:
    start = time.monotonic()
    per_window = {w: 0 for w in WINDOWS}
    lost_per_window = {w: 0 for w in WINDOWS}
    modes = {"lose": 0, "torn": 0}
    total = Outcome()
    problems: list[str] = []
    recordings = []
    trial = 0
    with tempfile.TemporaryDirectory(prefix="agentserve-powerloss-") as tmp:
        work = Path(tmp)
        for r in range(math.ceil(config.trials / TRIALS_PER_RECORDING)):
            seed = config.seed * 1000 + r
            group_commit = config.target == "kvstore" and config.plant is None and r % 2 == 1
            root = work / f"recording-{r}"
            root.mkdir()
            ops = record(config.target, root, seed, group_commit=group_commit, plant=config.plant)
            shutil.rmtree(root)
            marks = marks_of(ops)
            recordings.append(
                {"seed": seed, "group_commit": group_commit, "calls": len(ops), "acknowledged": len(marks.acked)}
            )
            rng = random.Random(seed)
            count = min(TRIALS_PER_RECORDING, config.trials - trial)
            for k, window in crash_points(windows_of(ops), count, rng):
                torn = trial % 2 == 1
                outcome = _trial(config.target, ops[:k], seed, random.Random(rng.random()) if torn else None, work)
                per_window[window] += 1
                lost_per_window[window] += outcome.lost
                modes["torn" if torn else "lose"] += 1
                _add(total, outcome)
                problems += [f"trial {trial} ({window}, call {k}): {p}" for p in outcome.problems]
                trial += 1
    result = {
        "bench": "powerloss",
        "target": config.target,
        "mechanism": MECHANISM,
        "plant": config.plant,
        "trials": trial,
        "acknowledged_lost": total.lost,
        "torn_readable": total.torn_readable,
        "acknowledged_checked": total.acknowledged,
        "crashes_per_window": per_window,
        "lost_per_window": lost_per_window,
        "persistence_modes": modes,
        "recordings": recordings,
        "problems": problems[:MAX_PROBLEMS],
        "wall_s": round(time.monotonic() - start, 2),
    }
    if config.target == "kvstore":
        result["torn_refused"] = total.refused  # torn block files the store found and dropped on read
    if config.target == "sessions":
        result["next_turn_checked"] = total.next_turn_checked
        result["next_turn_differs"] = total.next_turn_differs
    return result


def _trial(target: str, ops: list[Op], seed: int, rng: random.Random | None, work: Path) -> Outcome:
    """Restart `target` on what a power cut after `ops` leaves (mode "torn" with `rng`) and check it."""
    state = work / "restart"
    state.mkdir()
    try:
        materialize(replay(ops, rng), state)
        return CHECKS[target](state, marks_of(ops), seed)
    finally:
        shutil.rmtree(state)


def _add(total: Outcome, outcome: Outcome) -> None:
    total.acknowledged += outcome.acknowledged
    total.lost += outcome.lost
    total.torn_readable += outcome.torn_readable
    total.refused += outcome.refused
    total.next_turn_checked += outcome.next_turn_checked
    total.next_turn_differs += outcome.next_turn_differs


def markdown(result: dict) -> str:
    """The report's table of windows (crashes and acknowledged items lost in each) and its totals."""
    lines = [
        f"# bench powerloss: {result['target']}" + (f" (planted bug: {result['plant']})" if result["plant"] else ""),
        "",
        f"mechanism: {result['mechanism']}; {result['trials']} trials "
        f"({result['persistence_modes']['lose']} lose, {result['persistence_modes']['torn']} torn), "
        f"{result['acknowledged_checked']} acknowledged items checked",
        "",
        "| window | crashes | acknowledged lost |",
        "|---|---|---|",
    ]
    lines += [f"| {w} | {result['crashes_per_window'][w]} | {result['lost_per_window'][w]} |" for w in WINDOWS]
    lines += ["", f"acknowledged_lost {result['acknowledged_lost']}, torn_readable {result['torn_readable']}", ""]
    return "\n".join(lines)
