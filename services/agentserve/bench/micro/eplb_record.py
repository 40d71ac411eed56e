"""Expert loads of a MoE engine on agent sessions, recorded for `bench eplb`.

traces/ holds agent sessions' token counts and tool timings but no text, and routing depends on
the text; so the sessions here are the shipped corpus's agent dialogues (a user request, the
assistant's plan, a `tool` result, the assistant's report), rendered by the model's chat template.
A session is `rounds` consecutive dialogues; its round r prompt is its first r dialogues plus the
generation prompt, so each round extends the previous one as an agent's turns do, and the engine's
prefix cache serves the earlier rounds (their tokens are not routed again). Rounds run in
batches of `batch` sessions, each decoding `max_tokens` greedy tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentserve.contracts import SamplingParams
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model import CausalLM
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.training.corpus import chat_messages, corpus_blocks


def agent_sessions(rounds: int) -> list[list[list[dict[str, str]]]]:
    """Sessions of `rounds` rounds, each round's messages: the corpus's tool dialogues, in order."""
    dialogues = []
    for block in corpus_blocks():
        messages = chat_messages(block)
        if messages is not None and any(m["role"] == "tool" for m in messages):
            dialogues.append(messages)
    sessions = []
    for start in range(0, len(dialogues) - rounds + 1, rounds):
        turns = dialogues[start : start + rounds]
        sessions.append([[m for turn in turns[: r + 1] for m in turn] for r in range(rounds)])
    return sessions


def record_agent_loads(
    model_dir: str | Path,
    out: str | Path,
    rounds: int = 2,
    batch: int = 16,
    max_tokens: int = 16,
    max_sessions: int | None = None,
) -> dict[str, Any]:
    """Run the sessions (the first `max_sessions`, or all) on the model with `--record-expert-load`'s
    recorder writing to `out`."""
    engine = LLMEngine.from_dir(model_dir, EngineConfig(kv_cache_bytes=64 << 20))
    model = engine.model
    if not isinstance(model, CausalLM) or model.expert_load is None:
        raise ValueError(f"{model_dir} is not a MoE model: it has no expert loads to record")
    load = model.expert_load
    tokenizer = Tokenizer.from_dir(model_dir)
    sessions = agent_sessions(rounds)[:max_sessions]
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    recorder = load.record_to(out)
    prompt_tokens = cached_tokens = 0
    try:
        for r in range(rounds):
            for start in range(0, len(sessions), batch):
                prompts = [
                    tokenizer.encode(tokenizer.apply_chat_template(s[r], add_generation_prompt=True))
                    for s in sessions[start : start + batch]
                ]
                for seq in engine.generate_many(prompts, params):
                    prompt_tokens += seq.num_prompt_tokens
                    cached_tokens += seq.num_cached_tokens
    finally:
        recorder.close()
    return {
        "sessions": len(sessions),
        "rounds": rounds,
        "prompt_tokens": prompt_tokens,
        "cached_prompt_tokens": cached_tokens,
        "decoded_tokens": len(sessions) * rounds * max_tokens,
    }
