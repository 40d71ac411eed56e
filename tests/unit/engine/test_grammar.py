"""Grammar-constrained decoding (`agentserve.engine.grammar`) and the engine's per-row hook: exact
masks against the vocabulary, replay after a handoff, one compile per schema, and constrained rows
sampling beside free ones in one batch without changing the free ones."""

from __future__ import annotations

import dataclasses
import json
import re

import jsonschema
import pytest
import torch

from agentserve.contracts import SamplingParams, StructuredKind, StructuredOutput
from agentserve.engine import grammar as grammar_module
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.grammar import GrammarCompiler
from agentserve.model_files.presets import EOS_ID, IM_END_ID
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.scheduler.tool_calls import parse_tool_calls

pytestmark = pytest.mark.unit

VOCAB = 8192
YES_NO = StructuredOutput.json_schema({"enum": ["yes", "no"]})
# Bounded everywhere (string lengths, item counts, integer range) so a random model ends it.
RECORD = {
    "type": "object",
    "properties": {
        "level": {"enum": ["low", "high"]},
        "count": {"type": "integer", "minimum": -5, "maximum": 120},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}, "minItems": 1, "maxItems": 3},
        "owner": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 8}, "admin": {"type": "boolean"}},
            "required": ["name", "admin"],
            "additionalProperties": False,
        },
    },
    "required": ["level", "count", "tags", "owner"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 10},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
HERMES = re.compile(r"<tool_call>\n(.*)\n</tool_call>", re.DOTALL)


@pytest.fixture(scope="module")
def engine(tiny_model_dir) -> LLMEngine:
    return LLMEngine.from_dir(tiny_model_dir, EngineConfig(prefix_cache=False))


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir) -> Tokenizer:
    return Tokenizer.from_dir(tiny_model_dir)


@pytest.fixture
def compiler(tiny_model_dir) -> GrammarCompiler:
    return GrammarCompiler(tiny_model_dir / "tokenizer.json", VOCAB, (EOS_ID, IM_END_ID))


def _allowed(compiler: GrammarCompiler, structured: StructuredOutput, generated: list[int] | None = None) -> set[int]:
    return set(torch.nonzero(compiler.matcher(structured, generated or []).allowed()).flatten().tolist())


def _text(tokenizer: Tokenizer, token_ids: list[int]) -> str:
    assert token_ids[-1] in (EOS_ID, IM_END_ID)  # the grammar ended the output
    return tokenizer.decode(token_ids[:-1], skip_special_tokens=False)


def test_mask_is_exactly_the_tokens_that_continue_the_grammar(compiler, tokenizer):
    # Every non-special token whose text is a prefix of '"yes"' or '"no"', and nothing else.
    texts = {i: tokenizer.decode([i], skip_special_tokens=False) for i in range(tokenizer.vocab_size)}
    expected = {i for i, t in texts.items() if i > IM_END_ID and t and ('"yes"'.startswith(t) or '"no"'.startswith(t))}
    assert expected >= {tokenizer.encode('"')[0]}
    assert _allowed(compiler, YES_NO) == expected


def test_replayed_tokens_resume_the_grammar_where_they_ended(compiler, tokenizer):
    # After '"y' only 'es"' can follow: forced text is offered in the tokenizer's own tokenization
    # alone ('es' then '"', not 'e'), so constrained output tokenizes as the model was trained.
    assert _allowed(compiler, YES_NO, tokenizer.encode('"y')) == {tokenizer.encode('es"')[0]}
    # Complete: EOS (either stop token) is all the grammar allows.
    assert _allowed(compiler, YES_NO, tokenizer.encode('"yes"')) == {EOS_ID, IM_END_ID}
    with pytest.raises(ValueError, match="do not match the grammar"):
        compiler.matcher(YES_NO, tokenizer.encode('"maybe"'))


def test_mask_sets_disallowed_logits_to_minus_infinity(compiler):
    logits = compiler.matcher(YES_NO, []).mask(torch.zeros(VOCAB))
    allowed = _allowed(compiler, YES_NO)
    assert set(torch.nonzero(logits == 0).flatten().tolist()) == allowed
    assert int(torch.isinf(logits).sum()) == VOCAB - len(allowed)


def test_each_distinct_request_compiles_once_and_the_cache_is_bounded(compiler, monkeypatch):
    first = compiler.compile(YES_NO)
    assert compiler.compile(StructuredOutput.json_schema({"enum": ["yes", "no"]})) is first  # equal, not same object
    assert compiler.compile(StructuredOutput(StructuredKind.JSON_OBJECT)) is not first
    monkeypatch.setattr(grammar_module, "CACHE_SIZE", 2)
    compiler.compile(StructuredOutput.json_schema({"type": "integer"}))
    assert compiler.compile(YES_NO) is not first  # evicted as least recently used, compiled again


