"""Recording a writer's file-system calls for the power-loss trials.

The recorder is `powerloss_shim.c`, an LD_PRELOAD library compiled here with the system's C
compiler into the cache dir (`$AGENTSERVE_HOME/powerloss`, default `~/.cache/agentserve`), keyed
by the source's hash so an edit recompiles it; no binary is committed. `record` runs one writer
(`powerloss_writers`) as a child process under it: the real store code, unchanged, whose every
open, write, truncate, fsync, sync, rename, unlink and mkdir under the root is logged with its data.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from agentserve.bench.micro.powerloss_log import Op, read_log

SHIM_SOURCE = Path(__file__).with_name("powerloss_shim.c")
PLANTS = ("no-dir-fsync", "no-file-fsync")  # bugs the recorder can plant (`PL_PLANT`): those fsyncs dropped


def cache_dir() -> Path:
    return Path(os.environ.get("AGENTSERVE_HOME", Path.home() / ".cache" / "agentserve")) / "powerloss"


def build_shim() -> Path:
    """The compiled recorder (compiled on first use; RuntimeError naming the compiler's output)."""
    source = SHIM_SOURCE.read_bytes()
    target = cache_dir() / f"shim-{hashlib.sha256(source).hexdigest()[:16]}.so"
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("the power-loss recorder needs a C compiler (cc or gcc; scripts/install.sh installs gcc)")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial")
    built = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(SHIM_SOURCE), "-ldl", "-lpthread"],
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        raise RuntimeError(f"compiling {SHIM_SOURCE.name} failed: {built.stderr.strip()}")
    os.replace(partial, target)
    return target


def record(target: str, root: Path, seed: int, group_commit: bool = False, plant: str | None = None) -> list[Op]:
    """Run the `target` writer on the empty directory `root` under the recorder; its log, in order.

    `plant` names a bug the recorder plants in the writer's calls (one of PLANTS)."""
    if plant is not None and plant not in PLANTS:
        raise ValueError(f"plant must be one of {', '.join(PLANTS)}, got {plant!r}")
    root = root.resolve()
    if any(root.iterdir()):
        raise ValueError(f"the recording root {root} must be empty: the model starts from an empty directory")
    log = root.parent / f"{root.name}.log"
    log.unlink(missing_ok=True)
    env = dict(os.environ, LD_PRELOAD=str(build_shim()), PL_ROOT=str(root), PL_LOG=str(log))
    env.pop("PL_PLANT", None)
    if plant is not None:
        env["PL_PLANT"] = plant
    command = [sys.executable, "-m", "agentserve.bench.micro.powerloss_writers", target, str(root), str(seed)]
    if group_commit:
        command.append("--group-commit")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"power-loss writer {target} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    try:
        return read_log(log, root)
    finally:
        log.unlink(missing_ok=True)
