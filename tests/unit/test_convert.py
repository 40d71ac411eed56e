"""agentserve.convert: every domain type survives the wire unchanged; bad values fail on the way in."""

from __future__ import annotations

import dataclasses

import pytest

from agentserve import convert
from agentserve.contracts import (
    EngineStatus,
    GenerateChunk,
    GenerateRequest,
    KVHint,
    KVPath,
    LoadPlan,
    NICStatus,
    PrefillRequest,
    PrefillResult,
    Role,
    SamplingParams,
    StructuredKind,
    StructuredOutput,
    TokenLogprob,
    ToolCall,
    ToolSchema,
    TurnEvent,
    TurnMeta,
)
from agentserve.contracts.structured import NO_PARAMETERS
from agentserve.v1 import common_pb2, fabric_pb2, prefill_pb2
from tests.unit.scheduler.fakes import engine_proto

pytestmark = pytest.mark.unit

# temperature and top_p are float32 on the wire: values exact in float32 round-trip unchanged.
SAMPLING = SamplingParams(max_tokens=7, temperature=0.5, top_p=0.75, seed=3, ignore_eos=True)


def test_sampling_defaults_and_validation() -> None:
    params = convert.sampling_from_proto(common_pb2.SamplingParams(max_tokens=8))
    assert (params.max_tokens, params.temperature, params.top_p, params.seed) == (8, 0.0, 1.0, None)
    assert convert.sampling_from_proto(common_pb2.SamplingParams(max_tokens=8, seed=0)).seed == 0
    with pytest.raises(ValueError, match="max_tokens must be positive"):
        convert.sampling_from_proto(common_pb2.SamplingParams())


def test_engine_status_translation() -> None:
    status = convert.engine_status_from_proto(engine_proto())
    assert (status.role, status.address, status.running, status.waiting) == (Role.DECODE, "127.0.0.1:7009", 1, 2)
    with pytest.raises(ValueError, match="ENGINE_ROLE_UNSPECIFIED"):
        convert.engine_status_from_proto(engine_proto(role=common_pb2.ENGINE_ROLE_UNSPECIFIED))


def test_engine_status_carries_nic_queues() -> None:
    nics = [
        fabric_pb2.NICStatus(name="snic", configured_gbps=2.5, queue_bytes=4096, active_transfers=1, bytes_total=10),
        fabric_pb2.NICStatus(name="cnic"),
    ]
    status = convert.engine_status_from_proto(engine_proto(nics=nics, kv_block_bytes=65984))
    assert status.nic("snic") == NICStatus("snic", 2.5, 4096, 1, 10)
    assert status.nic("cnic") == NICStatus("cnic")
    assert status.kv_block_bytes == 65984


def test_sampling_round_trip_drops_stop_ids_and_can_override_the_budget() -> None:
    assert convert.sampling_from_proto(convert.sampling_to_proto(SAMPLING)) == SAMPLING
    # Stop ids are the scheduler's business: engines never see them.
    with_stops = SamplingParams(max_tokens=7, stop_token_ids=(9,))
    assert convert.sampling_from_proto(convert.sampling_to_proto(with_stops)).stop_token_ids == ()
    assert convert.sampling_to_proto(SAMPLING, max_tokens=2).max_tokens == 2


@pytest.mark.parametrize(
    "structured",
    [
        StructuredOutput(StructuredKind.JSON_OBJECT),
        StructuredOutput.json_schema({"type": "object", "properties": {"a": {"enum": [1, 2]}}}),
        StructuredOutput.tool_calls({"f": {"type": "object"}, "g": {}}),
        StructuredOutput.tool_calls({"f": {"type": "object"}}, single_call=True),
    ],
)
def test_structured_output_survives_the_wire(structured: StructuredOutput) -> None:
    params = SamplingParams(max_tokens=9, temperature=1.0, seed=4, structured=structured)
    assert convert.sampling_from_proto(convert.sampling_to_proto(params)) == params


def test_structured_output_from_proto_validates() -> None:
    with pytest.raises(ValueError, match="structured.kind must be set"):
        convert.structured_from_proto(common_pb2.StructuredOutput(schema="{}"))
    with pytest.raises(ValueError, match="schema is not valid JSON"):
        convert.structured_from_proto(
            common_pb2.StructuredOutput(kind=common_pb2.StructuredOutput.KIND_JSON_SCHEMA, schema="{")
        )
    # A tool without parameters takes none, as in OpenAI's API.
    msg = common_pb2.StructuredOutput(
        kind=common_pb2.StructuredOutput.KIND_TOOL_CALL, tools=[common_pb2.ToolSchema(name="f")]
    )
    assert convert.structured_from_proto(msg).tools == (ToolSchema("f", NO_PARAMETERS),)


def test_kv_path_round_trip_and_unknown_values() -> None:
    for path in KVPath:
        assert convert.kv_path_from_proto(convert.kv_path_to_proto(path)) is path
    assert convert.kv_path_from_proto(prefill_pb2.KV_PATH_UNSPECIFIED) is KVPath.A
    with pytest.raises(ValueError, match="unknown kv_path 99"):
        convert.kv_path_from_proto(99)


