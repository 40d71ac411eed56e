"""llama.cpp's `llama-server` as the peer: its configuration for many agent sessions, and the
process that serves it.

The configuration follows llama.cpp's server README (tools/server/README.md of the vendored
sources) for many concurrent sessions: one slot per concurrent session (`--parallel`), one unified
KV buffer shared by all slots (`--kv-unified`) sized as slots x per-slot context
(`--kv-unified-per-slot`), prompt caching on (`--cache-prompt`, a slot keeps its session's KV and
a returning request is routed to the slot with the most similar prompt), KV shifting to reuse
chunks of at least `cache_reuse` tokens (`--cache-reuse`), and the RAM prompt cache
(`--cache-ram`) that keeps idle slots' prompts for sessions that come back after a tool wait.
"""

from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class LlamaServerConfig:
    binary: Path
    model: Path
    port: int
    parallel: int = 32  # slots: one per concurrent session
    ctx_per_slot: int = 2048  # tokens each slot may hold; the unified KV holds parallel x this
    cache_reuse: int = 256  # min chunk reused by KV shifting (the README's card suggests 256)
    cache_ram_mib: int = 8192  # the RAM prompt cache for idle slots (the server's default)
    threads: int = 2  # generation and batch threads: the cores agentserve's engines share too
    batch: int = 2048  # logical batch (the server's default)
    ubatch: int = 512  # physical batch (the server's default)

    def __post_init__(self) -> None:
        for name in ("parallel", "ctx_per_slot", "threads", "batch", "ubatch", "port"):
            if getattr(self, name) < 1:
                raise ValueError(f"llama-server {name} must be >= 1, got {getattr(self, name)}")
        if self.cache_reuse < 0:
            raise ValueError(f"llama-server cache_reuse must be >= 0, got {self.cache_reuse}")
        if self.cache_ram_mib < -1:
            raise ValueError(f"llama-server cache_ram_mib must be >= -1 (-1: no limit), got {self.cache_ram_mib}")

    @property
    def ctx_size(self) -> int:
        return self.parallel * self.ctx_per_slot

    def args(self) -> list[str]:
        """The command line, flag for flag as the README names them."""
        return [
            str(self.binary),
            "--model", str(self.model),
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--parallel", str(self.parallel),
            "--kv-unified",
            "--kv-unified-per-slot", str(self.ctx_per_slot),
            "--ctx-size", str(self.ctx_size),
            "--cont-batching",
            "--cache-prompt",
            "--cache-reuse", str(self.cache_reuse),
            "--cache-ram", str(self.cache_ram_mib),
            "--threads", str(self.threads),
            "--threads-batch", str(self.threads),
            "--batch-size", str(self.batch),
            "--ubatch-size", str(self.ubatch),
            "--no-webui",
        ]  # fmt: skip

    def to_dict(self) -> dict:
        out = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(self).items()}
        out.update(ctx_size=self.ctx_size, kv_unified=True, cache_prompt=True, cont_batching=True)
        out["command"] = " ".join(self.args())
        return out


class LlamaServer:
    """A running llama-server; `start()` returns once `/health` answers 200 (model loaded)."""

    def __init__(self, config: LlamaServerConfig, log: IO[bytes]) -> None:
        self.config = config
        self._log = log
        self.popen: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.config.port}"

    def start(self, timeout_s: float = 300.0) -> None:
        self.popen = subprocess.Popen(self.config.args(), stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"llama-server exited with code {self.popen.returncode} while loading")
            try:
                with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(f"llama-server was not healthy within {timeout_s:.0f}s")

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
