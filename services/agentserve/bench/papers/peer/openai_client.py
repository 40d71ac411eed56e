"""The replayer's `ServingClient` over the OpenAI completions API, the one surface both systems
serve alike: `POST /v1/completions` with the prompt as token ids, streamed, `ignore_eos` so every
turn generates exactly the trace's output length, usage in the last chunk.

The API is stateless, so a session here is the client's copy of the conversation: each turn sends
the whole history and the server's prefix cache (agentserve's block cache, llama-server's slots
and prompt cache) decides what it recomputes. The API streams text, not token ids: each streamed
text piece counts as one token for timing, the usage's `completion_tokens` corrects the count at
the end, and the reply re-enters the history as synthetic ids of that length (the replay's
`TokenSynth`, keyed by the prompt, so both systems get the same ids for the same prompt). So a
later turn recomputes the previous reply's tokens on both, as a server does that re-tokenizes a
client's text. Tool calls are the agent's own: the client sleeps their duration, and the server
sees the gap between turns.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from array import array
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agentserve.bench.common.workloads.tokens import TokenSynth
from agentserve.bench.papers.replay.client import Chunk, ServerBusy, ServerSession


class CompletionsSession:
    def __init__(self, client: CompletionsClient, tenant: str) -> None:
        self._client = client
        self._tenant = tenant
        self.history: list[int] = []

    async def turn(self, token_ids: list[int], max_tokens: int) -> AsyncIterator[Chunk]:
        prompt = [*self.history, *token_ids]
        body: dict[str, Any] = {
            "prompt": prompt,
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self._client.model is not None:  # else the server's one model
            body["model"] = self._client.model
        reply = self._client.reply_ids(prompt, max_tokens)
        streamed, usage = 0, None
        async for event in self._client.events(body, self._tenant):
            if event.get("usage"):
                usage = event["usage"]
            choices = event.get("choices") or []
            if choices and choices[0].get("text") and streamed < max_tokens:
                yield Chunk((reply[streamed],))
                streamed += 1
        generated = streamed if usage is None else min(max_tokens, int(usage.get("completion_tokens", streamed)))
        if generated > streamed:
            yield Chunk(tuple(reply[streamed:generated]))
        cached = ((usage or {}).get("prompt_tokens_details") or {}).get("cached_tokens")
        yield Chunk((), cached_tokens=int(cached or 0), prompt_tokens=len(prompt))
        self.history = prompt + reply[:generated]

    async def call_tool(self, name: str, args: dict[str, Any], predicted_s: float | None = None) -> dict[str, Any]:
        """The agent runs its tool itself: `sleep` waits the recorded seconds; the server is idle
        for this session meanwhile, as it is for any OpenAI client running a tool."""
        if name != "sleep":
            raise ValueError(f"the peer bench replays only the sleep tool, got {name!r}")
        await asyncio.sleep(float(args["seconds"]))
        return {"slept_s": args["seconds"]}

    async def close(self) -> None:
        self.history = []


class CompletionsClient:
    """`ServingClient` for any server with OpenAI's `/v1/completions` (`base_url` without `/v1`);
    `model` names the served model, None leaves it to the server (both serve one)."""

    def __init__(self, base_url: str, synth: TokenSynth, model: str | None = None, timeout_s: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.synth = synth
        # A connection per request (force_close): llama-server closes a connection right after a
        # streamed reply, and a pooled connection reused in that window fails its write. Both
        # systems are dialled the same way, and a loopback connect costs far less than a turn.
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            connector=aiohttp.TCPConnector(limit=0, force_close=True),
        )

    def reply_ids(self, prompt: list[int], n: int) -> list[int]:
        """The ids a reply of `n` tokens to `prompt` stands as in the history: a function of the
        prompt alone, so a replay against either system builds the same histories."""
        digest = hashlib.blake2b(array("l", prompt).tobytes(), digest_size=8).hexdigest()
        return self.synth.message(f"reply-{digest}", n)

    async def open_session(self, tenant: str, agent: str, critical: bool = False) -> ServerSession:
        return CompletionsSession(self, tenant)

    async def events(self, body: dict, tenant: str) -> AsyncIterator[dict]:
        """The stream's JSON events, until `[DONE]`; a 429 is `ServerBusy`, other errors raise."""
        url = f"{self.base_url}/v1/completions"
        async with self._http.post(url, json=body, headers={"X-Tenant": tenant}) as reply:
            if reply.status == 429:
                raise ServerBusy(await reply.text(), float(reply.headers.get("Retry-After", "1")))
            if reply.status != 200:
                raise RuntimeError(f"HTTP {reply.status} from {url}: {(await reply.text())[:300]}")
            async for raw in reply.content:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                event = json.loads(data)
                if "error" in event:
                    raise RuntimeError(f"stream error from {url}: {event['error']}")
                yield event

    async def close(self) -> None:
        await self._http.close()
