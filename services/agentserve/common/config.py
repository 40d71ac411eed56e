"""Typed service configs built once from flags and environment.

Each service declares a frozen dataclass whose fields are its settings and whose `__post_init__`
validates them. `load_config` turns the fields into `--flag-name` options whose defaults come from
`AGENTSERVE_FLAG_NAME` environment variables, so the same config works from a shell, from
`agentserve up --local` and from docker-compose.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Sequence
from typing import Any, ClassVar, Protocol, TypeVar


class _Dataclass(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]


T = TypeVar("T", bound=_Dataclass)

ENV_PREFIX = "AGENTSERVE_"


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _converter(tp: Any):
    if tp is bool:
        return _parse_bool
    if tp in (int, float, str):
        return tp
    raise TypeError(f"unsupported config field type {tp!r}")


def load_config(cls: type[T], argv: Sequence[str] | None = None, env: dict[str, str] | None = None) -> T:
    """Build `cls` from `argv` flags over `env` over the dataclass defaults. Errors are ValueError."""
    env = dict(os.environ if env is None else env)
    hints = typing.get_type_hints(cls)
    parser = argparse.ArgumentParser(prog=getattr(cls, "prog", cls.__name__), exit_on_error=False)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        convert = _converter(hints[f.name])
        env_name = ENV_PREFIX + f.name.upper()
        if env_name in env:
            try:
                values[f.name] = convert(env[env_name])
            except ValueError as exc:
                raise ValueError(f"{env_name}: {exc}") from None
        parser.add_argument(
            "--" + f.name.replace("_", "-"), dest=f.name, type=convert, default=None, help=f"(env {env_name})"
        )
    try:
        args = parser.parse_args(list(argv or []))
    except (argparse.ArgumentError, SystemExit) as exc:
        raise ValueError(f"bad arguments for {cls.__name__}: {exc}") from None
    values.update({k: v for k, v in vars(args).items() if v is not None})
    return cls(**values)
