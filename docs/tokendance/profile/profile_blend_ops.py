"""Where collective's blended prefill spends its time near GenerativeAgents' limit: agent 1's
last-round prompt served collectively at AGENTS agents (token scale 1/16, one thread), its CPU time
against prefix caching's prefill of the same prompt after the same history (min and median of 50),
then torch.profiler's op table and cProfile's top functions over 20 blends.

    PYTHONPATH=$PWD/services python docs/tokendance/profile/profile_blend_ops.py [AGENTS]
"""

from __future__ import annotations

import cProfile
import pstats
import sys
import time

import torch
from profile_blend import last_round_blend, timed  # this folder's other profile
from torch.profiler import ProfilerActivity, profile

from agentserve.bench.papers.tokendance.workload import generative_agents
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.loader import load_model
from agentserve.engine.shared_context import CollectiveReuse


def main(agents: int) -> None:
    torch.set_num_threads(1)
    model = load_model(ensure_default_model(), "fp32")[0]
    print(model.config)
    shape = generative_agents(agents).scaled(16)
    started = time.process_time()
    server, prompt, prefix, probe = last_round_blend(model, shape)
    print("serve cpu", time.process_time() - started, [r.latency_s for r in probe.rounds])
    known = CollectiveReuse(model, max_deviation=None, estimate=False)

    def blend():
        return known.prefill(prompt, server.masters, prefix)

    def full():
        return known.full(prompt.token_ids, prefix)

    for _ in range(10):
        blend()
        full()
    print(len(prompt.token_ids), prefix.num_tokens, "blend", timed(blend, 50), "full", timed(full, 50))
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(20):
            blend()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(20):
        blend()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 52)
