"""Golden files: a report's whole text checked against one file kept beside its test.

`matches_golden(text, path)` is true when `text` equals the file. With AGENTSERVE_UPDATE_GOLDEN=1
it writes `text` to the file instead (a changed report is then reviewed as the file's diff)."""

from __future__ import annotations

import os
from pathlib import Path

UPDATE_ENV = "AGENTSERVE_UPDATE_GOLDEN"


def matches_golden(text: str, path: Path) -> bool:
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if not path.exists():
        raise FileNotFoundError(f"no golden file {path}: run the test once with {UPDATE_ENV}=1 and review it")
    return text == path.read_text()
