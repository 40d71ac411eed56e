"""One blended prefill against prefix caching's prefill of the same prompt, as the served bench
runs them: agent 1's prompt of the last gather round, served collectively at the workload's own
agent count (token scale 1/32 unless given, one thread), after its cached history. CPU time per
call, min and median of 300.

    PYTHONPATH=$PWD/services python docs/tokendance/profile/profile_blend.py [generative-agents|agent-society] [SCALE]
"""

from __future__ import annotations

import statistics
import sys
import time

import torch

from agentserve.bench.papers.tokendance.served import RoundServer, ServedSpec
from agentserve.bench.papers.tokendance.workload import agent_society, generative_agents
from agentserve.engine.default_model import ensure_default_model
from agentserve.engine.loader import load_model
from agentserve.engine.shared_context import CollectiveReuse


def timed(call, reps: int = 300) -> tuple[float, float]:
    times = []
    for _ in range(reps):
        started = time.process_time()
        call()
        times.append(time.process_time() - started)
    return round(min(times) * 1e3, 2), round(statistics.median(times) * 1e3, 2)


def last_round_blend(model, shape):
    """Serves `shape` collectively and returns the server (its masters) with agent 1's last-round
    prompt and cached prefix: a blend (agent 0 led the round). Also the served probe."""
    server = RoundServer(model, shape, "collective", ServedSpec(), float("inf"))
    captured = []
    prefill = server._prefill

    def capture(prompt, prefix):
        if prompt.shared_spans()[0].block.round_index == shape.rounds:
            captured.append((prompt, prefix))
        return prefill(prompt, prefix)

    server._prefill = capture
    probe = server.serve(float("inf"))
    prompt, prefix = captured[1]
    return server, prompt, prefix, probe


def main(workload: str, token_scale: int) -> None:
    torch.set_num_threads(1)
    model = load_model(ensure_default_model(), "fp32")[0]
    shape = (generative_agents() if workload == "generative-agents" else agent_society()).scaled(token_scale)
    server, prompt, prefix, _ = last_round_blend(model, shape)
    masters = server.masters
    estimating = CollectiveReuse(model, max_deviation=None)
    known = CollectiveReuse(model, max_deviation=None, estimate=False)
    calls = {
        "prefix caching (full after the history)": lambda: known.full(prompt.token_ids, prefix),
        "blend, layer 0 over every token (estimate)": lambda: estimating.prefill(prompt, masters, prefix),
        "blend, chosen tokens only (served)": lambda: known.prefill(prompt, masters, prefix),
    }
    for call in calls.values():
        for _ in range(20):
            call()
    stats = known.prefill(prompt, masters, prefix).stats
    chosen = stats.computed_tokens - prefix.num_tokens
    print(f"{workload}: {stats.prompt_tokens} tokens, {prefix.num_tokens} cached, {chosen} chosen")
    full = None
    for name, call in calls.items():
        low, median = timed(call)
        full = full or low
        print(f"  {name}: min {low} ms, median {median} ms, min over prefix caching's {low / full:.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "generative-agents", int(sys.argv[2]) if len(sys.argv) > 2 else 32)
