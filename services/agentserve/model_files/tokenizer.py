"""Tokenizer: text <-> token ids and chat rendering for a Hugging Face checkpoint folder.

Wraps a `tokenizers.Tokenizer` (from `tokenizer.json`, the source of truth for the vocabulary and
special tokens) and reads the rest from `tokenizer_config.json`: the BOS/EOS tokens and the jinja
`chat_template`. Templates render the way `transformers.apply_chat_template` renders them (same
sandboxed environment, filters and globals), so a prompt built here tokenizes exactly like the
one the model was trained on. Everything is read and validated once in `from_dir`, so a broken
checkpoint fails at start-up rather than on the first request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as BackendTokenizer

from agentserve.model_files.gguf_folder import model_folder
from agentserve.model_files.tools_prompt import needs_tools_prompt, renders_tools, with_tools_prompt

# Texts longer than this are tokenized with the GIL released (see `encode`).
GIL_FREE_CHARS = 16 << 10
# Special-token variables HF exposes to chat templates (Llama 3 templates use bos_token, for instance).
TEMPLATE_TOKEN_NAMES = ("bos_token", "eos_token", "pad_token", "unk_token")


class Tokenizer:
    def __init__(
        self,
        backend: BackendTokenizer,
        *,
        special_tokens: Mapping[str, str] | None = None,
        eos_token_ids: Iterable[int] = (),
        chat_template: str | None = None,
    ) -> None:
        """Prefer `from_dir`. `special_tokens` maps names like 'bos_token' to token strings."""
        self._backend = backend
        self._special_tokens = dict(special_tokens or {})
        for name, token in self._special_tokens.items():
            if backend.token_to_id(token) is None:
                raise ValueError(f"{name} {token!r} is not in the tokenizer vocabulary")
        bos = self._special_tokens.get("bos_token")
        self._bos_id = None if bos is None else backend.token_to_id(bos)
        self._eos_ids = tuple(dict.fromkeys(int(i) for i in eos_token_ids))  # ordered, deduplicated
        self._template = None if chat_template is None else _compile_chat_template(chat_template)
        self._renders_tools = chat_template is not None and renders_tools(chat_template)

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Load from a folder with `tokenizer.json` and `tokenizer_config.json` (or a GGUF model file).

        EOS ids are the union, in this order, of the config's eos_token, generation_config.json's
        eos_token_id and config.json's eos_token_id: instruct models list the end-of-turn token in
        only some of these, and generation must stop at any of them.
        """
        folder = model_folder(path)  # a GGUF file: the folder its metadata converts to
        if not folder.is_dir():
            raise ValueError(f"tokenizer folder {folder} does not exist")
        tokenizer_file = folder / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise ValueError(f"no tokenizer.json in {folder}")
        try:
            backend = BackendTokenizer.from_file(str(tokenizer_file))
        except Exception as exc:  # noqa: BLE001 - the Rust side raises a bare Exception for any parse failure
            raise ValueError(f"{tokenizer_file} is not a valid tokenizer: {exc}") from None
        config = _read_json(folder / "tokenizer_config.json", required=True)

        special_tokens = {}
        for name in TEMPLATE_TOKEN_NAMES:
            token = _token_content(config.get(name), name)
            if token is not None:
                special_tokens[name] = token

        eos_ids: list[int] = []
        if "eos_token" in special_tokens:
            eos_id = backend.token_to_id(special_tokens["eos_token"])
            if eos_id is None:
                raise ValueError(f"eos_token {special_tokens['eos_token']!r} is not in the tokenizer vocabulary")
            eos_ids.append(eos_id)
        for extra in ("generation_config.json", "config.json"):
            eos_ids.extend(_id_list(_read_json(folder / extra).get("eos_token_id"), folder / extra))
        return cls(
            backend,
            special_tokens=special_tokens,
            eos_token_ids=[i for i in eos_ids if i is not None],
            chat_template=_find_chat_template(folder, config),
        )

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included (may be below the model's embedding rows)."""
        return self._backend.get_vocab_size(with_added_tokens=True)

    @property
    def bos_token_id(self) -> int | None:
        return self._bos_id

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos_ids

    def token_to_id(self, token: str) -> int | None:
        return self._backend.token_to_id(token)

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        """Token ids of `text`; special tokens written in the text are recognised.

        No post-processor runs: BOS is added only on request, and only if the model has one
        (Qwen2 has none), so a chat template that already emits BOS is not doubled.
        """
        if len(text) > GIL_FREE_CHARS:
            # The same ids; `encode` holds the GIL for the whole text (a megabyte: about a second
            # in which no other thread runs), `encode_batch` releases it, so callers that tokenize
            # on a worker thread leave the event loop free meanwhile.
            ids = self._backend.encode_batch([text], add_special_tokens=False)[0].ids
        else:
            ids = self._backend.encode(text, add_special_tokens=False).ids
        if add_bos and self._bos_id is not None:
            ids.insert(0, self._bos_id)
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`. Ids outside the tokenizer vocabulary (spare embedding rows) decode to nothing."""
        return self._backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """Render `messages` (each with 'role' and 'content') into the model's prompt string.

        `tools` are JSON schemas passed to templates that describe tools (Llama 3.1, Qwen2.5). For a
        template that does not read `tools`, the tools, earlier calls and tool results are written
        into the messages in the documented format (`model_files.tools_prompt`).
        """
        if self._template is None:
            raise ValueError("this tokenizer has no chat_template")
        _check_messages(messages)
        if not self._renders_tools and needs_tools_prompt(messages, tools):
            messages, tools = with_tools_prompt(messages, tools), None
        try:
            return self._template.render(
                messages=[dict(m) for m in messages],
                add_generation_prompt=add_generation_prompt,
                tools=None if tools is None else [dict(t) for t in tools],
                documents=None,
                **self._special_tokens,
            )
        except jinja2.TemplateError as exc:
            raise ValueError(f"chat template rejected the messages: {exc}") from None


def _check_messages(messages: Sequence[Mapping[str, Any]]) -> None:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of {{'role', 'content'}} dicts, got {type(messages).__name__}")
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{i}] must be a dict, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}] needs a non-empty string 'role', got {role!r}")
        if "content" not in message:
            raise ValueError(f"messages[{i}] ({role}) has no 'content'")


def _compile_chat_template(source: str) -> jinja2.Template:
    """Compile like transformers does: templates come from the Hub, so they run sandboxed."""

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(
        value: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: tuple[str, str] | None = None,
        sort_keys: bool = False,
    ) -> str:
        # jinja's own tojson HTML-escapes, which would change the prompt text.
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"chat_template is not valid jinja (line {exc.lineno}): {exc.message}") from None


def _find_chat_template(folder: Path, config: Mapping[str, Any]) -> str | None:
    # Newer transformers save the template as its own file, and it wins over the config copy.
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = config.get("chat_template")
    if template is None or isinstance(template, str):
        return template
    if isinstance(template, list):  # older multi-template form: [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
        if isinstance(named.get("default"), str):
            return named["default"]
    raise ValueError("tokenizer_config.json chat_template must be a string or a list with a 'default' entry")


def _token_content(value: Any, name: str) -> str | None:
    """Special tokens are strings, or AddedToken dicts like {"content": "<s>", ...} in older configs."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    raise ValueError(f"tokenizer_config.json {name} must be a string or {{'content': ...}}, got {value!r}")


def _id_list(value: Any, source: Path) -> list[int]:
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{source} eos_token_id must be an int or a list of ints, got {value!r}")
    return list(values)


def _read_json(path: Path, required: bool = False) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise ValueError(f"no {path.name} in {path.parent}")
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data
