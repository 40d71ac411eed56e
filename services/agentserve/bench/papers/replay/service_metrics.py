"""What the services themselves measured during a replay: KV bytes by path (and over time), cache
hits per store tier, NIC utilisation. Each comes with its source, or is None with the reason."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from agentserve.bench.common.spans import KV_PATHS, KVTransfer
from agentserve.bench.papers.replay.prom import Scrape, delta, label_values, total

NIC_BUSY = "agentserve_nic_busy_seconds_total"  # counters: the sample names end in _total
NIC_BYTES = "agentserve_nic_bytes_total"
NIC_GBPS = "agentserve_nic_configured_gbps"  # a gauge; 0 = unshaped
TIER_HITS = "agentserve_kvstore_tier_hits"
# Phase histograms (local seconds): a turn's phases in the scheduler, a prefill request's in its engine.
PHASE_HISTOGRAMS = {
    "scheduler": "agentserve_scheduler_turn_phase_seconds",
    "prefill": "agentserve_prefill_phase_seconds",
}
# A histogram's samples this reads: its name + _sum / _count -> (side, field).
_PHASE_FIELDS = {
    f"{name}_{suffix}": (side, field)
    for side, name in PHASE_HISTOGRAMS.items()
    for suffix, field in (("sum", "sum_s"), ("count", "count"))
}
FORWARD_SECONDS = "agentserve_engine_forward_seconds_total"  # emulated engines: compute, layer_wait


def _path_counters(scrape: Scrape) -> dict[str, float]:
    """Sum of every agentserve byte counter labelled with a KV `path`, by path."""
    out: dict[str, float] = defaultdict(float)
    for sample in scrape.by_target.values():
        for (name, labels), value in sample.items():
            ls = dict(labels)
            if name.startswith("agentserve_") and "path" in ls and name.endswith(("_bytes", "_bytes_total")):
                out[ls["path"]] += value
    return out


def kv_bytes(
    scrapes: Sequence[Scrape], transfers: Sequence[KVTransfer] | None, start_unix_s: float, bin_s: float
) -> dict:
    """{"by_path": {path: bytes} | None, "source", "reason", "timeline": {"t_s", "by_path"}}."""
    if len(scrapes) >= 2 and _path_counters(scrapes[-1]):
        first, last = _path_counters(scrapes[0]), _path_counters(scrapes[-1])
        paths = sorted(set(KV_PATHS) | set(last))
        by_path = {p: int(last.get(p, 0) - first.get(p, 0)) for p in paths}
        times: list[float] = []
        series: dict[str, list[float]] = {p: [] for p in paths}
        for before, after in zip(scrapes, scrapes[1:]):
            b, a = _path_counters(before), _path_counters(after)
            times.append(after.unix_s - start_unix_s)
            for p in paths:
                series[p].append(a.get(p, 0) - b.get(p, 0))
        return {
            "by_path": by_path,
            "source": "prometheus (byte counters labelled path)",
            "reason": None,
            "timeline": {"t_s": times, "by_path": series, "bin_s": None},
        }
    if transfers is None:
        return {
            "by_path": None,
            "source": None,
            "timeline": None,
            "reason": "no service exports KV bytes per path on /metrics, and no span source was given "
            "(bench-started clusters collect kv.transfer spans; against a deployment pass --phoenix)",
        }
    paths = sorted(set(KV_PATHS) | {t.path for t in transfers})
    by_path = {p: 0 for p in paths}
    bins: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for t in transfers:
        by_path[t.path] += t.nbytes
        bins[int(max(0.0, t.end_unix_s - start_unix_s) // bin_s)][t.path] += t.nbytes
    n = max(bins) + 1 if bins else 0
    timeline = {
        "t_s": [(i + 1) * bin_s for i in range(n)],
        "bin_s": bin_s,
        "by_path": {p: [bins[i].get(p, 0) if i in bins else 0 for i in range(n)] for p in paths},
    }
    return {"by_path": by_path, "source": "kv.transfer spans", "reason": None, "timeline": timeline}


def tier_hits(scrapes: Sequence[Scrape], prompt_tokens: int, cached_tokens: int, block_tokens: int) -> dict:
    """Share of prompt tokens served by each store tier (its block reads during the run), and by
    the engines' own memory (the rest of the cached tokens)."""
    if len(scrapes) < 2 or prompt_tokens <= 0:
        return {"by_tier": None, "reason": "no kvstore /metrics to read (pass --metrics kvstore=URL)"}
    first, last = _merged(scrapes[0]), _merged(scrapes[-1])
    tiers = sorted(label_values(last, TIER_HITS, "tier"))
    if not tiers:
        return {"by_tier": None, "reason": f"the kvstore does not export {TIER_HITS}"}
    by_tier = {}
    store_tokens = 0.0
    for tier in tiers:
        tokens = (delta(first, last, TIER_HITS, tier=tier) or 0.0) * block_tokens
        store_tokens += tokens
        by_tier[tier] = tokens / prompt_tokens
    by_tier["engine"] = max(0.0, cached_tokens - store_tokens) / prompt_tokens
    return {
        "by_tier": by_tier,
        "reason": None,
        "note": "store tiers: block reads during the run x block tokens / prompt tokens; "
        "engine: cached tokens the store did not serve",
    }


