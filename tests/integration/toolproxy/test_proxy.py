"""Tool calls through the proxy logic and its HTTP routes, with recorded events and a fake upstream."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from agentserve.contracts import ToolCall
from agentserve.toolproxy.http_app import build_app
from agentserve.toolproxy.predictor import ToolDurationPredictor
from agentserve.toolproxy.proxy import ToolProxy
from agentserve.toolproxy.tools import ToolRegistry, UpstreamClient

pytestmark = pytest.mark.integration

# Event-loop timers have millisecond resolution and may fire that much early.
EARLY = 0.005


class RecordingSink:
    def __init__(self) -> None:
        self.events: list[tuple[str, ToolCall]] = []

    def started(self, record: ToolCall) -> None:
        self.events.append(("started", record))

    def finished(self, record: ToolCall) -> None:
        self.events.append(("finished", record))


def _proxy(upstreams=None, max_sleep_s=300.0):
    client = UpstreamClient(timeout_s=1.0)
    sink = RecordingSink()
    proxy = ToolProxy(ToolRegistry.build(upstreams or {}, client, max_sleep_s), ToolDurationPredictor(0.5), sink)
    return proxy, sink, client


def run_http(scenario, upstreams=None, upstream_app: web.Application | None = None, max_sleep_s=300.0):
    async def main():
        upstream = None
        urls = dict(upstreams or {})
        if upstream_app is not None:
            upstream = TestServer(upstream_app)
            await upstream.start_server()
            urls = {name: str(upstream.make_url(path)) for name, path in urls.items()}
        proxy, sink, client = _proxy(urls, max_sleep_s)
        await client.start()
        try:
            async with TestClient(TestServer(build_app(proxy))) as http:
                return await scenario(http), sink, proxy
        finally:
            await client.close()
            if upstream is not None:
                await upstream.close()

    return asyncio.run(main())


def test_sleep_reports_started_then_finished_with_durations():
    async def scenario(http):
        results = []
        for seconds in (0.05, 0.15):
            resp = await http.post(
                "/tools/sleep", json={"seconds": seconds}, headers={"X-Session-Id": "s1", "X-Call-Id": f"c{seconds}"}
            )
            results.append((resp.status, await resp.json(), resp.headers["X-Call-Id"]))
        return results

    results, sink, proxy = run_http(scenario)
    assert results == [(200, {"slept_s": 0.05}, "c0.05"), (200, {"slept_s": 0.15}, "c0.15")]
    assert [kind for kind, _ in sink.events] == ["started", "finished", "started", "finished"]
    (_, s1), (_, f1), (_, s2), (_, f2) = sink.events
    assert (s1.session_id, s1.tool, s1.call_id, s1.predicted_duration_s) == ("s1", "sleep", "c0.05", 0.5)
    assert f1.ok and 0.05 - EARLY <= f1.actual_duration_s < 1.05 and f1.start_unix_s == s1.start_unix_s
    assert s2.predicted_duration_s == pytest.approx(f1.actual_duration_s)  # learned from the first call
    assert 0.15 - EARLY <= f2.actual_duration_s < 1.15
    sleep = next(t for t in proxy.tools() if t.name == "sleep")
    mean = (f1.actual_duration_s + f2.actual_duration_s) / 2
    assert sleep.calls == 2 and sleep.predicted_duration_s == pytest.approx(mean)


def test_a_call_is_a_tool_span_in_the_callers_trace(spans):
    parent = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"

    async def scenario(http):
        joined = await http.post("/tools/echo", json={"q": "x"}, headers={"X-Session-Id": "s1", "traceparent": parent})
        alone = await http.post("/tools/nope", json={})
        return joined.status, alone.status

    assert run_http(scenario)[0] == (200, 404)
    ((span),) = [s for s in spans.get_finished_spans() if s.name == "tool.call"]
    assert (format(span.context.trace_id, "032x"), format(span.parent.span_id, "016x")) == ("ab" * 16, "cd" * 8)
    assert {k: span.attributes[k] for k in span.attributes if not k.startswith("tool.") or k == "tool.name"} == {
        "openinference.span.kind": "TOOL",
        "tool.name": "echo",
        "session.id": "s1",
        "input.value": '{"q": "x"}',
        "input.mime_type": "application/json",
        "output.value": '{"q": "x"}',
        "output.mime_type": "application/json",
        "http.status_code": 200,
    }


def test_a_call_without_a_session_has_no_session_id(spans):
    async def scenario(http):
        return (await http.post("/tools/echo", json={})).status

    assert run_http(scenario)[0] == 200
    (span,) = [s for s in spans.get_finished_spans() if s.name == "tool.call"]
    assert span.parent is None and "session.id" not in span.attributes


def test_echo_and_listing():
    async def scenario(http):
        echo = await http.post("/tools/echo", json={"a": [1, {"b": None}]})
        empty = await http.post("/tools/echo")
        listing = await (await http.get("/tools")).json()
        return await echo.json(), await empty.json(), listing

    (echo, empty, listing), sink, _ = run_http(scenario)
    assert echo == {"a": [1, {"b": None}]} and empty == {}
    assert [(t["name"], t["kind"], t["calls"]) for t in listing["tools"]] == [
        ("sleep", "builtin", 0),
        ("echo", "builtin", 2),
    ]
    assert sink.events == []  # no session, nothing for the scheduler to act on


@pytest.mark.parametrize(
    "path, body, headers, status, match",
    [
        ("/tools/nope", b"{}", {}, 404, "unknown tool"),
        ("/tools/echo", b"{bad", {}, 400, "not valid JSON"),
        ("/tools/echo", b"[1]", {}, 400, "JSON object"),
        ("/tools/sleep", b'{"seconds": "x"}', {}, 400, "seconds"),
        ("/tools/sleep", b'{"seconds": 301}', {}, 400, "seconds"),
        ("/tools/sleep", b'{"seconds": -1}', {}, 400, "seconds"),
        ("/tools/echo", b"{}", {"X-Session-Id": "has space"}, 400, "X-Session-Id"),
    ],
)
def test_bad_calls_are_json_errors_and_the_proxy_stays_up(path, body, headers, status, match):
    async def scenario(http):
        resp = await http.post(path, data=body, headers=headers)
        after = await http.post("/tools/echo", json={})
        return resp.status, await resp.json(), after.status

    (got, error, after), _, _ = run_http(scenario)
    assert got == status and match in error["error"]["message"] and after == 200


def test_rejected_arguments_report_a_failed_call_but_teach_nothing():
    async def scenario(http):
        return (await http.post("/tools/sleep", json={"seconds": "x"}, headers={"X-Session-Id": "s"})).status

    status, sink, proxy = run_http(scenario)
    assert status == 400
    assert [(k, r.ok) for k, r in sink.events] == [("started", False), ("finished", False)]
    assert next(t for t in proxy.tools() if t.name == "sleep").predicted_duration_s == 0.5


def _upstream_app(seen: list) -> web.Application:
    async def search(request: web.Request) -> web.Response:
        seen.append((request.headers.get("X-Session-Id"), await request.json()))
        return web.json_response({"hits": ["a", "b"]}, status=201)

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=503, text="down for maintenance")

    app = web.Application()
    app.router.add_post("/search", search)
    app.router.add_post("/broken", broken)
    return app


def test_upstream_status_and_body_are_relayed():
    seen: list = []

    async def scenario(http):
        ok = await http.post("/tools/search", json={"q": "kv"}, headers={"X-Session-Id": "s9"})
        bad = await http.post("/tools/broken", json={})
        return ok.status, await ok.json(), bad.status, bad.content_type, await bad.text()

    result, sink, _ = run_http(scenario, {"search": "/search", "broken": "/broken"}, _upstream_app(seen))
    assert result == (201, {"hits": ["a", "b"]}, 503, "text/plain", "down for maintenance")
    assert seen == [("s9", {"q": "kv"})]
    assert [(k, r.tool, r.ok) for k, r in sink.events] == [("started", "search", False), ("finished", "search", True)]


def test_unreachable_upstream_is_502():
    async def scenario(http):
        resp = await http.post("/tools/gone", json={}, headers={"X-Session-Id": "s"})
        return resp.status, await resp.json()

    (status, body), sink, _ = run_http(scenario, {"gone": "http://127.0.0.1:9/x"})
    assert status == 502 and "gone" in body["error"]["message"]
    assert sink.events[-1][1].ok is False


def test_cancelled_call_still_reports_finished():
    async def main():
        proxy, sink, _ = _proxy()
        task = asyncio.create_task(proxy.call("sleep", {"seconds": 10}, "s", "c"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return sink

    sink = asyncio.run(main())
    assert [(k, r.ok) for k, r in sink.events] == [("started", False), ("finished", False)]


def test_with_api_keys_tool_calls_need_one_and_health_does_not():
    from agentserve.common.api_keys import ApiKeys

    key = "as-toolproxy-test-key-012345"

    async def main():
        proxy, sink, client = _proxy()
        await client.start()
        try:
            app = build_app(proxy, ApiKeys.parse([f"acme:{key}"]))
            async with TestClient(TestServer(app)) as http:
                refused = await http.post("/tools/echo", json={"a": 1}, headers={"X-Session-Id": "s1"})
                listed = await http.get("/tools")
                allowed = await http.post(
                    "/tools/echo", json={"a": 1}, headers={"X-Session-Id": "s1", "Authorization": f"Bearer {key}"}
                )
                health = await http.get("/health")
                return (
                    (refused.status, refused.headers.get("WWW-Authenticate"), await refused.json()),
                    listed.status,
                    allowed.status,
                    health.status,
                    len(sink.events),
                )
        finally:
            await client.close()

    refused, listed, allowed, health, events = asyncio.run(main())
    missing = "missing API key: send 'Authorization: Bearer <key>'"
    assert refused == (401, "Bearer", {"error": {"message": missing, "type": "invalid_request_error"}})
    assert (listed, allowed, health, events) == (401, 200, 200, 2)


def test_the_callers_prediction_travels_with_the_events():
    async def scenario(http):
        ok = await http.post("/tools/echo", json={}, headers={"X-Session-Id": "s1", "X-Tool-Predicted-S": "12.5"})
        bad = await http.post("/tools/echo", json={}, headers={"X-Session-Id": "s1", "X-Tool-Predicted-S": "soon"})
        return ok.status, bad.status, await bad.json()

    (ok, bad, body), sink, _ = run_http(scenario)
    assert ok == 200 and [(kind, e.caller_predicted_s) for kind, e in sink.events] == [
        ("started", 12.5),
        ("finished", 12.5),
    ]
    assert (
        bad == 400
        and body["error"]["message"] == "X-Tool-Predicted-S must be a finite number of seconds >= 0, got 'soon'"
    )
