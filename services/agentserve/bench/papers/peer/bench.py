"""One peer comparison: each system in turn starts, warms the trace's shared prefixes (untimed),
replays the same workload through the OpenAI completions API while its processes' memory and CPU
are sampled, and stops; the same summaries (`bench.papers.replay.summary`) and SLO for both.

The SLO is fixed before the run and judged per session: a session is served within it when every
one of its turns succeeded and met every bound (TTFT and TPOT by default).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentserve.bench.common.workloads.model import Workload
from agentserve.bench.common.workloads.tokens import TokenSynth
from agentserve.bench.papers.peer.cli_args import DEFAULT_SLO
from agentserve.bench.papers.peer.openai_client import CompletionsClient
from agentserve.bench.papers.peer.resources import ResourceSampler
from agentserve.bench.papers.peer.systems import PeerSystem
from agentserve.bench.papers.peer.workload import PeerWorkloadSpec, describe
from agentserve.bench.papers.replay.records import SessionRecord, TurnRecord
from agentserve.bench.papers.replay.replayer import Replayer, ReplayOptions
from agentserve.bench.papers.replay.slo import SLO
from agentserve.bench.papers.replay.summary import summarize
from agentserve.model_files.tokenizer_files import models_home

DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Synthetic prompt ids: ordinary tokens of any model with a vocabulary of at least 8192 (SmolLM2's
# specials are its first 17 ids; the tiny model's its first 5).
SYNTH_LOW, SYNTH_HIGH = 100, 8192


def default_model() -> Path:
    return models_home() / DEFAULT_MODEL_FILE


@dataclass(frozen=True)
class PeerSpec:
    model: Path = field(default_factory=default_model)
    workload: PeerWorkloadSpec = PeerWorkloadSpec()
    slo: str = DEFAULT_SLO

    def __post_init__(self) -> None:
        if not self.model.is_file():
            raise ValueError(f"--model: no GGUF file at {self.model} (scripts/install.sh fetches SmolLM2)")
        if self.model.suffix != ".gguf":
            raise ValueError(f"--model must be a GGUF file (both systems serve the same file), got {self.model}")
        SLO.parse(self.slo)  # a bad SLO fails here, naming the term


def sessions_within_slo(turns: Sequence[TurnRecord], sessions: Sequence[SessionRecord], slo: SLO) -> int:
    """Sessions that finished with every turn succeeded and within every bound of `slo`."""
    by_session: dict[str, list[TurnRecord]] = {}
    for t in turns:
        by_session.setdefault(t.session_id, []).append(t)
    return sum(
        1
        for s in sessions
        if s.end_s is not None and s.failed_turns == 0 and all(slo.met_by(t) for t in by_session.get(s.session_id, []))
    )


def headline(summary: dict, within_slo: int, output_tokens: int, resources: dict) -> dict:
    """The figures the report's table shows, from one system's replay summary and resources."""
    latency = summary["latency_ms"]
    cpu = resources.get("cpu_s_total")
    return {
        "sessions_within_slo": within_slo,
        "sessions_total": summary["sessions_total"],
        "turns_ok": summary["turns_ok"],
        "turns_failed": summary["turns_failed"],
        "ttft_later_p50_ms": latency["ttft"]["later_turns"]["p50"],
        "ttft_later_p90_ms": latency["ttft"]["later_turns"]["p90"],
        "ttft_first_p50_ms": latency["ttft"]["first_turn"]["p50"],
        "ttft_first_p90_ms": latency["ttft"]["first_turn"]["p90"],
        "tpot_p50_ms": latency["tpot"]["all"]["p50"],
        "tpot_p90_ms": latency["tpot"]["all"]["p90"],
        "output_tokens_per_s": summary["throughput"]["output_tokens_per_s"],
        "computed_prompt_tokens_per_s": summary["throughput"]["computed_prompt_tokens_per_s"],
        "hit_ratio": summary["hit_ratio"],
        "duration_s": summary["duration_s"],
        "output_tokens": output_tokens,
        "rss_peak_mib": resources.get("rss_peak_mib"),
        "pss_peak_mib": resources.get("pss_peak_mib"),
        "cpu_s": cpu,
        "cpu_ms_per_output_token": None if not cpu or not output_tokens else cpu * 1000 / output_tokens,
    }


async def replay_system(system: PeerSystem, workload: Workload, slo: SLO) -> dict:
    """Start `system`, replay `workload` on it once, stop it; its result section."""
    print(f"agentserve bench peer: starting {system.name}...", file=sys.stderr)
    started = time.monotonic()
    try:
        await asyncio.to_thread(system.start)
        startup_s = time.monotonic() - started
        client = CompletionsClient(system.base_url, TokenSynth(SYNTH_LOW, SYNTH_HIGH))
        try:
            replayer = Replayer(workload, client, ReplayOptions(tenant_tag=f"-{system.name}"))
            await replayer.warm_prefixes()
            sampler = ResourceSampler(system.roots)
            sampling = asyncio.create_task(sampler.run())
            print(f"agentserve bench peer: replaying on {system.name}...", file=sys.stderr)
            try:
                result = await replayer.run()
            finally:
                sampler.stop()
                await sampling
        finally:
            await client.close()
        config = system.config()
    finally:
        await asyncio.to_thread(system.stop)
    summary = summarize(result.turns, result.sessions, result.duration_s, slo)
    within = sessions_within_slo(result.turns, result.sessions, slo)
    resources = sampler.summary()
    return {
        "config": config,
        "startup_s": startup_s,
        "headline": headline(summary, within, sum(t.output_tokens for t in result.turns if t.ok), resources),
        "resources": resources,
        "summary": summary,
    }


async def run_peer(spec: PeerSpec, workload: Workload, systems: Sequence[PeerSystem]) -> dict:
    """Every system in turn, never two at once: each has the machine's cores to itself."""
    slo = SLO.parse(spec.slo)
    started = time.time()
    results = {}
    for system in systems:
        results[system.name] = await replay_system(system, workload, slo)
    return {
        "bench": "peer",
        "regime": {
            "model": str(spec.model),
            "workload": {**spec.workload.to_dict(), **describe(workload)},
            "load": f"{len(workload.sessions)} sessions all arriving at t=0, each turn after the previous turn's "
            "output and tool calls (client-side sleeps of the recorded durations); one system at a time",
            "api": "POST /v1/completions, prompt as token ids, stream, ignore_eos, temperature 0",
            "slo": {**slo.to_json(), "text": str(slo), "judged": "per session: every turn within every bound"},
            "cpus": os.cpu_count(),
        },
        "systems": results,
        "started_unix_s": started,
        "wall_s": time.time() - started,
    }
