"""`agentserve plan`: arguments -> a plan (or `--elastic`, or `--multi`) -> its JSON and files."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

from agentserve.plan.deployment import Prices
from agentserve.plan.planner import PlanSpec


def spec(args: argparse.Namespace, workload: str) -> PlanSpec:
    return PlanSpec(
        workload=workload,
        slo=args.slo,
        profile=args.profile,
        model=args.model,
        gpu=args.gpu,
        policies=args.policies,
        snic_gbps=args.snic_gbps,
        max_gpus=args.max_gpus,
        prices=Prices(args.gpu_hour_cost, args.snic_cost),
        window_s=args.window,
        turn_order=args.turn_order,
        lifecycles=args.lifecycles,
    )


def plan(args: argparse.Namespace) -> dict[str, Any]:
    from agentserve.plan import report

    if args.elastic and args.multi:
        raise ValueError("--elastic and --multi are separate questions: give one of them")
    if args.elastic:
        from agentserve.plan.elastic import run_elastic
        from agentserve.plan.elastic_spec import ELASTIC_DEFAULTS

        result = run_elastic(
            replace(
                ELASTIC_DEFAULTS,
                startup_s=args.startup,
                peak_sessions_per_s=args.day_sessions,
                seed=args.day_seed,
                **args.scaling,
            ),
            progress=args.progress,
        )
        name = "elastic"
    elif args.multi:
        from agentserve.plan.multi import DEFAULT_SERVE, parse_serve, plan_multi

        serve = args.serve or list(DEFAULT_SERVE)
        if len(serve) != 2:
            raise ValueError(f"--serve: --multi places two models, got {len(serve)}")
        pair = (parse_serve(serve[0]), parse_serve(serve[1]))
        result = plan_multi(spec(args, pair[0].workload), pair, progress=args.progress)
        name = "multi"
    else:
        if not args.workload:
            raise ValueError("--workload is required: a Mooncake or TraceLab trace file, or coding[:key=value,...]")
        from agentserve.plan.planner import plan as run_plan

        result = run_plan(spec(args, args.workload), progress=args.progress)
        name = "plan"
    if args.out is not None:
        result["files"] = report.write(result, args.out, name)
    return result