def test_an_unusable_schema_is_a_value_error_naming_it(engine):
    bad = StructuredOutput.json_schema({"type": "array", "uniqueItems": True})
    with pytest.raises(ValueError, match=r"the response schema is not a usable JSON Schema: .*uniqueItems"):
        engine.validate([5, 6, 7], SamplingParams(structured=bad))


def test_an_engine_without_a_tokenizer_refuses_structured_output(engine):
    bare = LLMEngine(engine.model, engine.fingerprint, EngineConfig(prefix_cache=False))
    with pytest.raises(ValueError, match="needs the model's tokenizer.json"):
        bare.add_request([5, 6, 7], SamplingParams(structured=YES_NO))


def test_constrained_rows_batch_with_free_rows_and_leave_them_unchanged(engine, tokenizer):
    prompts = [[11 + i, 300 + 7 * i, 42, 977] for i in range(8)]
    free = SamplingParams(max_tokens=24, ignore_eos=True)
    alone = [engine.generate(p, free).output_token_ids for p in prompts[:4]]
    seqs = [engine.add_request(p, free) for p in prompts[:4]]
    structured = StructuredOutput.json_schema(RECORD)
    seqs += [
        engine.add_request(p, SamplingParams(max_tokens=120, temperature=1.0, seed=i, structured=structured))
        for i, p in enumerate(prompts[4:])
    ]
    batch_sizes = []
    while engine.has_unfinished():
        batch_sizes.append(len(engine.step()))
    assert max(batch_sizes) == len(prompts)  # free and constrained rows decoded together
    assert [s.output_token_ids for s in seqs[:4]] == alone
    for seq in seqs[4:]:
        assert seq.finish_reason == "stop"
        jsonschema.validate(json.loads(_text(tokenizer, seq.output_token_ids)), RECORD)


def test_named_tool_call_is_one_hermes_call_with_valid_arguments(engine, tokenizer):
    structured = StructuredOutput.tool_calls({"get_weather": WEATHER}, single_call=True)
    for seed in range(4):
        params = SamplingParams(max_tokens=80, temperature=1.0, seed=seed, structured=structured)
        text = _text(tokenizer, engine.generate([5, 900, 31, 7], params).output_token_ids)
        call = json.loads(HERMES.fullmatch(text).group(1))
        assert list(call) == ["name", "arguments"] and call["name"] == "get_weather"
        jsonschema.validate(call["arguments"], WEATHER)


def test_required_tool_choice_is_one_or_more_calls_among_the_tools(engine, tokenizer):
    no_arguments = {"type": "object", "properties": {}, "additionalProperties": False}
    structured = StructuredOutput.tool_calls({"get_weather": WEATHER, "get_time": no_arguments})
    for seed in range(4):
        params = SamplingParams(max_tokens=300, temperature=1.0, seed=seed, structured=structured)
        seq = engine.generate([5, 900, 31, 7], params)
        assert seq.finish_reason == "stop"
        text = _text(tokenizer, seq.output_token_ids)
        bodies = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.DOTALL)
        assert bodies and "\n".join(f"<tool_call>\n{b}\n</tool_call>" for b in bodies) == text  # calls only
        for call in map(json.loads, bodies):
            if call["name"] == "get_weather":
                jsonschema.validate(call["arguments"], WEATHER)
            else:
                assert call == {"name": "get_time", "arguments": {}}


def test_a_single_call_output_holds_exactly_one_forced_call_among_several_tools(engine, tokenizer):
    no_arguments = {"type": "object", "properties": {}, "additionalProperties": False}
    tools = {"get_weather": WEATHER, "get_time": no_arguments}
    forced = StructuredOutput.tool_calls(tools, single_call=True)
    for seed in range(3):
        params = SamplingParams(max_tokens=120, temperature=1.0, seed=seed, structured=forced)
        seq = engine.generate([5, 900, 31, 7], params)
        assert seq.finish_reason == "stop"
        call = json.loads(HERMES.fullmatch(_text(tokenizer, seq.output_token_ids)).group(1))
        assert call["name"] in tools


def test_after_one_call_a_single_call_text_cannot_open_another(compiler, tokenizer):
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
    trigger = tokenizer.encode("<tool_call>")
    generated = tokenizer.encode("Sure. " + call + " Then ") + trigger[:-1]
    several = StructuredOutput(
        StructuredKind.TEXT_OR_TOOL_CALLS, tools=StructuredOutput.tool_calls({"get_weather": WEATHER}).tools
    )
    single = dataclasses.replace(several, single_call=True)
    assert trigger[-1] in _allowed(compiler, several, generated)  # a second call may open
    assert trigger[-1] not in _allowed(compiler, single, generated)  # it may not


