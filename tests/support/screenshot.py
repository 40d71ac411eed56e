"""Headless Chromium screenshots of a web UI (the tracing UI's trace page), for container tests.

`ensure_chromium()` installs Debian's chromium when it is missing (scripts/setup_chromium.sh), so
CI on a fresh machine needs no extra step. Pages are single-page apps: `--virtual-time-budget`
lets their scripts fetch and render before the shot. Every host but loopback is unresolvable, so
the page can reach nothing else.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "artifacts"


def ensure_chromium() -> str:
    """Path of the chromium binary, installing it first if needed."""
    found = shutil.which("chromium")
    if found is None:
        subprocess.run([str(ROOT / "scripts" / "setup_chromium.sh")], check=True, timeout=900)
        found = shutil.which("chromium")
    if found is None:
        raise RuntimeError("chromium is not installed and scripts/setup_chromium.sh did not install it")
    return found


def screenshot(
    url: str, out: Path, width: int = 1600, height: int = 1000, budget_ms: int = 30000, timeout_s: float = 120.0
) -> Path:
    """Render `url` headless and save a PNG at `out`; returns `out`."""
    out.parent.mkdir(parents=True, exist_ok=True)
    result = _render(url, [f"--window-size={width},{height}", f"--screenshot={out}"], budget_ms, timeout_s)
    if result.returncode != 0 or not out.is_file():
        raise RuntimeError(f"chromium screenshot of {url} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return out


def rendered_dom(
    url: str, width: int = 1600, height: int = 1000, budget_ms: int = 30000, timeout_s: float = 120.0
) -> str:
    """The page's DOM as HTML after its scripts ran for `budget_ms` of virtual time."""
    result = _render(url, [f"--window-size={width},{height}", "--dump-dom"], budget_ms, timeout_s)
    if result.returncode != 0 or not result.stdout.strip():
        raise RuntimeError(f"chromium --dump-dom of {url} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result.stdout


def _render(url: str, output: list[str], budget_ms: int, timeout_s: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [
            ensure_chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}",
            f"--virtual-time-budget={budget_ms}",
            "--run-all-compositor-stages-before-draw",
            *output,
            url,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
