"""The default model's tokenizer files: a byte-level BPE trained on the shipped corpus, its configs.

Written by `engine.model_init` into every default model folder, and on their own for a process that
needs only the tokenizer (the scheduler), byte for byte the same.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from agentserve.model_files.presets import (
    BOS,
    BOS_ID,
    CHAT_TEMPLATE,
    EOS,
    IM_END,
    IM_START,
    PAD,
    PAD_ID,
    SPECIAL_TOKENS,
    STOP_IDS,
    ModelPreset,
    get_preset,
)


def models_home() -> Path:
    return Path(os.environ.get("AGENTSERVE_HOME", Path.home() / ".cache" / "agentserve")) / "models"


def write_tokenizer_files(out: Path, spec: ModelPreset) -> None:
    """tokenizer.json, its configs and generation_config.json into the folder `out`."""
    # The trainer never exceeds vocab_size; a corpus too small for the preset leaves spare embedding rows.
    train_tokenizer(spec.vocab_size).save(str(out / "tokenizer.json"), pretty=True)
    write_json(out / "tokenizer_config.json", tokenizer_config(spec))
    write_json(out / "special_tokens_map.json", special_tokens_map())
    write_json(
        out / "generation_config.json", {"bos_token_id": BOS_ID, "eos_token_id": STOP_IDS, "pad_token_id": PAD_ID}
    )


def ensure_default_tokenizer(preset: str = "tiny") -> Path:
    """A folder with only the default model's tokenizer files, written once and then reused."""
    target = models_home() / f"tokenizer-{preset}-{files_digest()}"
    return build_once(target, "tokenizer.json", lambda staging: write_tokenizer_files(staging, get_preset(preset)))


def build_once(target: Path, marker: str, build: Callable[[Path], object]) -> Path:
    """`target`, first built by `build(staging)` unless its `marker` file exists.

    Built in a temporary folder and renamed into place, so a crash mid-write never leaves a
    half-written folder that later runs would load.
    """
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(staging)
        try:
            staging.rename(target)
        except OSError:  # another process won the race; its copy is identical
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


def files_digest(*extra: Path) -> str:
    """Changes whenever these files' generator or the corpus changes (or any of `extra`), so a
    stale cached folder is never reused."""
    h = hashlib.sha256()
    for path in (
        Path(__file__),
        Path(__file__).parent / "presets.py",
        Path(__file__).parent / "data" / "corpus.txt",
        *extra,
    ):
        h.update(path.read_bytes())
    return h.hexdigest()[:10]


def write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def train_tokenizer(vocab_size: int) -> Tokenizer:
    """Byte-level BPE trained on the shipped corpus; the specials take ids 0..4.

    The trainer is deterministic: pair-count ties break on token ids and the initial alphabet is
    sorted, so neither rayon's thread count nor Rust's per-process hash seeds change the result
    (checked by hand with RAYON_RS_NUM_CPUS=1 vs 2 in separate processes; the tests repeat in-process).
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus_blocks(), trainer)
    return tokenizer


def _corpus_blocks() -> list[str]:
    text = resources.files("agentserve.model_files").joinpath("data", "corpus.txt").read_text(encoding="utf-8")
    # Blocks keep their separator so newline/indent runs are learned as they appear in chats.
    return [block + "\n\n" for block in text.split("\n\n")]


def tokenizer_config(spec: ModelPreset) -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": PAD,
        # HF only skips tokens it knows are special; listing the chat markers keeps its decode equal to ours.
        "additional_special_tokens": [IM_START, IM_END],
        "extra_special_tokens": [IM_START, IM_END],
        "model_max_length": spec.max_position_embeddings,
        # Decoding must be the exact inverse of encoding; HF's cleanup would drop spaces before punctuation.
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(i): {
                "content": tok,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, tok in enumerate(SPECIAL_TOKENS)
        },
        "chat_template": CHAT_TEMPLATE,
    }


def special_tokens_map() -> dict[str, Any]:
    return {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "additional_special_tokens": [IM_START, IM_END]}
