"""ModelConfig: the subset of a Hugging Face `config.json` the engine runs on.

Parsed once at load time and validated with clear errors, so a malformed or unsupported checkpoint
fails at start-up rather than deep inside a forward pass.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from agentserve.engine.moe_config import MOE_MODEL_TYPES, MoeConfig

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", *MOE_MODEL_TYPES)
QK_NORM_MODEL_TYPES = ("qwen3_moe",)

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    """Map 'fp32'/'bf16'/'fp16' (or HF's long names) to a torch dtype."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return DTYPES[str(name).lower()]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r}; choose one of fp32, bf16, fp16") from None


def dtype_name(dtype: torch.dtype) -> str:
    return {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]


@dataclass(frozen=True)
class ModelConfig:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = None
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # q/k/v bias (always on for qwen2)
    mlp_bias: bool = False
    bos_token_id: int | None = None
    eos_token_id: tuple[int, ...] = field(default_factory=tuple)
    torch_dtype: str = "float32"
    moe: MoeConfig | None = None  # set for the MoE model types, None for the dense ones

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"unsupported model_type {self.model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
            )
        for name in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"config.{name} must be a positive integer, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in ("default", "llama3", "linear"):
                raise ValueError(f"unsupported rope_scaling type {kind!r}; supported: default, llama3, linear")
        if (self.moe is not None) != (self.model_type in MOE_MODEL_TYPES):
            raise ValueError(f"model_type {self.model_type!r} {'needs' if self.moe is None else 'takes no'} MoE fields")

    @property
    def qk_norm(self) -> bool:
        """Whether attention normalises each head's q and k (RMSNorm over head_dim) before RoPE."""
        return self.model_type in QK_NORM_MODEL_TYPES

    @property
    def kv_heads_per_group(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    def kv_bytes_per_token(self, dtype: torch.dtype) -> int:
        """K and V for every layer of one token."""
        elem = torch.empty((), dtype=dtype).element_size()
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * elem

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        model_type = raw.get("model_type")
        if model_type is None:
            raise ValueError("config.json has no model_type")
        try:
            hidden = int(raw["hidden_size"])
            heads = int(raw["num_attention_heads"])
            layers = int(raw["num_hidden_layers"])
            moe = MoeConfig.from_dict(model_type, raw, layers) if model_type in MOE_MODEL_TYPES else None
            eos = raw.get("eos_token_id")
            eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
            rope_theta = raw.get("rope_theta")
            rope_scaling = raw.get("rope_scaling")
            # transformers >= 5 writes rope settings under `rope_parameters`.
            params = raw.get("rope_parameters")
            if isinstance(params, dict):
                rope_theta = params.get("rope_theta", rope_theta)
                if params.get("rope_type", "default") != "default":
                    rope_scaling = params
            return cls(
                model_type=model_type,
                vocab_size=int(raw["vocab_size"]),
                hidden_size=hidden,
                intermediate_size=int(raw["intermediate_size"]),
                num_hidden_layers=layers,
                num_attention_heads=heads,
                num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
                head_dim=int(raw.get("head_dim") or hidden // heads),
                rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
                rope_theta=float(rope_theta if rope_theta is not None else 10000.0),
                rope_scaling=rope_scaling,
                max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
                tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
                attention_bias=_attention_bias(model_type, raw),
                mlp_bias=bool(raw.get("mlp_bias", False)),
                bos_token_id=raw.get("bos_token_id"),
                eos_token_id=eos_ids,
                torch_dtype=str(raw.get("torch_dtype") or raw.get("dtype") or "float32"),
                moe=moe,
            )
        except KeyError as exc:
            raise ValueError(f"config.json is missing required field {exc.args[0]!r}") from None

    @classmethod
    def from_file(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"no config.json at {path}")
        try:
            raw = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        return cls.from_dict(raw)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["eos_token_id"] = list(self.eos_token_id)
        if self.moe is None:
            # Dense configs serialise as before, so their fingerprints do not change.
            del out["moe"]
        return out


def _attention_bias(model_type: str, raw: dict[str, Any]) -> bool:
    """q/k/v biases: always on for qwen2, `qkv_bias` (default on) for qwen2_moe, `attention_bias`
    (default off) for the others."""
    if model_type == "qwen2":
        return True
    if model_type == "qwen2_moe":
        return bool(raw.get("qkv_bias", True))
    return bool(raw.get("attention_bias", False))
