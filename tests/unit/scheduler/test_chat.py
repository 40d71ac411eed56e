"""ChatRenderer and PromptBuilder: a later turn's tokens extend the history exactly, and equal what
rendering the whole conversation at once would give."""

from __future__ import annotations

import pytest

from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.chat import ChatRenderer
from agentserve.scheduler.prompts import PromptBuilder, check_fits
from agentserve.scheduler.sessions import Session

pytestmark = pytest.mark.unit

IM_START, IM_END, NEWLINE = 3, 4, 203  # the tiny model's ChatML tokens


def msg(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


def full_render(tokenizer: Tokenizer, messages: list[dict[str, str]]) -> list[int]:
    return tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=True))


def test_first_turn_is_the_plain_template(tokenizer: Tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    messages = [msg("system", "You are terse."), msg("user", "hello there")]
    tokens = renderer.first_turn(messages)
    assert tokens == full_render(tokenizer, messages)
    assert tokens[0] == IM_START and tokens.count(IM_START) == 3  # system, user, assistant prompt


def test_later_turn_after_a_stopped_reply_equals_the_full_render(tokenizer: Tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    opening = [msg("system", "You are terse."), msg("user", "hi")]
    reply = tokenizer.encode("Yo yo") + [IM_END]  # what the model generates: text, then its stop token
    history = renderer.first_turn(opening) + reply
    appended = renderer.next_turn(history, [msg("user", "next")])
    # Only the newline closing the assistant message, then the new message: no BOS, no system again.
    assert appended[0] == NEWLINE and appended[1] == IM_START
    assert history + appended == full_render(tokenizer, [*opening, msg("assistant", "Yo yo"), msg("user", "next")])


def test_reply_cut_by_length_gets_closed_first(tokenizer: Tokenizer) -> None:
    renderer = ChatRenderer(tokenizer)
    opening = [msg("user", "count")]
    history = renderer.first_turn(opening) + tokenizer.encode("one two")  # no stop token: max_tokens hit
    appended = renderer.next_turn(history, [msg("tool", '{"result": 3}')])
    assert appended[:2] == [IM_END, NEWLINE]
    expected = full_render(tokenizer, [*opening, msg("assistant", "one two"), msg("tool", '{"result": 3}')])
    assert history + appended == expected


def test_three_turns_keep_extending(tokenizer: Tokenizer) -> None:
    builder = PromptBuilder(tokenizer, max_message_tokens=1000)
    session = Session("s", pending_system="sys")
    conversation = [msg("system", "sys")]
    for i, (question, answer) in enumerate([("a?", "A."), ("b?", "B!"), ("c?", "C")]):
        prompt = session.history + builder.new_tokens(session, question, None, "user")
        conversation.append(msg("user", question))
        assert prompt == full_render(tokenizer, conversation), f"turn {i}"
        session.commit(prompt + tokenizer.encode(answer) + [IM_END])
        conversation.append(msg("assistant", answer))


def test_token_id_turn_with_a_system_prompt_gets_the_system_message_first(tokenizer: Tokenizer) -> None:
    builder = PromptBuilder(tokenizer, max_message_tokens=1000)
    tokens = builder.new_tokens(Session("s", pending_system="sys"), None, [10, 11], "user")
    system = tokenizer.encode(tokenizer.apply_chat_template([msg("system", "sys")], add_generation_prompt=False))
    assert tokens == system + [10, 11]
    assert builder.new_tokens(Session("s"), None, [10, 11], "user") == [10, 11]


@pytest.mark.parametrize(
    "message, token_ids, role, error",
    [
        ("", None, "user", "message is empty"),
        (None, [], "user", "message is empty"),
        ("hi", [1], "user", "either message or token_ids"),
        (None, [1, 8192], "user", r"token id 8192 is outside the vocabulary \[0, 8192\)"),
        (None, [-1], "user", "outside the vocabulary"),
        ("hi", None, "assistant", "role must be one of"),
        (None, list(range(11)), "user", "message is 11 tokens, over the limit of 10"),
    ],
)
def test_bad_requests(tokenizer: Tokenizer, message, token_ids, role, error) -> None:
    with pytest.raises(ValueError, match=error):
        PromptBuilder(tokenizer, max_message_tokens=10).check(message, token_ids, role, vocab_size=8192)


def test_rendered_message_over_the_limit(tokenizer: Tokenizer) -> None:
    builder = PromptBuilder(tokenizer, max_message_tokens=10)
    builder.check("word " * 20, None, "user", vocab_size=8192)  # the size is known only once rendered
    with pytest.raises(ValueError, match="over the limit of 10"):
        builder.new_tokens(Session("s"), "word " * 20, None, "user")


def test_context_limit() -> None:
    check_fits(100, 28, 128)
    with pytest.raises(ValueError, match=r"prompt \(100 tokens\) plus max_tokens \(29\) exceeds .* 128"):
        check_fits(100, 29, 128)
