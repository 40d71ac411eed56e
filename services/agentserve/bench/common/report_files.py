"""One bench's result on disk: `<bench>.json` (everything), `<bench>.md` and its plots."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path


def write_report_files(
    bench: str,
    result: dict,
    out_dir: Path,
    plots: Callable[[dict, Path], dict[str, Path]],
    markdown: Callable[[dict], str],
) -> None:
    """`plots` draws into `out_dir` and names its files; it raises ImportError without matplotlib
    (an optional dependency), and the report is then written without plots, said once."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        result["files"] = {k: str(v) for k, v in plots(result, out_dir).items()}
    except ImportError:
        print(f"agentserve bench {bench}: matplotlib is not installed; skipping plots", file=sys.stderr)
        result["files"] = {}
    (out_dir / f"{bench}.json").write_text(json.dumps(result, indent=2))
    (out_dir / f"{bench}.md").write_text(markdown(result))
