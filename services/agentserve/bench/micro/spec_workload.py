"""Tool-echo turns: agent turns whose reply repeats spans of a tool output, the case prompt lookup
drafts for.

The traces under traces/ carry token counts and hashes, no text, so the turns are generated: a
seeded JSON listing of jobs (ids, names, statuses, log paths) returned by a `list_jobs` tool call,
after which the user asks for the listing back verbatim (a reply that quotes its tool output, as
agents' replies that cite files, logs or search results do). Rendered with the model's own chat
template, so an instruct model sees a well-formed conversation (a model without a template gets
the turns as plain text).
"""

from __future__ import annotations

import json
import random

from agentserve.model_files.tokenizer import Tokenizer

NAMES = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")
STATUSES = ("ok", "failed", "pending", "running")


def tool_output(rng: random.Random, rows: int) -> str:
    jobs = [
        {
            "id": rng.randrange(1000, 9999),
            "name": f"{rng.choice(NAMES)}-{rng.randrange(100)}",
            "status": rng.choice(STATUSES),
            "path": f"/srv/{rng.choice(NAMES)}/{rng.choice(NAMES)}.log",
        }
        for _ in range(rows)
    ]
    return json.dumps(jobs, indent=1)


def tool_echo_turns(tokenizer: Tokenizer, count: int, rows: int = 8, seed: int = 0) -> list[list[int]]:
    """`count` prompts (token ids), each ending where the assistant starts its reply."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(count):
        messages = [
            {"role": "system", "content": "You are a helpful assistant with tools."},
            {"role": "user", "content": "List the jobs on the server."},
            {"role": "assistant", "content": '{"tool": "list_jobs", "arguments": {}}'},
            {
                "role": "user",
                "content": f"Tool output:\n{tool_output(rng, rows)}\n\nRepeat the tool output above exactly, as JSON.",
            },
        ]
        prompts.append(tokenizer.encode(_render(tokenizer, messages)))
    return prompts


def _render(tokenizer: Tokenizer, messages: list[dict[str, str]]) -> str:
    """The model's chat template; a model without one (the tiny default) gets the turns as text."""
    try:
        return tokenizer.apply_chat_template(messages)
    except ValueError:
        return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
