"""The sweep's third point (budget fraction 0.25), served part only: prefix caching and collective.

Usage: python served_at_budget.py generative_agents|agent_society
(the logs beside this file are its output for each workload).
"""

import sys

import torch

from agentserve.bench.papers.tokendance.served import ServedSpec, calibrate, served_capacity
from agentserve.bench.papers.tokendance.workload import agent_society, generative_agents
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.loader import load_model

# workload name -> (shape, the diff share the default run measured for it)
WORKLOADS = {
    "generative_agents": (lambda: generative_agents(32, 5), 0.046),
    "agent_society": (lambda: agent_society(64, 5), 0.053),
}

make_shape, diff_share = WORKLOADS[sys.argv[1]]
torch.set_num_threads(1)
model = load_model(ensure_default_model(), "fp32")[0]
shape = make_shape()
spec = ServedSpec(diff_share=diff_share)
cal = calibrate(model, shape, spec)
print("SLO", cal.slo_s, "full", cal.full_kv_tokens, flush=True)
for fraction in (0.25,):
    regime = cal.regime(spec, fraction)
    print("budget", regime, flush=True)
    for policy in ("collective", "prefix"):
        known = cal.known(regime) if policy == "prefix" else None
        found = served_capacity(model, shape, policy, spec, regime, known, lambda line: print(line, flush=True))
        probes = [
            (
                p.agents,
                p.met,
                p.worst_latency_s,
                sum(r.recomputed_history_tokens for r in p.rounds),
                p.rounds[-1].kv_tokens,
            )
            for p in sorted(found.probes, key=lambda p: p.agents)
        ]
        print(fraction, policy, found.max_agents, found.limited_by, probes, flush=True)
