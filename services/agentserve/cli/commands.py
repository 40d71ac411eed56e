"""What each CLI subcommand does; argument parsing lives in `main`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model_catalog import TINY, resolve_model
from agentserve.engine.model_init import init_model
from agentserve.model_files.tokenizer import Tokenizer


def _model_dir(path: Path | None) -> Path:
    """`generate` and `bench engine`'s `--model`: a catalog name (tiny, smollm2) or a path; tiny when none."""
    return resolve_model(str(path) if path is not None else TINY).source


def model_init(args: argparse.Namespace) -> None:
    if args.seed is not None and not args.random_weights:
        raise ValueError("--seed applies to --random-weights only")
    seed = (args.seed or 0) if args.random_weights else None
    out = init_model(args.out, preset=args.preset, seed=seed, model_type=args.model_type)
    weights = "trained weights" if seed is None else f"random weights (seed {seed})"
    print(f"wrote {args.preset} {args.model_type} model with {weights} to {out}", file=sys.stderr)


def model_train(args: argparse.Namespace) -> dict:
    from agentserve.training.trainer import TrainConfig, save_weights, train

    config = TrainConfig(
        steps=args.steps,
        batch_size=args.batch_size,
        warmup_steps=args.warmup_steps,
        threads=args.threads,
        model_type=args.model_type,
        seq_len=args.seq_len,
        data_seed=args.data_seed,
        lr=args.lr,
        min_lr=args.min_lr,
        init_from=args.init_from,
        agent_transcripts=args.agent_transcripts,
    )
    result = train(config, log=lambda line: print(line, file=sys.stderr, flush=True))
    out = save_weights(result.weights, args.out)
    return {
        "out": str(out),
        "steps": config.steps,
        "train_tokens": result.train_tokens,
        "tokens_seen": config.steps * config.batch_size * config.seq_len,
        "final_loss": round(result.final_loss, 4),
        "wall_s": round(result.wall_s, 1),
    }


def generate(args: argparse.Namespace) -> dict | None:
    model_dir = _model_dir(args.model)
    tokenizer = Tokenizer.from_dir(model_dir)
    text = args.prompt
    if args.chat:
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}])
    prompt_ids = tokenizer.encode(text, add_bos=tokenizer.bos_token_id is not None and not args.chat)
    params = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature or 0.0,
        top_p=args.top_p,
        seed=args.seed,
        ignore_eos=args.ignore_eos,
    )
    config = EngineConfig(dtype=args.dtype, prefix_cache=not args.no_prefix_cache, device=args.device)
    engine = LLMEngine.from_dir(model_dir, config)
    seq = engine.generate(prompt_ids, params)
    output = tokenizer.decode(seq.output_token_ids)
    if not args.json:
        print(output)
        return None
    return {
        "text": output,
        "token_ids": seq.output_token_ids,
        # As in vLLM's output: another implementation can be fed exactly these ids.
        "prompt_token_ids": list(prompt_ids),
        "prompt_tokens": seq.num_prompt_tokens,
        "cached_tokens": seq.num_cached_tokens,
        "finish_reason": seq.finish_reason,
    }


