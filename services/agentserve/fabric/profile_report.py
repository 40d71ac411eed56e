"""What a hardware profile means for a target model's agent turns: `agentserve profile show`.

For each model, the turn's cache-compute ratio (agentserve.costmodel.ratio) beside what the node's
NICs allow. With a node topology and a GPU peak, `snic_gb_per_pflop` is one prefill engine's SNIC
share in GB/s over its GPU's PFLOP/s; `snic_bound_mfu` is the most of the GPU's peak a prefill can
use before its SNIC share saturates (ratio of the two, capped at 1), and `pooled_snic_bound_mfu`
the same when prefill reads may also go through the decode nodes' SNICs (DualPath's path B), i.e.
the prefill engines see every node's storage bandwidth.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentserve.costmodel.models import TargetModel
from agentserve.costmodel.ratio import TurnShape, cache_compute_ratio
from agentserve.fabric.profiles import HardwareProfile


def profile_report(profile: HardwareProfile, models: Iterable[TargetModel], turn: TurnShape) -> dict[str, Any]:
    report: dict[str, Any] = {
        "profile": profile.name,
        "description": profile.description,
        "decode_per_prefill": profile.decode_per_prefill,
        "engine_nics_gbps": {
            role: {"snic": nics.snic.gbps, "cnic": nics.cnic.gbps} for role, nics in profile.engines.items()
        },
        "target": profile.target.model if profile.target else None,
        "node": profile.node.to_dict() if profile.node else None,
        "models": [],
    }
    node = profile.node
    for model in models:
        ratio = cache_compute_ratio(model, turn)
        entry: dict[str, Any] = {**ratio.to_dict(), "kv_bytes_per_token": model.kv_bytes_per_token}
        if node is not None and node.gpu_tflops is not None:
            need = ratio.gb_per_pflop
            snic_gb_per_pflop = (node.snic_share.gbps / 8) / (node.gpu_tflops / 1000)
            pooled = snic_gb_per_pflop * (node.prefill_nodes + node.decode_nodes) / node.prefill_nodes
            entry["snic_gb_per_pflop"] = round(snic_gb_per_pflop, 3)
            entry["snic_bound_mfu"] = round(min(1.0, snic_gb_per_pflop / need), 4)
            entry["pooled_snic_bound_mfu"] = round(min(1.0, pooled / need), 4)
        report["models"].append(entry)
    return report
