"""LLMEngine: continuous batching with a hashed prefix cache over a paged KV pool.

One step either admits (prefills) waiting sequences or decodes every running one, the nano-vllm
schedule: prefill first keeps time to first token low, and a decode batch of any mix of context
lengths runs as one forward pass. Which waiting sequences one step prefills is the config's
`prefill_batching` policy (`engine.prefill_batch`): the oldest alone, or the oldest up to a compute
quota; a batch stops at the first sequence the pool cannot admit and passes over one whose external
KV has not delivered layer 0 yet (or, while another waiting prefill needs no KV still arriving, one
whose external KV has not all arrived); its members are admitted (slots taken) before the first
forward.

Layerwise prefill (`layerwise: true`): a prefill-only sequence (max_tokens 1, a prefill engine's
request) whose cached prefix comes from outside (`ExternalPrefix`) gives the external blocks no
pool slots. Each layer's prefix is staged just before the layer runs (`ModelRunner.prefill_staged`),
so the prefill holds ~1/num_layers of its cached KV, and admission counts it so: ceil(blocks /
layers) staging slots beside the new blocks. The external blocks are not cached here afterwards.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from pathlib import Path

import torch

from agentserve.contracts import SamplingParams
from agentserve.contracts.segments import SegmentedPrompt
from agentserve.engine.config import ModelConfig, parse_dtype
from agentserve.engine.device import place_model
from agentserve.engine.emulated_model import EmulatedModel
from agentserve.engine.emulated_pool import EmulatedKVPool
from agentserve.engine.emulated_runner import DecodeStepCost, EmulatedRunner
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.expert_placement import ExpertPlacement
from agentserve.engine.grammar import GrammarCompiler
from agentserve.engine.kv_pool import KVPool
from agentserve.engine.loader import load_model
from agentserve.engine.model import CausalLM
from agentserve.engine.runner import ExternalPrefix, LayerLoadError, ModelRunner
from agentserve.engine.sampling import make_generator, sample, suppress, token_logprob
from agentserve.engine.segmented_prefill import SegmentedPrefill
from agentserve.engine.sequence import Sequence, SequenceStatus
from agentserve.engine.shared_context import PrefixKV
from agentserve.engine.speculative.acceptance import verify_token
from agentserve.engine.speculative.speculator import Speculator, make_drafter
from agentserve.kv import block_hash
from agentserve.kv.block_format import deserialize_blocks, serialize_blocks
from agentserve.kv.block_hash import compute_block_id
from agentserve.kv.block_manager import BlockManager
from agentserve.kv.eviction import Hint
from agentserve.model_files.gguf_folder import model_folder

log = logging.getLogger(__name__)


@dataclass
class PrefillPlan:
    """How one admitted sequence is prefilled: its resident hits, the external prefix used (if any)
    and, for a staged (layerwise) prefill, the slots it holds until the forward ends."""

    hits: int  # leading blocks resident in the pool
    external: ExternalPrefix | None = None
    staged: bool = False
    slots: list[int] = field(default_factory=list)  # staged: resident hits, then the new blocks
    staging: list[int] = field(default_factory=list)  # staged: slots charged for one layer of the prefix
    # A resident tail (`LLMEngine._resident_plan`) continuing the hits: its id and its tokens, copied
    # into the sequence's next block at admission (the cached tail stays for others).
    tail_id: bytes | None = None
    tail_tokens: int = 0

    def cached_tokens(self, block_size: int) -> int:
        if self.external is not None:
            return self.external.num_tokens(block_size)
        return self.hits * block_size + self.tail_tokens


class LLMEngine:
    def __init__(
        self,
        model: CausalLM | EmulatedModel,
        fingerprint: str,
        config: EngineConfig = EngineConfig(),
        grammars: GrammarCompiler | None = None,
        decode_cost: DecodeStepCost | None = None,
    ):
        """`grammars` compiles structured-output grammars with the model's tokenizer; without it
        (an engine built from weights alone) requests with structured output are refused. An
        `EmulatedModel` (see `emulated`) gets the emulated pool and runner, whose decode steps
        take `decode_cost`'s time (default: the model's); the rest is shared."""
        self.model = model
        self.model_config: ModelConfig = model.config
        self.fingerprint = fingerprint
        self.config = config
        self.block_size = config.block_size
        self.pool: KVPool | EmulatedKVPool
        self.runner: ModelRunner | EmulatedRunner
        if isinstance(model, EmulatedModel):
            self.dtype = model.dtype
            self.pool = model.pool()
            self.runner = EmulatedRunner(model, self.pool, decode_cost=decode_cost)
        else:
            self.dtype = parse_dtype(config.dtype)
            device = config.torch_device
            model = self.model = place_model(model, device)  # weights where the pool is (`engine.device`)
            self.pool = KVPool.for_budget(
                self.model_config, config.kv_cache_bytes, config.block_size, self.dtype, config.fp8_kv, device
            )
            self.runner = ModelRunner(model, self.pool, config.batch_invariant)
            if config.expert_placement:
                _place_experts(model, config.expert_placement)
        self.segmented: SegmentedPrefill | None = None
        # A segmented prefill blends masters' KV computed outside the pool; with FP8 KV its prompts
        # run as plain prompts, so every row the engine attends over is on the FP8 grid. The blend
        # builds its KV on the host, so off the CPU they run as plain prompts too.
        on_cpu = isinstance(self.pool, KVPool) and self.pool.device.type == "cpu"
        if isinstance(model, CausalLM) and isinstance(self.pool, KVPool) and not config.fp8_kv and on_cpu:
            self.segmented = SegmentedPrefill(model, self.pool, config.reuse_max_deviation)
        self.blocks = BlockManager(self.pool.num_slots, config.block_size, config.eviction_policy)
        self.speculator: Speculator | None = None
        if config.speculative.enabled and isinstance(model, CausalLM) and isinstance(self.pool, KVPool):
            drafter = make_drafter(config.speculative, model, self.pool, config.batch_invariant)
            self.speculator = Speculator(config.speculative, drafter, self.blocks, config.block_size)
        self.batch_policy = config.prefill_batch_policy()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._external: dict[str, ExternalPrefix] = {}
        self._segments: dict[str, tuple[SegmentedPrompt, PrefixKV | None]] = {}
        self.num_preemptions = 0
        self.grammars = grammars
        if config.num_threads:
            torch.set_num_threads(config.num_threads)

    @classmethod
    def from_dir(cls, model_dir: str | Path, config: EngineConfig = EngineConfig()) -> LLMEngine:
        model_dir = model_folder(model_dir)  # a GGUF file loads through its converted folder
        model, fingerprint = load_model(model_dir, config.dtype)
        tokenizer_file = model_dir / "tokenizer.json"
        grammars = None
        if tokenizer_file.is_file():
            grammars = GrammarCompiler(tokenizer_file, model.config.vocab_size, model.config.eos_token_id)
        return cls(model, fingerprint, config, grammars)

    @classmethod
    def emulated(
        cls, vocabulary_dir: str | Path, config: EngineConfig, decode_cost: DecodeStepCost | None = None
    ) -> LLMEngine:
        """An emulated-compute engine (`config.emulation`); `vocabulary_dir` is the model folder
        whose config.json gives the token ids (its weights are not read). `decode_cost`: its
        decode steps' time, if not the target model's `ComputeCost`."""
        vocabulary = ModelConfig.from_file(model_folder(vocabulary_dir) / "config.json")
        model = EmulatedModel.build(config.emulation, vocabulary, config.block_size, config.kv_dtype)
        return cls(model, model.fingerprint, config, decode_cost=decode_cost)

    @classmethod
    def for_config(cls, model_dir: str | Path, config: EngineConfig) -> LLMEngine:
        """The engine `config.compute` asks for: the model in `model_dir`, or its emulation."""
        return cls.emulated(model_dir, config) if config.compute == "emulated" else cls.from_dir(model_dir, config)

    # ---- requests -------------------------------------------------------------------------

    def validate(self, prompt_token_ids: Seq[int], params: SamplingParams) -> None:
        """Raise ValueError for input the engine cannot serve, before any state changes."""
        if len(prompt_token_ids) == 0:
            raise ValueError("prompt is empty: at least one token is required")
        vocab = self.model_config.vocab_size
        if not _plain_ids_below(prompt_token_ids, vocab):  # the loop only runs to name the bad token
            for i, tok in enumerate(prompt_token_ids):
                if not isinstance(tok, int) or isinstance(tok, bool) or not 0 <= tok < vocab:
                    raise ValueError(f"token id {tok!r} at position {i} is out of range for vocab size {vocab}")
        total = len(prompt_token_ids) + params.max_tokens
        limit = self.model_config.max_position_embeddings
        if total > limit:
            raise ValueError(
                f"prompt ({len(prompt_token_ids)} tokens) + max_tokens ({params.max_tokens}) = {total} "
                f"exceeds the model's context length {limit}"
            )
        blocks = -(-total // self.block_size)
        if blocks > self.pool.num_slots:
            raise ValueError(f"request needs {blocks} KV blocks but the pool holds only {self.pool.num_slots}")
        if params.structured is not None:
            self._grammars().compile(params.structured)  # compiled once here, cached for the sequence

    def add_request(  # noqa: PLR0913 - a request's options, keyword defaults; PrefillRequest's fields
        self,
        prompt_token_ids: Seq[int],
        params: SamplingParams,
        tenant_salt: str = "",
        external_prefix: ExternalPrefix | None = None,
        generated: int = 0,
        segments: SegmentedPrompt | None = None,
        priority: int = 0,
        seal_tail: bool = False,
        rank: int = 0,
        segment_prefix: PrefixKV | None = None,
        exact_prefix: bool = True,
    ) -> Sequence:
        """Queue a request, after the waiting ones of a higher `priority`, or of its own and a
        `rank` no higher (lower ranks first among equal priorities). The last `generated`
        prompt tokens are output another engine already produced (a decode after its prefill): a
        grammar replays them before constraining more. `segments` (the same tokens as the prompt)
        lets the prefill reuse its shared blocks (`segmented_prefill`); an EXACT one, or one the
        engine cannot reuse on, is a plain prompt. `seal_tail`: when the sequence finishes, its
        partial last block is cached under its tail id (`Sequence.tail_id`), for the caller to
        persist before it is evicted. `segment_prefix`: with reusing `segments`, the KV of the
        prompt's first tokens, restored from the store (only the tokens after it run).
        `exact_prefix` False: `external_prefix` holds reused KV (TokenDance), not a full
        recompute's: the sequence takes no resident hit and none of its blocks is cached under
        the chained ids, which promise exact KV (`Sequence.exact_kv`)."""
        tokens = list(prompt_token_ids)
        self.validate(tokens, params)
        if segments is not None and segments.token_ids != tokens:
            raise ValueError("segments must hold exactly the prompt's tokens")
        if segments is not None and (external_prefix is not None or generated):
            raise ValueError("segments cannot be combined with an external prefix or generated tokens")
        if segment_prefix is not None and (segments is None or segments.reuse.exact):
            raise ValueError("a segment prefix needs segments that reuse")
        if not exact_prefix and external_prefix is None:
            raise ValueError("exact_prefix=False describes an external prefix: none was given")
        if external_prefix is not None and external_prefix.num_tokens(self.block_size) >= len(tokens):
            raise ValueError("external prefix must leave at least one prompt token to compute")
        if not 0 <= generated < len(tokens):
            raise ValueError(f"generated must be in [0, {len(tokens)}), got {generated}")
        seq = Sequence(
            tokens,
            len(tokens),
            params,
            tenant_salt=tenant_salt,
            generator=make_generator(params),
            priority=priority,
            rank=rank,
            seal_tail=seal_tail,
        )
        if params.structured is not None:
            seq.grammar = self._grammars().matcher(params.structured, tokens[len(tokens) - generated :])
        seq.exact_kv = exact_prefix
        if external_prefix is not None:
            self._external[seq.request_id] = external_prefix
        if segments is not None and self.segmented is not None and not segments.reuse.exact:
            self._segments[seq.request_id] = (segments, segment_prefix)
        self._enqueue(seq)
        return seq

    def _enqueue(self, seq: Sequence, front: bool = False) -> None:
        """Into `waiting`, ordered by priority (highest first), then rank (lowest first): behind
        its equals, or before them with `front` (a preempted or failed sequence goes back to the
        head of its class)."""
        key = (-seq.priority, seq.rank)
        index = len(self.waiting)
        for i, other in enumerate(self.waiting):
            other_key = (-other.priority, other.rank)
            if other_key > key or (front and other_key == key):
                index = i
                break
        self.waiting.insert(index, seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def abort(self, seq: Sequence) -> None:
        if seq in self.waiting:
            self.waiting.remove(seq)
        elif seq in self.running:
            self.running.remove(seq)
            self.blocks.free(seq.slots)
        self._finish(seq, "abort", free=False)

    # ---- scheduling ----------------------------------------------------------------------

    def step(self) -> list[Sequence]:
        """Run one step (a prefill batch or a decode forward); returns the sequences that received a token."""
        batch = self._admit_prefills()
        if batch:
            return [seq for seq, plan in batch if self._prefill(seq, plan)]
        if not self.running:
            return []
        self._reserve_decode_slots()
        if self.speculator is not None:
            return self._decode_speculative(list(self.running))
        logits = self.runner.decode(self.running)
        batch_seqs = list(self.running)
        for seq, row in zip(batch_seqs, logits):
            seq.num_computed = len(seq)
            self._seal_full_blocks(seq)
            self._append_token(seq, row)
        return batch_seqs

    def _decode_speculative(self, batch: list[Sequence]) -> list[Sequence]:
        """A decode step that verifies drafts (`engine.speculative`): one forward over every
        sequence's last token and draft; each sequence keeps its draft tokens up to the first the
        target rejects, plus the target's own token there (or after the whole draft), then gives
        back the slots of the positions it did not keep."""
        assert self.speculator is not None and isinstance(self.runner, ModelRunner)
        drafts = self.speculator.draft(batch)
        rows = self.runner.verify(batch, [draft.tokens for draft in drafts])
        for seq, seq_rows, draft in zip(batch, rows, drafts):
            kept = 0
            for j, row in enumerate(seq_rows):
                seq.num_computed = len(seq)  # the forward wrote the KV of every token so far
                self._seal_full_blocks(seq)
                accepted = self._append_token(seq, row, draft.at(j))
                kept += accepted
                if not accepted or seq.finished:
                    break
            self.speculator.roll_back(seq, len(draft.tokens), kept)
        return batch

    def _admit_prefills(self) -> list[tuple[Sequence, PrefillPlan]]:
        """Take waiting sequences in queue order (priority, then arrival) while the policy, the pool
        and their KV allow."""
        batch: list[tuple[Sequence, PrefillPlan]] = []
        taken_cost = 0.0
        plans = [(seq, self._plan(seq)) for seq in self.waiting]
        # A forward over a prefix still arriving holds the engine (no other sequence steps) until
        # its last layer is in: while a waiting prefill can run without waiting, those whose
        # prefix is still arriving are passed over too, keeping their place.
        arrived_only = any(plan.external is None or plan.external.arrived() for _, plan in plans)
        for seq, plan in plans:
            if len(self.running) + len(batch) >= self.config.max_batch_size:
                break
            external = plan.external
            if external is not None and not (external.arrived() if arrived_only else external.ready()):
                # Its layer 0 has not arrived (or, above, its last): the forward would only wait.
                # Those behind it go first, as they would if it were still loading outside the
                # engine; it keeps its place.
                continue
            cached = plan.cached_tokens(self.block_size)
            cost = self.batch_policy.cost(len(seq) - cached, cached)
            if not self.batch_policy.fits(len(batch), taken_cost, cost) or not self._admit(seq, plan):
                break
            self.waiting.remove(seq)
            batch.append((seq, plan))
            taken_cost += cost
        return batch

    def _plan(self, seq: Sequence) -> PrefillPlan:
        if seq.request_id in self._segments:
            self._extend_block_ids(seq)
            return PrefillPlan(0)  # the segmented prefill computes the whole prompt (private tokens included)
        external = self._external.get(seq.request_id)
        if not seq.exact_kv and external is not None:
            self._extend_block_ids(seq)
            return PrefillPlan(0, external)  # reused KV: every row from it, none from exact resident blocks
        hits = self._usable_hits(seq)
        # An external prefix helps only past the resident hits, and only if it starts at or before
        # them (blocks evicted since it was planned are recomputed instead: output stays exact).
        if (
            external is None
            or external.num_tokens(self.block_size) <= hits * self.block_size
            or external.first_block > hits
        ):
            return self._resident_plan(seq, hits)
        staged = self.config.layerwise and seq.params.max_tokens == 1
        return PrefillPlan(hits, external, staged)

    def _admit(self, seq: Sequence, plan: PrefillPlan) -> bool:
        """Check, then take the plan's slots; False (nothing taken) if the pool lacks room, counting
        the share held for critical sequences against a sequence below the critical priority."""
        keep = 0 if seq.priority >= self.config.critical_priority else self.critical_reserve()
        if not plan.staged:
            if plan.tail_id is not None and self.blocks.lookup(plan.tail_id) is None:
                # Evicted since it was planned (an earlier admission of this step took its slot):
                # its tokens are computed instead.
                plan.tail_id, plan.tail_tokens = None, 0
            # Pinned, a resident tail cannot be evicted by the allocation that makes room for its copy.
            tail = self.blocks.pin([plan.tail_id]) if plan.tail_id is not None else []
            try:
                if not self.blocks.can_allocate(len(seq), plan.hits, seq.block_ids, keep_free=keep):
                    return False
                seq.slots = self.blocks.allocate(seq.block_ids, len(seq), plan.hits).slots
                if tail:
                    self.pool.write_blocks([seq.slots[plan.hits]], *self.pool.read_blocks(tail))
            finally:
                self.blocks.free(tail)
            return True
        assert plan.external is not None
        num_new = -(-len(seq) // self.block_size) - plan.external.full_blocks
        num_staging = -(-plan.external.num_blocks // self.model_config.num_hidden_layers)
        if num_new + num_staging + keep > self.blocks.available_after(seq.block_ids[: plan.hits]):
            return False
        plan.slots = self.blocks.pin(seq.block_ids[: plan.hits]) + self.blocks.reserve(num_new)
        plan.staging = self.blocks.reserve(num_staging)
        return True

    def _usable_hits(self, seq: Sequence) -> int:
        self._extend_block_ids(seq)
        if not self.config.prefix_cache:
            return 0
        hits = self.blocks.cached_prefix(seq.block_ids)
        # The last prompt token must run to produce logits, so a fully cached prompt recomputes
        # its last block.
        return min(hits, (len(seq) - 1) // self.block_size)

    def _prefill(self, seq: Sequence, plan: PrefillPlan) -> bool:
        """Run an admitted sequence's prefill; False if its external KV failed to arrive (the
        sequence is back at the head of the queue, to be recomputed without it)."""
        self._external.pop(seq.request_id, None)
        external = plan.external
        segments = self._segments.pop(seq.request_id, None)
        seq.exact_kv = seq.exact_kv or external is None  # reused KV only where the external prefix is used
        seq.prefill_started_s = time.monotonic()
        try:
            if segments is not None:
                assert self.segmented is not None
                logits = self.segmented.prefill(seq, *segments)
            elif plan.staged:
                assert external is not None
                resident, new = plan.slots[: plan.hits], plan.slots[plan.hits :]
                logits = self.runner.prefill_staged(seq, resident, new, external)
            elif external is not None:
                logits = self.runner.prefill(seq, external.num_tokens(self.block_size), external, plan.hits)
            else:
                logits = self.runner.prefill(seq, plan.cached_tokens(self.block_size))
        except LayerLoadError as exc:
            log.warning("external KV of %s failed (%s); recomputing it", seq.request_id, exc)
            self.blocks.free(plan.slots + plan.staging if plan.staged else seq.slots)
            seq.slots = []
            self._enqueue(seq, front=True)
            return False
        seq.num_cached_tokens = plan.cached_tokens(self.block_size)
        seq.num_computed = len(seq)
        seq.status = SequenceStatus.RUNNING
        if plan.staged:
            self._release_staged(seq, plan)
        else:
            seq.num_sealed = plan.hits  # a hit is a sealed block already; only the blocks after it need sealing
            self.running.append(seq)
            self._seal_full_blocks(seq)
        self._append_token(seq, logits)
        return True

    def _release_staged(self, seq: Sequence, plan: PrefillPlan) -> None:
        """Seal a staged prefill's computed full blocks and free everything it held: it ends with
        this step (max_tokens 1), so it never runs with its external blocks missing from the pool."""
        assert plan.external is not None
        first_new = plan.external.full_blocks  # a tail's block is computed in the pool: a new block
        if self.config.prefix_cache:
            for i in range(first_new, len(seq) // self.block_size):
                self.blocks.seal(plan.slots[plan.hits + i - first_new], seq.block_ids[i])
        tail_at = plan.hits + seq.num_computed // self.block_size - first_new  # its last block's slot
        if seq.seal_tail and tail_at < len(plan.slots):  # freed here, before `_finish` would seal it
            self._seal_tail(seq, plan.slots[tail_at])
        self.blocks.free(plan.slots + plan.staging)
        seq.slots = []

    def critical_reserve(self) -> int:
        """Slots a sequence below the critical priority must leave free: what the critical ones
        still need to finish (waiting: all of it; running: their growth to max_tokens), up to the
        configured share of the pool. Sized by demand each time, and reserved progressively: no one
        is preempted to make it, slots freed by others are simply held back for it."""
        share = self.config.critical_reserve
        if not share:
            return 0
        demand = 0
        for seq in (*self.waiting, *self.running):
            if seq.priority >= self.config.critical_priority:
                final = len(seq) + seq.params.max_tokens - seq.num_output_tokens
                demand += max(0, -(-final // self.block_size) - len(seq.slots))
        return min(demand, int(share * self.blocks.num_slots))

    def _reserve_decode_slots(self) -> None:
        # Preempt the lowest-priority, newest sequences (recompute later) until every survivor has
        # room for its token.
        while True:
            need = sum(1 for s in self.running if len(s.slots) * self.block_size < len(s))
            if need <= self.blocks.num_free_slots or len(self.running) == 1:
                break
            lowest = min(s.priority for s in self.running)
            victim = next(s for s in reversed(self.running) if s.priority == lowest)
            self.running.remove(victim)
            self.num_preemptions += 1
            self.blocks.free(victim.slots)
            victim.slots, victim.num_computed, victim.num_sealed = [], 0, 0
            victim.status = SequenceStatus.WAITING
            self._enqueue(victim, front=True)
        for seq in self.running:
            self.blocks.append(seq.slots, len(seq))

    def _append_token(
        self, seq: Sequence, logits: torch.Tensor, draft: tuple[int, torch.Tensor | None] | None = None
    ) -> bool:
        """Sample `seq`'s next token from `logits`, or, for a drafted position, verify the draft's
        token and distribution (`speculative.acceptance`); True if the draft's token was kept."""
        p = seq.params
        shaped = logits
        if seq.grammar is not None:
            shaped = seq.grammar.mask(shaped)  # this row only: other sequences of the batch sample freely
        if seq.num_output_tokens < p.min_tokens:  # nothing that would stop the sequence, yet
            eos = () if p.ignore_eos else self.model_config.eos_token_id
            shaped = suppress(shaped, {*eos, *p.stop_token_ids})
        kept = False
        if draft is None:
            token = sample(shaped, p, seq.generator)
        else:
            token, kept = verify_token(shaped, *draft, p, seq.generator)
        if seq.grammar is not None:
            seq.grammar.accept(token)
        if p.logprobs is not None:
            seq.logprobs.append(token_logprob(logits, token, p.logprobs))
        seq.token_ids.append(token)
        if not p.ignore_eos and token in self.model_config.eos_token_id or token in p.stop_token_ids:
            self._finish(seq, "stop")
        elif seq.num_output_tokens >= p.max_tokens:
            self._finish(seq, "length")
        return kept

    def _finish(self, seq: Sequence, reason: str, free: bool = True) -> None:
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        if (
            free
            and self.config.prefix_cache
            and len(seq) % self.block_size == 0
            and len(seq.slots) * self.block_size >= len(seq)
        ):
            # The last sampled token completes a block: compute its KV too (one small forward) so
            # the next turn, whose prompt is this whole history, hits every full block.
            self.runner.decode([seq])
            seq.num_computed = len(seq)
            self._seal_full_blocks(seq)
        if free and seq.seal_tail:
            self._seal_tail(seq)
        if free and seq in self.running:
            self.running.remove(seq)
            if seq.priority:
                # Its cached blocks keep the session's priority: a hint-driven pool (`hinted`) evicts
                # a low-priority session's history before a critical one's (`lru` ignores it).
                self.blocks.hint(seq.block_ids[: seq.num_sealed], Hint(priority=seq.priority))
            self.blocks.free(seq.slots)
        self._external.pop(seq.request_id, None)
        self._segments.pop(seq.request_id, None)

    def _grammars(self) -> GrammarCompiler:
        if self.grammars is None:
            raise ValueError("structured output needs the model's tokenizer.json, which this engine was built without")
        return self.grammars

    # ---- prefix cache --------------------------------------------------------------------

    def _extend_block_ids(self, seq: Sequence) -> None:
        bs = self.block_size
        if not seq.block_ids:
            # A new prompt: hash all its blocks in one pass (tokens packed once), ~2x faster.
            seq.block_ids = block_hash.block_ids_for(seq.token_ids, bs, self.fingerprint, seq.tenant_salt)
            return
        for i in range(len(seq.block_ids), len(seq) // bs):
            parent = seq.block_ids[-1] if seq.block_ids else None
            seq.block_ids.append(
                compute_block_id(parent, self.fingerprint, seq.tenant_salt, seq.token_ids[i * bs : (i + 1) * bs])
            )

    def _seal_full_blocks(self, seq: Sequence) -> None:
        if not self.config.prefix_cache or not seq.exact_kv:
            return
        full = seq.num_computed // self.block_size
        if full <= seq.num_sealed:
            return
        self._extend_block_ids(seq)
        for i in range(seq.num_sealed, full):
            self.blocks.seal(seq.slots[i], seq.block_ids[i])
        seq.num_sealed = full

    def _seal_tail(self, seq: Sequence, slot: int | None = None) -> None:
        """Cache the KV of `seq`'s computed tokens past its last full block under their tail id, so
        the next turn over this context (or, handed off, the decode of this prompt) need not
        recompute them. Only the tail's id names the block: its other rows are no KV of any
        sequence, so no full block's id may. `slot`: the tail's, if not in `seq.slots`."""
        full, tail = divmod(seq.num_computed, self.block_size)
        if slot is None and len(seq.slots) > full:
            slot = seq.slots[full]
        if not self.config.prefix_cache or not seq.exact_kv or not tail or slot is None:
            return
        self._extend_block_ids(seq)
        seq.tail_id = self._tail_id(seq, full, seq.num_computed)
        self.blocks.seal(slot, seq.tail_id)

    def _tail_id(self, seq: Sequence, full: int, end: int) -> bytes:
        """The tail id of `seq`'s tokens [full * block_size, end), after its `full` full blocks."""
        parent = seq.block_ids[full - 1] if full else None
        return block_hash.tail_block_id(
            parent, self.fingerprint, seq.tenant_salt, seq.token_ids[full * self.block_size : end], self.block_size
        )

    def _resident_plan(self, seq: Sequence, hits: int) -> PrefillPlan:
        """`hits` resident blocks and, after them, a cached block holding every prompt token but the
        last (which must run for its logits), if there is one. Either the block those tokens begin,
        cached whole (a prompt of whole cached blocks: only its last token runs, not its last
        block), or their tail (what a decode engine finds when its prefill engine handed off the
        prompt's tail with the full blocks: it then computes only the first output token)."""
        known = len(seq) - 1
        tail = known - hits * self.block_size
        if not self.config.prefix_cache or hits != known // self.block_size or not tail:
            return PrefillPlan(hits)
        whole = seq.block_ids[hits] if len(seq.block_ids) > hits else None
        for block_id in (whole, self._tail_id(seq, hits, known)):
            if block_id is not None and self.blocks.lookup(block_id) is not None:
                return PrefillPlan(hits, tail_id=block_id, tail_tokens=tail)
        return PrefillPlan(hits)

    def kv_ids(self, seq: Sequence) -> list[bytes]:
        """Ids of the KV a finished `seq` left cached: its computed full blocks' (the prompt's, and
        the block its first token completed, if it did) and its tail's (`seal_tail`)."""
        self._extend_block_ids(seq)
        full = seq.block_ids[: seq.num_computed // self.block_size]
        return full + ([seq.tail_id] if seq.tail_id is not None else [])

    def block_ids_for(self, token_ids: Seq[int], tenant_salt: str = "") -> list[bytes]:
        seq = Sequence(list(token_ids), len(token_ids), SamplingParams(), tenant_salt=tenant_salt)
        self._extend_block_ids(seq)
        return seq.block_ids

    def export_blocks(self, block_ids: Seq[bytes], kv_dtype: str | None = None) -> bytearray:
        """Serialize resident blocks (wire/disk format, no extra copy); ValueError if one is not resident.

        `kv_dtype` (block format) defaults to the engine's: FP8 bytes and scales for an FP8 engine,
        which carry its pool's values exactly (`kv_pool`)."""
        slots = []
        for i, block_id in enumerate(block_ids):
            slot = self.blocks.lookup(block_id)
            if slot is None:
                raise ValueError(f"block {i} ({block_id.hex()}) is not resident in this engine")
            slots.append(slot)
        k, v = self.pool.read_blocks(slots)
        kv_dtype = kv_dtype or self.config.block_kv_dtype
        return serialize_blocks(k, v, block_ids=list(block_ids), fingerprint=self.fingerprint, kv_dtype=kv_dtype)

    def import_blocks(self, data: bytes | memoryview) -> int:
        """Insert serialized blocks into the prefix cache (as evictable cached blocks).

        Returns how many were new. Rejects blocks of another model or with bad checksums.
        """
        blocks = deserialize_blocks(data, expected_fingerprint=self.fingerprint, dtype=self.dtype)
        ids = blocks.header.block_ids
        new = [i for i, block_id in enumerate(ids) if self.blocks.lookup(block_id) is None]
        if not new:
            return 0
        new_ids = [ids[i] for i in new]
        if not self.blocks.can_allocate(len(new) * self.block_size, 0, new_ids):
            raise RuntimeError(f"no room in the KV pool for {len(new)} imported blocks")
        slots = self.blocks.allocate(new_ids, len(new) * self.block_size, 0).slots
        index = torch.as_tensor(new, dtype=torch.long)
        self.pool.write_blocks(slots, blocks.k.index_select(1, index), blocks.v.index_select(1, index))
        for slot, i in zip(slots, new):
            self.blocks.seal(slot, ids[i])
        self.blocks.free(slots)
        return len(new)

    # ---- convenience ---------------------------------------------------------------------

    def generate(
        self,
        prompt_token_ids: Seq[int],
        params: SamplingParams,
        tenant_salt: str = "",
        external_prefix: ExternalPrefix | None = None,
    ) -> Sequence:
        return self.generate_many([prompt_token_ids], params, tenant_salt, [external_prefix])[0]

    def generate_many(
        self,
        prompts: Iterable[Seq[int]],
        params: SamplingParams,
        tenant_salt: str = "",
        external_prefixes: list[ExternalPrefix | None] | None = None,
    ) -> list[Sequence]:
        prompts = list(prompts)
        externals = external_prefixes or [None] * len(prompts)
        seqs = [self.add_request(p, params, tenant_salt, e) for p, e in zip(prompts, externals)]
        while not all(s.finished for s in seqs):
            self.step()
        return seqs


def _place_experts(model: CausalLM, path: str) -> None:
    """`EngineConfig.expert_placement`: the router splits replicated experts' tokens over replicas."""
    if model.expert_load is None:
        raise ValueError(f"expert_placement={path!r} needs a MoE model (qwen2_moe, qwen3_moe, mixtral)")
    model.expert_load.place(ExpertPlacement.read(path))


def _plain_ids_below(token_ids: Seq[int], vocab: int) -> bool:
    """Every id a plain int in [0, vocab): three C-speed passes, ~5x faster than a Python loop."""
    return set(map(type, token_ids)) == {int} and min(token_ids) >= 0 and max(token_ids) < vocab
