"""The `agentserve` command line: model init/train, generate, bench."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agentserve.bench.common.workloads import cli_args as workload_args
from agentserve.bench.micro import eplb_cli, powerloss_cli
from agentserve.bench.papers.agentaware import cli_args as agentaware_args
from agentserve.bench.papers.dualpath import cli_args as dualpath_args
from agentserve.bench.papers.peer import cli_args as peer_args
from agentserve.bench.papers.replay import cli_args as replay_args
from agentserve.bench.papers.tokendance.cli import add_arguments as tokendance_args
from agentserve.cli import commands
from agentserve.engine.emulation_config import COMPUTE_MODES, EmulationConfig
from agentserve.plan import cli_args as plan_cli
from agentserve.sim import cli_args as sim_cli
from agentserve.training.trainer import TrainConfig

# `EngineConfig.device`: the flag of generate, bench engine and up (and of every engine service).
DEVICE_HELP = "where the engine runs the model: cpu (the default), cuda, cuda:N, or auto (cuda when present)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentserve", description="LLM inference serving for AI agents")
    sub = parser.add_subparsers(dest="command", required=True)

    model = sub.add_parser("model", help="manage models").add_subparsers(dest="model_command", required=True)
    init = model.add_parser(
        "init", help="write the embedded default model (HF format): the shipped trained weights, or random ones"
    )
    init.add_argument("--out", required=True, type=Path)
    init.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    init.add_argument(
        "--random-weights", action="store_true", help="random weights drawn from --seed (the only kind for small)"
    )
    init.add_argument("--seed", type=int, default=None, help="seed of --random-weights (default 0)")
    init.add_argument("--model-type", default="llama", choices=["llama", "qwen2", "mixtral"])
    init.set_defaults(func=commands.model_init)
    train = model.add_parser(
        "train",
        help="train the tiny default model on the shipped corpus (CPU, deterministic); "
        "writes the fp16 weights `model init` ships",
    )
    train.add_argument("--out", required=True, type=Path, help="safetensors file to write")
    train.add_argument("--steps", type=int, default=TrainConfig.steps)
    train.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    train.add_argument("--warmup-steps", type=int, default=TrainConfig.warmup_steps)
    train.add_argument("--threads", type=int, default=TrainConfig.threads, help="part of the result: keep it fixed")
    train.add_argument("--seq-len", type=int, default=TrainConfig.seq_len)
    train.add_argument("--data-seed", type=int, default=TrainConfig.data_seed, help="window order and transcripts")
    train.add_argument("--lr", type=float, default=TrainConfig.lr)
    train.add_argument("--min-lr", type=float, default=TrainConfig.min_lr)
    train.add_argument(
        "--init-from",
        default=TrainConfig.init_from,
        choices=["seed", "trained", "agent"],
        help="start from seed-0 random weights or the preset's shipped trained or agent weights",
    )
    train.add_argument(
        "--agent-transcripts",
        type=int,
        default=TrainConfig.agent_transcripts,
        help="generated agent exchanges (tool calls, results, final answers) mixed into the corpus",
    )
    train.add_argument(
        "--model-type", default="llama", choices=["llama", "mixtral"], help="mixtral: the preset's MoE variant"
    )
    train.add_argument("--json", action="store_true")
    train.set_defaults(func=commands.model_train)

    gen = sub.add_parser("generate", help="generate a completion with a local engine")
    gen.add_argument(
        "--model",
        type=Path,
        help="HF-style model folder, Llama GGUF file, or a catalog name: tiny (the default), smollm2",
    )
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=None, help="sample at this temperature (default: greedy)")
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    gen.add_argument("--device", default="cpu", help=DEVICE_HELP)
    gen.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    gen.add_argument("--ignore-eos", action="store_true", help="generate exactly --max-tokens tokens")
    gen.add_argument("--no-prefix-cache", action="store_true")
    gen.add_argument("--json", action="store_true")
    gen.set_defaults(func=commands.generate)

    up = sub.add_parser("up", help="run the whole system")
    up.add_argument(
        "--local",
        action="store_true",
        required=True,
        help="every service as a local process on loopback (compose: docker compose up)",
    )
    up.add_argument(
        "--model",
        help="what every engine serves: smollm2 (SmolLM2-135M-Instruct, the default; scripts/install.sh fetches it), "
        "tiny (the embedded 4-layer model), or an HF-style model folder or Llama GGUF file",
    )
    up.add_argument("--prefill", type=int, default=1, help="prefill engines, each on its own port")
    up.add_argument("--decoders", type=int, default=2)
    up.add_argument("--demo", action="store_true", help="run a demo agent session once everything is up")
    up.add_argument(
        "--host",
        default="127.0.0.1",
        help="where the clients' endpoints (scheduler gRPC and HTTP, tool proxy HTTP) listen; anything but "
        "loopback needs API keys (AGENTSERVE_API_KEYS); internal services always listen on loopback",
    )
    up.add_argument("--free-ports", action="store_true", help="free ports instead of the defaults (50051, 8000...)")
    up.add_argument("--data-dir", type=Path, help="the kvstore's data (default ~/.cache/agentserve/kvstore-local)")
    up.add_argument("--log-dir", type=Path, help="each service's log (default ~/.cache/agentserve/logs)")
    up.add_argument(
        "--profile",
        default="local-unshaped",
        help="hardware profile of the emulated fabric (profiles/<name>.yaml, e.g. h800-node)",
    )
    up.add_argument(
        "--kv-path-policy",
        default="dualpath",
        choices=["dualpath", "always-a", "always-b"],
        help="how store hits reach the prefill engine (DualPath: the shorter storage-NIC queue)",
    )
    up.add_argument(
        "--shared-snic",
        action="store_true",
        help="a node's engines draw from one storage-NIC bucket (the profile's node), not a static share each",
    )
    up.add_argument(
        "--compute",
        default="real",
        choices=COMPUTE_MODES,
        help="emulated: engines load no weights and take the target model's time on the target GPU",
    )
    up.add_argument("--device", default="cpu", help=DEVICE_HELP + "; real compute: every engine runs there")
    emulation = EmulationConfig()  # the defaults of the flags below
    up.add_argument("--target-model", default=emulation.target_model, help="emulated: an agentserve.costmodel model")
    up.add_argument("--target-gpu", default=emulation.target_gpu, help="emulated compute: h800, h100 or h200")
    up.add_argument(
        "--time-dilation", type=float, default=emulation.time_dilation, help="emulated: local seconds per target second"
    )
    up.add_argument(
        "--kv-materialise-bytes",
        type=int,
        default=emulation.kv_materialise_bytes,
        help="emulated: KV payload bytes materialised per block (0 = the target's); NICs charge the target's",
    )
    up.add_argument(
        "--schedulers",
        type=int,
        default=1,
        help="schedulers sharing the engines, behind HAProxy on the same ports (more than one: state in etcd)",
    )
    up.add_argument(
        "--state",
        choices=["sqlite", "etcd"],
        help="where the schedulers' state lives: sqlite (one scheduler's, the default) or etcd (started with "
        "the cluster; the default with several schedulers)",
    )
    up.add_argument(
        "--plain-internal",
        action="store_true",
        help="run the internal plane without mutual TLS (default: certificates issued into <data-dir>-certs)",
    )
    up.set_defaults(func=commands.up_local)

    certs = sub.add_parser(
        "certs",
        help="issue the internal plane's certificates: a private CA and one certificate per service "
        "(idempotent: keeps what is valid)",
    )
    certs.add_argument("--out", required=True, type=Path, help="one directory per service under it (internal_tls_dir)")
    certs.add_argument("--ca-dir", type=Path, help="the CA and its key (default OUT/ca); keep it off the services")
    certs.add_argument(
        "--service", action="append", help="a service to issue for (repeatable; default: every service and client)"
    )
    certs.set_defaults(func=commands.certs)

    drain = sub.add_parser(
        "drain",
        help="scale in: the engine takes no new turns, finishes its own, deregisters and exits "
        "(its sessions' KV stays in the store)",
    )
    drain.add_argument(
        "engine",
        help="the engine's id (turn metadata's prefill_engine / decode_engine, the scheduler's log) or host:port",
    )
    drain.add_argument(
        "--scheduler", default="127.0.0.1:50061", help="the scheduler's internal port (default: up --local's)"
    )
    drain.add_argument(
        "--tls-dir",
        type=Path,
        help="an operator certificate (ca.pem, cert.pem, key.pem); default: up --local's, when its default "
        "data directory has one (compose: /certs/operator in the scheduler's container)",
    )
    drain.add_argument(
        "--plain", action="store_true", help="the internal plane runs plain (up --local --plain-internal)"
    )
    drain.add_argument("--wait", action="store_true", help="return once the engine deregistered")
    drain.add_argument("--timeout", type=float, default=120.0, help="seconds --wait waits (default 120)")
    drain.set_defaults(func=commands.drain)

    profile = sub.add_parser("profile", help="hardware profiles of the emulated fabric").add_subparsers(
        dest="profile_command", required=True
    )
    pshow = profile.add_parser(
        "show", help="a profile's NICs and, per target model, the cache-compute ratio (GB of KV per PFLOP) of a turn"
    )
    pshow.add_argument("name", help="profiles/<name>.yaml, or a path to one")
    pshow.add_argument("--model", action="append", help="target model (repeatable; default: all)")
    pshow.add_argument("--context", type=int, default=32_700, help="prompt tokens of the turn")
    turn = pshow.add_mutually_exclusive_group()
    turn.add_argument("--new-tokens", type=int, help="tokens appended this turn (default 429, the paper's)")
    turn.add_argument("--hit-ratio", type=float, help="cached share of the prompt, instead of --new-tokens")
    pshow.add_argument("--pd-ratio", help="prefill nodes:decode nodes, e.g. 1:1 (profiles with a node)")
    pshow.add_argument("--json", action="store_true")
    pshow.set_defaults(func=commands.profile_show)

    demo = sub.add_parser("demo", help="run a demo agent session against a running system")
    demo.add_argument("--address", default="127.0.0.1:50051", help="scheduler gRPC address")
    demo.add_argument("--toolproxy", default="http://127.0.0.1:8080")
    demo.add_argument("--turns", type=int, default=3)
    demo.set_defaults(func=commands.demo)

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="bench_command", required=True)
    eng = bench.add_parser("engine", help="prefill/decode speed and prefix-cache speedup of one engine")
    eng.add_argument("--model", type=Path, help="model folder, GGUF file, or tiny (the default) / smollm2")
    eng.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    eng.add_argument("--device", default="cpu", help=DEVICE_HELP)
    eng.add_argument("--quick", action="store_true", help="fewer contexts and repetitions")
    eng.add_argument("--json", action="store_true")
    eng.set_defaults(func=commands.bench_engine)
    spec = bench.add_parser("spec", help="speculative decoding (prompt lookup, self-draft) vs plain on tool-echo turns")
    spec.add_argument("--model", type=Path, help="model folder or GGUF (default: SmolLM2-135M-Instruct)")
    spec.add_argument("--batch", type=int, default=4)
    spec.add_argument("--max-tokens", type=int, default=96)
    spec.add_argument("--rounds", type=int, default=3)
    spec.add_argument("--k", type=int, default=6, help="draft tokens per step")
    spec.add_argument("--ngram", type=int, default=2, help="prompt lookup's match length")
    spec.add_argument("--draft-layers", type=int, default=0, help="self-draft's layers (0: half)")
    spec.add_argument("--json", action="store_true")
    spec.set_defaults(func=commands.bench_spec)
    ppl = bench.add_parser("perplexity", help="held-out perplexity of the trained default model vs random weights")
    ppl.add_argument("--seq-len", type=int, default=256, help="tokens per scored window")
    ppl.add_argument("--max-tokens", type=int, help="score only the first N held-out tokens")
    ppl.add_argument("--random-seed", type=int, default=0, help="seed of the random-weight baseline")
    ppl.add_argument("--json", action="store_true")
    ppl.set_defaults(func=commands.bench_perplexity)
    f8 = bench.add_parser("fp8", help="FP8 KV against full precision: bytes, top-1 agreement, KL; DualPath sim")
    f8.add_argument("--model", type=Path, help="GGUF file or model folder (default: SmolLM2-135M-Instruct)")
    f8.add_argument("--lengths", default="512,1024,2048,3072", help="prompt tokens, comma-separated")
    f8.add_argument("--scored", type=int, default=256, help="positions scored per prompt (at most half of it)")
    f8.add_argument("--sim-agents", type=int, default=64, help="agents of the DualPath simulation (0: skip it)")
    f8.add_argument(
        "--emulated-agents",
        type=int,
        default=8,
        help="agents of the emulated DualPath comparison, a local cluster per policy and KV dtype (0: skip it)",
    )
    f8.add_argument("--emulated-turns", type=int, default=4, help="turns per agent of the emulated comparison")
    f8.add_argument(
        "--emulated-out", type=Path, help="the emulated runs' reports (default artifacts/bench/fp8-dualpath-<time>)"
    )
    f8.add_argument("--json", action="store_true")
    f8.set_defaults(func=commands.bench_fp8)
    fab = bench.add_parser("fabric", help="shaping accuracy and fairness of the emulated fabric over real gRPC")
    fab.add_argument("--duration", type=float, default=1.5, help="seconds per case")
    fab.add_argument("--chunk-kb", type=int, default=1024, help="largest message (a layer range of a run)")
    fab.add_argument("--repeats", type=int, default=2, help="runs per case; the fastest is reported")
    fab.add_argument("--profile", help="also scale this hardware profile (profiles/<name>.yaml) to this machine")
    fab.add_argument("--json", action="store_true")
    fab.set_defaults(func=commands.bench_fabric)
    lw = bench.add_parser("layerwise", help="time to first token of a cached prefill, layerwise on vs off")
    lw.add_argument("--cached-tokens", type=int, default=3072, help="the prefix the store holds (multiple of 16)")
    lw.add_argument("--new-tokens", type=int, default=64)
    lw.add_argument("--snic-gbps", type=float, default=2.0, help="the prefill engine's storage NIC")
    lw.add_argument("--repeats", type=int, default=5)
    lw.add_argument("--min-read-kb", type=int, default=64, help="a path-A read of a block carries whole layers >= this")
    lw.add_argument("--json", action="store_true")
    lw.set_defaults(func=commands.bench_layerwise)
    mat = bench.add_parser(
        "materialise", help="emulated KV capped at a few KB per block vs materialised in full: load times"
    )
    mat.add_argument("--blocks", type=int, default=40)
    mat.add_argument("--time-dilation", type=float, default=200.0, help="slows the profile's NICs so loads are long")
    mat.add_argument("--repeats", type=int, default=4)
    mat.add_argument("--cap", type=int, default=8192, help="bytes materialised per block in the capped case")
    mat.add_argument("--json", action="store_true")
    mat.set_defaults(func=commands.bench_materialise)
    hand = bench.add_parser("handoff", help="handoff bytes per turn of a 5-turn session vs a full-prompt handoff")
    hand.add_argument("--address", help="scheduler gRPC address of a running system (default: start a local one)")
    hand.add_argument("--turns", type=int, default=5)
    hand.add_argument("--profile", default="local-unshaped", help="hardware profile of the local cluster")
    hand.add_argument("--kv-path-policy", default="dualpath", choices=["dualpath", "always-a", "always-b"])
    hand.add_argument("--json", action="store_true")
    hand.set_defaults(func=commands.bench_handoff)
    ovl = bench.add_parser(
        "overload",
        help="a local cluster at several times its sustainable rate: 429s with Retry-After, admitted "
        "p99 vs unloaded, scheduler and store memory",
    )
    ovl.add_argument("--concurrency", type=int, default=4, help="the scheduler's in-flight bound (and closed loop)")
    ovl.add_argument("--multiple", type=float, default=3.0, help="offered rate as a multiple of the sustainable one")
    ovl.add_argument("--window-s", type=float, default=15.0, help="seconds of the closed and the open loop")
    ovl.add_argument(
        "--schedulers",
        default="1",
        help="scheduler counts to measure, comma-separated (1,2: one run each on the same engines, side by side; "
        "more than one scheduler: etcd and HAProxy, the in-flight bound split over them)",
    )
    ovl.add_argument("--json", action="store_true")
    ovl.set_defaults(func=commands.bench_overload)
    soak = bench.add_parser(
        "soak",
        help="a running system at a fraction of its capacity for a while: exit 1 on any failed turn or a "
        "service's memory growing past --max-growth (scripts/soak.sh)",
    )
    soak.add_argument("--address", default="127.0.0.1:50051", help="the scheduler's client gRPC address")
    soak.add_argument("--duration-s", type=float, default=1800.0)
    soak.add_argument("--fraction", type=float, default=0.7, help="offered load as a fraction of measured capacity")
    soak.add_argument("--rate", type=float, default=0.0, help="offered turns/s instead (0: --fraction x capacity)")
    soak.add_argument("--capacity-s", type=float, default=30.0, help="seconds of the capacity measurement")
    soak.add_argument("--concurrency", type=int, default=4, help="sessions in the capacity measurement")
    soak.add_argument("--turns-per-session", type=int, default=4)
    soak.add_argument("--max-growth", type=float, default=0.10, help="largest RSS growth allowed per process")
    soak.add_argument(
        "--parent", type=int, default=0, help="pid of the `up --local` running the system: only its children's memory"
    )
    soak.add_argument("--out", type=Path, help="write the JSON result here")
    soak.set_defaults(func=commands.bench_soak)
    plo = bench.add_parser(
        "powerloss", help="simulated power cuts under the kvstore or the session database: acknowledged writes lost"
    )
    powerloss_cli.add_arguments(plo)
    plo.set_defaults(func=powerloss_cli.command)
    eplb = bench.add_parser("eplb", help="expert-parallel rank load, MoE layer time and TPOT with vs without EPLB")
    eplb_cli.add_arguments(eplb)
    eplb.set_defaults(func=eplb_cli.command)
    kvb = bench.add_parser("kvstore", help="kvstore read/write MB/s and latency per block size vs the raw disk")
    kvb.add_argument("--data-dir", type=Path, help="where to put the bench files (default: system temp)")
    kvb.add_argument("--mb-per-size", type=int, default=256, help="MB of blocks per block size")
    kvb.add_argument("--raw-mb", type=int, default=1024, help="size of the raw sequential-read file")
    kvb.add_argument("--concurrency", type=int, default=4, help="reader threads / gRPC streams")
    kvb.add_argument("--sizes", default="64KB,1MB,8MB", help="comma-separated block sizes (64KB, 1MB, 8MB)")
    kvb.add_argument(
        "--passes",
        type=int,
        default=3,
        help="side-by-side cold passes (raw disk, in process, gRPC) the headline ratios are medians of",
    )
    kvb.add_argument("--json", action="store_true")
    kvb.set_defaults(func=commands.bench_kvstore)
    dpt = bench.add_parser(
        "disk-patterns",
        help="cold read MB/s of the disk per access pattern (sequential, "
        "contiguous streams, interleaved requests, a file per block)",
    )
    dpt.add_argument("--data-dir", type=Path, help="where to put the files (default: system temp)")
    dpt.add_argument("--mb", type=int, default=512, help="bytes every pattern reads")
    dpt.add_argument("--concurrency", type=int, default=4, help="streams / threads of the parallel patterns")
    dpt.add_argument("--passes", type=int, default=3, help="passes over every pattern; medians are reported")
    dpt.add_argument("--json", action="store_true")
    dpt.set_defaults(func=commands.bench_disk_patterns)
    kvt = bench.add_parser("kvstore-trace", help="hit ratio of the real store on a Mooncake trace vs exact LRU")
    kvt.add_argument("--trace", type=Path, required=True, help="Mooncake trace (.jsonl)")
    kvt.add_argument("--block-tokens", type=int, default=512, help="must divide the trace's 512-token blocks")
    kvt.add_argument("--capacity-blocks", required=True, help="store capacity in blocks; comma-separated for several")
    kvt.add_argument("--dram-fraction", type=float, default=0.25, help="DRAM budget as a share of the SSD budget")
    kvt.add_argument("--fsync", action="store_true", help="fsync every write (slower; same hit ratio)")
    kvt.add_argument("--data-dir", type=Path)
    kvt.add_argument("--json", action="store_true")
    kvt.set_defaults(func=commands.bench_kvstore_trace)
    kvs = bench.add_parser("kvstore-soak", help="mixed load with budgets far below the working set; max bytes per tier")
    kvs.add_argument("--minutes", type=float, default=10.0)
    kvs.add_argument("--dram-mb", type=int, default=4)
    kvs.add_argument("--ssd-mb", type=int, default=32)
    kvs.add_argument("--group-commit", action="store_true")
    kvs.add_argument("--data-dir", type=Path)
    kvs.add_argument("--json", action="store_true")
    kvs.set_defaults(func=commands.bench_kvstore_soak)
    rep = bench.add_parser(
        "replay",
        help="replay an agent trace (Mooncake, TraceLab, agentserve workload): "
        "latency first vs later turns, goodput, cache hits, KV bytes",
    )
    replay_args.add_replay_arguments(rep)
    rep.set_defaults(func=commands.bench_replay)
    capa = bench.add_parser("capacity", help="highest load (rate, concurrency or speedup) that meets an SLO")
    replay_args.add_capacity_arguments(capa)
    capa.set_defaults(func=commands.bench_capacity)
    dual = bench.add_parser(
        "dualpath",
        help="DualPath's figures: every policy (baseline, layerwise, dualpath, split reads) on one agent workload, "
        "offline JCT, online capacity, storage-NIC balance",
    )
    dualpath_args.add_arguments(dual)
    dual.set_defaults(func=commands.bench_dualpath)
    aware = bench.add_parser(
        "agentaware",
        help="KV lifecycle over tool waits: every policy (lru, agentserve, ...) on one multi-agent DAG workload "
        "at three arrival rates: job latency, critical-path JCT, KV utilisation, prefetch hits, bytes moved",
    )
    agentaware_args.add_arguments(aware)
    aware.set_defaults(func=commands.bench_agentaware)
    dance = bench.add_parser(
        "tokendance",
        help="TokenDance's figures: all-gather rounds under prefix caching, per-request and collective "
        "position-independent reuse (capacity, storage, round prefill, quality)",
    )
    tokendance_args(dance)
    dance.set_defaults(func=commands.bench_tokendance)
    peer = bench.add_parser(
        "peer",
        help="agentserve vs llama.cpp's llama-server on the same GGUF and agent trace: sessions within an SLO, "
        "later-turn TTFT, TPOT, tokens/s, resident memory",
    )
    peer_args.add_arguments(peer)
    peer.set_defaults(func=peer_args.command)

    sim = sub.add_parser("sim", help="discrete-event simulation of the scheduler's policies at scale").add_subparsers(
        dest="sim_command", required=True
    )
    simdp = sim.add_parser(
        "dualpath",
        help="DualPath's figures at the paper's scale (1024 agents, 1 prefill + 2 decode nodes) in virtual time",
    )
    sim_cli.add_dualpath_arguments(simdp)
    simdp.set_defaults(func=commands.sim_dualpath)
    simaa = sim.add_parser(
        "agentaware",
        help="the agent-aware KV lifecycle at TokenCake's regime (pools smaller than the working set) "
        "against vllm (recompute) and lru (store-backed), in virtual time",
    )
    sim_cli.add_agentaware_arguments(simaa)
    simaa.set_defaults(func=commands.sim_agentaware)
    simval = sim.add_parser(
        "validate",
        help="small configurations run on the emulated cluster and simulated (or stored emulated runs), "
        "metric by metric",
    )
    sim_cli.add_validate_arguments(simval)
    simval.set_defaults(func=commands.sim_validate)
    plan = sub.add_parser(
        "plan",
        help="the cheapest deployment (prefill and decode engines, storage NIC, policies) that serves an agent "
        "workload within an SLO, by simulation; --elastic: a scaling policy against a peak-sized deployment over "
        "a day; --multi: two models placed together",
    )
    plan_cli.add_arguments(plan)
    plan.set_defaults(func=commands.plan)
    workload = sub.add_parser("workload", help="agent workloads for bench replay").add_subparsers(
        dest="workload_command", required=True
    )
    conv = workload.add_parser("convert", help="Mooncake or TraceLab trace -> agentserve workload JSONL")
    workload_args.add_convert_arguments(conv)
    conv.set_defaults(func=commands.workload_convert)
    wgen = workload.add_parser("generate", help="synthetic multi-agent workload (fan-out, all-gather, tools)")
    workload_args.add_generate_arguments(wgen)
    wgen.set_defaults(func=commands.workload_generate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.func(args)
    except ValueError as exc:
        print(f"agentserve: error: {exc}", file=sys.stderr)
        return 2
    if isinstance(result, dict):
        print(json.dumps(result, indent=None if getattr(args, "json", False) else 2))
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
