"""load_config: flags over environment over defaults, with clear errors."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from agentserve.common.config import check_choice, choices_of, config_prefix, load_config

pytestmark = pytest.mark.unit


@dataclass(frozen=True)
class Example:
    grpc_port: int = 50051
    data_dir: str = "/tmp/x"
    fsync: bool = True
    ratio: float = 0.5

    def __post_init__(self):
        if self.grpc_port <= 0:
            raise ValueError("grpc_port must be positive")


def test_defaults_env_and_flags_layer():
    assert load_config(Example, [], env={}) == Example()
    env = {"AGENTSERVE_GRPC_PORT": "6000", "AGENTSERVE_FSYNC": "false"}
    assert load_config(Example, [], env=env) == Example(grpc_port=6000, fsync=False)
    assert load_config(Example, ["--grpc-port", "7000", "--ratio", "0.25"], env=env) == Example(
        grpc_port=7000, fsync=False, ratio=0.25
    )


def test_bad_values_are_value_errors():
    with pytest.raises(ValueError, match="AGENTSERVE_GRPC_PORT"):
        load_config(Example, [], env={"AGENTSERVE_GRPC_PORT": "many"})
    with pytest.raises(ValueError, match="AGENTSERVE_FSYNC"):
        load_config(Example, [], env={"AGENTSERVE_FSYNC": "maybe"})
    with pytest.raises(ValueError, match="grpc_port must be positive"):
        load_config(Example, ["--grpc-port", "-1"], env={})
    with pytest.raises(ValueError):
        load_config(Example, ["--no-such-flag", "1"], env={})


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


@dataclass(frozen=True)
class Inner:
    rate: float = 1.0
    mode: Literal["fast", "slow"] = "fast"

    def __post_init__(self):
        if self.rate <= 0:
            raise ValueError(f"rate must be positive, got {self.rate}")


@dataclass(frozen=True)
class Budget:
    tokens: int = 8


@dataclass(frozen=True)
class Typed:
    mode: Literal["real", "emulated"] = "real"
    color: Color = Color.RED
    root: Path = Path("/srv")
    limit: float | None = None
    label: str | None = "x"
    ports: tuple[int, ...] = ()
    names: list[str] = field(default_factory=list)
    inner: Inner = field(default_factory=Inner)
    shared: Budget = field(default_factory=Budget, metadata=config_prefix(""))


def test_literal_choices_from_env_and_flag():
    assert load_config(Typed, [], env={"AGENTSERVE_MODE": "emulated"}).mode == "emulated"
    assert load_config(Typed, ["--mode", "emulated"], env={}).mode == "emulated"


def test_literal_refusal_names_the_variable_and_the_choices():
    with pytest.raises(ValueError) as env_error:
        load_config(Typed, [], env={"AGENTSERVE_MODE": "fake"})
    assert str(env_error.value) == "AGENTSERVE_MODE: mode must be one of real, emulated, got 'fake'"
    with pytest.raises(ValueError) as flag_error:
        load_config(Typed, ["--mode", "fake"], env={})
    assert str(flag_error.value) == "--mode: mode must be one of real, emulated, got 'fake'"


def test_enum_by_value():
    assert load_config(Typed, ["--color", "green"], env={}).color is Color.GREEN
    with pytest.raises(ValueError) as error:
        load_config(Typed, [], env={"AGENTSERVE_COLOR": "blue"})
    assert str(error.value) == "AGENTSERVE_COLOR: color must be one of red, green, got 'blue'"


def test_path():
    assert load_config(Typed, ["--root", "/data/kv"], env={}).root == Path("/data/kv")


def test_optional_none_and_value():
    assert load_config(Typed, ["--limit", "2.5"], env={}).limit == 2.5
    assert load_config(Typed, ["--limit", "none"], env={"AGENTSERVE_LIMIT": "3"}).limit is None
    assert load_config(Typed, [], env={"AGENTSERVE_LABEL": ""}).label is None
    assert load_config(Typed, [], env={"AGENTSERVE_LABEL": "None"}).label is None
    with pytest.raises(ValueError) as error:
        load_config(Typed, [], env={"AGENTSERVE_LIMIT": "lots"})
    assert str(error.value) == "AGENTSERVE_LIMIT: could not convert string to float: 'lots'"


def test_sequences_are_comma_separated():
    config = load_config(Typed, ["--ports", "1, 2,3"], env={"AGENTSERVE_NAMES": "a,b"})
    assert config.ports == (1, 2, 3)
    assert config.names == ["a", "b"]
    assert load_config(Typed, [], env={"AGENTSERVE_PORTS": ""}).ports == ()
    with pytest.raises(ValueError) as error:
        load_config(Typed, ["--ports", "1,x"], env={})
    assert str(error.value) == "--ports: invalid literal for int() with base 10: 'x'"


def test_nested_dataclass_fields_take_the_field_name_as_prefix():
    config = load_config(Typed, ["--inner-rate", "2"], env={"AGENTSERVE_INNER_MODE": "slow"})
    assert config.inner == Inner(rate=2.0, mode="slow")
    assert config.shared == Budget()
    assert load_config(Typed, [], env={}) == Typed()


def test_nested_with_an_empty_prefix_reads_unprefixed_flags():
    config = load_config(Typed, ["--tokens", "4"], env={"AGENTSERVE_MODE": "emulated"})
    assert config.shared == Budget(tokens=4)
    assert config.inner == Inner()
    assert config.mode == "emulated"


def test_two_fields_reading_one_flag_is_a_type_error():
    @dataclass(frozen=True)
    class Clash:
        rate: float = 1.0
        inner: Inner = field(default_factory=Inner, metadata=config_prefix(""))

    with pytest.raises(TypeError) as error:
        load_config(Clash, [], env={})
    assert str(error.value) == "Clash: rate and inner.rate both read --rate"


def test_nested_errors_name_the_prefixed_flag_and_the_nested_check():
    with pytest.raises(ValueError) as choice:
        load_config(Typed, ["--inner-mode", "medium"], env={})
    assert str(choice.value) == "--inner-mode: mode must be one of fast, slow, got 'medium'"
    with pytest.raises(ValueError) as check:
        load_config(Typed, ["--inner-rate", "0"], env={})
    assert str(check.value) == "rate must be positive, got 0.0"


def test_check_choice_gives_the_same_message_in_code():
    check_choice("mode", "real", Literal["real", "emulated"])
    check_choice("color", Color.GREEN, Color)
    check_choice("policy", "lru", {"lru": object, "ttl": object})
    with pytest.raises(ValueError) as error:
        check_choice("mode", "fake", Literal["real", "emulated"])
    assert str(error.value) == "mode must be one of real, emulated, got 'fake'"
    assert choices_of(Color) == ("red", "green")
    with pytest.raises(ValueError) as registry:
        check_choice("policy", "mru", {"lru": object, "ttl": object})
    assert str(registry.value) == "policy must be one of lru, ttl, got 'mru'"


def test_unsupported_field_type_is_a_type_error():
    @dataclass(frozen=True)
    class Bad:
        table: dict[str, int] = field(default_factory=dict)

    with pytest.raises(TypeError) as error:
        load_config(Bad, [], env={})
    assert str(error.value) == "unsupported config field type dict[str, int] (field table)"
