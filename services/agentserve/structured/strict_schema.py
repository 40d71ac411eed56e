"""OpenAI's strict-mode rules for a JSON Schema (`strict: true` on a function tool or a `json_schema`).

A strict schema pins down every object: `additionalProperties` is `false` and every property is
listed in `required` (an optional field is a required one whose type admits `null`). Only the
keywords of OpenAI's strict subset are allowed:

- any schema: `type` (a name or a list of names), `enum`, `const`, `anyOf`, `$ref`, `$defs` /
  `definitions`, and the annotations `description`, `title`, `default`, `examples`, `$comment`,
  `$schema`, `$id`;
- objects: `properties`, `required`, `additionalProperties`;
- arrays: `items`, `minItems`, `maxItems`;
- strings: `pattern`, `format`, `minLength`, `maxLength`;
- numbers and integers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`, `multipleOf`.

The root is an object schema or a `$ref` to one (OpenAI refuses a bare `anyOf` or scalar at the root). Everything else
(`allOf`, `oneOf`, `not`, `if`, `patternProperties`, `uniqueItems`, ...) is refused with the JSON path
of the schema that uses it, so a client learns which field to change. Pure: no grammar library here;
`agentserve.structured.grammar` still checks that the engines can decode under the schema.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment", "$schema", "$id"})
COMMON_KEYWORDS = ANNOTATIONS | {"type", "enum", "const", "anyOf", "$ref", "$defs", "definitions"}
KEYWORDS_BY_TYPE = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "minItems", "maxItems"}),
    "string": frozenset({"pattern", "format", "minLength", "maxLength"}),
    "number": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
    "integer": frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}),
    "boolean": frozenset(),
    "null": frozenset(),
}
ALL_KEYWORDS = COMMON_KEYWORDS.union(*KEYWORDS_BY_TYPE.values())


def check_strict(schema: Any, where: str) -> None:
    """ValueError `'<where>.<path>: <rule>'` for the first strict-rule violation in `schema`."""
    for path, problem in strict_violations(schema, where):
        raise ValueError(f"{path}: {problem}")


def strict_violations(schema: Any, where: str) -> list[tuple[str, str]]:
    """Every violation as (JSON path, rule broken), in document order; empty when `schema` is strict."""
    if not isinstance(schema, dict):
        return [(where, "must be a JSON Schema object")]
    found = []
    if not _is_object_schema(schema):
        found.append((where, "the root must be an object schema ('type': 'object')"))
    found.extend(_violations(schema, where))
    return found


def _violations(schema: Any, path: str) -> Iterator[tuple[str, str]]:
    if not isinstance(schema, dict):
        yield path, "must be a JSON Schema object"
        return
    types = _types(schema)
    if types is None:
        yield path, "'type' must be a type name or a list of type names"
        return
    allowed = COMMON_KEYWORDS.union(*(KEYWORDS_BY_TYPE[t] for t in types)) if types else ALL_KEYWORDS
    for keyword in schema:
        if keyword not in allowed:
            reason = "is not supported in strict mode" if keyword not in ALL_KEYWORDS else f"does not apply to {types}"
            yield path, f"'{keyword}' {reason}"
    if "object" in types or (not types and "properties" in schema):
        yield from _object_violations(schema, path)
    yield from _nested_violations(schema, path)


def _nested_violations(schema: dict[str, Any], path: str) -> Iterator[tuple[str, str]]:
    """The violations of the schemas `schema` holds: its items, its anyOf branches, its definitions."""
    if isinstance(schema.get("items"), dict):
        yield from _violations(schema["items"], f"{path}.items")
    elif "items" in schema:
        yield path, "'items' must be one schema (tuple forms are not supported in strict mode)"
    if "anyOf" in schema:
        branches = schema["anyOf"]
        if not isinstance(branches, list) or not branches:
            yield path, "'anyOf' must be a non-empty list of schemas"
        else:
            for i, branch in enumerate(branches):
                yield from _violations(branch, f"{path}.anyOf[{i}]")
    for keyword in ("$defs", "definitions"):
        definitions = schema.get(keyword, {})
        if not isinstance(definitions, dict):
            yield path, f"'{keyword}' must map names to schemas"
            continue
        for name, definition in definitions.items():
            yield from _violations(definition, f"{path}.{keyword}.{name}")


def _object_violations(schema: dict[str, Any], path: str) -> Iterator[tuple[str, str]]:
    if schema.get("additionalProperties") is not False:
        yield path, "additionalProperties must be false"
    properties = schema.get("properties", {})
    if not isinstance(properties, dict):
        yield path, "'properties' must map names to schemas"
        return
    required = schema.get("required", [])
    if not isinstance(required, list):
        yield path, "'required' must be a list of property names"
        return
    missing = [name for name in properties if name not in required]
    if missing:
        yield path, f"every property must be in 'required'; missing {missing}"
    unknown = [name for name in required if name not in properties]
    if unknown:
        yield path, f"'required' names properties not in 'properties': {unknown}"
    for name, child in properties.items():
        yield from _violations(child, f"{path}.properties.{name}")


def _types(schema: dict[str, Any]) -> list[str] | None:
    """The schema's type names ([] when it states none), or None when `type` is malformed."""
    raw = schema.get("type", [])
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not all(isinstance(n, str) and n in KEYWORDS_BY_TYPE for n in names):
        return None
    return names


def _is_object_schema(schema: dict[str, Any]) -> bool:
    # A root `$ref` (pydantic's form for a recursive model) is checked where it points, in `$defs`.
    return schema.get("type") == "object" or ("type" not in schema and ("properties" in schema or "$ref" in schema))
