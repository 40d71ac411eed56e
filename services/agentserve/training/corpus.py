"""The shipped corpus as language-model samples, split once into training and held-out blocks.

The corpus (`scripts/make_corpus.py`) is blocks separated by blank lines: prose paragraphs and
stories, `User:`/`Assistant:`/`Tool:` dialogues, code, JSON, shell lines, logs and tables. Each
block becomes one sample:

- a dialogue: a conversation with the same roles (`Tool:` lines as `tool` messages), rendered by
  the model's chat template, so the weights depend on it;
- a prose block: a one-exchange chat, its first sentence the user's message and the rest the
  assistant's reply, so replies in the chat demo come out as sentences;
- anything else: a plain document, `<|bos|>` text `<|eos|>`, as `generate` without `--chat` prompts.

Every `HOLD_OUT_EVERY`-th block is held out for evaluation and never trained on. A stride rather
than the corpus's tail, because the tail is the corpus's non-ASCII lines, appended last.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from agentserve.model_files.presets import EOS_ID
from agentserve.model_files.tokenizer import Tokenizer
from agentserve.training.agent_transcripts import Transcript

HOLD_OUT_EVERY = 20
DIALOGUE_ROLES = {"User": "user", "Assistant": "assistant", "Tool": "tool"}
# A sentence ends at . ? ! (or a closing quote after one) followed by a capital or an opening quote.
_SENTENCE_END = re.compile(r'(?<=[.?!"])\s+(?=[A-Z"])')


@dataclass(frozen=True)
class CorpusSplit:
    train: tuple[str, ...]
    held_out: tuple[str, ...]


def corpus_blocks() -> list[str]:
    text = resources.files("agentserve.model_files").joinpath("data", "corpus.txt").read_text(encoding="utf-8")
    blocks: list[str] = []
    for block in text.strip("\n").split("\n\n"):
        # An indented block continues the one before: the blank line inside a Python class.
        if blocks and block.startswith(" "):
            blocks[-1] += "\n\n" + block
        else:
            blocks.append(block)
    return blocks


def split_corpus(blocks: list[str] | None = None) -> CorpusSplit:
    """Block i is held out iff i % HOLD_OUT_EVERY == HOLD_OUT_EVERY - 1; training gets the other
    blocks, less any that repeat a held-out block's text (the corpus has a few exact repeats)."""
    blocks = corpus_blocks() if blocks is None else blocks
    held_out = tuple(blocks[HOLD_OUT_EVERY - 1 :: HOLD_OUT_EVERY])
    held = set(held_out)
    return CorpusSplit(train=tuple(b for b in blocks if b not in held), held_out=held_out)


def chat_messages(block: str) -> list[dict[str, str]] | None:
    """The block as chat messages, or None if it is neither a dialogue nor prose."""
    lines = block.split("\n")
    if all(line.split(": ", 1)[0] in DIALOGUE_ROLES and ": " in line for line in lines):
        return [
            {"role": DIALOGUE_ROLES[speaker], "content": content}
            for speaker, content in (line.split(": ", 1) for line in lines)
        ]
    if len(lines) == 1 and block[0].isalpha():
        sentences = _SENTENCE_END.split(block)
        if len(sentences) >= 2:
            return [
                {"role": "user", "content": sentences[0]},
                {"role": "assistant", "content": " ".join(sentences[1:])},
            ]
    return None


def sample_tokens(tokenizer: Tokenizer, block: str) -> list[int]:
    """One block's token ids, rendered as the module docstring describes."""
    messages = chat_messages(block)
    if messages is not None:
        return tokenizer.encode(tokenizer.apply_chat_template(messages, add_generation_prompt=False))
    return [*tokenizer.encode(block, add_bos=True), EOS_ID]


def transcript_tokens(tokenizer: Tokenizer, transcript: Transcript) -> list[int]:
    """An agent transcript's token ids, rendered with its tools as the gateway renders a request."""
    text = tokenizer.apply_chat_template(transcript.messages, add_generation_prompt=False, tools=transcript.tools)
    return tokenizer.encode(text)


def token_stream(tokenizer: Tokenizer, blocks: tuple[str, ...] | list[str]) -> list[int]:
    """The blocks' samples back to back, in corpus order."""
    stream: list[int] = []
    for block in blocks:
        stream.extend(sample_tokens(tokenizer, block))
    return stream
