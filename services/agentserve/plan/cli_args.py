"""`agentserve plan` arguments (light: the parser imports this module; the simulation runs later).

Every option but `--workload` has a default, stated in its help. A bad value fails in the parser
(exit 2) with a message naming the option.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from agentserve.bench.common.policy import DEFAULT_TURN_ORDER
from agentserve.bench.papers.replay.slo import SLO
from agentserve.costmodel.gpus import TARGET_GPUS
from agentserve.costmodel.models import TARGET_MODELS
from agentserve.plan.deployment import DEFAULT_GPU_HOUR_COST, DEFAULT_SNIC_100G_HOUR_COST
from agentserve.plan.elastic_spec import ELASTIC_DEFAULTS, SCALING_KEYS, scaling_settings
from agentserve.plan.planner import (
    DEFAULT_MAX_GPUS,
    DEFAULT_POLICIES,
    DEFAULT_PROFILE,
    DEFAULT_SLO,
    DEFAULT_SNIC_GBPS,
    DEFAULT_TRACE_WINDOW_S,
)
from agentserve.scheduler.kv_lifecycle import LIFECYCLE_POLICIES

POLICY_CHOICES = ("baseline", "layerwise", "dualpath", "dualpath-split")


def slo(text: str) -> str:
    try:
        SLO.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--slo: {exc}") from None
    return text


def number(name: str, zero_ok: bool = False) -> Callable[[str], float]:
    """A parser of `name`'s value: a number above 0 (at least 0 with `zero_ok`)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if value < 0 or (value == 0 and not zero_ok):
            raise argparse.ArgumentTypeError(f"{name} must be {'>= 0' if zero_ok else '> 0'}, got {text!r}")
        return value

    return parse