def nic_utilization(scrapes: Sequence[Scrape]) -> dict:
    """Busy share of every shaped emulated NIC over the run, and its max and mean over NICs. An
    unshaped NIC (no configured bandwidth) has no utilisation: it is listed as None."""
    if len(scrapes) < 2:
        return {
            "per_nic": None,
            "max": None,
            "avg": None,
            "reason": "no service /metrics sampled (a local target samples its own; against a deployment pass "
            "--metrics NAME=URL for each engine)",
        }
    first, last = scrapes[0], scrapes[-1]
    elapsed = last.unix_s - first.unix_s
    per_nic: dict[str, float | None] = {}
    nic_bytes = {}
    for target, sample in last.by_target.items():
        before = first.by_target.get(target, {})
        for nic in sorted(label_values(sample, NIC_BUSY, "nic")):
            name = f"{target}/{nic}"
            moved = delta(before, sample, NIC_BYTES, nic=nic)
            if moved is not None:
                nic_bytes[name] = int(moved)
            if not total(sample, NIC_GBPS, nic=nic):
                per_nic[name] = None
                continue
            busy = (total(sample, NIC_BUSY, nic=nic) or 0.0) - (total(before, NIC_BUSY, nic=nic) or 0.0)
            per_nic[name] = busy / elapsed if elapsed > 0 else None
    if not per_nic:
        return {
            "per_nic": None,
            "max": None,
            "avg": None,
            "reason": "no service exports agentserve_nic_busy_seconds (engines without emulated NICs)",
        }
    values = [v for v in per_nic.values() if v is not None]
    reason = (
        None
        if values
        else (
            "every NIC is unshaped (no configured bandwidth, e.g. profile local-unshaped): "
            "utilisation is undefined; replay with a shaped profile such as --profile h800-node"
        )
    )
    return {
        "per_nic": per_nic,
        "bytes_per_nic": nic_bytes,
        "max": max(values, default=None),
        "avg": sum(values) / len(values) if values else None,
        "reason": reason,
    }


def phase_seconds(scrapes: Sequence[Scrape]) -> dict:
    """What the services' phase histograms and emulated forwards recorded during the run.

    {"phases": {"scheduler" | "prefill": {turn kind: {phase: {"sum_s", "count"}}}} summed over the
    services, "forward_s": {service: {"compute" | "layer_wait": seconds}} per emulated engine,
    "elapsed_s": the scrapes' span}; empty maps where no service exports them."""
    if len(scrapes) < 2:
        return {"phases": {}, "forward_s": {}, "elapsed_s": None}
    first, last = scrapes[0], scrapes[-1]
    phases: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    forward: dict[str, dict[str, float]] = {}
    for target, sample in last.by_target.items():
        before = first.by_target.get(target, {})
        for (sample_name, labels), value in sample.items():
            if sample_name not in _PHASE_FIELDS:
                continue
            side, field = _PHASE_FIELDS[sample_name]
            ls = dict(labels)
            entry = phases.setdefault(side, {}).setdefault(ls["turn"], {}).setdefault(ls["phase"], {})
            entry[field] = entry.get(field, 0.0) + value - before.get((sample_name, labels), 0.0)
        for kind in sorted(label_values(sample, FORWARD_SECONDS, "kind")):
            seconds = delta(before, sample, FORWARD_SECONDS, kind=kind)
            if seconds is not None:
                forward.setdefault(target, {})[kind] = seconds
    return {"phases": phases, "forward_s": forward, "elapsed_s": last.unix_s - first.unix_s}


def _merged(scrape: Scrape) -> dict:
    out: dict = {}
    for sample in scrape.by_target.values():
        for key, value in sample.items():
            out[key] = out.get(key, 0.0) + value
    return out
