"""DualPath's emulated figures with FP8 KV beside full precision (`agentserve bench fp8`).

`agentserve bench dualpath`'s machinery (a local cluster of emulated engines: real processes over
gRPC, the store on disk, the NICs shaped by the hardware profile) at a small scale, the baseline
and dualpath policies offline, on a BF16-KV target (qwen2.5-32b: DeepSeek-V3.2's KV is FP8
already, so FP8 would change nothing there), once with every engine's `kv_dtype` auto and once
fp8_e4m3. An emulated engine with FP8 KV charges the target's FP8 bytes (half of BF16 plus the row
scales, `TargetModel.with_kv_dtype`) on its storage and compute NICs and in the store, and reads
them in decode. The pools hold the same tokens under both (bench dualpath's plan for the target,
`kv_pool.plan`), so what differs is the bytes moved, stored and read.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from agentserve.bench.papers.dualpath.bench import run_bench
from agentserve.bench.papers.dualpath.cli import bench_spec
from agentserve.bench.papers.dualpath.cli_args import DEFAULT_FINAL_CONTEXT, DEFAULT_FIRST_CONTEXT, add_arguments
from agentserve.bench.papers.dualpath.report import write_report
from agentserve.engine.emulation_config import EmulationConfig

TARGET_MODEL = "qwen2.5-32b"
# bench dualpath's default turn: 30 turns growing from 20,480 to 32,768 tokens append ~424 a turn
# (the paper's ~98.7% hit); fewer turns keep that append, so a later turn stays storage-bound.
DEFAULT_TURNS = 30
APPEND_PER_TURN = (DEFAULT_FINAL_CONTEXT - DEFAULT_FIRST_CONTEXT) // (DEFAULT_TURNS - 1)
POLICIES = ("baseline", "dualpath")
KV_DTYPES = ("auto", "fp8_e4m3")
FIGURES = (
    "jct_s",
    "turns_per_s",
    "ttft_p50_ms",
    "ttft_p90_ms",
    "tpot_p50_ms",
    "tpot_p90_ms",
    "hit_ratio",
    "turns_ok",
    "turns_total",
)


def dualpath_flags(agents: int, turns: int, kv_dtype: str, out: Path) -> list[str]:
    """`agentserve bench dualpath`'s flags for one side of the comparison: its default workload's
    turns, `turns` of them."""
    final_context = DEFAULT_FIRST_CONTEXT + (turns - 1) * APPEND_PER_TURN
    return [
        *("--target-model", TARGET_MODEL, "--kv-dtype", kv_dtype, "--final-context", str(final_context)),
        *("--policies", ",".join(POLICIES), "--agents", str(agents), "--turns", str(turns)),
        *("--no-online", "--no-floor", "--out", str(out)),
    ]


def compare(agents: int, turns: int, out: Path) -> dict[str, Any]:
    """Offline figures of each policy under each KV dtype, one bench dualpath run each (reports in
    `out/<kv_dtype>/`), and FP8's JCT over full precision's."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    result: dict[str, Any] = {
        "regime": f"agentserve bench dualpath {' '.join(dualpath_flags(agents, turns, '{auto,fp8_e4m3}', out))}",
    }
    for kv_dtype in KV_DTYPES:
        args = parser.parse_args(dualpath_flags(agents, turns, kv_dtype, out / kv_dtype))
        run = asyncio.run(run_bench(bench_spec(args)))
        write_report(run, out / kv_dtype)
        target = EmulationConfig(target_model=TARGET_MODEL).cost(kv_dtype).model  # type: ignore[arg-type]
        side: dict[str, Any] = {"kv_bytes_per_token": target.kv_bytes_per_token, "wall_s": run["wall_s"]}
        side["load_avg_1m"] = [run["machine"]["load_avg_1m_start"], run["machine"]["load_avg_1m_end"]]
        for name in POLICIES:
            offline = run["policies"][name]["offline"]
            side[name] = {k: offline.get(k) for k in FIGURES}
            side[name]["kv_bytes_by_path"] = offline.get("kv_bytes_by_path")
        result[kv_dtype] = side
    for name in POLICIES:
        full, fp8 = result["auto"][name]["jct_s"], result["fp8_e4m3"][name]["jct_s"]
        result[f"{name}_jct_fp8_over_full"] = round(fp8 / full, 4) if full and fp8 else None
    return result