def test_engine_status_round_trip() -> None:
    status = EngineStatus(
        "p1", Role.PREFILL, "127.0.0.1:7001", "fp", 16, model_name="m", running=2, waiting=1,
        free_kv_blocks=10, total_kv_blocks=20, vocab_size=100, max_context=64,
        nics=(NICStatus("snic", 400.0, 5, 1, 9), NICStatus("cnic")), kv_block_bytes=4096,
        unfinished_prefill_tokens=1234,
    )  # fmt: skip
    assert convert.engine_status_from_proto(convert.engine_status_to_proto(status)) == status


def test_prefill_request_and_result_round_trip() -> None:
    request = PrefillRequest(
        "r1", "s1", "acme", [1, 2, 3], SAMPLING, store_hit_blocks=2, decode_address="127.0.0.1:9",
        plan=LoadPlan(KVPath.SPLIT, relay_address="127.0.0.1:9", relay_blocks=1, relay_hbm_first=True), priority=1020,
        store_tail_tokens=7, service_rank=12,
    )  # fmt: skip
    assert convert.prefill_request_from_proto(convert.prefill_request_to_proto(request)) == request
    result = PrefillResult(5, 3, 2, 1, 2, 1, 3, False, "", KVPath.B, 2, 300, 1, True)
    assert convert.prefill_result_from_proto(convert.prefill_result_to_proto(result)) == result
    # Halves are exact in the wire's float32.
    with_logprob = dataclasses.replace(result, first_logprob=TokenLogprob(5, -0.5, ((5, -0.5), (9, -1.25))))
    assert convert.prefill_result_from_proto(convert.prefill_result_to_proto(with_logprob)) == with_logprob


def test_a_relayed_plan_without_a_relay_is_rejected_on_the_way_in() -> None:
    msg = convert.prefill_request_to_proto(PrefillRequest("r", "s", "t", [1], SAMPLING))
    msg.kv_path = prefill_pb2.KV_PATH_B
    with pytest.raises(ValueError, match="needs a relay_address"):
        convert.prefill_request_from_proto(msg)


def test_generate_request_and_chunk_round_trip() -> None:
    request = GenerateRequest("r1", "s1", "acme", [1, 2, 3, 4], 3, SAMPLING, priority=-70)
    assert convert.generate_request_from_proto(convert.generate_request_to_proto(request)) == request
    chunk = GenerateChunk([4, 5], finished=True, finish_reason="stop", cached_tokens=16, persisted_blocks=2)
    assert convert.generate_chunk_from_proto(convert.generate_chunk_to_proto(chunk)) == chunk
    logprobs = [TokenLogprob(4, -0.25), TokenLogprob(5, -2.0, ((6, -0.5),))]
    chunk = GenerateChunk([4, 5], logprobs=logprobs)
    assert convert.generate_chunk_from_proto(convert.generate_chunk_to_proto(chunk)) == chunk


def test_sampling_round_trip_carries_min_tokens_and_logprobs() -> None:
    for logprobs in (None, 0, 5):
        params = SamplingParams(max_tokens=9, min_tokens=4, logprobs=logprobs, ignore_eos=True, seed=3)
        assert convert.sampling_from_proto(convert.sampling_to_proto(params)) == params


def test_turn_chunk_carries_every_metadata_field() -> None:
    meta = TurnMeta("t", 1, 40, 32, "p0", "d0", "ab" * 16, "SPLIT", 2, 1, 3, 300, 1, relay_engine="d1")
    chunk = convert.turn_chunk_to_proto(TurnEvent([7], "x", meta, True, "stop", 1))
    assert (chunk.metadata.kv_path, chunk.metadata.handoff_held_blocks, chunk.finish_reason) == ("SPLIT", 1, "stop")
    assert {f.name: getattr(chunk.metadata, f.name) for f in chunk.metadata.DESCRIPTOR.fields} == meta.__dict__
    assert not convert.turn_chunk_to_proto(TurnEvent([7])).HasField("metadata")
    with_logprobs = convert.turn_chunk_to_proto(TurnEvent([7], logprobs=[TokenLogprob(7, -0.5, ((7, -0.5),))]))
    assert [convert.logprob_from_proto(e) for e in with_logprobs.logprobs] == [TokenLogprob(7, -0.5, ((7, -0.5),))]


def test_tool_call_round_trip() -> None:
    call = ToolCall("s", "search", "c1", 12.5, 0.25, 0.75, False)
    assert convert.tool_call_from_proto(convert.tool_call_to_proto(call)) == call


@pytest.mark.parametrize("hint", [KVHint(), KVHint(priority=-3, next_use_in_s=0.0, pin_s=12.5)])
def test_kv_hint_round_trip(hint) -> None:
    ids = [b"\x01" * 16, b"\x02" * 16]
    assert convert.kv_hint_from_proto(convert.kv_hint_to_proto(ids, hint)) == (ids, hint)


def test_a_kv_hint_out_of_range_is_rejected_naming_the_field() -> None:
    from agentserve.v1 import decode_pb2

    with pytest.raises(ValueError, match=r"^HintKVRequest\.pin_s must be in \[0, 3600\] seconds, got -1\.0$"):
        convert.kv_hint_from_proto(decode_pb2.HintKVRequest(pin_s=-1.0))
    with pytest.raises(ValueError, match=r"^HintKVRequest\.next_use_in_s must be a finite number"):
        convert.kv_hint_from_proto(decode_pb2.HintKVRequest(next_use_in_s=float("inf")))
