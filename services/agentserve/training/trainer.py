"""Train the default model on the shipped corpus, on the CPU, deterministically.

Starts from the seed-0 random weights `agentserve model init --random-weights` writes (or, with
`init_from="trained"`, the preset's shipped trained weights), and trains on the corpus's training
blocks (`corpus.split_corpus`), with `agent_transcripts` generated agent exchanges
(`agent_transcripts`) mixed in, packed into windows of `seq_len + 1` tokens: AdamW, linear warm-up
then cosine decay, gradient clipping. Everything that could vary between runs is pinned: seeds,
data order (one seeded generator), deterministic kernels and the thread count (a GEMM's summation
order depends on it). Same config, torch and CPU kernels: same bytes.

The shipped weights came from the defaults:
`agentserve model train --out services/agentserve/model_files/data/tiny-trained.fp16.safetensors`
(307K tokens seen, ~4.5 passes over the training blocks): 2 minutes on 2 otherwise idle cores, 16
on 2 cores shared with other jobs, the same bytes every time. The tiny MoE's came from
`agentserve model train --model-type mixtral --steps 50 --warmup-steps 5 --out
services/agentserve/model_files/data/tiny-mixtral-trained.fp16.safetensors` (docs/moe.md). The tiny
agent weights came from two runs, the second starting from the first's file:
`agentserve model train --init-from trained --agent-transcripts 800 --seq-len 768 --steps 120
--warmup-steps 10 --lr 1e-3 --min-lr 1e-4 --out FILE`, then `agentserve model train --init-from
agent --data-seed 1 --agent-transcripts 800 --seq-len 768 --steps 100 --warmup-steps 5 --lr 1e-3
--min-lr 5e-5 --out FILE`, FILE being services/agentserve/model_files/data/tiny-agent.fp16.safetensors:
windows long enough to hold a whole tool-calling request, a lower rate than from scratch as they
start from trained weights, and the second run on transcripts of another seed.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors.torch import save

from agentserve.engine.config import ModelConfig
from agentserve.engine.model_init import init_weights, model_config, trained_weights
from agentserve.model_files.presets import get_preset
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.model_files.tokenizer_files import ensure_default_tokenizer
from agentserve.training.agent_transcripts import agent_transcripts
from agentserve.training.corpus import sample_tokens, split_corpus, token_stream, transcript_tokens
from agentserve.training.forward import TrainingForward, Weights

# The shipped weights are stored in fp16: half the bytes of fp32, and for weights of this size
# (|w| well inside fp16's range) 3 more mantissa bits than bf16.
SHIPPED_DTYPE = torch.float16


@dataclass(frozen=True)
class TrainConfig:
    preset: str = "tiny"
    model_type: str = "llama"  # or mixtral: the preset's mixture-of-experts variant (`model_init`)
    router_aux_coef: float = 0.01  # mixtral's load-balancing term (`forward.TrainingForward`)
    init_seed: int = 0  # the random weights training starts from
    data_seed: int = 0  # window offsets and order
    steps: int = 300
    batch_size: int = 4
    seq_len: int = 256
    lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 15
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    threads: int = 2
    # "seed": the random weights of init_seed; "trained" / "agent": the preset's shipped trained /
    # agent weights (`presets.TRAINED_WEIGHTS`, `presets.AGENT_WEIGHTS`).
    init_from: str = "seed"
    agent_transcripts: int = 0  # drawn agent exchanges (`agent_transcripts`) mixed into the corpus

    def __post_init__(self) -> None:
        get_preset(self.preset)
        if self.model_type not in ("llama", "mixtral"):
            raise ValueError(f"model_type must be llama or mixtral, got {self.model_type!r}")
        for name in ("steps", "batch_size", "seq_len", "threads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.init_from not in ("seed", "trained", "agent"):
            raise ValueError(f"init_from must be seed, trained or agent, got {self.init_from!r}")
        if self.agent_transcripts < 0:
            raise ValueError(f"agent_transcripts must be >= 0, got {self.agent_transcripts}")
        if self.init_seed < 0 or self.data_seed < 0:
            raise ValueError("seeds must be non-negative")
        if not 0 < self.min_lr <= self.lr:
            raise ValueError(f"need 0 < min_lr <= lr, got min_lr={self.min_lr}, lr={self.lr}")
        if not 0 <= self.warmup_steps < self.steps:
            raise ValueError(f"warmup_steps must be in [0, steps), got {self.warmup_steps}")

    def lr_at(self, step: int) -> float:
        """Learning rate of 0-based `step`: linear warm-up, then cosine from lr down to min_lr."""
        if step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        progress = (step - self.warmup_steps) / max(1, self.steps - 1 - self.warmup_steps)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1 + math.cos(math.pi * progress))


@dataclass(frozen=True)
class TrainResult:
    weights: Weights
    losses: list[float]
    train_tokens: int  # tokens in the training split
    wall_s: float

    @property
    def final_loss(self) -> float:
        """Mean loss of the last 20 steps (one step's loss depends on its batch)."""
        tail = self.losses[-20:]
        return sum(tail) / len(tail)


def windows(stream: torch.Tensor, seq_len: int, gen: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless shuffled `[seq_len + 1]` windows; each pass over the data starts at a new offset."""
    while True:
        offset = int(torch.randint(seq_len, (1,), generator=gen))
        count = (len(stream) - offset - 1) // seq_len
        for i in torch.randperm(count, generator=gen).tolist():
            start = offset + i * seq_len
            yield stream[start : start + seq_len + 1]


@contextmanager
def pinned_kernels(threads: int) -> Iterator[None]:
    """Deterministic kernels on a fixed thread count, the process's settings restored after."""
    previous = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(previous[0])
        torch.use_deterministic_algorithms(previous[1])


def train(config: TrainConfig, log: Callable[[str], None] = print, log_every: int = 20) -> TrainResult:
    with pinned_kernels(config.threads):
        return _train(config, log, log_every)


def _train(config: TrainConfig, log: Callable[[str], None], log_every: int) -> TrainResult:
    spec = get_preset(config.preset)
    forward = TrainingForward(ModelConfig.from_dict(model_config(spec, config.model_type)), config.router_aux_coef)
    if config.init_from == "seed":
        start_weights = init_weights(spec, config.model_type, config.init_seed)
    else:
        start_weights = trained_weights(config.preset, config.model_type, agent=config.init_from == "agent")
    weights = {name: t.requires_grad_() for name, t in start_weights.items()}
    tokenizer = Tokenizer.from_dir(ensure_default_tokenizer(config.preset))
    stream = torch.tensor(training_stream(tokenizer, config))
    batches = windows(stream, config.seq_len, torch.Generator().manual_seed(config.data_seed))
    decay = [t for t in weights.values() if t.dim() >= 2]
    no_decay = [t for t in weights.values() if t.dim() < 2]  # norm scales
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=config.lr,
        betas=(0.9, 0.95),
    )
    log(f"training {config.preset} on {len(stream)} tokens: {asdict(config)}")
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(config.steps):
        for group in optimizer.param_groups:
            group["lr"] = config.lr_at(step)
        batch = torch.stack([next(batches) for _ in range(config.batch_size)])
        loss = forward.loss(weights, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(weights.values()), config.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        if (step + 1) % log_every == 0 or step + 1 == config.steps:
            elapsed = time.perf_counter() - start
            log(f"step {step + 1}/{config.steps} loss {losses[-1]:.4f} lr {config.lr_at(step):.2e} {elapsed:.0f}s")
    final = {name: t.detach() for name, t in weights.items()}
    return TrainResult(final, losses, len(stream), time.perf_counter() - start)


def training_stream(tokenizer: Tokenizer, config: TrainConfig) -> list[int]:
    """The corpus's training blocks in order; with agent transcripts, those and the blocks as one
    list of samples in an order drawn from data_seed, so every window mixes both kinds."""
    corpus = split_corpus().train
    if not config.agent_transcripts:
        return token_stream(tokenizer, corpus)
    samples = [sample_tokens(tokenizer, block) for block in corpus]
    samples += [transcript_tokens(tokenizer, t) for t in agent_transcripts(config.agent_transcripts, config.data_seed)]
    random.Random(config.data_seed).shuffle(samples)
    return [token for sample in samples for token in sample]


def save_weights(weights: Weights, path: str | Path) -> Path:
    """The weights as an fp16 safetensors file.

    Its metadata is `format` alone: safetensors writes metadata keys in hash-map order, which
    changes from run to run, so any second key would make equal weights differ in bytes.
    """
    data = save({name: t.to(SHIPPED_DTYPE).contiguous() for name, t in weights.items()}, metadata={"format": "pt"})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