def bench_engine(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro.engine import run

    return run(_model_dir(args.model), dtype=args.dtype, quick=args.quick, device=args.device)


def bench_spec(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import spec

    return spec.run(args.model, args.batch, args.max_tokens, args.rounds, args.k, args.ngram, args.draft_layers)


def bench_perplexity(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import perplexity

    return perplexity.run(seq_len=args.seq_len, max_tokens=args.max_tokens, random_seed=args.random_seed)


def bench_fp8(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import fp8
    from agentserve.sim import kv_dtype

    lengths = tuple(int(n) for n in args.lengths.split(",") if n)
    result = fp8.run(args.model or fp8.DEFAULT_MODEL, lengths, args.scored)
    result["dualpath_sim"] = kv_dtype.compare(args.sim_agents) if args.sim_agents else None
    result["dualpath_emulated"] = None
    if args.emulated_agents:
        from agentserve.bench.micro import fp8_dualpath

        out = args.emulated_out or Path("artifacts") / "bench" / f"fp8-dualpath-{time.strftime('%Y%m%d-%H%M%S')}"
        result["dualpath_emulated"] = fp8_dualpath.compare(args.emulated_agents, args.emulated_turns, out)
    return result


def bench_layerwise(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import layerwise as layerwise_bench

    return layerwise_bench.run(args.cached_tokens, args.new_tokens, args.snic_gbps, args.repeats, args.min_read_kb)


def bench_materialise(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import materialise as materialise_bench

    return materialise_bench.run(args.blocks, args.time_dilation, args.repeats, args.cap)


def bench_fabric(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import fabric as fabric_bench

    result = fabric_bench.run(duration_s=args.duration, chunk_bytes=args.chunk_kb << 10, repeats=args.repeats)
    if args.profile:
        result["profile"] = fabric_bench.scaled_profile(args.profile, result["grpc_unshaped_gbps"])
    return result


def bench_handoff(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import handoff as handoff_bench

    if args.turns < 2:
        raise ValueError(f"--turns must be at least 2, got {args.turns}")
    return handoff_bench.run(args.address, turns=args.turns, profile=args.profile, kv_path_policy=args.kv_path_policy)


def bench_overload(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro import overload

    if args.concurrency < 1 or args.multiple <= 0 or args.window_s <= 0:
        raise ValueError("--concurrency must be at least 1, --multiple and --window-s positive")
    try:
        schedulers = tuple(int(count) for count in args.schedulers.split(","))
    except ValueError:
        raise ValueError(f"--schedulers takes counts like 1,2, got {args.schedulers!r}") from None
    if not schedulers or min(schedulers) < 1:
        raise ValueError(f"--schedulers counts must be at least 1, got {args.schedulers!r}")
    return overload.run(args.concurrency, args.multiple, args.window_s, schedulers=schedulers)


def bench_soak(args: argparse.Namespace) -> int:
    from agentserve.bench.micro import soak

    config = soak.SoakConfig(
        address=args.address,
        duration_s=args.duration_s,
        fraction=args.fraction,
        rate=args.rate,
        capacity_s=args.capacity_s,
        concurrency=args.concurrency,
        turns_per_session=args.turns_per_session,
        max_growth=args.max_growth,
        parent=args.parent,
        api_key=os.environ.get("AGENTSERVE_API_KEY", ""),
    )
    result = asyncio.run(soak.measure(config))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(soak.report(result), file=sys.stderr)
    return 0 if result["passed"] else 1


def profile_show(args: argparse.Namespace) -> dict:
    from agentserve.costmodel.models import TARGET_MODELS, target_model
    from agentserve.costmodel.ratio import TurnShape
    from agentserve.fabric.profile_report import profile_report
    from agentserve.fabric.profiles import load_profile

    profile = load_profile(args.name)
    if args.pd_ratio is not None:
        profile = profile.with_pd_ratio(args.pd_ratio)
    if args.hit_ratio is not None:
        turn = TurnShape.from_hit_ratio(args.context, args.hit_ratio)
    else:
        turn = TurnShape(args.context, 429 if args.new_tokens is None else args.new_tokens)
    models = [target_model(key) for key in args.model] if args.model else list(TARGET_MODELS.values())
    return profile_report(profile, models, turn)


def bench_kvstore(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro.kvstore import bench as kvstore_bench

    sizes = tuple(s.strip() for s in args.sizes.split(",") if s.strip())
    return kvstore_bench.run(
        args.data_dir,
        mb_per_size=args.mb_per_size,
        raw_mb=args.raw_mb,
        concurrency=args.concurrency,
        sizes=sizes,
        passes=args.passes,
    )


def bench_disk_patterns(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro.kvstore import disk_patterns

    return disk_patterns.run(args.data_dir, mb=args.mb, concurrency=args.concurrency, passes=args.passes)


def bench_kvstore_trace(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro.kvstore import trace as kvstore_trace

    try:
        capacities = [int(c) for c in args.capacity_blocks.split(",") if c.strip()]
    except ValueError:
        raise ValueError(f"--capacity-blocks must be integers, got {args.capacity_blocks!r}") from None
    return kvstore_trace.run(
        args.trace,
        args.block_tokens,
        capacities,
        data_dir=args.data_dir,
        fsync=args.fsync,
        dram_fraction=args.dram_fraction,
    )


def bench_kvstore_soak(args: argparse.Namespace) -> dict:
    from agentserve.bench.micro.kvstore import soak as kvstore_soak

    return kvstore_soak.run(
        args.minutes * 60,
        data_dir=args.data_dir,
        dram_budget_bytes=args.dram_mb << 20,
        ssd_budget_bytes=args.ssd_mb << 20,
        group_commit=args.group_commit,
    )


def bench_replay(args: argparse.Namespace) -> dict | None:
    from agentserve.bench.papers.replay.cli import replay

    return replay(args)


def bench_capacity(args: argparse.Namespace) -> dict | None:
    from agentserve.bench.papers.replay.cli import capacity

    return capacity(args)


def bench_dualpath(args: argparse.Namespace) -> dict | None:
    from agentserve.bench.papers.dualpath.cli import dualpath

    return dualpath(args)


def sim_dualpath(args: argparse.Namespace) -> dict | None:
    from agentserve.sim.cli import dualpath

    return dualpath(args)


def sim_agentaware(args: argparse.Namespace) -> dict | None:
    from agentserve.sim.cli import agentaware

    return agentaware(args)


def sim_validate(args: argparse.Namespace) -> dict | None:
    from agentserve.sim.cli import validate

    return validate(args)


def plan(args: argparse.Namespace) -> dict | None:
    from agentserve.plan.cli import plan as run_plan

    return run_plan(args)


def bench_agentaware(args: argparse.Namespace) -> dict | None:
    from agentserve.bench.papers.agentaware.cli import agentaware

    return agentaware(args)


def bench_tokendance(args: argparse.Namespace) -> dict | None:
    from agentserve.bench.papers.tokendance.cli import tokendance

    return tokendance(args)


def workload_convert(args: argparse.Namespace) -> dict:
    from agentserve.bench.common.workloads.cli import convert

    return convert(args)


def workload_generate(args: argparse.Namespace) -> dict:
    from agentserve.bench.common.workloads.cli import generate_command

    return generate_command(args)


def certs(args: argparse.Namespace) -> int:
    from agentserve.common.certs import SERVICES, ensure_certs

    issued = ensure_certs(args.out, args.service or SERVICES, args.ca_dir)
    kept = [s for s in args.service or SERVICES if s not in issued]
    print(f"certs in {args.out}: issued {', '.join(issued) or 'none'}; kept {', '.join(kept) or 'none'}")
    return 0


def drain(args: argparse.Namespace) -> int:
    from agentserve.cli.drain import drain as drain_engine

    return drain_engine(args)


def up_local(args: argparse.Namespace) -> int:
    from agentserve.cli.up import drain_hint, ready_line
    from agentserve.cluster.local import LocalCluster, Stopped, catch_stop_signals
    from agentserve.cluster.ports import LocalPorts
    from agentserve.cluster.settings import ComputeSettings, ControlSettings, FabricSettings
    from agentserve.common.config import load_config
    from agentserve.engine.emulation_config import EmulationConfig
    from agentserve.engine.model_catalog import describe, resolve_model
    from agentserve.engine_service.config import EngineServiceConfig

    model = resolve_model(args.model)
    compute = ComputeSettings(
        args.compute,
        EmulationConfig(
            args.target_model,
            args.target_gpu,
            time_dilation=args.time_dilation,
            kv_materialise_bytes=args.kv_materialise_bytes,
        ),
        device=args.device,
    )
    cluster = LocalCluster(
        LocalPorts.free(args.decoders, args.prefill) if args.free_ports else LocalPorts(),
        prefill=args.prefill,
        decoders=args.decoders,
        fabric=FabricSettings(args.profile, args.kv_path_policy, shared_snic=args.shared_snic),
        compute=compute,
        listen_host=args.host,
        data_dir=args.data_dir,
        log_dir=args.log_dir,
        internal_tls=not args.plain_internal,
        model_dir=model.source,
        model_name=model.name,
        control=ControlSettings(args.schedulers, args.state),
    )
    engines = load_config(EngineServiceConfig, [], env=cluster.env)  # the settings the engines inherit
    print(f"agentserve: {describe(model, engines.dtype)}", file=sys.stderr)
    emulated = (
        f"; emulated {compute.emulation.target_model} on {compute.emulation.target_gpu}, "
        f"time dilation {compute.emulation.time_dilation:g}"
        if compute.mode == "emulated"
        else ""
    )
    control = cluster.control
    schedulers = "scheduler" if control.schedulers == 1 else f"{control.schedulers} schedulers behind haproxy"
    print(
        f"agentserve: starting {'etcd, ' if control.shared else ''}kvstore, {schedulers}, {args.prefill} prefill, "
        f"{args.decoders} decode, toolproxy; fabric {args.profile}, kv paths {args.kv_path_policy}{emulated} "
        f"(logs in {cluster.log_dir})",
        file=sys.stderr,
    )
    catch_stop_signals()  # from here on, a signal stops every child started so far, warm-up included
    try:
        cluster.start()
    except Stopped as stopped:
        print(f"agentserve: {stopped} while starting; every service stopped", file=sys.stderr)
        return 128 + stopped.signum
    ports = cluster.ports
    print(ready_line(ports, os.environ, args.host) + ". Ctrl-C stops everything.", file=sys.stderr)
    print(drain_hint(ports, cluster.certs), file=sys.stderr)
    if args.demo:
        from agentserve.cli.demo import run_demo

        try:
            run_demo(f"127.0.0.1:{ports.scheduler}", f"http://127.0.0.1:{ports.toolproxy_http}", turns=3)
        except BaseException:
            cluster.stop()
            raise
    return cluster.supervise()


def demo(args: argparse.Namespace) -> None:
    from agentserve.cli.demo import run_demo

    run_demo(args.address, args.toolproxy, turns=args.turns)
