"""The internal plane's certificates and mutual TLS: what `ensure_certs` issues and keeps, what
`InternalTLS.load` and the service configs refuse (naming the setting). Over loopback:
tests/integration/common/test_internal_tls.py."""

from __future__ import annotations

import stat

import pytest
from cryptography import x509

from agentserve.common.certs import CA_KEY_FILE, SERVICES, ensure_certs
from agentserve.common.internal_tls import INTERNAL_NAME, InternalTLS
from agentserve.decode.config import DecodeConfig
from agentserve.kvstore.config import KVStoreConfig
from agentserve.scheduler.config import SchedulerConfig
from agentserve.toolproxy.config import ToolProxyConfig

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
