import socket

import pytest

from agentserve.common import netutil
from agentserve.common.netutil import NETWORK_ENV, address_on_network, advertise_host

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def no_network_env(monkeypatch):
    monkeypatch.delenv(NETWORK_ENV, raising=False)


@pytest.fixture
def hostname_resolves_to(monkeypatch):
    def set_address(address: str | None) -> None:
        def fake_gethostbyname(name: str) -> str:
            if name == "engine-host" and address is not None:
                return address
            if name.replace(".", "").isdigit():  # IP literals resolve to themselves
                return name
            raise socket.gaierror(socket.EAI_NONAME, "unknown")

        monkeypatch.setattr(netutil.socket, "gethostname", lambda: "engine-host")
        monkeypatch.setattr(netutil.socket, "gethostbyname", fake_gethostbyname)

    return set_address


def test_configured_value_wins_over_everything(monkeypatch):
    monkeypatch.setenv(NETWORK_ENV, "127.0.0.0/8")
    assert advertise_host("decode-7.example") == "decode-7.example"
    assert advertise_host("10.0.0.5", network="127.0.0.1") == "10.0.0.5"


def test_empty_uses_the_host_name_address(hostname_resolves_to):
    hostname_resolves_to("172.18.0.4")
    assert advertise_host("") == "172.18.0.4"


def test_unresolvable_host_name_falls_back_to_loopback(hostname_resolves_to):
    hostname_resolves_to(None)
    assert advertise_host("") == "127.0.0.1"


def test_cidr_hint_picks_the_local_address_inside_it(hostname_resolves_to):
    hostname_resolves_to("172.18.0.4")
    assert advertise_host("", network="127.0.0.0/8") == "127.0.0.1"


def test_host_hint_picks_the_address_routing_to_it(hostname_resolves_to):
    hostname_resolves_to("172.18.0.4")
    assert advertise_host("", network="127.0.0.1") == "127.0.0.1"


def test_hint_is_read_from_the_environment(monkeypatch, hostname_resolves_to):
    hostname_resolves_to("172.18.0.4")
    monkeypatch.setenv(NETWORK_ENV, "127.0.0.0/8")
    assert advertise_host("") == "127.0.0.1"


@pytest.mark.parametrize("hint", ["203.0.113.0/24", "no-such-host.invalid", "not/a/cidr"])
def test_hint_matching_nothing_falls_back_to_the_host_name(hint, hostname_resolves_to):
    # 203.0.113.0/24 is TEST-NET-3: the default route may reach it, but no local address is in it.
    hostname_resolves_to("172.18.0.4")
    assert address_on_network(hint) == ""
    assert advertise_host("", network=hint) == "172.18.0.4"
