"""The JSON Schema a request's output is decoded under: the client's schema, closed and made finite.

Two rewrites, both applied by the gateway before the schema becomes a StructuredOutput:

- **Closed objects** (xgrammar's strict default, which vLLM decodes under): an object schema that
  declares `properties` and says nothing about `additionalProperties` gets
  `additionalProperties: false`, so the output never carries a key the schema does not declare. An
  object schema without `properties` stays open: it asks for any object.
- **Finite values**: an integer or number with no upper (lower) bound gets `maximum` (`minimum`)
  of +-`MAX_INTEGER`, i.e. at most 18 integer digits; a number without `multipleOf` gets
  `multipleOf` 10^-`NUMBER_DECIMALS`, i.e. at most 6 decimals (llguidance then writes it without
  an exponent); a string with no `maxLength`, `enum`,
  `const`, `pattern` or `format` gets `maxLength` of `string_chars(max_tokens, n)` characters, n
  being the number of such strings in the schema: the strings together take at most a quarter of
  `max_tokens` when a character is one token, which leaves the rest for keys, punctuation and
  numbers. So a reply whose schema has a short completion ends inside `max_tokens` instead of
  being cut inside a 90-digit number or a paragraph-long name.

Pure and torch-free: the gateway runs it on every `response_format` and tool schema.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

MAX_INTEGER = 10**18 - 1  # 18 digits: inside a signed 64-bit integer
NUMBER_DECIMALS = 6
MIN_STRING_CHARS = 8  # a string bound never drops below this, however small max_tokens is
STRING_BUDGET_SHARE = 4  # the strings together get max_tokens // 4 characters
# Keywords that already make a string finite (or fix its shape: a pattern or format is the
# client's own bound, and llguidance cannot combine maxLength with a format).
BOUNDED_STRING_KEYWORDS = frozenset({"maxLength", "enum", "const", "pattern", "format"})
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
SUBSCHEMA_SINGLES = ("items", "additionalProperties", "not", "contains", "if", "then", "else")


def decoding_schema(schema: dict[str, Any], max_tokens: int) -> dict[str, Any]:
    """`schema` (unchanged) rewritten as the module says, for a reply of at most `max_tokens`."""
    rewritten = copy.deepcopy(schema)
    nodes = list(_subschemas(rewritten))
    chars = string_chars(max_tokens, sum(1 for node in nodes if _unbounded_string(node)))
    for node in nodes:
        _close_and_bound(node, chars)
    return rewritten


def string_chars(max_tokens: int, strings: int) -> int:
    """The `maxLength` each of `strings` unbounded strings gets in a reply of `max_tokens` tokens."""
    return max(MIN_STRING_CHARS, max_tokens // (STRING_BUDGET_SHARE * max(1, strings)))


def _close_and_bound(node: dict[str, Any], chars: int) -> None:
    types = _types(node)
    if "properties" in node and "additionalProperties" not in node:
        node["additionalProperties"] = False
    if ("integer" in types or "number" in types) and not {"enum", "const"} & set(node):
        if "maximum" not in node and "exclusiveMaximum" not in node:
            node["maximum"] = MAX_INTEGER
        if "minimum" not in node and "exclusiveMinimum" not in node:
            node["minimum"] = -MAX_INTEGER
    if "number" in types and not {"enum", "const", "multipleOf"} & set(node):
        node["multipleOf"] = 10**-NUMBER_DECIMALS
    if _unbounded_string(node):
        node["maxLength"] = max(chars, node.get("minLength", 0))


def _unbounded_string(node: dict[str, Any]) -> bool:
    return "string" in _types(node) and not BOUNDED_STRING_KEYWORDS & set(node)


def _types(node: dict[str, Any]) -> list[str]:
    raw = node.get("type", [])
    return [raw] if isinstance(raw, str) else [t for t in raw if isinstance(t, str)] if isinstance(raw, list) else []


def _subschemas(node: Any) -> Iterator[dict[str, Any]]:
    """`node` and every schema inside it (each once: a schema is a tree, `$ref`s are not followed)."""
    if not isinstance(node, dict):
        return
    yield node
    for key in SUBSCHEMA_SINGLES:
        yield from _subschemas(node.get(key))
    for key in SUBSCHEMA_LISTS:
        children = node.get(key)
        if isinstance(children, list):
            for child in children:
                yield from _subschemas(child)
    for key in SUBSCHEMA_MAPS:
        children = node.get(key)
        if isinstance(children, dict):
            for child in children.values():
                yield from _subschemas(child)
