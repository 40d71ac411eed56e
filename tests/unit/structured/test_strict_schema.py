"""OpenAI's strict-mode rules: every violation named by its JSON path, in document order."""

from __future__ import annotations

import pytest

from agentserve.structured.strict_schema import check_strict, strict_violations

pytestmark = pytest.mark.unit

WHERE = "response_format.json_schema.schema"
# What pydantic / the openai client send for `class Person(BaseModel): name: str; pet: Pet | None`.
PERSON = {
    "$defs": {
        "Pet": {
            "type": "object",
            "title": "Pet",
            "properties": {"kind": {"type": "string", "enum": ["cat", "dog"]}},
            "required": ["kind"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "title": "Person",
    "properties": {
        "name": {"type": "string", "description": "full name"},
        "age": {"type": ["integer", "null"], "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "pet": {"anyOf": [{"$ref": "#/$defs/Pet"}, {"type": "null"}]},
    },
    "required": ["name", "age", "tags", "pet"],
    "additionalProperties": False,
}


def test_a_strict_schema_has_no_violations():
    assert strict_violations(PERSON, WHERE) == []
    check_strict(PERSON, WHERE)
    check_strict({"$ref": "#/$defs/Pet", "$defs": PERSON["$defs"]}, WHERE)


def test_every_violation_is_named_by_its_path_in_document_order():
    schema = {
        "type": "object",
        "properties": {
            "user": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
            "note": {"type": "string", "minItems": 1},
            "pick": {"oneOf": [{"type": "string"}]},
            "list": {"type": "array", "items": [{"type": "string"}]},
            "alt": {"anyOf": [{"type": "object", "properties": {}, "additionalProperties": True}]},
        },
        "required": ["user", "note", "pick", "list", "ghost"],
        "additionalProperties": False,
        "$defs": {"D": {"type": "strin"}},
    }
    assert strict_violations(schema, WHERE) == [
        (WHERE, "every property must be in 'required'; missing ['alt']"),
        (WHERE, "'required' names properties not in 'properties': ['ghost']"),
        (f"{WHERE}.properties.user", "additionalProperties must be false"),
        (f"{WHERE}.properties.note", "'minItems' does not apply to ['string']"),
        (f"{WHERE}.properties.pick", "'oneOf' is not supported in strict mode"),
        (f"{WHERE}.properties.list", "'items' must be one schema (tuple forms are not supported in strict mode)"),
        (f"{WHERE}.properties.alt.anyOf[0]", "additionalProperties must be false"),
        (f"{WHERE}.$defs.D", "'type' must be a type name or a list of type names"),
    ]


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ({"type": "object", "properties": {}}, f"^{WHERE}: additionalProperties must be false$"),
        ({"type": "string"}, rf"^{WHERE}: the root must be an object schema \('type': 'object'\)$"),
        ({"anyOf": [PERSON]}, rf"^{WHERE}: the root must be an object schema"),
        ([], f"^{WHERE}: must be a JSON Schema object$"),
        (
            {
                **PERSON,
                "properties": {**PERSON["properties"], "x": {"type": "number", "not": {}}},
                "required": [*PERSON["required"], "x"],
            },
            rf"^{WHERE}.properties.x: 'not' is not supported in strict mode$",
        ),
    ],
)
def test_check_strict_raises_the_first_violation(schema, message):
    with pytest.raises(ValueError, match=message):
        check_strict(schema, WHERE)
