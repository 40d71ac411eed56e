"""IncrementalDetokenizer: deltas add up to the full text and never end in half a character."""

from __future__ import annotations

import pytest

from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.detokenizer import REPLACEMENT, IncrementalDetokenizer

pytestmark = pytest.mark.unit


def test_token_by_token_deltas_rebuild_the_text(tokenizer: Tokenizer) -> None:
    text = "Hello, wörld! 😀 naïve café — ok"
    tokens = tokenizer.encode(text)
    detokenizer = IncrementalDetokenizer(tokenizer)
    deltas = [detokenizer.add([t], final=i == len(tokens) - 1) for i, t in enumerate(tokens)]
    assert "".join(deltas) == tokenizer.decode(tokens) == text
    assert not any(REPLACEMENT in d for d in deltas)


def test_a_split_character_is_held_back_until_complete(tokenizer: Tokenizer) -> None:
    tokens = tokenizer.encode("😀")
    assert len(tokens) > 1, "the emoji should span several byte-level tokens"
    detokenizer = IncrementalDetokenizer(tokenizer)
    assert detokenizer.add(tokens[:1]) == ""
    assert detokenizer.add(tokens[1:]) == "😀"


def test_final_flushes_an_incomplete_character(tokenizer: Tokenizer) -> None:
    tokens = tokenizer.encode("😀")
    detokenizer = IncrementalDetokenizer(tokenizer)
    assert detokenizer.add(tokens[:1]) == ""
    assert detokenizer.add([], final=True) == tokenizer.decode(tokens[:1])


def test_special_tokens_are_not_text(tokenizer: Tokenizer) -> None:
    detokenizer = IncrementalDetokenizer(tokenizer)
    assert detokenizer.add(tokenizer.encode("done") + [4], final=True) == "done"
