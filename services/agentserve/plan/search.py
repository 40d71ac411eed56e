"""The capacity search: the cheapest deployment whose simulated run meets the SLO.

For each policy set and storage-NIC bandwidth (a *family*) the search assumes that meeting the SLO
is monotone in the prefill and in the decode engine count (more engines of a role never hurt; true
up to noise, and the consistency check below tests it where it matters). Then the cheapest passing
engine counts lie on a staircase, P*(D) non-increasing in D, and the search walks it:

1. From a floor the cost model sets (`floors`: the prefill compute the offered load needs at full
   utilisation), grow until a point passes: the prefill count when a TTFT term binds, the decode
   count when TPOT binds (`SLO.binding`), by `GROWTH`; both once the binding term stops gaining
   (a later turn's TTFT also waits on the decode engines' storage NICs under DualPath).
2. Bisect the decode count at that prefill count, then the prefill count at that decode count:
   the staircase's first step.
3. Step the decode count up one at a time, bisecting the prefill count below the step before,
   while a point can still cost less than the cheapest passing one so far, and stop once an extra
   decode engine saves no prefill engine.

Colocated families (`plan/colocated.py`: a KV lifecycle policy and a storage-NIC bandwidth, on
engines that prefill and decode both) are searched after the prefill/decode ones, over one count:
the lowest passing engine count between the prefill floor and the most engines that still cost
less than the cheapest pass (probing that top first, so a family that cannot beat the cheapest
pass costs one simulation). A lifecycle's families go widest storage NIC first, and a narrower
one is not simulated when that many engines already failed with more bandwidth. A rejection at
the consistency check (below) raises the bound, and the colocated families are searched again.

Points that cannot cost less than the cheapest passing point found are never simulated. Every
simulated point is kept with why it was rejected (failed the SLO, and which term binds; or passed
but costs more). The family that holds the default profile's policy is searched first so the bound
is tight early.

**Consistency.** The cheapest passing point is simulated again on the workload drawn with another
seed; if it fails there it is rejected as too close to the bound and the next cheapest passing
point is checked. `consistent` is: the chosen point meets the SLO at the new seed, and every point
tried that costs less failed it. The chosen point's one-step-cheaper neighbours (one prefill or one
decode engine fewer) are simulated at the new seed as well and reported beside it: how far the
choice is from the bound. Within the workload's sampling noise a neighbour can pass at another seed
(its seed-0 run failed), which says the bound lies between the two, not that the search missed it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from agentserve.plan.colocated import COLOCATED, STORE
from agentserve.plan.deployment import Evaluator, Point, Trial

GROWTH = 1.5  # factor an engine count grows by while no point passes
STALL = 0.01  # a binding term whose value over bound shrinks less than this from growing its role has stalled
FLOOR_SHARE = 0.75  # of the full-utilisation prefill count, where the search starts
RESEED = 1  # the consistency check's seed (the search runs seed 0)
MAX_REJECTS = 8  # passes that fail at RESEED before the search gives up


@dataclass(frozen=True)
class Space:
    policies: tuple[str, ...]
    snic_gbps: tuple[float, ...]
    max_gpus: int
    lifecycles: tuple[str, ...] = ()  # colocated families' KV lifecycle policies (none: not searched)


def lowest_passing(passes: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """The smallest x in [lo, hi] with passes(x), for a predicate monotone in x (False up to some
    point, True from there); None when passes(hi) is False or the range is empty. Probes hi, then
    bisects: ceil(log2(hi - lo + 1)) more probes at most."""
    if lo > hi or not passes(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if passes(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def floors(ev: Evaluator) -> tuple[int, int]:
    """Where the search starts: 3/4 of the prefill engines that the prefill compute of every turn
    needs over the arrival window at full utilisation (turns of sessions that arrive late run past
    the window, so the whole-window figure can overstate the need), and one decode engine."""
    cost = ev.base.cost()
    work = 0.0
    for session in ev.workload.workload.sessions:
        context = ev.workload.workload.prefixes.get(session.prefix, 0) if session.prefix else 0
        for turn in session.turns:
            work += cost.prefill_s(context, turn.new_tokens)
            context += turn.new_tokens + turn.output_tokens
    return max(1, math.floor(FLOOR_SHARE * work / ev.workload.duration_s)), 1


class Search:
    def __init__(
        self, ev: Evaluator, space: Space, progress: bool = False, start: tuple[int, int] | None = None
    ) -> None:
        """`start`: the (prefill, decode) floors to grow from; default `floors(ev)`."""
        self.ev = ev
        self.space = space
        self.progress = progress
        self.best: Trial | None = None
        self.rejected: set[Point] = set()  # passed at seed 0, failed at RESEED: counted as failing
        self.families: list[dict[str, Any]] = []  # what each configuration's search did
        self.p_floor, self.d_floor = start if start is not None else floors(ev)
        self.started = time.monotonic()

    # -- one point --
    def cheaper_than_best(self, point: Point) -> bool:
        return self.best is None or self.ev.cost(point) < self.best.cost_per_hour

    def try_point(self, point: Point) -> Trial:
        trial = self.ev(point)
        if self.progress:
            print(
                f"plan: {point.label()}: attainment {trial.attainment:.3f} "
                f"{'meets' if trial.meets_slo else 'fails'} (binds {trial.binds}), {trial.wall_s:.1f} s "
                f"[{len(self.ev.trials)} trials, {time.monotonic() - self.started:.0f} s]",
                file=sys.stderr,
                flush=True,
            )
        if self.ok(trial) and (self.best is None or _rank(trial) < _rank(self.best)):
            self.best = trial
        return trial

    def ok(self, trial: Trial) -> bool:
        return trial.meets_slo and trial.point not in self.rejected

    def passes(self, point: Point) -> bool:
        """The verdict of a point already simulated; else simulated, or False unsimulated for a point
        that cannot beat the best."""
        tried = self.ev.trials.get((point, 0))
        if tried is not None:
            return self.ok(tried)
        if not self.cheaper_than_best(point) or point.gpus > self.space.max_gpus:
            return False
        return self.try_point(point).meets_slo

    # -- one family --
    def family(self, policy: str, snic: float, start: tuple[int, int] | None = None) -> None:
        corner = self._corner(policy, snic, start)
        if corner is None:
            return
        p_top, d_top = corner

        def at_decode(decode: int) -> Callable[[int], bool]:
            return lambda prefill: self.passes(Point(policy, snic, prefill, decode))

        d = lowest_passing(lambda decode: self.passes(Point(policy, snic, p_top, decode)), self.d_floor, d_top)
        if d is None:  # the corner itself passed, so only a seed-0 pass rejected since can get here
            return
        p = lowest_passing(at_decode(d), self.p_floor, p_top)
        while p is not None and p > self.p_floor:
            d += 1
            if not self.cheaper_than_best(Point(policy, snic, self.p_floor, d)):
                return
            step = lowest_passing(at_decode(d), self.p_floor, p - 1)
            if step is None:  # an extra decode engine saves no prefill engine
                return
            p = step

    def colocated_family(self, lifecycle: str, snic: float, floor: int | None = None) -> None:
        """The lowest passing count of colocated engines under `lifecycle`, from `floor` (default the
        prefill floor) up to the most that cost less than the cheapest pass."""
        lo = floor if floor is not None else self.p_floor

        def point(engines: int) -> Point:
            return Point(COLOCATED, snic, 0, 0, lifecycle, engines)

        top = self.space.max_gpus
        while top >= lo and not self.cheaper_than_best(point(top)):
            top -= 1
        if self._fails_with_more_bandwidth(lifecycle, snic, top):
            return
        lowest_passing(lambda n: self.passes(point(n)), lo, top)

    def _fails_with_more_bandwidth(self, lifecycle: str, snic: float, engines: int) -> bool:
        """Whether `engines` colocated engines or more failed under `lifecycle` with a wider storage
        NIC (more bandwidth never hurts, as more engines never do: so they fail with this one too)."""
        return any(
            pt.colocated >= engines and pt.lifecycle == lifecycle and pt.snic_gbps > snic and not self.ok(t)
            for (pt, seed), t in self.ev.trials.items()
            if seed == 0 and pt.colocated
        )

    def _corner(self, policy: str, snic: float, start: tuple[int, int] | None = None) -> tuple[int, int] | None:
        """A passing point, grown from the floors along the role whose term binds (by GROWTH, or to
        the most engines that still cost less than the best point); None if none passes below the
        best point's cost or `max_gpus`."""
        p, d = start or (self.p_floor, self.d_floor)
        last: Trial | None = None
        while True:
            point = Point(policy, snic, p, d)
            if not self.cheaper_than_best(point) or point.gpus > self.space.max_gpus:
                return None
            trial = self.try_point(point)
            if self.ok(trial):
                return p, d
            roles = {"decode" if trial.binds.startswith("tpot") else "prefill"}
            if last is not None and trial.binds == last.binds and _ratio(trial) >= _ratio(last) * (1 - STALL):
                roles = {"prefill", "decode"}  # the binding term stalled: the other role limits it too
            last = trial
            if "prefill" in roles:
                p = self._grown(Point(policy, snic, p, d), "prefill")
            if "decode" in roles:
                d = self._grown(Point(policy, snic, p, d), "decode")

    def _grown(self, point: Point, role: str) -> int:
        """`role`'s count grown by GROWTH, or less if that would cost as much as the best point."""
        count = point.prefill if role == "prefill" else point.decode
        grown = max(count + 1, math.ceil(count * GROWTH))
        while grown > count + 1 and not self.cheaper_than_best(
            replace(point, prefill=grown) if role == "prefill" else replace(point, decode=grown)
        ):
            grown -= 1
        return grown

    # -- the whole search --
    def run(self, first: tuple[str, float]) -> None:
        families = [(pol, STORE, snic) for pol in self.space.policies for snic in self.space.snic_gbps]
        families.sort(key=lambda f: (f[0], f[2]) != first)
        widest_first = sorted(self.space.snic_gbps, reverse=True)
        families += [(COLOCATED, life, snic) for life in self.space.lifecycles for snic in widest_first]
        for policy, lifecycle, snic in families:
            before = len(self.ev.trials)
            if policy == COLOCATED:
                self.colocated_family(lifecycle, snic)
            else:
                self.family(policy, snic)
            mine = [
                t
                for (pt, seed), t in self.ev.trials.items()
                if seed == 0 and (pt.policy, pt.lifecycle, pt.snic_gbps) == (policy, lifecycle, snic)
            ]
            passing = [t for t in mine if self.ok(t)]
            self.families.append(
                {
                    "policy": policy,
                    "lifecycle": lifecycle,
                    "snic_gbps_per_node": snic,
                    "points_simulated": len(self.ev.trials) - before,
                    "cheapest_pass": min(passing, key=_rank).point.to_dict() if passing else None,
                    "outcome": "searched" if len(self.ev.trials) > before else _unsimulated(policy),
                }
            )

    def choose(self) -> tuple[Trial | None, dict[str, Any]]:
        """The cheapest seed-0 pass that also passes at RESEED, and the consistency record. A pass
        that fails at RESEED is rejected (counted as failing from then on) and its family searched
        again from it, so a choice too close to the bound moves up (at most `MAX_REJECTS` times)."""
        rejected: list[dict[str, Any]] = []
        while len(rejected) < MAX_REJECTS:
            passing = sorted((t for (_, seed), t in self.ev.trials.items() if seed == 0 and self.ok(t)), key=_rank)
            if not passing:
                break
            trial = passing[0]
            again = self.ev(trial.point, RESEED)
            if again.meets_slo:
                return trial, self._consistency(trial, again, rejected)
            trial.verdict = f"passes at seed 0 but fails at seed {RESEED} (attainment {again.attainment:.3f})"
            rejected.append({**trial.point.to_dict(), "attainment_reseed": round(again.attainment, 4)})
            self.rejected.add(trial.point)
            self.best = min(passing[1:], key=_rank, default=None)
            # Every rejected point's family again (each may have stopped at the bound this one set).
            for p in sorted(self.rejected):
                if p.colocated:
                    self.colocated_family(p.lifecycle, p.snic_gbps, p.colocated + 1)
                else:
                    self.family(p.policy, p.snic_gbps, (p.prefill, p.decode))
            # Colocated families again too: each stopped at the bound the rejected point set, and
            # costs one simulation more when its new top fails.
            for lifecycle in self.space.lifecycles:
                for snic in sorted(self.space.snic_gbps, reverse=True):
                    self.colocated_family(lifecycle, snic)
        return None, {"consistent": False, "why": "no point tried meets the SLO at both seeds", "rejected": rejected}

    def _consistency(self, chosen: Trial, again: Trial, rejected: list[dict[str, Any]]) -> dict[str, Any]:
        p = chosen.point
        neighbours = []
        if p.colocated:
            fewer = [replace(p, colocated=p.colocated - 1)] if p.colocated > 1 else []
        else:
            fewer = [replace(p, prefill=p.prefill - 1), replace(p, decode=p.decode - 1)]
        for n in fewer:
            if n.colocated or (n.prefill >= 1 and n.decode >= 1):
                t = self.ev(n, RESEED)
                neighbours.append(
                    {**n.to_dict(), "seed": RESEED, "attainment": round(t.attainment, 4), "meets_slo": t.meets_slo}
                )
        cheaper = [t for (_, seed), t in self.ev.trials.items() if seed == 0 and t.cost_per_hour < chosen.cost_per_hour]
        cheaper_failed = all(not t.meets_slo or t.verdict.startswith("passes at seed 0 but fails") for t in cheaper)
        return {
            "consistent": again.meets_slo and cheaper_failed,
            "reseed": RESEED,
            "chosen_at_reseed": {"attainment": round(again.attainment, 4), "meets_slo": again.meets_slo},
            "cheaper_points_tried": len(cheaper),
            "cheaper_points_all_fail": cheaper_failed,
            "cheaper_neighbours_at_reseed": neighbours,
            "passed_seed0_failed_reseed": rejected,
        }


