"""`agentserve plan --multi`: two models, each with its own workload, placed in one deployment.

A prefill engine's output is KV blocks in its model's format: layers, bytes per token and layer
(attention and indexer), dtype and block size. Two models whose formats are equal (one base model
served under two names: fine-tunes or adapters of it) can share one prefill pool, since either
model's decode engines take the blocks either computes with the base weights; models whose formats
differ cannot hand KV to each other and are placed apart.

- **Apart** (one deployment per model): each model's cheapest prefill and decode counts under the
  default policy set and storage NIC (`plan/search.py`, one family).
- **Together**: with equal formats, one prefill pool serves both workloads (their sessions merged in
  one simulated cluster, arrivals as each workload has them) beside the decode engines the two
  deployments apart need, and the pool's size is searched; otherwise the deployments stay apart.
  `gpus_saved` is the GPUs apart less the GPUs together. In the merged run the scheduler may place
  a turn on either model's decode engines (the base weights serve both); their count is held at the
  sum apart, so what is saved comes from pooling the prefill engines.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from agentserve.bench.common.workloads.model import Session, Workload
from agentserve.costmodel.models import target_model
from agentserve.plan.deployment import Evaluator, Point, Trial, rounded
from agentserve.plan.planner import PlanSpec, evaluator
from agentserve.plan.search import Search, Space, lowest_passing
from agentserve.plan.workload import PlanWorkload

DEFAULT_SERVE = (
    "deepseek-v3.2=coding",
    "deepseek-v3.2=traces/mooncake/conversation_trace.jsonl",
)


@dataclass(frozen=True)
class Served:
    model: str
    workload: str


def parse_serve(text: str) -> Served:
    """`MODEL=WORKLOAD` (the workload as `--workload` takes it)."""
    model, eq, workload = text.partition("=")
    if not eq or not workload:
        raise ValueError(f"--serve {text!r}: expected MODEL=WORKLOAD, e.g. deepseek-v3.2=coding")
    target_model(model)
    return Served(model, workload)


def kv_format(model: str, kv_dtype: str, block_size: int) -> tuple[Any, ...]:
    m = target_model(model)
    return (
        m.layers,
        m.kv_bytes_per_token_per_layer,
        m.indexer_kv_bytes_per_token_per_layer,
        m.kv_fp8,
        kv_dtype,
        block_size,
    )


def merged(a: PlanWorkload, b: PlanWorkload) -> PlanWorkload:
    """Both workloads' sessions in one, each session id and shared prefix named after its side."""

    def side(w: PlanWorkload, tag: str) -> tuple[list[Session], dict[str, int]]:
        sessions = [
            replace(s, id=f"{tag}-{s.id}", prefix=None if s.prefix is None else f"{tag}-{s.prefix}")
            for s in w.workload.sessions
        ]
        return sessions, {f"{tag}-{k}": v for k, v in w.workload.prefixes.items()}

    sa, pa = side(a, "a")
    sb, pb = side(b, "b")
    workload = Workload("merged", tuple(sa + sb), source="merged", prefixes={**pa, **pb})
    return PlanWorkload(workload, a.arrivals + b.arrivals, {"kind": "merged", "a": a.source, "b": b.source})


def _cheapest(ev: Evaluator, policy: str, snic: float, max_gpus: int, progress: bool) -> Trial:
    search = Search(ev, Space((policy,), (snic,), max_gpus), progress)
    search.run((policy, snic))
    chosen, _ = search.choose()
    if chosen is None:
        raise ValueError(f"no deployment of up to {max_gpus} GPUs meets the SLO for {ev.workload.source}")
    return chosen


def plan_multi(spec: PlanSpec, serve: tuple[Served, Served], progress: bool = False) -> dict[str, Any]:
    started = time.monotonic()
    policy = "dualpath" if "dualpath" in spec.policies else spec.policies[0]
    base = spec.base_config()
    snic = base.snic_gbps
    apart: list[dict[str, Any]] = []
    evs: list[Evaluator] = []
    for s in serve:
        ev = evaluator(replace(spec, workload=s.workload, model=s.model))
        chosen = _cheapest(ev, policy, snic, spec.max_gpus, progress)
        evs.append(ev)
        apart.append(
            {
                "model": s.model,
                "workload": ev.workload.source,
                **chosen.point.to_dict(),
                "attainment": round(chosen.attainment, 4),
            }
        )
    formats = [kv_format(s.model, base.kv_dtype, base.block_size) for s in serve]
    gpus_apart = sum(a["gpus"] for a in apart)
    together: dict[str, Any]
    if formats[0] != formats[1]:
        together = {
            "placement": "apart",
            "why": f"KV formats differ ({serve[0].model}: {formats[0]}; {serve[1].model}: {formats[1]})",
            "gpus": gpus_apart,
        }
    else:
        decode = sum(a["decode_engines"] for a in apart)
        pooled = merged(evs[0].workload, evs[1].workload)
        ev = replace(evs[0], workload=pooled, draw=lambda seed: merged(evs[0].draw(seed), evs[1].draw(seed)), trials={})
        top = sum(a["prefill_engines"] for a in apart)
        prefill = lowest_passing(lambda p: ev(Point(policy, snic, p, decode)).meets_slo, 1, top)
        if prefill is None:
            together = {
                "placement": "apart",
                "why": "the merged workload misses the SLO with the pools apart",
                "gpus": gpus_apart,
            }
        else:
            chosen = ev(Point(policy, snic, prefill, decode))
            again = ev(chosen.point, 1)
            together = {
                "placement": "shared prefill pool",
                "why": f"equal KV formats {formats[0]} (layers, bytes/token/layer, indexer bytes, fp8, dtype, block)",
                **chosen.point.to_dict(),
                "decode_per_model": [a["decode_engines"] for a in apart],
                "attainment": round(chosen.attainment, 4),
                "value_over_bound": rounded(chosen.ratios),
                "meets_slo_at_reseed": again.meets_slo,
                "trace": [t.to_dict() for (_, s), t in ev.trials.items() if s == 0],
            }
    return {
        "models": [{"model": s.model, "workload": s.workload} for s in serve],
        "policy": policy,
        "snic_gbps_per_node": snic,
        "slo": spec.slo,
        "apart": apart,
        "gpus_apart": gpus_apart,
        "together": together,
        "gpus_together": together["gpus"],
        "gpus_saved": gpus_apart - together["gpus"],
        "wall_s": round(time.monotonic() - started, 1),
    }
