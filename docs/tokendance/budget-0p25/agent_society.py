# AgentSociety at budget fraction 0.25: prefix and collective only (the sweep's third point, served part only).
import torch
from dataclasses import replace
from agentserve.bench.tokendance.served import ServedSpec, calibrate, served_capacity
from agentserve.bench.tokendance.workload import agent_society
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.loader import load_model
torch.set_num_threads(1)
model = load_model(ensure_default_model(), "fp32")[0]
shape = agent_society(64, 5)
spec = ServedSpec(diff_share=0.053)
cal = calibrate(model, shape, spec)
print("SLO", cal.slo_s, "full", cal.full_kv_tokens, flush=True)
for fraction in (0.25,):
    regime = cal.regime(spec, fraction)
    print("budget", regime, flush=True)
    for policy in ("collective", "prefix"):
        found = served_capacity(model, shape, policy, spec, regime, cal.known(regime) if policy == "prefix" else None, lambda l: print(l, flush=True))
        print(fraction, policy, found.max_agents, found.limited_by, [(p.agents, p.met, p.worst_latency_s, sum(r.recomputed_history_tokens for r in p.rounds), p.rounds[-1].kv_tokens) for p in sorted(found.probes, key=lambda p: p.agents)], flush=True)
