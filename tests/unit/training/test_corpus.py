"""The corpus split and how each kind of block becomes a training sample."""

from __future__ import annotations

import pytest

from agentserve.model_files.presets import BOS_ID, EOS_ID, IM_END_ID, IM_START_ID
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import ensure_default_tokenizer
from agentserve.training.corpus import (
    HOLD_OUT_EVERY,
    chat_messages,
    corpus_blocks,
    sample_tokens,
    split_corpus,
    token_stream,
)

pytestmark = pytest.mark.unit

DIALOGUE = (
    "User: Can you decode the layer in node.py?\n"
    "Assistant: Sure. I will decode the layer, then sort the syntax and report back.\n"
    'Tool: {"status": "ok", "lines": 337}\n'
    "Assistant: Done. The layer now sorts 2000 syntaxes."
)
QUESTION = "Why does the tenant measure the suffix when the reviewer is huge?"
REPLY = '"Angry promotions never climb electricians," said Tariq. In 2019, a blue cough payed 31 managers.'
PROSE = f"{QUESTION} {REPLY}"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_dir(ensure_default_tokenizer())


def test_every_twentieth_block_is_held_out_and_never_trained_on() -> None:
    blocks = corpus_blocks()
    split = split_corpus()
    assert split.held_out == tuple(blocks[HOLD_OUT_EVERY - 1 :: HOLD_OUT_EVERY])
    assert not set(split.held_out) & set(split.train)
    assert split.train == tuple(b for b in blocks if b not in split.held_out)
    numbered = split_corpus([str(i) for i in range(40)])
    assert (numbered.held_out, numbered.train) == (("19", "39"), tuple(str(i) for i in range(40) if i not in (19, 39)))
    # A repeat of a held-out block's text is not trained on either.
    repeated = split_corpus(["a"] * 19 + ["b"] + ["b", "c"])
    assert (repeated.held_out, repeated.train) == (("b",), ("a",) * 19 + ("c",))


def test_an_indented_block_continues_the_one_before() -> None:
    first = corpus_blocks()[0]
    assert first.startswith("class CatchMemory:\n")
    assert '    """Reduce results for the commit."""\n\n    def encode_map_variable(' in first


def test_dialogues_become_conversations_with_the_same_roles() -> None:
    assert chat_messages(DIALOGUE) == [
        {"role": "user", "content": "Can you decode the layer in node.py?"},
        {"role": "assistant", "content": "Sure. I will decode the layer, then sort the syntax and report back."},
        {"role": "tool", "content": '{"status": "ok", "lines": 337}'},
        {"role": "assistant", "content": "Done. The layer now sorts 2000 syntaxes."},
    ]


def test_prose_becomes_a_question_and_the_rest_as_the_reply() -> None:
    assert chat_messages(PROSE) == [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": REPLY}]


@pytest.mark.parametrize(
    "block",
    [
        "$ docker run --rm -p 2463:8080 task/path:latest",
        "2024-01-26T18:23:14Z WARN protocol.protocol caught latency_ms=451.7 tokens=1701 id=3b4304f3",
        "東京の天気は晴れです。",
        "Le café près de la gare ouvre à sept heures.",  # one sentence: nothing to reply with
        "| agent | tool | cache |\n|---|---|---|",
    ],
)
def test_other_blocks_are_plain_documents(block: str, tokenizer: Tokenizer) -> None:
    assert chat_messages(block) is None
    assert sample_tokens(tokenizer, block) == [BOS_ID, *tokenizer.encode(block), EOS_ID]


def test_chat_samples_are_the_chat_template_without_a_generation_prompt(tokenizer: Tokenizer) -> None:
    tokens = sample_tokens(tokenizer, DIALOGUE)
    assert tokens[0] == IM_START_ID and tokens.count(IM_START_ID) == tokens.count(IM_END_ID) == 4
    # The tool's output goes back as the template renders tool results (Hermes: a user turn).
    assert tokenizer.decode(tokens, skip_special_tokens=False) == (
        "<|im_start|>user\nCan you decode the layer in node.py?<|im_end|>\n"
        "<|im_start|>assistant\nSure. I will decode the layer, then sort the syntax and report back.<|im_end|>\n"
        '<|im_start|>user\n<tool_response>\n{"status": "ok", "lines": 337}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\nDone. The layer now sorts 2000 syntaxes.<|im_end|>\n"
    )


def test_the_stream_is_the_samples_in_corpus_order(tokenizer: Tokenizer) -> None:
    blocks = [DIALOGUE, "$ ls", PROSE]
    assert token_stream(tokenizer, blocks) == [t for b in blocks for t in sample_tokens(tokenizer, b)]
