"""The must-show figures: each policy against `lru` at the middle arrival rate, and the targets
(TokenCake's single-GPU gains) the `agentserve` policy is held to.

Beside them, the physical limit measured in the same runs (`bound.py`):
`e2e_latency_reduction_bound` = 1 - mean(lru's job latency bound) / mean(lru's job latency) at
the middle rate, the largest `e2e_latency_reduction` any policy could show against this lru on
these tool times, and the share of lru's job latency its critical chains spent in tool waits
(`lru_chain_tool_share`) and in LLM turns (`lru_chain_llm_share`, of which
`lru_chain_modelled_compute_share` is the turns' own modelled compute).
`e2e_latency_reduction_of_reachable` = `e2e_latency_reduction` / `e2e_latency_reduction_bound`:
the share of what any policy could take off lru that agentserve took off."""

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
            "job_latency_bound_mean_s": (f.get("bound") or {}).get("job_latency_bound_mean_s"),
        }
        for p, f in at.items()
    }
    ours = per_policy.get(OURS, {})
    base_bound = base.get("bound") or {}
    reachable = _reduction(base_bound.get("job_latency_bound_mean_s"), base.get("job_latency_mean_s"))
    achieved = ours.get("e2e_latency_reduction")
    return {
        "compared_at_rate_jobs_per_s": rate,
        "e2e_latency_reduction": ours.get("e2e_latency_reduction"),
        "critical_path_jct_reduction": ours.get("critical_path_jct_reduction"),
        "kv_utilization_gain": ours.get("kv_utilization_gain"),
        "prefetch_hit_ratio": ours.get("prefetch_hit_ratio"),
        "e2e_latency_reduction_bound": reachable,
        "e2e_latency_reduction_of_reachable": None if achieved is None or not reachable else achieved / reachable,
        "lru_chain_tool_share": base_bound.get("chain_tool_share"),
        "lru_chain_llm_share": base_bound.get("chain_llm_share"),
        "lru_chain_modelled_compute_share": base_bound.get("chain_modelled_compute_share"),
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
