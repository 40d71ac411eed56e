"""Where a turn's time went, per policy: the physical limits beside the JCT.

From one offline run's records and the services' own phase metrics (local seconds, means over the
run's later turns: every turn after an agent's first, the regime the figures are about):

- `client`: the turn cycle as an agent sees it: time to first token, the rest of the output, and
  the gap from its end to the agent's next turn's request (the client's own work).
- `scheduler`: the same time to first token split where the scheduler sees it: waiting for the
  session's previous turn, the store lookup, the prefill call; then the decode stream (with the
  KV drop at its end, also given alone as `release`).
- `prefill`: the prefill call inside its engine: pool-room wait (no layerwise), the load, the
  queue behind other prefills, its own forward (layer waits included; a compute-quota batch's
  first tokens come out together, so a member's runs to its batch's end), persist, handoff, drop.
  Under layerwise the load runs beside queue and forward, so the phases do not add up. The engine
  knows a turn only by its store hits: with a shared prefix cached, first turns have hits too,
  and these means are then over every turn.
- `prefill_engines`: each prefill engine's share of the run spent computing, held by a layerwise
  forward waiting for its next layer's KV, and neither (idle or CPU work).
- `bounds`: the JCT each limit alone would allow: `prefill_compute_s` (the busiest prefill
  engine's compute: every turn served back to back, reads free), `prefill_snic_s` (the busiest
  prefill storage NIC's busy time: path A's reads alone), and `agent_chain_s` (an agent's turns
  one after another, each taking only the mean forward, decode and client gap: the closed loop
  with no queue anywhere). The largest bound is the physical limit; the JCT over it is what
  the run lost to queueing and stalls beyond it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from statistics import mean
from typing import Any

from agentserve.bench.papers.replay.records import TurnRecord

LATER = "later"


def _means(phases: dict[str, dict[str, float]]) -> dict[str, float | None]:
    return {phase: (v["sum_s"] / v["count"]) if v.get("count") else None for phase, v in sorted(phases.items())}


def _client(turns: Sequence[TurnRecord]) -> dict[str, Any]:
    """Later turns' TTFT, output time and the gap to the session's next request, in local seconds."""
    by_session: dict[str, list[TurnRecord]] = defaultdict(list)
    for t in turns:
        by_session[t.session_id].append(t)
    ttft, output, gap = [], [], []
    for records in by_session.values():
        records.sort(key=lambda t: t.index)
        for prev, t in zip([None, *records], records):
            if t.first or not t.ok or t.first_token_s is None:
                continue
            ttft.append(t.first_token_s - t.sent_s)
            if t.done_s is not None:
                output.append(t.done_s - t.first_token_s)
            if prev is not None and prev.done_s is not None:
                gap.append(t.sent_s - prev.done_s)
    return {
        "turns": len(ttft),
        "ttft_s": mean(ttft) if ttft else None,
        "output_s": mean(output) if output else None,
        "gap_s": mean(gap) if gap else None,
        "cycle_s": mean(ttft) + mean(output) + mean(gap) if ttft and output and gap else None,
    }


def breakdown(summary: dict[str, Any], turns: Sequence[TurnRecord], snic: dict[str, Any]) -> dict[str, Any]:
    """The run's per-turn phases and bounds (module docstring). `snic`: `metrics.nic_figures` of
    the run's storage NICs."""
    service = summary.get("service_seconds") or {}
    phases = service.get("phases") or {}
    duration = summary["duration_s"]
    client = _client(turns)
    forward = {n: s for n, s in sorted((service.get("forward_s") or {}).items()) if n.startswith("prefill")}
    engines: dict[str, dict[str, float]] = {}
    for name, seconds in forward.items() if duration else ():
        compute, wait = seconds.get("compute", 0.0), seconds.get("layer_wait", 0.0)
        engines[name] = {
            "compute_share": compute / duration,
            "layer_wait_share": wait / duration,
            "other_share": max(0.0, 1.0 - (compute + wait) / duration),
        }
    scheduler = _means(phases.get("scheduler", {}).get(LATER, {}))
    prefill = _means(phases.get("prefill", {}).get(LATER, {}))
    agents = len({t.session_id for t in turns})
    chain = None
    turn_forward, decode, gap = prefill.get("forward"), scheduler.get("decode"), client.get("gap_s")
    if agents and turn_forward is not None and decode is not None and gap is not None:
        chain = len(turns) / agents * (turn_forward + decode + gap)
    computes = [s.get("compute", 0.0) for s in forward.values()]
    prefill_snics = [u for n, u in (snic.get("utilization") or {}).items() if n.startswith("prefill") and u is not None]
    return {
        "client": client,
        "scheduler": scheduler,
        "prefill": prefill,
        "prefill_engines": engines,
        "bounds": {
            "jct_s": duration,
            "prefill_compute_s": max(computes) if computes else None,
            "prefill_snic_s": max(prefill_snics) * duration if prefill_snics else None,
            "agent_chain_s": chain,
        },
    }


def busiest_engine_share(turn_phases: dict[str, Any], share: str) -> float | None:
    """The largest `share` (compute_share, layer_wait_share, other_share) among the run's prefill
    engines (`breakdown`'s `prefill_engines`); None without any."""
    return max((e[share] for e in turn_phases["prefill_engines"].values()), default=None)