def policy_list(text: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [n for n in names if n not in POLICY_CHOICES]
    if not names or unknown:
        given = ", ".join(unknown) or "(none given)"
        raise argparse.ArgumentTypeError(f"--policies: unknown policy {given}; choose from {', '.join(POLICY_CHOICES)}")
    return names


def lifecycle_list(text: str) -> tuple[str, ...]:
    """Lifecycle policies by registry name, comma-separated; `none`: no colocated points."""
    if text.strip() == "none":
        return ()
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    unknown = [n for n in names if n not in LIFECYCLE_POLICIES]
    if not names or unknown:
        given = ", ".join(unknown) or "(none given)"
        raise argparse.ArgumentTypeError(
            f"--lifecycles: unknown lifecycle policy {given}; choose from {', '.join(LIFECYCLE_POLICIES)}, or none"
        )
    return names


def gbps_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--snic-gbps must be comma-separated numbers, got {text!r}") from None
    if not values or any(not v > 0 for v in values):
        raise argparse.ArgumentTypeError(f"--snic-gbps must be positive numbers, got {text!r}")
    return values


def scaling(text: str) -> dict[str, float | bool]:
    try:
        settings = scaling_settings(text)
        replace(ELASTIC_DEFAULTS, **settings)  # type: ignore[arg-type]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"--scaling: {exc}") from None
    return settings


def max_gpus(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--max-gpus must be an integer, got {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"--max-gpus must be >= 2 (one prefill, one decode engine), got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workload",
        help="required unless --elastic or --multi: a Mooncake or TraceLab JSONL trace file (read as it is), or a "
        "generator spec coding[:sessions=N,turns=N,system=T,first=T,new=T,output=T,tool=DIST,tool_prob=P,rate=R] "
        "(DIST: const:X, exp:MEAN, uniform:LO,HI, lognormal:MEDIAN,SIGMA)",
    )
    p.add_argument(
        "--slo",
        type=slo,
        default=DEFAULT_SLO,
        help=f"first-turn TTFT, later-turn TTFT and TPOT bounds with their percentile (default {DEFAULT_SLO})",
    )
    p.add_argument("--profile", default=DEFAULT_PROFILE, help=f"hardware profile (default {DEFAULT_PROFILE})")
    p.add_argument(
        "--model",
        default="",
        choices=["", *TARGET_MODELS],
        help="target model (default: the profile's, deepseek-v3.2 for dualpath-h800)",
    )
    p.add_argument("--gpu", default="h800", choices=list(TARGET_GPUS), help="target GPU (default h800)")
    p.add_argument(
        "--gpu-hour-cost",
        type=number("--gpu-hour-cost"),
        default=DEFAULT_GPU_HOUR_COST,
        help=f"price of one GPU-hour (default {DEFAULT_GPU_HOUR_COST})",
    )
    p.add_argument(
        "--snic-cost",
        type=number("--snic-cost", zero_ok=True),
        default=DEFAULT_SNIC_100G_HOUR_COST,
        help=f"price of 100 Gbps of a node's storage NIC per hour (default {DEFAULT_SNIC_100G_HOUR_COST})",
    )
    p.add_argument(
        "--policies",
        type=policy_list,
        default=DEFAULT_POLICIES,
        help=f"policy sets searched (default {','.join(DEFAULT_POLICIES)}; also dualpath-split)",
    )
    p.add_argument(
        "--lifecycles",
        type=lifecycle_list,
        default=LIFECYCLE_POLICIES,
        help=f"KV lifecycle policies searched on colocated engines, the only ones the simulator models them on "
        f"(default {','.join(LIFECYCLE_POLICIES)}; none: prefill/decode points only, whose lifecycle is the store's)",
    )
    p.add_argument(
        "--snic-gbps",
        type=gbps_list,
        default=DEFAULT_SNIC_GBPS,
        help=f"storage-NIC bandwidths per node searched (default {','.join(f'{g:g}' for g in DEFAULT_SNIC_GBPS)})",
    )
    p.add_argument(
        "--max-gpus",
        type=max_gpus,
        default=DEFAULT_MAX_GPUS,
        help=f"largest deployment tried (default {DEFAULT_MAX_GPUS})",
    )
    p.add_argument(
        "--window",
        type=number("--window"),
        default=DEFAULT_TRACE_WINDOW_S,
        help=f"a trace's first seconds planned for (default {DEFAULT_TRACE_WINDOW_S:g}; generated workloads: all)",
    )
    p.add_argument(
        "--turn-order", default=DEFAULT_TURN_ORDER, help=f"scheduler turn order (default {DEFAULT_TURN_ORDER})"
    )
    p.add_argument(
        "--elastic",
        action="store_true",
        help="instead: a scaling policy against a static deployment sized for the peak on a day-long diurnal trace",
    )
    p.add_argument(
        "--multi",
        action="store_true",
        help="instead: two models with their own workloads, placed together against one deployment per model",
    )
    e = ELASTIC_DEFAULTS
    p.add_argument(
        "--startup",
        type=number("--startup", zero_ok=True),
        default=e.startup_s,
        help=f"--elastic: seconds from adding an engine to its first turn (default {e.startup_s:g})",
    )
    p.add_argument(
        "--day-sessions",
        type=number("--day-sessions"),
        default=e.peak_sessions_per_s,
        help=f"--elastic: peak session arrivals per second of the diurnal trace (default {e.peak_sessions_per_s:g})",
    )
    p.add_argument(
        "--day-seed",
        type=int,
        default=e.seed,
        help=f"--elastic: seed of the day's arrivals and sessions; the scaling policy's defaults were set on "
        f"day {e.seed} (default {e.seed}), another seed is a held-out day",
    )
    p.add_argument(
        "--scaling",
        type=scaling,
        default={},
        metavar="KEY=VALUE,...",
        help=f"--elastic: scaling-policy settings other than the defaults tuned on day {e.seed} "
        f"({', '.join(SCALING_KEYS)}; default: none, the defaults)",
    )
    p.add_argument(
        "--serve",
        action="append",
        metavar="MODEL=WORKLOAD",
        help="--multi: a model and its workload, given twice (default deepseek-v3.2=coding and "
        "deepseek-v3.2=traces/mooncake/conversation_trace.jsonl: one base model under two names)",
    )
    p.add_argument("--json", action="store_true", help="print the result as one line of JSON")
    p.add_argument("--out", type=Path, help="also write plan.json, README.md and the plot there (default: none)")
    p.add_argument("--progress", action="store_true", help="a line on stderr per simulated point")
