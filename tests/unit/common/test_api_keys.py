"""ApiKeys: entries parsed and validated, keys held as digests only, tenants resolved from keys."""

from __future__ import annotations

import pytest

from agentserve.common.api_keys import ApiKeys, generate_key, key_digest, resolve_tenant
from agentserve.common.errors import Unauthenticated

pytestmark = pytest.mark.unit

KEY_A = "as-key-of-tenant-a-0123456789"
KEY_B = "as-key-of-tenant-b-0123456789"


def test_keys_map_to_tenants_and_only_digests_are_kept() -> None:
    keys = ApiKeys.parse([f"acme:{KEY_A}", f"beta:sha256:{key_digest(KEY_B).upper()}", "# a comment", ""])
    assert keys.enabled and keys.tenants == {"acme", "beta"}
    assert keys.tenant_of(KEY_A) == "acme" and keys.tenant_of(KEY_B) == "beta"
    assert keys.tenant_of_authorization(f"Bearer {KEY_A}") == "acme"
    assert keys.tenant_of_authorization(f"bearer  {KEY_B}") == "beta"
    assert KEY_A not in repr(vars(keys)) and KEY_B not in repr(vars(keys))


@pytest.mark.parametrize(
    ("authorization", "message"),
    [
        (None, "missing API key"),
        ("", "missing API key"),
        (f"Basic {KEY_A}", "must be 'Bearer <key>'"),
        ("Bearer as-unknown-key-00000000000", "invalid API key"),
        ("Bearer ", "invalid API key"),
    ],
)
def test_missing_or_wrong_keys_are_unauthenticated(authorization, message) -> None:
    keys = ApiKeys.parse([f"acme:{KEY_A}"])
    with pytest.raises(Unauthenticated, match=message):
        keys.tenant_of_authorization(authorization)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("no-separator", "entry 1: must be TENANT:KEY"),
        (f"bad tenant:{KEY_A}", "tenant 'bad tenant' must be"),
        ("acme:short", "at least 20 printable ASCII"),
        ("acme:has a space in the key 01234", "at least 20 printable ASCII"),
        ("acme:sha256:1234", "64 hex digits"),
    ],
)
def test_malformed_entries_name_the_entry_never_the_key(entry, message) -> None:
    with pytest.raises(ValueError, match=message) as err:
        ApiKeys.parse([entry], "AGENTSERVE_API_KEYS")
    assert "AGENTSERVE_API_KEYS" in str(err.value) and KEY_A not in str(err.value)


def test_a_key_listed_twice_is_rejected(tmp_path) -> None:
    with pytest.raises(ValueError, match="already listed .*'acme'"):
        ApiKeys.parse([f"acme:{KEY_A}", f"other:{KEY_A}"])
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"# tenants\nbeta:{KEY_B}\nacme:sha256:{key_digest(KEY_A)}\n")
    with pytest.raises(ValueError, match="listed twice"):
        ApiKeys.load(f"acme:{KEY_A}", str(keys_file))


def test_load_merges_the_variable_and_the_file(tmp_path) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"beta:{KEY_B}\n")
    keys = ApiKeys.load(f"acme:{KEY_A}", str(keys_file))
    assert (keys.tenant_of(KEY_A), keys.tenant_of(KEY_B)) == ("acme", "beta")
    assert not ApiKeys.load().enabled
    with pytest.raises(ValueError, match="api_keys_file '/nonexistent/keys'"):
        ApiKeys.load(keys_file="/nonexistent/keys")


def test_generated_keys_are_accepted_and_distinct() -> None:
    a, b = generate_key(), generate_key()
    assert a != b and a.startswith("as-")
    assert ApiKeys.parse([f"t:{a}"]).tenant_of(a) == "t"


def test_the_tenant_comes_from_the_key_when_keys_are_on() -> None:
    on, off = ApiKeys.parse([f"acme:{KEY_A}"]), ApiKeys()
    assert resolve_tenant(off, None, "claimed", "X-Tenant") == "claimed"
    assert resolve_tenant(on, "acme", "", "X-Tenant") == "acme"
    assert resolve_tenant(on, "acme", "acme", "X-Tenant") == "acme"
    with pytest.raises(ValueError, match="X-Tenant 'beta' does not match the API key's tenant"):
        resolve_tenant(on, "acme", "beta", "X-Tenant")
    with pytest.raises(Unauthenticated):
        resolve_tenant(on, None, "acme", "X-Tenant")


def test_entries_may_give_their_tenant_a_fair_queue_weight(tmp_path) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"beta:{KEY_B}  weight=0.5\nbeta:sha256:{key_digest(KEY_A + 'x')} weight=0.5\n")
    keys = ApiKeys.load(f"acme:{KEY_A} weight=3,gamma:{KEY_A}yz", str(keys_file))
    assert keys.weights == {"acme": 3.0, "beta": 0.5} and keys.tenant_of(KEY_B) == "beta"


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([f"acme:{KEY_A} weight=0"], "entry 1: weight must be a positive number, got '0'"),
        ([f"acme:{KEY_A} weight=heavy"], "entry 1: weight must be a positive number, got 'heavy'"),
        ([f"acme:{KEY_A} weight=2", f"acme:{KEY_B} weight=3"], "entry 2: tenant 'acme' has weight 2 in another entry"),
    ],
)
def test_bad_weights_name_the_entry(entries, message) -> None:
    with pytest.raises(ValueError, match=message):
        ApiKeys.parse(entries)


def test_the_variable_and_the_file_must_agree_on_a_weight(tmp_path) -> None:
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"acme:{KEY_B} weight=3\n")
    with pytest.raises(ValueError, match="tenant 'acme' has weight 2 elsewhere, here 3"):
        ApiKeys.load(f"acme:{KEY_A} weight=2", str(keys_file))
