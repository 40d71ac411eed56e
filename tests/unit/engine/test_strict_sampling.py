"""A strict json_schema with an unbounded string and integer, sampled at temperature 1 on the model
`up` serves by default (SmolLM2-135M-Instruct) and on the tiny model the tests serve: every reply
ends inside max_tokens, parses and validates. The constraint is
built as the gateway builds it (`parse_chat_request`), so the bounds under test are the served ones."""

from __future__ import annotations

import dataclasses
import json

import jsonschema
import pytest

from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.model_catalog import SERVED_DEFAULT, TINY, resolve_model
from agentserve.model_files.gguf_folder import model_folder
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.http.schemas import parse_chat_request

pytestmark = pytest.mark.unit

CITY_DAYS = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
SAMPLES = 100
MAX_TOKENS = 64


@pytest.mark.timeout(900)  # 100 sequences in one batch: minutes on two shared cores for SmolLM2
@pytest.mark.parametrize("model", [SERVED_DEFAULT, TINY])
def test_every_seeded_sample_of_a_strict_schema_parses_and_validates(model):
    model_dir = model_folder(resolve_model(model).source)
    engine = LLMEngine.from_dir(model_dir, EngineConfig(prefix_cache=False))
    tokenizer = Tokenizer.from_dir(model_dir)
    body = {
        "messages": [{"role": "user", "content": "Plan a trip: which city, and for how many days?"}],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "trip", "schema": CITY_DAYS, "strict": True},
        },
        "temperature": 1.0,
        "max_tokens": MAX_TOKENS,
    }
    sampling = parse_chat_request(body).sampling
    prompt = tokenizer.encode(tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True))
    seqs = [engine.add_request(prompt, dataclasses.replace(sampling, seed=seed)) for seed in range(SAMPLES)]
    while engine.has_unfinished():
        engine.step()
    for seq in seqs:
        assert seq.finish_reason == "stop", tokenizer.decode(seq.output_token_ids, skip_special_tokens=False)
        reply = json.loads(tokenizer.decode(seq.output_token_ids, skip_special_tokens=True))
        jsonschema.validate(reply, CITY_DAYS)
