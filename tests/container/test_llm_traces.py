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

from agentserve.cli.demo import MESSAGES, run_demo
from tests.support.compose import TEST_TIMEOUT_S, Stack
from tests.support.screenshot import ARTIFACTS, rendered_dom, screenshot

pytestmark = [pytest.mark.container, pytest.mark.timeout(TEST_TIMEOUT_S)]

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
        assert attributes["llm.model_name"] == "agentserve-tiny"
        counts = {k: v for k, v in attributes.items() if k.startswith("llm.token_count.")}
        assert counts == {
            "llm.token_count.prompt": turn["prompt_tokens"],
            "llm.token_count.completion": turn["completion_tokens"],
            "llm.token_count.total": turn["prompt_tokens"] + turn["completion_tokens"],
            "llm.token_count.prompt_details.cache_read": turn["cached_tokens"],
        }
        assert attributes["input.value"] == MESSAGES[i] and attributes["output.value"] == turn["text"]
        session_ids.add(attributes["session.id"])
        if i + 1 < len(turns):
            (tool,) = stack.phoenix.wait_for_spans("tool.call", trace_id=turn["trace_id"])
            assert tool["span_kind"] == "TOOL" and tool["parent_id"] == turn["span_id"]
            assert tool["attributes"]["session.id"] == attributes["session.id"]
            assert tool["attributes"]["input.value"] == '{"seconds": 0.2}'
    assert len(session_ids) == 1

    # The page the link opens, rendered: the turn selected, its kind LLM in the span header, its
    # token counts among its attributes.
    png = screenshot(url, ARTIFACTS / "llm-turn-trace.png")
    dom = rendered_dom(url)
    print(f"[llm traces] {url} rendered to {png}", file=sys.stderr)
    assert png.stat().st_size > 20_000  # a rendered page, not a blank one
    assert selected_span(dom) == ("llm", "turn"), page_text(dom)[:3000]
    text = page_text(dom)
    total = last["prompt_tokens"] + last["completion_tokens"]
    for name, count in (("prompt", last["prompt_tokens"]), ("completion", last["completion_tokens"]), ("total", total)):
        assert re.search(rf"llm\. ?token_count\. ?{name} {count}\b", text), f"{name} tokens {count} not shown"

    # The first turn's trace with its tool call selected: a TOOL span under the turn.
    (tool,) = stack.phoenix.spans(name="tool.call", trace_id=turns[0]["trace_id"])
    tool_url = stack.phoenix.trace_url(turns[0]["trace_id"], tool)
    png = screenshot(tool_url, ARTIFACTS / "llm-turn-tool-trace.png")
    assert png.stat().st_size > 20_000
    assert selected_span(rendered_dom(tool_url)) == ("tool", "tool.call")


def selected_span(dom: str) -> tuple[str, str]:
    """(kind badge, name) in the header of the span the trace page has selected."""
    header = re.search(
        r'span-header__identity.*?class="token__text">([^<]*)</span>.*?span-header__name[^"]*" title="([^"]*)"',
        dom,
        re.DOTALL,
    )
    assert header is not None, "no selected span on the page"
    return header.group(1), header.group(2)


def page_text(dom: str) -> str:
    """The visible text of a rendered DOM: tags, scripts and styles dropped, entities decoded."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.DOTALL | re.IGNORECASE)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))
