"""The schema the output is decoded under: objects closed, integers, numbers and strings finite."""

from __future__ import annotations

import copy

import pytest

from agentserve.structured.decoding_schema import MAX_INTEGER, decoding_schema, string_chars

pytestmark = pytest.mark.unit

CITY_DAYS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
}


def test_objects_are_closed_and_unbounded_values_get_the_stated_bounds():
    original = copy.deepcopy(CITY_DAYS)
    assert decoding_schema(CITY_DAYS, 64) == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 16},
            "days": {"type": "integer", "maximum": MAX_INTEGER, "minimum": -MAX_INTEGER},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    assert original == CITY_DAYS  # the client's schema is left as sent
    assert MAX_INTEGER == 999_999_999_999_999_999


def test_the_strings_share_a_quarter_of_max_tokens_with_a_floor():
    assert string_chars(64, 1) == 16
    assert string_chars(4096, 2) == 512
    assert string_chars(64, 3) == 8  # 64 // 12 = 5, raised to the floor
    two = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": ["string", "null"]}}}
    assert [p["maxLength"] for p in decoding_schema(two, 4096)["properties"].values()] == [512, 512]


def test_the_clients_own_bounds_and_openness_are_kept():
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "when": {"type": "string", "format": "date"},
            "name": {"type": "string", "maxLength": 100},
            "long": {"type": "string", "minLength": 40},
            "kind": {"type": "string", "enum": ["a", "b"]},
            "score": {"type": "number", "minimum": 0, "multipleOf": 0.5},
            "count": {"type": "integer", "exclusiveMaximum": 10},
            "extra": {"type": "object"},
            "open": {"type": "object", "properties": {}, "additionalProperties": True},
        },
    }
    properties = decoding_schema(schema, 64)["properties"]
    assert properties["code"] == schema["properties"]["code"]
    assert properties["when"] == schema["properties"]["when"]
    assert properties["name"] == schema["properties"]["name"]
    assert properties["long"] == {"type": "string", "minLength": 40, "maxLength": 40}
    assert properties["kind"] == schema["properties"]["kind"]
    assert properties["score"] == {"type": "number", "minimum": 0, "multipleOf": 0.5, "maximum": MAX_INTEGER}
    assert properties["count"] == {"type": "integer", "exclusiveMaximum": 10, "minimum": -MAX_INTEGER}
    assert properties["extra"] == {"type": "object"}  # no properties declared: any object
    assert properties["open"] == schema["properties"]["open"]


def test_numbers_get_six_decimals_and_nested_schemas_are_rewritten_too():
    schema = {
        "type": "object",
        "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"}}},
        "$defs": {"Item": {"type": "object", "properties": {"price": {"type": "number"}}}},
        "anyOf": [{"type": "object", "properties": {"x": {"type": "string"}}}],
    }
    decoded = decoding_schema(schema, 400)
    assert decoded["$defs"]["Item"] == {
        "type": "object",
        "properties": {
            "price": {"type": "number", "maximum": MAX_INTEGER, "minimum": -MAX_INTEGER, "multipleOf": 1e-6}
        },
        "additionalProperties": False,
    }
    assert decoded["anyOf"][0] == {
        "type": "object",
        "properties": {"x": {"type": "string", "maxLength": 100}},
        "additionalProperties": False,
    }
