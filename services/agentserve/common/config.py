"""Typed service configs built once from flags and environment.

Each component declares a frozen dataclass whose fields are its settings and whose `__post_init__`
validates them. `load_config` turns the fields into `--flag-name` options whose defaults come from
`AGENTSERVE_FLAG_NAME` environment variables, so the same config works from a shell, from
`agentserve up --local` and from docker-compose. Flags win over the environment, which wins over
the dataclass defaults.

What a field's type reads from text (a flag's value or an environment variable's):

    bool                 1/true/yes/on or 0/false/no/off/"" (any case)
    int, float, str      as Python converts them
    pathlib.Path         the text as a path
    Literal["a", "b"]    one of the listed strings
    an Enum              one of its members' values
    X | None             "" or "none" (any case) is None, anything else an X
    tuple[X, ...]        comma-separated Xs ("" is the empty tuple); list[X] likewise

A field whose type is itself a dataclass is nested: each of its fields becomes a flag of its own,
prefixed with the outer field's name (`emulation: EmulationConfig` gives `--emulation-time-dilation`
and `AGENTSERVE_EMULATION_TIME_DILATION`), and the nested dataclass is built from the values given
(its own defaults for the rest) and validated by its own `__post_init__`. A nested field declared
with `metadata=config_prefix("")` contributes its fields unprefixed (`--time-dilation`): for
settings that belong to the whole component rather than to a part of it.

A value that a choice type refuses gets the same message as `check_choice` gives a value passed
in code ("compute must be one of real, emulated, got 'x'"), preceded by the flag or variable that
carried it.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar


class _Dataclass(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]


T = TypeVar("T", bound=_Dataclass)

ENV_PREFIX = "AGENTSERVE_"
_PREFIX_KEY = "agentserve.config.prefix"
_NONE_TEXTS = ("", "none")


def config_prefix(prefix: str) -> Mapping[str, str]:
    """Field metadata setting the prefix of a nested dataclass field's flags (default `<name>_`)."""
    return {_PREFIX_KEY: prefix}


def choices_of(tp: Any) -> tuple[str, ...]:
    """The allowed values of a `Literal` of strings or of an `Enum` type, in declaration order."""
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tuple(str(member.value) for member in tp)
    if typing.get_origin(tp) is Literal:
        return tuple(str(arg) for arg in typing.get_args(tp))
    raise TypeError(f"not a Literal or Enum type: {tp!r}")


def check_choice(name: str, value: object, allowed: Any) -> None:
    """ValueError unless `value` is one of `allowed`: a Literal or Enum type, or the values (a
    registry's names)."""
    options = choices_of(allowed) if _is_choice(allowed) else tuple(allowed)
    given = value.value if isinstance(value, enum.Enum) else value
    if given not in options:
        raise ValueError(f"{name} must be one of {', '.join(map(str, options))}, got {value!r}")


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _optional_arg(tp: Any) -> Any | None:
    """X for `X | None` (or `Optional[X]`), None for any other type."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def _converter(name: str, tp: Any) -> Callable[[str], Any]:
    """A function from text to a value of `tp` for field `name`; ValueError names what is wrong."""
    if tp is bool:
        return _parse_bool
    if tp in (int, float, str):
        return typing.cast(Callable[[str], Any], tp)
    if tp is Path:
        return Path
    if typing.get_origin(tp) is Literal or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        return _choice_converter(name, tp)
    inner = _optional_arg(tp)
    if inner is not None:
        convert_inner = _converter(name, inner)
        return lambda text: None if text.strip().lower() in _NONE_TEXTS else convert_inner(text)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item = _converter(name, args[0])
        return lambda text: tuple(item(part.strip()) for part in text.split(",") if part.strip())
    if origin is list and len(args) == 1:
        item = _converter(name, args[0])
        return lambda text: [item(part.strip()) for part in text.split(",") if part.strip()]
    raise TypeError(f"unsupported config field type {tp!r} (field {name})")


def _choice_converter(name: str, tp: Any) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        check_choice(name, text, tp)
        return tp(text) if isinstance(tp, type) else text

    return convert


def _argparse_type(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    """`convert` whose ValueError reaches the caller as its own message, not argparse's."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


