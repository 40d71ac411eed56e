"""One policy's figures from one replay: what the must-show ratios are computed from.

Offline, every agent is submitted at once and the job completion time (JCT) is the time until the
last agent's last turn ends; throughput is the same work over that time. Storage-NIC figures come
from every engine's emulated SNIC (`agentserve_nic_busy_seconds`, `agentserve_nic_bytes`)."""

from __future__ import annotations

from typing import Any

SNIC = "snic"
CNIC = "cnic"


def _role(service: str) -> str:
    return service.split("-")[0]


def nic_figures(nic: dict, kind: str, duration_s: float) -> dict[str, Any]:
    """Busy share and bytes of every engine's NIC of `kind`, by engine and summed by role; a
    NIC's rate while busy (bytes over busy time) is the bandwidth its shaping allowed."""
    per = {name.rsplit("/", 1)[0]: u for name, u in (nic.get("per_nic") or {}).items() if name.endswith(f"/{kind}")}
    moved = {
        name.rsplit("/", 1)[0]: b for name, b in (nic.get("bytes_per_nic") or {}).items() if name.endswith(f"/{kind}")
    }
    shares = [u for u in per.values() if u is not None]
    by_role: dict[str, dict[str, float]] = {}
    for engine, b in moved.items():
        role = by_role.setdefault(_role(engine), {"bytes": 0.0, "engines": 0, "gbps": 0.0, "gbps_when_busy": 0.0})
        role["bytes"] += b
        role["engines"] += 1
        if duration_s > 0:
            role["gbps"] += b * 8 / 1e9 / duration_s
            busy = per.get(engine)
            if busy:
                role["gbps_when_busy"] += b * 8 / 1e9 / (busy * duration_s)
    return {
        "utilization": per,
        "bytes": moved,
        "bytes_by_role": by_role,
        "max": max(shares) if shares else None,
        "avg": sum(shares) / len(shares) if shares else None,
        "max_over_avg": max(shares) / (sum(shares) / len(shares)) if shares and sum(shares) > 0 else None,
    }


def run_figures(summary: dict) -> dict[str, Any]:
    """The figures of one offline replay that the report compares across policies."""
    duration = summary["duration_s"]
    nic = summary.get("nic_utilization") or {}
    snic = nic_figures(nic, SNIC, duration)
    return {
        "jct_s": duration,
        "turns_total": summary["turns_total"],
        "turns_ok": summary["turns_ok"],
        "turns_failed": summary["turns_failed"],
        "failures": summary["failures"],
        "turns_per_s": summary["throughput"]["turns_per_s"],
        "prompt_tokens_per_s": summary["throughput"]["prompt_tokens_per_s"],
        "computed_prompt_tokens_per_s": summary["throughput"]["computed_prompt_tokens_per_s"],
        "output_tokens_per_s": summary["throughput"]["output_tokens_per_s"],
        "hit_ratio": summary["hit_ratio"],
        "ttft_p50_ms": summary["ttft_p50_ms"],
        "ttft_p90_ms": summary["ttft_p90_ms"],
        "tpot_p50_ms": summary["tpot_p50_ms"],
        "tpot_p90_ms": summary["tpot_p90_ms"],
        # TPOT less the first token's hand-off to the decode engine: the decode step's own pace.
        "itl_p50_ms": summary["itl_p50_ms"],
        "itl_p90_ms": summary["itl_p90_ms"],
        "agent_completion_s": summary["session_completion_s"],
        "snic": snic,
        "cnic": nic_figures(nic, CNIC, duration),
        "kv_bytes_by_path": summary.get("kv_bytes_by_path"),
        "engines": summary["engines"],
        "nic_reason": nic.get("reason"),
    }
