"""`agentserve generate --json`: the prompt's token ids come back with the completion."""

from __future__ import annotations

import json

import pytest

from agentserve.cli.main import main
from agentserve.model_files.tokenizer import Tokenizer

pytestmark = pytest.mark.unit

PROMPT = "The quick brown fox"


def generate_json(capsys, *args: str) -> dict:
    assert main(["generate", "--prompt", PROMPT, "--max-tokens", "3", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_prompt_token_ids_are_the_tokenizers_encoding(tiny_model_dir, capsys) -> None:
    result = generate_json(capsys, "--model", str(tiny_model_dir))
    tokenizer = Tokenizer.from_dir(tiny_model_dir)
    expected = tokenizer.encode(PROMPT, add_bos=True)
    assert expected[0] == tokenizer.bos_token_id
    assert result["prompt_token_ids"] == expected
    assert result["prompt_tokens"] == len(expected)
    assert len(result["token_ids"]) == 3


def test_chat_prompt_token_ids_are_the_templated_encoding(tiny_model_dir, capsys) -> None:
    result = generate_json(capsys, "--model", str(tiny_model_dir), "--chat")
    tokenizer = Tokenizer.from_dir(tiny_model_dir)
    templated = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}])
    assert result["prompt_token_ids"] == tokenizer.encode(templated, add_bos=False)


def test_ignore_eos_generates_exactly_max_tokens(capsys) -> None:
    # The trained default model ends this plain completion early (<|eos|>); the flag runs on.
    assert main(["generate", "--prompt", "hi", "--max-tokens", "8", "--json"]) == 0
    stopped = json.loads(capsys.readouterr().out)
    assert main(["generate", "--prompt", "hi", "--max-tokens", "8", "--ignore-eos", "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert (stopped["finish_reason"], full["finish_reason"], len(full["token_ids"])) == ("stop", "length", 8)
    assert full["token_ids"][: len(stopped["token_ids"])] == stopped["token_ids"]
