"""The internal plane's certificates and mutual TLS: what `ensure_certs` issues and keeps, what
`InternalTLS.load` and the service configs refuse (naming the setting), and, over loopback, a port
on the internal plane that serves a CA-issued client and refuses everyone else in the handshake."""

from __future__ import annotations

import asyncio
import stat

import grpc
import pytest
from cryptography import x509

from agentserve.common.certs import CA_KEY_FILE, SERVICES, ensure_certs
from agentserve.common.channels import open_channel
from agentserve.common.internal_tls import INTERNAL_NAME, InternalTLS
from agentserve.decode.config import DecodeConfig
from agentserve.kvstore.config import KVStoreConfig
from agentserve.scheduler.config import SchedulerConfig
from agentserve.toolproxy.config import ToolProxyConfig
from agentserve.v1 import common_pb2, scheduler_pb2_grpc
from tests.unit.common.fakes import serving

pytestmark = pytest.mark.unit


def test_first_run_issues_every_service_and_later_runs_keep_them(tmp_path) -> None:
    certs = tmp_path / "certs"
    assert ensure_certs(certs) == list(SERVICES)
    first = {s: (certs / s / "cert.pem").read_bytes() for s in SERVICES}
    assert ensure_certs(certs) == []
    assert {s: (certs / s / "cert.pem").read_bytes() for s in SERVICES} == first

    ca = x509.load_pem_x509_certificate((certs / "ca" / "ca.pem").read_bytes())
    for service in SERVICES:
        directory = certs / service
        assert sorted(p.name for p in directory.iterdir()) == ["ca.pem", "cert.pem", "key.pem"]  # no CA key
        assert stat.S_IMODE((directory / "key.pem").stat().st_mode) == 0o600
        cert = x509.load_pem_x509_certificate((directory / "cert.pem").read_bytes())
        cert.verify_directly_issued_by(ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert names.get_values_for_type(x509.DNSName) == [INTERNAL_NAME, service]
    assert stat.S_IMODE((certs / "ca" / CA_KEY_FILE).stat().st_mode) == 0o600


def test_a_certificate_of_another_ca_or_a_missing_key_is_issued_again(tmp_path) -> None:
    ensure_certs(tmp_path / "ours", ["decode", "prefill"])
    ensure_certs(tmp_path / "theirs", ["decode"])
    for name in ("cert.pem", "ca.pem", "key.pem"):
        (tmp_path / "ours" / "decode" / name).write_bytes((tmp_path / "theirs" / "decode" / name).read_bytes())
    (tmp_path / "ours" / "prefill" / "key.pem").unlink()
    assert ensure_certs(tmp_path / "ours", ["decode", "prefill", "client"]) == ["decode", "prefill", "client"]


def test_the_ca_key_can_live_apart(tmp_path) -> None:
    ensure_certs(tmp_path / "certs", ["kvstore"], ca_dir=tmp_path / "ca")
    assert sorted(p.name for p in (tmp_path / "ca").iterdir()) == ["ca.key", "ca.pem"]
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == ["kvstore"]


@pytest.mark.parametrize("name", ["", "a/b", ".hidden"])
def test_service_names_are_plain_directory_names(tmp_path, name) -> None:
    with pytest.raises(ValueError, match="service names are directory names"):
        ensure_certs(tmp_path, [name])


def test_load_names_the_setting_and_the_bad_file(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"internal_tls_dir: '.*nope' is not a directory"):
        InternalTLS.load(str(tmp_path / "nope"))
    ensure_certs(tmp_path, ["decode"])
    (tmp_path / "decode" / "key.pem").unlink()
    with pytest.raises(ValueError, match=r"internal_tls_dir: cannot read .*key\.pem"):
        InternalTLS.load(str(tmp_path / "decode"))
    (tmp_path / "decode" / "key.pem").write_text("not a key")
    with pytest.raises(ValueError, match=r"internal_tls_dir: .*key\.pem is not a PEM private key"):
        InternalTLS.load(str(tmp_path / "decode"))
    (tmp_path / "decode" / "cert.pem").write_text("not a certificate")
    with pytest.raises(ValueError, match=r"internal_tls_dir: .*cert\.pem is not a PEM certificate"):
        InternalTLS.load(str(tmp_path / "decode"))


def test_no_secret_in_its_repr(tmp_path) -> None:
    ensure_certs(tmp_path, ["decode"])
    tls = InternalTLS.load(str(tmp_path / "decode"))
    assert repr(tls) == f"InternalTLS(source='{tmp_path / 'decode'}')"


@pytest.mark.parametrize("config", [SchedulerConfig, DecodeConfig, KVStoreConfig, ToolProxyConfig])
def test_every_service_config_refuses_an_unreadable_tls_dir(tmp_path, config) -> None:
    with pytest.raises(ValueError, match="internal_tls_dir: .* is not a directory"):
        config(internal_tls_dir=str(tmp_path / "missing"))
    ensure_certs(tmp_path, ["any"])
    assert config(internal_tls_dir=str(tmp_path / "any")).internal_tls_dir == str(tmp_path / "any")


def test_the_scheduler_internal_port_is_its_own() -> None:
    with pytest.raises(ValueError, match="internal_port must be in"):
        SchedulerConfig(internal_port=0)
    with pytest.raises(ValueError, match="grpc_port, internal_port, http_port and metrics_port must differ"):
        SchedulerConfig(grpc_port=50061, internal_port=50061)


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
