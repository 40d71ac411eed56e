"""EmulatedModel: what an emulated-compute engine has in place of a model.

No weights are loaded. The vocabulary (size, EOS/BOS ids) is the tokenizer model's, so the
scheduler's tokenizer and the engines agree on token ids; the layers and context length are the
target model's; KV blocks have the stand-in geometry of `emulated_pool`. The fingerprint names
all of that, so emulated blocks never meet a real model's (or another emulation's) in the store.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import torch

from agentserve.costmodel.models import KVDtype
from agentserve.costmodel.timing import ComputeCost
from agentserve.engine.config import ModelConfig
from agentserve.engine.emulated_pool import STANDIN_DTYPE, EmulatedKVPool, StandinGeometry
from agentserve.engine.emulation_config import EmulationConfig


@dataclass(frozen=True)
class EmulatedModel:
    config: ModelConfig  # the stand-in: the tokenizer's vocabulary, the target's layers and context
    emulation: EmulationConfig
    cost: ComputeCost
    geometry: StandinGeometry
    num_blocks: int  # `emulation.kv_blocks`, or what the target GPU holds (agentserve.costmodel.kv_capacity)

    @classmethod
    def build(
        cls, emulation: EmulationConfig, vocabulary: ModelConfig, block_size: int, kv_dtype: KVDtype = "auto"
    ) -> EmulatedModel:
        """`vocabulary`: the config.json of the model whose tokenizer the cluster uses (weights unread);
        `kv_dtype`: the engine's, which sets the target KV bytes its blocks are charged."""
        cost = emulation.cost(kv_dtype)
        geometry = StandinGeometry.for_target(cost.model, block_size, emulation.kv_materialise_bytes)
        config = ModelConfig(
            model_type="llama",
            vocab_size=vocabulary.vocab_size,
            hidden_size=geometry.head_dim,
            intermediate_size=geometry.head_dim,
            num_hidden_layers=geometry.layers,
            num_attention_heads=1,
            num_key_value_heads=1,
            head_dim=geometry.head_dim,
            max_position_embeddings=emulation.context_limit,
            bos_token_id=vocabulary.bos_token_id,
            eos_token_id=vocabulary.eos_token_id,
            torch_dtype="float16",
        )
        return cls(config, emulation, cost, geometry, emulation.pool_blocks(block_size, kv_dtype))

    @property
    def fingerprint(self) -> str:
        # What a block means (the target, the stand-in geometry, the token ids), not how fast it is
        # made: engines at another time dilation or efficiency share the store's blocks.
        doc = {"target": self.cost.model.key, "config": self.config.to_dict(), "geometry": asdict(self.geometry)}
        return "emu-" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def dtype(self) -> torch.dtype:
        return STANDIN_DTYPE

    def pool(self) -> EmulatedKVPool:
        return EmulatedKVPool(self.geometry, self.num_blocks)
