"""`agentserve workload convert` and `workload generate`: write agentserve's session format."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentserve.bench.common.workloads import load_workload
from agentserve.bench.common.workloads.generator import GeneratorSpec, generate
from agentserve.bench.common.workloads.model import Workload
from agentserve.bench.common.workloads.session_format import write_workload


def _described(workload: Workload, out: Path) -> dict:
    tools = [t for s in workload.sessions for turn in s.turns for t in turn.tools]
    return {
        "out": str(out),
        "name": workload.name,
        "source": workload.source,
        "sessions": len(workload.sessions),
        "turns": workload.num_turns,
        "tool_calls": len(tools),
        "dependencies": sum(len(s.deps(i)) for s in workload.sessions for i in range(len(s.turns))),
        "prefixes": dict(workload.prefixes),
    }


def convert(args: argparse.Namespace) -> dict:
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    workload = load_workload(args.input, args.fmt, limit=args.limit, reuse=args.reuse, chain=args.chain)
    return _described(workload, write_workload(workload, args.out))


def generate_command(args: argparse.Namespace) -> dict:
    spec = GeneratorSpec(
        teams=args.teams,
        agents=args.agents,
        turns=args.turns,
        pattern=args.pattern,
        system_tokens=args.system_tokens,
        first_tokens=args.first_tokens,
        new_tokens=args.new_tokens,
        output_tokens=args.output_tokens,
        tool_prob=args.tool_prob,
        tool_time=args.tool_time,
        arrival_rate=args.arrival_rate,
        seed=args.seed,
    )
    workload = generate(spec)
    return _described(workload, write_workload(workload, args.out))
