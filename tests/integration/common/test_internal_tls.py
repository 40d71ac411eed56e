"""Mutual TLS on the internal plane, over loopback with certificates `ensure_certs` issues: a port on
the internal plane serves a CA-issued client and refuses everyone else in the handshake, and a
client refuses a server outside the deployment."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from agentserve.common.certs import ensure_certs
from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import InternalTLS
from agentserve.v1 import common_pb2, scheduler_pb2_grpc
from tests.integration.common.fakes import serving

pytestmark = pytest.mark.integration


async def _heartbeat(channel: grpc.aio.Channel) -> tuple[grpc.StatusCode, str]:
    """Heartbeat, an internal method engines call (a decode certificate may)."""
    try:
        reply = await scheduler_pb2_grpc.SchedulerInternalStub(channel).Heartbeat(
            common_pb2.EngineStatus(engine_id="d-1"), timeout=5
        )
    except grpc.aio.AioRpcError as exc:
        return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, f"known={reply.known}"


def test_an_internal_port_serves_only_peers_with_a_certificate_of_its_ca(tmp_path) -> None:
    ensure_certs(tmp_path / "ours", ["scheduler", "decode"])
    ensure_certs(tmp_path / "theirs", ["decode"])
    server_tls = InternalTLS.load(str(tmp_path / "ours" / "scheduler"))
    ours = InternalTLS.load(str(tmp_path / "ours" / "decode"))
    theirs = InternalTLS.load(str(tmp_path / "theirs" / "decode"))
    # A client that presents no certificate but trusts our CA (it got hold of ca.pem).
    anonymous = grpc.ssl_channel_credentials(ours.ca)

    async def main():
        async with serving(server_tls) as address:
            outcomes = {}
            async with open_channel(address, ours) as channel:
                outcomes["ours"] = await _heartbeat(channel)
            async with open_channel(address, theirs) as channel:
                outcomes["another CA's"] = await _heartbeat(channel)
            async with open_channel(address) as channel:
                outcomes["plain"] = await _heartbeat(channel)
            async with grpc.aio.secure_channel(address, anonymous, options=ours.channel_options()) as channel:
                outcomes["no certificate"] = await _heartbeat(channel)
            return outcomes

    outcomes = asyncio.run(main())
    assert outcomes.pop("ours") == (grpc.StatusCode.OK, "known=True")
    for label, (code, details) in outcomes.items():
        assert code is grpc.StatusCode.UNAVAILABLE, label
        assert "BEGIN" not in details and "PRIVATE" not in details, label  # no key or cert material told


def test_a_client_refuses_a_server_outside_the_deployment(tmp_path) -> None:
    """An engine told to hand KV to an address that is not a deployment peer sends nothing: the
    server's certificate is not of our CA, so the handshake fails before any request is sent."""
    ensure_certs(tmp_path / "ours", ["prefill"])
    ensure_certs(tmp_path / "theirs", ["decode"])

    theirs, ours = (
        InternalTLS.load(str(tmp_path / "theirs" / "decode")),
        InternalTLS.load(str(tmp_path / "ours" / "prefill")),
    )

    async def main():
        async with serving(theirs) as address, open_channel(address, ours) as channel:
            return await _heartbeat(channel)

    code, _ = asyncio.run(main())
    assert code is grpc.StatusCode.UNAVAILABLE