def _unsimulated(policy: str) -> str:
    if policy == COLOCATED:
        return (
            "not simulated: as many engines as could cost less than the cheapest pass fail with a wider "
            "storage NIC, or its floor costs no less"
        )
    return "not simulated: its floor point costs no less than the cheapest pass found before it"


def _ratio(trial: Trial) -> float:
    """The binding term's value over its bound."""
    return trial.ratios[trial.binds]


def _rank(trial: Trial) -> tuple[float, int, float]:
    """Cheapest first; then fewer GPUs; then the higher attainment."""
    return (round(trial.cost_per_hour, 9), trial.point.gpus, -trial.attainment)


def verdicts(trials: list[Trial], chosen: Trial | None) -> None:
    """Say why each seed-0 trial was or was not chosen."""
    for t in trials:
        if t.verdict:
            continue
        if chosen is not None and t.point == chosen.point:
            t.verdict = "chosen: the cheapest point that meets the SLO at both seeds"
        elif not t.meets_slo:
            terms = ", ".join(f"{k} {v:.2f}" for k, v in t.ratios.items())
            t.verdict = f"fails: {t.binds} binds (value over bound: {terms}); attainment {t.attainment:.3f}"
        else:
            cost = chosen.cost_per_hour if chosen else float("nan")
            t.verdict = f"meets the SLO but costs {t.cost_per_hour:.2f}/h against {cost:.2f}/h"
