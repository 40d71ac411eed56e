"""A session opened with tools: the chat template lists them with its first turn, later turns
extend that history exactly, and a fork past the start of a conversation cannot take tools."""

from __future__ import annotations

import pytest

from agentserve.contracts import SamplingParams
from tests.unit.scheduler.fakes import collect, run

pytestmark = pytest.mark.unit

TOOLS = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]


def test_first_turn_lists_the_tools_and_the_next_extends_it(make_core, engines, tokenizer) -> None:
    core = make_core()
    sampling = SamplingParams(max_tokens=8)

    async def go():
        sid = await core.open_session(system_prompt="be terse", tools=TOOLS)
        await collect(core.turn(sid, message="time?", sampling=sampling))
        await collect(core.turn(sid, message="12:00", role="tool", sampling=sampling))
        return core.sessions.get(sid)

    session = run(go())
    system, user = {"role": "system", "content": "be terse"}, {"role": "user", "content": "time?"}
    first = tokenizer.encode(tokenizer.apply_chat_template([system, user], tools=TOOLS))
    assert engines.prefills[0][1].token_ids == first
    second = engines.prefills[1][1].token_ids
    assert tokenizer.decode(second[len(first) :], skip_special_tokens=False).endswith(
        "<|im_start|>user\n<tool_response>\n12:00\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert session.pending_tools == ()


def test_a_fork_with_history_cannot_take_tools(make_core) -> None:
    core = make_core()

    async def go():
        parent = await core.open_session()
        await collect(core.turn(parent, message="hi", sampling=SamplingParams(max_tokens=4)))
        return await core.open_session(parent_session_id=parent, tools=TOOLS)

    with pytest.raises(ValueError, match="tools need a session that starts a conversation"):
        run(go())
