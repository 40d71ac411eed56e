"""Grammar-constrained decoding: one llguidance matcher per sequence, and the token mask it puts on logits.

`GrammarCompiler` (one per engine) holds llguidance's view of the model's tokenizer and compiles each
distinct StructuredOutput once: the compiled matcher is kept (LRU) and deep-copied for every sequence
that asks for it. A `SequenceGrammar` masks its sequence's logits row before sampling and advances on
the sampled token. The engine does this per row of its batched step, so constrained and free
sequences share one forward pass. The mask also ends the output: EOS is allowed only where the
grammar may end, and once the grammar is complete EOS is the only token it allows.

Where the grammar may end but could also go on (after a tool call, which another call may follow),
the tokens it refuses there are the model going on with something the format does not hold (text
after its calls, where the reply is calls only). Their probability goes to EOS, so the reply ends
where the model leaves the format, instead of masking leaving only the format's continuation: after
`</tool_call>` a model that would write a sentence next ends its reply rather than being steered into
a second call by the newline that would have begun it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import llguidance
import numpy as np
import torch

from agentserve.contracts.structured import StructuredOutput
from agentserve.structured.grammar import check, grammar_for

# Distinct grammars kept compiled; an agent reuses a handful of tool sets and schemas.
CACHE_SIZE = 64


class SequenceGrammar:
    """One sequence's position in its grammar."""

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int, eos_token_ids: Sequence[int] = ()) -> None:
        self._matcher = matcher
        self._vocab_size = vocab_size
        self._eos_token_ids = tuple(eos_token_ids)

    def allowed(self) -> torch.Tensor:
        """A `[vocab]` bool tensor: the tokens the grammar allows next."""
        words = np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8)
        # Bit i of 32-bit little-endian word j is token 32j + i, i.e. bit i % 8 of byte i // 8.
        bits = np.unpackbits(words, bitorder="little")[: self._vocab_size]
        return torch.from_numpy(bits.astype(np.bool_))

    def mask(self, logits: torch.Tensor) -> torch.Tensor:
        """`logits` with every token the grammar does not allow next at -inf (a copy: the forward
        pass's logits are inference tensors). Where the grammar may end here, EOS also takes the
        probability of the tokens it refuses (the module docstring says why): its logit becomes
        log(p(EOS) + p(refused)) in the model's own distribution, before temperature."""
        allowed = self.allowed()
        masked = logits.masked_fill(~allowed, float("-inf"))
        if self._matcher.is_accepting():
            eos = next((e for e in self._eos_token_ids if e < self._vocab_size and allowed[e]), None)
            if eos is not None:
                refused = torch.logsumexp(logits.masked_fill(allowed, float("-inf")), dim=-1)
                masked[eos] = torch.logaddexp(logits[eos], refused)
        return masked

    def accept(self, token: int) -> None:
        """Advance past a sampled token (one the mask allowed)."""
        if not self._matcher.consume_token(token):
            raise RuntimeError(f"token {token} broke the grammar: {self._matcher.get_error()}")


class GrammarCompiler:
    """Compiles grammars against one tokenizer. Not thread-safe: the engine thread alone uses it."""

    def __init__(self, tokenizer_file: Path, vocab_size: int, eos_token_ids: Sequence[int]) -> None:
        """`vocab_size` is the model's (logits width); tokens past the tokenizer's are never allowed."""
        self.tokenizer_file = tokenizer_file
        self.vocab_size = vocab_size
        self.eos_token_ids = list(eos_token_ids)
        self._tokenizer: llguidance.LLTokenizer | None = None
        self._compiled: OrderedDict[StructuredOutput, llguidance.LLMatcher] = OrderedDict()

    def matcher(self, structured: StructuredOutput, generated: Sequence[int] = ()) -> SequenceGrammar:
        """A fresh position in `structured`'s grammar, advanced past `generated` (output tokens an
        earlier engine already produced under it: the prefill's first token, on the decode engine)."""
        matcher = self.compile(structured).deep_copy()
        if generated and not matcher.consume_tokens(list(generated)):
            raise ValueError(f"the tokens already generated do not match the grammar: {matcher.get_error()}")
        return SequenceGrammar(matcher, self.vocab_size, self.eos_token_ids)

    def compile(self, structured: StructuredOutput) -> llguidance.LLMatcher:
        """The compiled grammar at its start; ValueError if it does not compile."""
        cached = self._compiled.get(structured)
        if cached is not None:
            self._compiled.move_to_end(structured)
            return cached
        matcher = llguidance.LLMatcher(self._llg_tokenizer(), grammar_for(structured), log_level=0)
        if matcher.is_error():
            check(structured)  # a ValueError naming the schema at fault, when one is
            raise ValueError(f"structured output does not compile: {matcher.get_error()}")
        self._compiled[structured] = matcher
        while len(self._compiled) > CACHE_SIZE:
            self._compiled.popitem(last=False)
        return matcher

    def _llg_tokenizer(self) -> llguidance.LLTokenizer:
        # Built on first use: an engine that never sees structured output never pays for it.
        if self._tokenizer is None:
            self._tokenizer = llguidance.LLTokenizer(
                self.tokenizer_file.read_text(encoding="utf-8"), n_vocab=self.vocab_size, eos_token=self.eos_token_ids
            )
        return self._tokenizer