def test_decode_after_handoff_continues_exactly_where_the_prefill_left(engine):
    # The prefill engine samples the first token; the decode engine gets it as part of its prompt
    # and must replay it into the grammar. Greedy: both halves equal one uninterrupted run.
    structured = StructuredOutput.json_schema(RECORD)
    prompt = [5, 61, 700, 12]
    whole = engine.generate(prompt, SamplingParams(max_tokens=120, structured=structured)).output_token_ids
    first = engine.generate(prompt, SamplingParams(max_tokens=1, structured=structured)).output_token_ids
    rest = engine.add_request(prompt + first, SamplingParams(max_tokens=119, structured=structured), generated=1)
    while not rest.finished:
        engine.step()
    assert first + rest.output_token_ids == whole
    assert whole[-1] in (EOS_ID, IM_END_ID)


def test_auto_with_strict_tools_lets_text_open_only_valid_calls(engine, tokenizer):
    # The reply so far opened a call (replayed into the grammar as already generated); at
    # temperature 1 the model must finish it as a valid call, and any text after it holds no block.
    structured = StructuredOutput(
        StructuredKind.TEXT_OR_TOOL_CALLS, tools=StructuredOutput.tool_calls({"get_weather": WEATHER}).tools
    )
    opened = tokenizer.encode("Let me check. <tool_call>\n")
    prompt = [5, 900, 31, 7]
    for seed in range(3):
        params = SamplingParams(max_tokens=48, temperature=1.0, seed=seed, structured=structured)
        seq = engine.add_request(prompt + opened, params, generated=len(opened))
        while not seq.finished:
            engine.step()
        text = tokenizer.decode(opened + seq.output_token_ids, skip_special_tokens=True)
        parsed = parse_tool_calls(text)
        assert parsed.content.startswith("Let me check.") and "<tool_call>" not in parsed.content
        assert [call.name for call in parsed.tool_calls] == ["get_weather"]
        jsonschema.validate(json.loads(parsed.tool_calls[0].arguments), WEATHER)
    with pytest.raises(ValueError, match="do not match the grammar"):
        engine.grammars.matcher(structured, tokenizer.encode("hi <tool_call>\nfoo"))


def test_json_beside_strict_tools_is_the_json_or_calls_instead(engine, tokenizer):
    # A response_format beside strict tools under "auto": the reply is RECORD's JSON or calls to
    # get_weather; once it opened either, the other is gone, and text is neither.
    tools = StructuredOutput.tool_calls({"get_weather": WEATHER}).tools
    structured = dataclasses.replace(StructuredOutput.json_schema(RECORD), tools=tools)
    prompt = [5, 900, 31, 7]
    for opening in ("<tool_call>\n", '{"level": '):
        opened = tokenizer.encode(opening)
        for seed in range(2):
            params = SamplingParams(max_tokens=300, temperature=1.0, seed=seed, structured=structured)
            seq = engine.add_request(prompt + opened, params, generated=len(opened))
            while not seq.finished:
                engine.step()
            assert seq.finish_reason == "stop"
            text = opening + _text(tokenizer, seq.output_token_ids)
            parsed = parse_tool_calls(text)
            if opening.startswith("<tool_call>"):
                assert not parsed.content and [call.name for call in parsed.tool_calls][:1] == ["get_weather"]
                for call in parsed.tool_calls:
                    jsonschema.validate(json.loads(call.arguments), WEATHER)
            else:
                assert not parsed.tool_calls
                jsonschema.validate(json.loads(text), RECORD)
    with pytest.raises(ValueError, match="do not match the grammar"):
        engine.grammars.matcher(structured, tokenizer.encode("Let me check."))


def test_where_the_grammar_may_end_eos_takes_the_probability_of_the_tokens_it_refuses(compiler, tokenizer):
    # After a complete call (and the newline that may follow it) the grammar may end or open another
    # call. A token it refuses there (text) is the model leaving the format: its probability goes to
    # EOS, so a model that would write a sentence ends its reply instead of being held to a call.
    calls = StructuredOutput.tool_calls({"get_weather": WEATHER})
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_call>'
    logits = torch.randn(VOCAB, generator=torch.Generator().manual_seed(0))
    for done in (call, call + "\n"):
        grammar = compiler.matcher(calls, tokenizer.encode(done))
        allowed = grammar.allowed()
        masked = grammar.mask(logits)
        refused = torch.logsumexp(logits[~allowed], dim=-1)
        assert torch.isclose(masked[EOS_ID], torch.logaddexp(logits[EOS_ID], refused))
        others = allowed.clone()
        others[EOS_ID] = False  # every other allowed token (IM_END_ID, the separator) keeps its logit
        assert torch.equal(masked[others], logits[others])
        assert torch.isinf(masked[~allowed]).all()
    # Inside a call the grammar may not end: refused tokens only go to -inf.
    inside = compiler.matcher(calls, tokenizer.encode(call[:30]))
    assert torch.equal(inside.mask(logits), logits.masked_fill(~inside.allowed(), float("-inf")))
