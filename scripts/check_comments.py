"""Refuse dated measurements in comments and docstrings: a time zone tag, a time of day (hh:mm), a day
and month, or an ISO date in a `#` comment or a module, class or function docstring of a Python file.

Code outlives its runs: a comment states the mechanism, the contract and the reason; the run that
measured a figure, and when, belongs in docs/ and the commit message. Comments come from `tokenize`
and docstrings from `ast`, so a date or time zone that code computes with (a string literal, an
attribute such as the `datetime` module's time zone) is not checked. Prints `path:line: [kinds] text`
for each dated line and exits 1 if there is any.

    .venv/bin/python scripts/check_comments.py services tests scripts
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
# Each pattern is one kind of date or time. A time of day takes a two-digit hour and is neither part
# of a slice (`ids[10:20]`), an address (`host:10:20`) nor a longer number, so `1:4` (a ratio) and
# `127.0.0.1:50051` pass.
PATTERNS: dict[str, re.Pattern[str]] = {
    "time zone": re.compile(r"\b(?:UTC|GMT)\b"),
    "time of day": re.compile(r"(?<![\w.:\[])(?:[01]\d|2[0-3]):[0-5]\d(?![\w\]])"),
    "day and month": re.compile(rf"\b(?:\d{{1,2}} {_MONTH}(?![a-z])|{_MONTH} \d{{1,2}}\b)"),
    "ISO date": re.compile(r"\b(?:19|20)\d\d-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])\b"),
}


@dataclass(frozen=True)
class Finding:
    """One dated line of a comment or docstring: where it is (1-based) and the kinds of date it carries."""

    line: int
    kinds: tuple[str, ...]
    text: str


def matches(text: str) -> list[str]:
    """The kinds of date or time `text` carries, in `PATTERNS` order."""
    return [what for what, pattern in PATTERNS.items() if pattern.search(text)]


def comments(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every `#` comment."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def docstrings(source: str) -> Iterator[tuple[int, str]]:
    """(line, text) of every line of every module, class and function docstring."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        doc = ast.get_docstring(node, clean=False)
        if doc is None:
            continue
        first = node.body[0].lineno
        for offset, text in enumerate(doc.splitlines()):
            yield first + offset, text


def findings(source: str) -> list[Finding]:
    """The dated comments and docstring lines of one Python source, by line."""
    found = [
        Finding(line, tuple(kinds), text.strip())
        for line, text in (*comments(source), *docstrings(source))
        if (kinds := matches(text))
    ]
    return sorted(found, key=lambda f: f.line)


def python_files(paths: Iterable[Path]) -> Iterator[Path]:
    """The `.py` files named, or found under the directories named, in sorted order."""
    for path in paths:
        if path.is_dir():
            yield from sorted(path.rglob("*.py"))
        elif path.suffix == ".py":
            yield path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: check_comments.py PATH...", file=sys.stderr)
        return 2
    count = 0
    for path in python_files(Path(a) for a in args):
        for finding in findings(path.read_text(encoding="utf-8")):
            print(f"{path}:{finding.line}: [{', '.join(finding.kinds)}] {finding.text}")
            count += 1
    if count:
        print(f"{count} dated comment or docstring line(s): state the mechanism; dates and runs go in docs/")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