@dataclasses.dataclass(frozen=True)
class _Setting:
    """One flag: the path of field names from the top config to a scalar field, and its type."""

    path: tuple[str, ...]
    flag_name: str  # snake_case: the flag is --flag-name, the variable AGENTSERVE_FLAG_NAME
    convert: Callable[[str], Any]
    help: str


def _settings(cls: type, path: tuple[str, ...] = (), prefix: str = "") -> Iterable[_Setting]:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            nested_prefix = f.metadata.get(_PREFIX_KEY, f"{f.name}_")
            yield from _settings(tp, (*path, f.name), prefix + nested_prefix)
            continue
        convert = _converter(f.name, tp)
        flag_name = prefix + f.name
        allowed = f" (one of {', '.join(choices_of(tp))})" if _is_choice(tp) else ""
        yield _Setting((*path, f.name), flag_name, convert, f"(env {ENV_PREFIX}{flag_name.upper()}){allowed}")


def setting_names(cls: type) -> tuple[str, ...]:
    """The settings `load_config(cls, ...)` reads, by snake_case name (flag `--name-with-dashes`),
    a nested dataclass's fields under their prefix."""
    return tuple(setting.flag_name for setting in _settings(cls))


def _is_choice(tp: Any) -> bool:
    return typing.get_origin(tp) is Literal or (isinstance(tp, type) and issubclass(tp, enum.Enum))


def _build(cls: type[T], values: Mapping[tuple[str, ...], Any], path: tuple[str, ...] = ()) -> T:
    """`cls` from the values given under `path`, each nested dataclass built the same way."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        here = (*path, f.name)
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            if any(key[: len(here)] == here for key in values):
                kwargs[f.name] = _build(typing.cast(type[_Dataclass], tp), values, here)
        elif here in values:
            kwargs[f.name] = values[here]
    return cls(**kwargs)


def load_config(cls: type[T], argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> T:
    """Build `cls` from `argv` flags over `env` over the dataclass defaults. Errors are ValueError."""
    env = dict(os.environ if env is None else env)
    parser = argparse.ArgumentParser(prog=getattr(cls, "prog", cls.__name__), exit_on_error=False)
    values: dict[tuple[str, ...], Any] = {}
    settings = list(_settings(cls))
    seen: dict[str, tuple[str, ...]] = {}
    for setting in settings:
        if setting.flag_name in seen:
            first, second = ".".join(seen[setting.flag_name]), ".".join(setting.path)
            raise TypeError(f"{cls.__name__}: {first} and {second} both read --{setting.flag_name.replace('_', '-')}")
        seen[setting.flag_name] = setting.path
        env_name = ENV_PREFIX + setting.flag_name.upper()
        if env_name in env:
            try:
                values[setting.path] = setting.convert(env[env_name])
            except ValueError as exc:
                raise ValueError(f"{env_name}: {exc}") from None
        parser.add_argument(
            "--" + setting.flag_name.replace("_", "-"),
            dest=setting.flag_name,
            type=_argparse_type(setting.convert),
            default=argparse.SUPPRESS,  # absent unless given, so a flag may set None
            help=setting.help,
        )
    try:
        args = vars(parser.parse_args(list(argv or [])))
    except argparse.ArgumentError as exc:
        raise ValueError(f"{exc.argument_name}: {exc.message}") from None
    except SystemExit as exc:  # argparse exits on arguments it does not know
        raise ValueError(f"bad arguments for {cls.__name__}: {exc}") from None
    for setting in settings:
        if setting.flag_name in args:
            values[setting.path] = args[setting.flag_name]
    return _build(cls, values)
