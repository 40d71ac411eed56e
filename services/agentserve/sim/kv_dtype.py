"""DualPath's simulated figures with FP8 KV beside full precision (`agentserve bench fp8`).

`agentserve sim dualpath` offline, the baseline and dualpath policies, on a BF16-KV target
(qwen2.5-32b: DeepSeek-V3.2's KV is FP8 already, so FP8 would change nothing there), once with
`kv_dtype` auto and once with fp8_e4m3: the simulator then charges FP8 bytes (half of BF16 plus
the row scales, `TargetModel.with_kv_dtype`) on the storage and compute NICs and in the pools.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agentserve.fabric.profiles import load_profile
from agentserve.sim.config import SimConfig
from agentserve.sim.dualpath import DualPathSimSpec, run_dualpath
from agentserve.sim.workload import DEFAULT_PROFILE, PAPER_WORKLOAD

SIM_MODEL = "qwen2.5-32b"
POLICIES = ("baseline", "dualpath")
FIGURES = ("jct_s", "turns_per_s", "ttft_p50_ms", "ttft_p90_ms", "tpot_p50_ms", "tpot_p90_ms")


def compare(agents: int, model: str = SIM_MODEL) -> dict[str, Any]:
    """Offline figures of each policy under each KV dtype, and FP8's JCT over full precision's."""
    out: dict[str, Any] = {
        "regime": f"agentserve sim dualpath --model {model} --agents {agents} --policies baseline,dualpath "
        "--no-online, --kv-dtype auto and fp8_e4m3"
    }
    for kv_dtype in ("auto", "fp8_e4m3"):
        config = SimConfig.from_profile(load_profile(DEFAULT_PROFILE), model=model, kv_dtype=kv_dtype)
        spec = DualPathSimSpec(
            workload=dataclasses.replace(PAPER_WORKLOAD, agents=agents),
            config=config,
            policies=POLICIES,
            online=False,
            online_policies=(),
        )
        policies = run_dualpath(spec)["policies"]
        out[kv_dtype] = {"kv_bytes_per_token": config.kv_bytes_per_token}
        for name in POLICIES:
            out[kv_dtype][name] = {k: policies[name]["offline"].get(k) for k in FIGURES}
    for name in POLICIES:
        out[f"{name}_jct_fp8_over_full"] = round(out["fp8_e4m3"][name]["jct_s"] / out["auto"][name]["jct_s"], 4)
    return out
