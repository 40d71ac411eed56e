"""scripts/lib/steps.sh, the setup scripts' shared output: timed steps, run-once, pip without noise."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
NOISE = "WARNING: Location 'file:///opt/pypi-more/simple/wrapt/' is ignored: it is neither a file nor a directory."


def bash(script: str, tmp_path: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `script` after sourcing the library, with STEP_PREFIX=t."""
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail; source {ROOT}/scripts/lib/steps.sh; STEP_PREFIX=t; {script}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path), **(env or {})},
    )


def fake_python(tmp_path: Path, output: list[str], exit_code: int) -> Path:
    """A stand-in for `python -m pip` that prints `output` (as pip would, on stderr) and exits."""
    path = tmp_path / "python"
    lines = "".join(f"echo {line!r} >&2\n" for line in output)
    path.write_text(f"#!/usr/bin/env bash\n{lines}exit {exit_code}\n")
    path.chmod(0o755)
    return path


def test_a_step_says_what_it_does_then_how_long_it_took(tmp_path):
    done = bash("step 'making a thing' true", tmp_path)
    assert (done.returncode, done.stdout) == (0, "")
    assert done.stderr == "[t] making a thing ...\n[t] making a thing: done in 0s\n"
    failed = bash("step 'breaking a thing' false", tmp_path)
    assert failed.returncode == 1
    assert failed.stderr == "[t] breaking a thing ...\n[t] breaking a thing: FAILED (exit 1) after 0s\n"


def test_once_runs_a_named_script_once_down_the_process_tree(tmp_path):
    inner = f'bash -c "source {ROOT}/scripts/lib/steps.sh; once setup echo inner-setup"'
    result = bash(f"once setup echo outer-setup; {inner}; once other echo other", tmp_path)
    assert result.stdout == "outer-setup\nother\n"
    skipped = bash("once setup echo again", tmp_path, env={"AGENTSERVE_STEPS_DONE": " setup"})
    assert skipped.stdout == ""


def test_quiet_pip_drops_the_index_noise_and_keeps_real_warnings(tmp_path):
    python = fake_python(tmp_path, [NOISE, "Collecting x", "WARNING: x 1.0 is yanked", NOISE], 0)
    result = bash(f"quiet_pip {python} install x", tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "WARNING: x 1.0 is yanked\n")
    assert not list(tmp_path.glob("agentserve-pip.*.log"))  # nothing left behind on success


def test_quiet_pip_shows_the_tail_of_a_failure_without_the_noise(tmp_path):
    output = [NOISE, "Collecting nope", NOISE, "ERROR: No matching distribution found for nope"]
    python = fake_python(tmp_path, output, 1)
    result = bash(f"quiet_pip {python} install nope", tmp_path)
    assert result.returncode == 1
    (log,) = tmp_path.glob("agentserve-pip.*.log")
    assert result.stderr == (
        "ERROR: No matching distribution found for nope\n"
        f"[t] pip install failed (exit 1); its last lines (full log: {log}):\n"
        "Collecting nope\n"
        "ERROR: No matching distribution found for nope\n"
    )
