"""What a local cluster's engines emulate: the fabric (hardware profile, path policy, shared
storage NICs) and the compute (the real model, or the target model on the target GPU); and its
control plane (how many schedulers, and where their state lives)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

from agentserve.common.config import check_choice
from agentserve.costmodel.models import KVDtype
from agentserve.engine.device import resolve_device
from agentserve.engine.emulation_config import ComputeMode, EmulationConfig


@dataclass(frozen=True)
class FabricSettings:
    """The emulated fabric of a local cluster: engines' hardware profile, the scheduler's path policy."""

    profile: str = "local-unshaped"  # profiles/<name>.yaml, or a path to one
    kv_path_policy: str = "dualpath"  # dualpath, always-a, always-b
    prefill_tokens_per_s: float = 0.0  # what the profile is scaled against; 0 = each engine measures
    # One storage-NIC bucket per node shared by its engines (the profile's node: `gpus` engines of a
    # role each), worth their static shares together; off: each engine its static share alone.
    shared_snic: bool = False

    def snic_groups(self, role: str, count: int, cluster_key: int) -> list[list[str]]:
        """Per engine of `role` (of `count`), the flags naming its node's shared SNIC bucket."""
        if not self.shared_snic:
            return [[] for _ in range(count)]
        from agentserve.fabric.profiles import load_profile

        node = load_profile(self.profile).node
        if node is None:
            raise ValueError(f"shared_snic needs a profile with a node topology; {self.profile} has none")
        flags = []
        for i in range(count):
            first = i // node.gpus * node.gpus
            engines = min(node.gpus, count - first)
            path = snic_bucket_dir() / f"agentserve-snic-{cluster_key}-{role}-node{i // node.gpus}"
            flags.append(["--snic-group", str(path), "--snic-group-engines", str(engines)])
        return flags


def snic_bucket_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else Path(tempfile.gettempdir())


@dataclass(frozen=True)
class ComputeSettings:
    """Whether engines run the model (`real`) or emulate the target model on the target GPU
    (`emulated`: no weights loaded; `emulation` says what they emulate, see EmulationConfig)."""

    mode: ComputeMode = "real"
    emulation: EmulationConfig = field(default_factory=EmulationConfig)
    device: str = "cpu"  # real compute: where every engine runs the model (`EngineConfig.device`)
    kv_dtype: KVDtype = "auto"  # every engine's (`EngineConfig.kv_dtype`): fp8_e4m3 holds and moves FP8 KV

    def __post_init__(self) -> None:
        check_choice("compute", self.mode, ComputeMode)
        check_choice("kv_dtype", self.kv_dtype, KVDtype)
        resolve_device(self.device)  # a GPU this machine lacks fails here, before any service starts

    def engine_args(self) -> list[str]:
        """The engine flags (`EngineServiceConfig.compute`, its emulation's, `device`, `kv_dtype`) that say this."""
        kv = [] if self.kv_dtype == "auto" else ["--kv-dtype", self.kv_dtype]
        if self.mode == "real":
            return kv + ([] if self.device == "cpu" else ["--device", self.device])
        emulation = [
            text
            for f in fields(EmulationConfig)
            for text in (f"--{f.name.replace('_', '-')}", _flag_text(getattr(self.emulation, f.name)))
        ]
        # An emulated engine's torch work is a few tiny tensors a step: one thread, no pool.
        return ["--compute", "emulated", *emulation, "--num-threads", "1", *kv]


def _flag_text(value: object) -> str:
    """A setting as its flag's text: floats by repr, so they travel exactly."""
    return repr(value) if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class ControlSettings:
    """The control plane of a local cluster: `schedulers` schedulers (more than one: behind HAProxy on
    the clients' and engines' ports) over `state` (sqlite: one scheduler's own; etcd: an etcd
    started with the cluster, shared; None: etcd with several schedulers, else sqlite)."""

    schedulers: int = 1
    state: str | None = None

    def __post_init__(self) -> None:
        from agentserve.scheduler.config import StateName

        if self.schedulers < 1:
            raise ValueError(f"at least one scheduler is required, got schedulers={self.schedulers}")
        if self.state is not None:
            check_choice("state", self.state, StateName)
            if self.state == "sqlite" and self.schedulers > 1:
                raise ValueError("several schedulers share their state in etcd: state sqlite is one scheduler's")

    @property
    def shared(self) -> bool:
        """Whether the state is in etcd (an etcd runs with the cluster)."""
        return self.state == "etcd" or (self.state is None and self.schedulers > 1)

    @property
    def balanced(self) -> bool:
        """Whether HAProxy fronts the schedulers."""
        return self.schedulers > 1
