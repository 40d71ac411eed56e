"""Where collective's blended prefill spends its time near GenerativeAgents' limit: agent 1's
last-round prompt served collectively at AGENTS agents (token scale 1/16, one thread), its CPU time
against prefix caching's prefill of the same prompt after the same history (min and median of 50),
then torch.profiler's op table and cProfile's top functions over 20 blends.

    PYTHONPATH=$PWD/services python docs/tokendance/profile/profile_blend_ops.py [AGENTS]
"""

import sys, time, statistics
from dataclasses import replace
import torch
from agentserve.bench.tokendance.served import RoundServer, ServedSpec
from agentserve.bench.tokendance.workload import generative_agents
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.loader import load_model
from agentserve.engine.shared_context import CollectiveReuse
torch.set_num_threads(1)
model = load_model(ensure_default_model(), "fp32")[0]
print(model.config)
shape = generative_agents(int(sys.argv[1]) if len(sys.argv) > 1 else 52).scaled(16)
server = RoundServer(model, shape, "collective", ServedSpec(), float("inf"))
captured = []
prefill = server._prefill
def capture(prompt, prefix):
    if prompt.shared_spans()[0].block.round_index == shape.rounds:
        captured.append((prompt, prefix))
    return prefill(prompt, prefix)
server._prefill = capture
t=time.process_time(); probe=server.serve(float("inf")); print("serve cpu", time.process_time()-t, [r.latency_s for r in probe.rounds])
prompt, prefix = captured[1]
masters = server.masters
known = CollectiveReuse(model, max_deviation=None, estimate=False)
f=lambda: known.prefill(prompt, masters, prefix)
g=lambda: known.full(prompt.token_ids, prefix)
for _ in range(10): f(); g()
def timed(c, n=50):
    ts=[]
    for _ in range(n):
        s=time.process_time(); c(); ts.append(time.process_time()-s)
    return min(ts)*1e3, statistics.median(ts)*1e3
print(len(prompt.token_ids), prefix.num_tokens, "blend", timed(f), "full", timed(g))
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as p:
    for _ in range(20): f()
print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
import cProfile, pstats
pr=cProfile.Profile(); pr.enable()
for _ in range(20): f()
pr.disable(); pstats.Stats(pr).sort_stats("tottime").print_stats(15)
