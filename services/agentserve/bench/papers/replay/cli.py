"""`agentserve bench replay` and `agentserve bench capacity`: argparse namespace -> run -> report."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from agentserve.bench.common.target import Target, local_target, parse_metrics_targets, remote_target
from agentserve.bench.common.workloads.model import Workload
from agentserve.bench.papers.replay import capacity as cap
from agentserve.bench.papers.replay.replayer import ReplayOptions
from agentserve.bench.papers.replay.report import write_replay
from agentserve.bench.papers.replay.run import WorkloadSpec, prepare_workload, replay_once
from agentserve.bench.papers.replay.slo import SLO


def _workload(args: argparse.Namespace, recorded: bool) -> tuple[Workload, dict]:
    """The workload to replay and its description for the report."""
    arrival_before = args.duration * args.speedup if recorded and args.duration else None
    spec = WorkloadSpec(
        args.workload, args.fmt, args.token_scale, args.max_sessions, arrival_before, args.reuse, args.chain
    )
    workload, scale = prepare_workload(spec)
    info = {
        "name": workload.name,
        "source": workload.source,
        "path": str(args.workload),
        "sessions": len(workload.sessions),
        "turns": workload.num_turns,
        "token_scale": scale,
    }
    return workload, info


async def _target(args: argparse.Namespace) -> Target:
    kind = args.target or ("remote" if args.address else "local")
    metrics = parse_metrics_targets(args.metrics)
    if kind == "local":
        if args.address or args.metrics or args.phoenix:
            raise ValueError("--target local starts and measures its own system; drop --address/--metrics/--phoenix")
        options = {}
        if args.profile or args.kv_path_policy:
            from agentserve.cluster.settings import FabricSettings

            defaults = FabricSettings()
            options["fabric"] = FabricSettings(
                args.profile or defaults.profile, args.kv_path_policy or defaults.kv_path_policy
            )
        print(f"agentserve bench: starting a local cluster (1 prefill, {args.decoders} decode)...", file=sys.stderr)
        return await local_target(args.decoders, **options)
    if not args.address:
        raise ValueError("--target remote needs --address (and --toolproxy)")
    if args.profile or args.kv_path_policy:
        raise ValueError("--profile and --kv-path-policy configure a local target only")
    return remote_target(args.address, args.toolproxy, metrics, args.phoenix)


def _out_dir(args: argparse.Namespace, kind: str) -> Path:
    return args.out or Path("artifacts") / "bench" / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


def _check_common(args: argparse.Namespace) -> None:
    if args.token_scale is not None and args.token_scale < 1:
        raise ValueError(f"--token-scale must be >= 1, got {args.token_scale}")
    if args.max_sessions is not None and args.max_sessions < 1:
        raise ValueError(f"--max-sessions must be >= 1, got {args.max_sessions}")


def replay(args: argparse.Namespace) -> dict | None:
    _check_common(args)
    slo = SLO.parse(args.slo)
    options = ReplayOptions(
        speedup=args.speedup,
        rate=args.rate,
        concurrency=args.concurrency,
        duration_s=args.duration if (args.rate or args.concurrency) else None,
        seed=args.seed,
    )
    workload, info = _workload(args, recorded=options.load_model == "recorded")
    out_dir = _out_dir(args, "replay")

    async def main() -> tuple[dict, list]:
        target = await _target(args)
        try:
            summary, result = await replay_once(workload, target, options, slo, progress=args.progress)
        finally:
            await target.close(keep_logs_in=out_dir)
        return summary, result.turns

    summary, turns = asyncio.run(main())
    summary = {"workload": info, **summary}
    write_replay(summary, turns, out_dir)
    print(f"agentserve bench: results in {out_dir}/ (summary.md, summary.json, plots)", file=sys.stderr)
    if args.json:
        return summary
    print((out_dir / "summary.md").read_text())
    return None


def capacity(args: argparse.Namespace) -> dict | None:
    _check_common(args)
    slo = SLO.parse(args.slo)
    base = ReplayOptions(speedup=args.speedup, seed=args.seed)
    recorded = args.load == "speedup"
    workload, info = _workload(args, recorded=recorded)
    spec = cap.SearchSpec(
        start=args.start,
        factor=args.factor,
        max_load=args.max_load,
        rel_tolerance=args.tolerance,
        max_probes=args.max_probes,
        integer=args.load == "concurrency",
    )
    out_dir = _out_dir(args, "capacity")
    probes: list[dict] = []

    async def main() -> cap.SearchResult:
        target = await _target(args)
        try:

            async def probe(load: float) -> bool:
                options = cap.with_load(base, args.load, load)
                if not recorded and args.duration:
                    options = replace(options, duration_s=args.duration)
                summary, _ = await replay_once(workload, target, options, slo, progress=args.progress)
                entry = cap.probe_entry(load, summary)
                probes.append(entry)
                check = entry["slo_check"]
                terms = ", ".join(f"{t['term']} {_ms(t)}/{t['bound_ms']:g} ms" for t in check["terms"])
                print(
                    f"agentserve bench: {args.load}={load:g}: {terms} -> {'pass' if check['meets'] else 'fail'} "
                    f"(binding {check['binding']})",
                    file=sys.stderr,
                )
                return bool(check["meets"])

            return await cap.search(probe, spec)
        finally:
            await target.close(keep_logs_in=out_dir)

    found = asyncio.run(main())
    result = {
        "workload": info,
        "slo": slo.to_json(),
        "load": args.load,
        "capacity": found.capacity,
        "lowest_failing_load": found.lowest_failing,
        "converged": found.converged,
        "binding": cap.binding_term(probes, found.capacity, found.lowest_failing),
        "per_engine": cap.per_engine(found.capacity, probes),
        "probes": probes,
    }
    write_capacity(result, out_dir)
    print(f"agentserve bench: results in {out_dir}/", file=sys.stderr)
    if args.json:
        return result
    print((out_dir / "capacity.md").read_text())
    return None


def _ms(term: dict) -> str:
    """A term's value for a progress line: no turns to judge, failed turns at its percentile, or ms."""
    if not term["turns"]:
        return "n/a"
    return "failed" if term["value_ms"] is None else f"{term['value_ms']:.0f}"


def write_capacity(result: dict, out_dir: Path) -> None:
    from agentserve.bench.papers.replay.report import capacity_markdown

    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        from agentserve.bench.papers.replay.plots import capacity_curve

        title = f"capacity of {result['workload']['name']} under {result['load']}"
        result["files"] = {
            "capacity_plot": str(
                capacity_curve(
                    result["probes"], result["slo"], result["capacity"], result["load"], out_dir / "capacity.png", title
                )
            )
        }
    except ImportError:
        print("agentserve bench: matplotlib is not installed; skipping plots", file=sys.stderr)
    (out_dir / "capacity.json").write_text(json.dumps(result, indent=2))
    (out_dir / "capacity.md").write_text(capacity_markdown(result))
