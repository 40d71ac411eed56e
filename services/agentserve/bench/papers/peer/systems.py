"""The two systems the peer bench compares, behind one small interface: start serving the GGUF,
say where the OpenAI API is, name the processes to measure, describe the configuration, stop.

- `AgentserveSystem`: `agentserve up --local`'s cluster (kvstore, scheduler, prefill and decode
  engines, tool proxy) on free ports, through the cluster library.
- `LlamaServerSystem`: one llama-server process configured for many sessions (`llama_server.py`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Protocol

import agentserve
from agentserve.bench.papers.peer.llama_server import LlamaServer, LlamaServerConfig
from agentserve.cluster.local import LocalCluster
from agentserve.cluster.ports import LocalPorts

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
BUILD_SCRIPT = Path(agentserve.__file__).resolve().parents[2] / "scripts" / "build_llama_server.sh"


class PeerSystem(Protocol):
    name: str

    def start(self) -> None:
        """Serve the model; return once the OpenAI API answers."""
        ...

    @property
    def base_url(self) -> str: ...

    def roots(self) -> dict[str, int]:
        """Process name -> pid of every process tree whose memory and CPU count as the system's."""
        ...

    def config(self) -> dict: ...

    def stop(self) -> None: ...


class AgentserveSystem:
    """`up --local`'s cluster on free ports, its store in a temporary folder, its logs in `log_dir`.
    A service whose free port another process takes before it binds moves to fresh ports inside
    `LocalCluster.start`."""

    name = "agentserve"

    def __init__(self, model: Path, log_dir: Path, decoders: int = 2, prefill: int = 1) -> None:
        self.model = model
        self.log_dir = log_dir
        self.decoders = decoders
        self.prefill = prefill
        self._data = Path(tempfile.mkdtemp(prefix="agentserve-peer-"))
        self.cluster = LocalCluster(
            LocalPorts.free(self.decoders, self.prefill),
            decoders=self.decoders,
            prefill=self.prefill,
            data_dir=self._data / "kv",
            log_dir=self.log_dir,
            model_dir=self.model,
        )

    def start(self) -> None:
        self.cluster.start(timeout_s=600.0)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.cluster.ports.http}"

    def roots(self) -> dict[str, int]:
        return {p.name: p.popen.pid for p in self.cluster.procs}

    def config(self) -> dict:
        return {
            "launch": f"agentserve up --local --model {self.model} --prefill {self.prefill} --decoders {self.decoders}",
            "model": str(self.model),
            "prefill_engines": self.prefill,
            "decode_engines": self.decoders,
            "services": {p.name: " ".join(p.cmd) for p in self.cluster.procs},
            "logs": str(self.log_dir),
        }

    def stop(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self._data, ignore_errors=True)


class LlamaServerSystem:
    name = "llama-server"

    def __init__(self, config: LlamaServerConfig, log_path: Path) -> None:
        self.server_config = config
        self.log_path = log_path
        self._server: LlamaServer | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:  # the child keeps its own descriptor
            self._server = LlamaServer(self.server_config, log)
            self._server.start(timeout_s=600.0)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_config.port}"

    def roots(self) -> dict[str, int]:
        popen = None if self._server is None else self._server.popen
        return {} if popen is None else {"llama-server": popen.pid}

    def config(self) -> dict:
        return {**self.server_config.to_dict(), "log": str(self.log_path)}

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


def llama_server_binary(explicit: Path | None) -> Path:
    """`explicit`, else the cached build, built first by scripts/build_llama_server.sh (minutes,
    once; the script prints the binary's path on its last line)."""
    if explicit is not None:
        if not explicit.is_file():
            raise ValueError(f"--llama-server: no such file: {explicit}")
        return explicit
    cached = Path.home() / ".cache" / "agentserve" / "llama.cpp" / LLAMA_CPP_PYTHON_VERSION / "bin" / "llama-server"
    if cached.is_file():
        return cached
    if not BUILD_SCRIPT.is_file():
        raise ValueError(f"no llama-server at {cached} and no {BUILD_SCRIPT} to build it; pass --llama-server")
    print(f"agentserve bench peer: building llama-server with {BUILD_SCRIPT} (minutes, once)", file=sys.stderr)
    out = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "LLAMA_CPP_PYTHON_VERSION": LLAMA_CPP_PYTHON_VERSION, "PYTHON": sys.executable},
    )
    return Path(out.stdout.strip().splitlines()[-1])
