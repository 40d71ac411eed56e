"""`agentserve bench peer`: flags (`cli_args`) -> PeerSpec and the systems -> one run -> report files."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from agentserve.bench.common.report_files import write_report_files
from agentserve.bench.papers.peer.bench import PeerSpec, default_model, run_peer
from agentserve.bench.papers.peer.cli_args import SYSTEMS
from agentserve.bench.papers.peer.llama_server import LlamaServerConfig
from agentserve.bench.papers.peer.report import markdown, table
from agentserve.bench.papers.peer.systems import AgentserveSystem, LlamaServerSystem, PeerSystem, llama_server_binary
from agentserve.bench.papers.peer.workload import PeerWorkloadSpec, peer_workload
from agentserve.common.netutil import free_port


def systems_of(args: argparse.Namespace, spec: PeerSpec, out: Path) -> list[PeerSystem]:
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or not names:
        raise ValueError(f"--systems takes {', '.join(SYSTEMS)}, got {args.systems!r}")
    systems: list[PeerSystem] = []
    for name in names:
        if name == "agentserve":
            systems.append(
                AgentserveSystem(spec.model, out / "agentserve-logs", decoders=args.decoders, prefill=args.prefill)
            )
        else:
            config = LlamaServerConfig(
                binary=llama_server_binary(args.llama_server),
                model=spec.model,
                port=free_port(),
                parallel=args.slots or spec.workload.sessions,
                ctx_per_slot=args.ctx_per_slot,
                cache_reuse=args.cache_reuse,
                threads=args.threads,
            )
            systems.append(LlamaServerSystem(config, out / "llama-server.log"))
    return systems


def peer(args: argparse.Namespace) -> dict:
    spec = PeerSpec(
        model=args.model or default_model(),
        workload=PeerWorkloadSpec(sessions=args.sessions, turns=args.turns, token_scale=args.token_scale),
        slo=args.slo,
    )
    out = args.out or Path("artifacts/bench") / f"peer-{time.strftime('%Y%m%d-%H%M%S')}"
    systems = systems_of(args, spec, out)
    result = asyncio.run(run_peer(spec, peer_workload(spec.workload), systems))
    write_report_files("peer", result, out, lambda _result, _out: {}, markdown)
    print(table(result), file=sys.stderr)
    print(f"agentserve bench peer: report in {out}", file=sys.stderr)
    return result
