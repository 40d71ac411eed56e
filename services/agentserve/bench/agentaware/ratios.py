"""The must-show figures: each policy against `lru` at the middle arrival rate, and the targets
(TokenCake's single-GPU gains) the `agentserve` policy is held to."""

from __future__ import annotations

from typing import Any

BASELINE = "lru"
OURS = "agentserve"
TARGETS = {"e2e_latency_reduction": 0.47, "kv_utilization_gain": 0.169, "prefetch_hit_ratio": 0.9}


def _reduction(ours: float | None, base: float | None) -> float | None:
    return None if ours is None or not base else 1 - ours / base


def _gain(ours: float | None, base: float | None) -> float | None:
    return None if ours is None or not base else ours / base - 1


def middle(rates: list[float]) -> float:
    ordered = sorted(rates)
    return ordered[len(ordered) // 2]


def must_show(by_policy: dict[str, dict[float, dict[str, Any]]]) -> dict[str, Any]:
    """`by_policy`: policy -> rate -> run figures. Policies without runs are left out."""
    ran = {p: runs for p, runs in by_policy.items() if runs}
    if BASELINE not in ran:
        return {"reason": f"the {BASELINE} baseline did not run"}
    rate = middle(list(ran[BASELINE]))
    at = {p: runs.get(rate, {}) for p, runs in ran.items()}
    base = at[BASELINE]
    per_policy = {
        p: {
            "e2e_latency_reduction": _reduction(f.get("job_latency_mean_s"), base.get("job_latency_mean_s")),
            "critical_path_jct_reduction": _reduction(
                f.get("critical_path_jct_mean_s"), base.get("critical_path_jct_mean_s")
            ),
            "kv_utilization_gain": _gain((f.get("kv") or {}).get("kv_utilization"), base["kv"]["kv_utilization"]),
            "prefetch_hit_ratio": f.get("prefetch_hit_ratio"),
            "recomputed_tokens": f.get("recomputed_tokens"),
            "offload_bytes": f.get("offload_bytes"),
            "upload_bytes": f.get("upload_bytes"),
            "job_latency_mean_s": f.get("job_latency_mean_s"),
            "critical_path_jct_mean_s": f.get("critical_path_jct_mean_s"),
            "kv_utilization": (f.get("kv") or {}).get("kv_utilization"),
        }
        for p, f in at.items()
    }
    ours = per_policy.get(OURS, {})
    return {
        "compared_at_rate_jobs_per_s": rate,
        "e2e_latency_reduction": ours.get("e2e_latency_reduction"),
        "critical_path_jct_reduction": ours.get("critical_path_jct_reduction"),
        "kv_utilization_gain": ours.get("kv_utilization_gain"),
        "prefetch_hit_ratio": ours.get("prefetch_hit_ratio"),
        "recomputed_tokens": {p: v["recomputed_tokens"] for p, v in per_policy.items()},
        "offload_bytes": {p: v["offload_bytes"] for p, v in per_policy.items()},
        "upload_bytes": {p: v["upload_bytes"] for p, v in per_policy.items()},
        "by_policy": per_policy,
    }


def verdicts(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        key: {
            "value": figures.get(key),
            "target": target,
            "met": figures.get(key) is not None and figures[key] >= target,
        }
        for key, target in TARGETS.items()
    }
