"""Traces an LLM user can read: the demo's session in the tracing UI (Arize Phoenix).

The demo runs against the compose deployment and prints a link to its last turn's trace. That
turn's span is an OpenInference LLM span with the token counts the turn returned; each tool call
is a TOOL span under the turn that preceded it; and the page the link opens, rendered headless,
shows the span kind and the counts.
"""

from __future__ import annotations

import html
import io
import re
import sys

import pytest

from agentserve.cli.demo import run_demo
from tests.support.compose import Stack
from tests.support.screenshot import ARTIFACTS, rendered_dom, screenshot

pytestmark = pytest.mark.container

LINK = re.compile(r"^last turn's trace: (\S+)$", re.MULTILINE)


def test_the_demo_links_to_its_last_turns_trace_which_shows_an_llm_span_with_token_counts(stack: Stack):
    printed = io.StringIO()
    turns = run_demo(stack.grpc_address, stack.toolproxy_url, out=printed, tracing_ui=stack.phoenix_url)
    print(printed.getvalue(), file=sys.stderr)
    (url,) = LINK.findall(printed.getvalue())
    last = turns[-1]
    assert url.startswith(f"{stack.phoenix_url}/projects/") and f"/traces/{last['trace_id']}?" in url

    # Every turn is an LLM span with the counts the client got; each tool call is a TOOL span,
    # the child of the turn before it, in that turn's trace and session.
    session_ids = set()
    for i, turn in enumerate(turns):
        (span,) = stack.phoenix.wait_for_spans("turn", trace_id=turn["trace_id"])
        attributes = span["attributes"]
        assert span["span_kind"] == "LLM" and span["context"]["span_id"] == turn["span_id"]
        assert attributes["llm"]["model_name"] == "agentserve-tiny"
        assert attributes["llm"]["token_count"] == {
            "prompt": turn["prompt_tokens"],
            "completion": turn["completion_tokens"],
            "total": turn["prompt_tokens"] + turn["completion_tokens"],
            "prompt_details": {"cache_read": turn["cached_tokens"]},
        }
        assert attributes["input"]["value"] and attributes["output"]["value"]
        session_ids.add(attributes["session"]["id"])
        if i + 1 < len(turns):
            (tool,) = stack.phoenix.wait_for_spans("tool.call", trace_id=turn["trace_id"])
            assert tool["span_kind"] == "TOOL" and tool["parent_id"] == turn["span_id"]
            assert tool["attributes"]["session"]["id"] == attributes["session"]["id"]
            assert tool["attributes"]["input"]["value"] == '{"seconds": 0.2}'
    assert len(session_ids) == 1

    # The page the link opens, rendered: the LLM span selected, its kind and token counts shown.
    png = screenshot(url, ARTIFACTS / "llm-turn-trace.png")
    text = page_text(rendered_dom(url))
    print(f"[llm traces] {url} rendered to {png}", file=sys.stderr)
    assert png.stat().st_size > 20_000  # a rendered page, not a blank one
    assert re.search(r"\bLLM\b", text), text[:2000]
    assert re.search(r"\bTOOL\b", text) is None  # the last turn asked for no tool: none in its trace
    for label, count in (("prompt", last["prompt_tokens"]), ("completion", last["completion_tokens"])):
        assert re.search(rf"\b{count}\b", text), f"{label} tokens {count} not on the page: {text[:2000]}"
    assert re.search(rf"\b{last['prompt_tokens'] + last['completion_tokens']}\b", text), text[:2000]


def page_text(dom: str) -> str:
    """The visible text of a rendered DOM: tags, scripts and styles dropped, entities decoded."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.DOTALL | re.IGNORECASE)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))
