"""Request bodies: nesting depth and lone surrogates are 400s, found without recursion."""

from __future__ import annotations

import asyncio
import json

import pytest

from agentserve.common.json_body import MAX_JSON_DEPTH, parse_json_object, parse_json_object_async

pytestmark = pytest.mark.unit


def test_nesting_up_to_the_limit_parses() -> None:
    body = "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)
    assert parse_json_object(f'{{"a": {body}}}'.encode())["a"] is not None


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 900, 100_000])
def test_deeper_nesting_is_rejected(depth) -> None:
    raw = ('{"a": ' + "[" * depth + "]" * depth + "}").encode()
    with pytest.raises(ValueError, match=f"request body nests deeper than {MAX_JSON_DEPTH} levels"):
        parse_json_object(raw)


@pytest.mark.parametrize("text", ['"\\ud800"', '"ok \\udfff"', '"\\ude00\\ud83d"'])
def test_lone_surrogates_are_rejected_in_values_and_keys(text) -> None:
    for raw in (f'{{"messages": [{{"content": {text}}}]}}', f"{{{text}: 1}}"):
        with pytest.raises(ValueError, match="lone UTF-16 surrogate"):
            parse_json_object(raw.encode())


def test_a_surrogate_pair_is_one_character_and_accepted() -> None:
    assert parse_json_object(b'{"emoji": "\\ud83d\\ude00"}') == {"emoji": "\U0001f600"}


def test_large_bodies_parse_off_the_loop_with_the_same_result() -> None:
    body = {"messages": [{"role": "user", "content": "word " * 100_000}]}
    raw = json.dumps(body).encode()
    assert asyncio.run(parse_json_object_async(raw)) == body
    with pytest.raises(ValueError, match="must be a JSON object"):
        asyncio.run(parse_json_object_async(b"[" + b"1," * 200_000 + b"1]"))
