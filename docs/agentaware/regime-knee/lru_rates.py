"""lru (or another policy) on the default agentaware workload at a ramp of rates, one cluster, no report: the regime check in docs/agentaware.md.

Usage (from the repository root): PYTHONPATH=services python docs/agentaware/regime-knee/lru_rates.py 0.1,0.2,0.3 [POLICY] [bench args]"""
import argparse, asyncio, json, os, sys, time
from agentserve.bench.papers.agentaware import cli, cli_args
from agentserve.bench.papers.agentaware.runs import run_policy
from agentserve.bench.papers.agentaware.stacks import lifecycle_policy
from agentserve.bench.papers.agentaware.workload import generate, read_tool_sample

rates = tuple(float(x) for x in sys.argv[1].split(","))
policy_name = sys.argv[2] if len(sys.argv) > 2 else "lru"
extra = sys.argv[3:]
p = argparse.ArgumentParser(); cli_args.add_arguments(p)
args = p.parse_args(extra)
spec = cli.bench_spec(args)
wl = generate(spec.workload, read_tool_sample(spec.trace))
async def main():
    t0 = time.monotonic(); l0 = os.getloadavg()
    runs = await run_policy(lifecycle_policy(policy_name, {}), spec.cluster, wl, rates, 1 / spec.time_dilation,
                            spec.block_bytes, spec.workload.seed, spec.turn_cost())
    out = {}
    for r, f in runs.by_rate.items():
        b = f["bound"]
        out[r] = {k: f[k] for k in ("job_latency_mean_s", "job_latency_p90_s", "ttft_mean_s", "jobs_done", "turns_failed",
                                    "resident_at_first_token", "returning_turns", "recomputed_tokens", "store_loaded_blocks", "duration_s", "turn_retries")}
        out[r].update(bound=b["job_latency_bound_mean_s"], tool_share=b["chain_tool_share"], llm_share=b["chain_llm_share"],
                      compute_share=b["chain_modelled_compute_share"], kv_util=f["kv"]["kv_utilization"])
    print(json.dumps({"policy": policy_name, "args": extra, "load_start": l0, "load_end": os.getloadavg(), "wall_s": time.monotonic() - t0, "runs": out}, indent=1))
asyncio.run(main())
