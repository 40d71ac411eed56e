"""Hardware profiles: the NICs each engine role gets, read from `profiles/<name>.yaml`.

A profile describes a real target (e.g. an 8x H800 node: 400 Gbps SNIC and CNIC per GPU, two
decode engines per prefill engine). This machine computes far slower (or faster) than the target
and its model has a different KV size, so bandwidths are scaled to keep the target's I/O-to-compute
ratio, with

    time_dilation   D = local compute time / target compute time, for the same tokens
                      = target prefill tokens/s per GPU / local prefill tokens/s per engine
    bandwidth scale s = (local KV bytes per token / target KV bytes per token) / D
    local gbps        = target gbps * s
    local latency     = target latency * D

Then moving N tokens' KV takes N * kv_local / (gbps * s) = D * (target transfer time) locally, and
computing them takes D * (target compute time): the ratio of the two equals the target's. Local
seconds are D target seconds, so other target durations (tool waits, SLOs) scale by D too. A
profile without `target` is used literally (D = s = 1).

An emulated-compute engine (agentserve.engine.emulation_config) takes the target's compute time
times a chosen D and its NICs are charged the target's KV bytes (engine_service.kv_charge), so
`dilated(D)` gives s = 1 / D for any profile: target gbps / D and target latency * D.

A profile either lists each role's NICs (`engines`, `decode_per_prefill`) or describes a `node`
(agentserve.fabric.topology: GPUs, the storage NICs they share, a compute NIC each, P:D), from
which both are derived. `target.kv_bytes_per_token` may be left out when `target.model` names one
of agentserve.costmodel's target models.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from agentserve.costmodel.models import TARGET_MODELS
from agentserve.fabric.nic import DEFAULT_BURST_MS, DEFAULT_CATCHUP_MS, EmulatedNIC
from agentserve.fabric.topology import NICSpec, NodeTopology, RoleNICs

ROLES = ("prefill", "decode")
NIC_NAMES = ("snic", "cnic")
# Repo checkout: services/agentserve/fabric/profiles.py -> <root>/profiles
DEFAULT_PROFILES_DIR = Path(__file__).resolve().parents[3] / "profiles"


@dataclass(frozen=True)
class TargetSpec:
    """The real hardware and model whose I/O-to-compute ratio is reproduced."""

    model: str
    kv_bytes_per_token: float
    prefill_tokens_per_s: float  # per GPU, i.e. per engine

    def __post_init__(self) -> None:
        if self.kv_bytes_per_token <= 0 or self.prefill_tokens_per_s <= 0:
            raise ValueError("target kv_bytes_per_token and prefill_tokens_per_s must be positive")


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    description: str
    engines: dict[str, RoleNICs]  # by role: prefill, decode
    decode_per_prefill: float
    target: TargetSpec | None = None
    burst_ms: float = DEFAULT_BURST_MS  # tokens an idle NIC holds
    catchup_ms: float = DEFAULT_CATCHUP_MS  # tokens a sending NIC may bank when its process lags
    node: NodeTopology | None = None  # where `engines` and `decode_per_prefill` came from, if given

    def __post_init__(self) -> None:
        if set(self.engines) != set(ROLES):
            raise ValueError(
                f"profile {self.name}: engines must be exactly {', '.join(ROLES)}, got "
                f"{', '.join(sorted(self.engines)) or 'none'}"
            )
        if self.decode_per_prefill <= 0:
            raise ValueError(f"profile {self.name}: decode_per_prefill must be positive")
        if not 0 < self.burst_ms <= self.catchup_ms:
            raise ValueError(f"profile {self.name}: need 0 < burst_ms <= catchup_ms")

    def with_pd_ratio(self, ratio: str) -> HardwareProfile:
        """This profile with another prefill:decode node ratio (needs a `node`)."""
        if self.node is None:
            raise ValueError(f"profile {self.name} has no node topology; pd_ratio needs one")
        node = self.node.with_pd_ratio(ratio)
        return replace(self, node=node, decode_per_prefill=node.decode_per_prefill)

    def scaled(self, local_kv_bytes_per_token: float, local_prefill_tokens_per_s: float) -> ScaledProfile:
        """Bandwidths and latencies for this machine (formula in the module docstring)."""
        if local_kv_bytes_per_token <= 0 or local_prefill_tokens_per_s <= 0:
            raise ValueError("local KV bytes per token and prefill tokens/s must be positive")
        if self.target is None:
            return ScaledProfile(self, time_dilation=1.0, bandwidth_scale=1.0, engines=self.engines)
        dilation = self.target.prefill_tokens_per_s / local_prefill_tokens_per_s
        scale = local_kv_bytes_per_token / self.target.kv_bytes_per_token / dilation
        engines = {
            role: RoleNICs(*(NICSpec(spec.gbps * scale, spec.latency_ms * dilation) for spec in (nics.snic, nics.cnic)))
            for role, nics in self.engines.items()
        }
        return ScaledProfile(self, time_dilation=dilation, bandwidth_scale=scale, engines=engines)

    def dilated(self, time_dilation: float) -> ScaledProfile:
        """Bandwidths and latencies for emulated compute at `time_dilation`, bytes charged as the target's."""
        if not time_dilation > 0:
            raise ValueError(f"time_dilation must be positive, got {time_dilation}")
        scale = 1 / time_dilation
        engines = {
            role: RoleNICs(
                *(NICSpec(spec.gbps * scale, spec.latency_ms * time_dilation) for spec in (nics.snic, nics.cnic))
            )
            for role, nics in self.engines.items()
        }
        return ScaledProfile(self, time_dilation=time_dilation, bandwidth_scale=scale, engines=engines)


@dataclass(frozen=True)
class SnicGroup:
    """Engines of one node drawing from one storage NIC: `path` names its shared bucket
    (`fabric.shared_bucket`), `engines` how many per-engine shares it is worth."""

    path: str
    engines: int

    def __post_init__(self) -> None:
        if not self.path or self.engines <= 0:
            raise ValueError(f"an SNIC group needs a bucket path and a positive engine count, got {self!r}")


@dataclass(frozen=True)
class ScaledProfile:
    profile: HardwareProfile
    time_dilation: float  # local seconds per target second
    bandwidth_scale: float  # local gbps per target gbps
    engines: dict[str, RoleNICs]

    def nics(self, role: str, snic_group: SnicGroup | None = None, **clock: Any) -> dict[str, EmulatedNIC]:
        """Fresh `snic` and `cnic` for one engine of `role` (`clock`/`sleep` pass through). With
        `snic_group` the snic is one bucket shared with the group's other engines, at their shares' sum."""
        if role not in self.engines:
            raise ValueError(f"unknown engine role {role!r}; choose one of {', '.join(ROLES)}")
        specs = self.engines[role]
        burst, catchup = self.profile.burst_ms, self.profile.catchup_ms
        snic = EmulatedNIC("snic", specs.snic.gbps, specs.snic.latency_ms, burst, catchup, **clock)
        if snic_group is not None:
            gbps = specs.snic.gbps * snic_group.engines
            snic = EmulatedNIC(
                "snic", gbps, specs.snic.latency_ms, burst, catchup, **clock, shared_bucket=snic_group.path
            )
        return {
            "snic": snic,
            "cnic": EmulatedNIC("cnic", specs.cnic.gbps, specs.cnic.latency_ms, burst, catchup, **clock),
        }

    def to_dict(self) -> dict[str, Any]:
        def nic(spec: NICSpec) -> dict[str, float]:
            return {"gbps": float(f"{spec.gbps:.4g}"), "latency_ms": float(f"{spec.latency_ms:.4g}")}

        return {
            "profile": self.profile.name,
            "time_dilation": float(f"{self.time_dilation:.4g}"),
            "bandwidth_scale": float(f"{self.bandwidth_scale:.4g}"),
            "engines": {
                role: {name: nic(getattr(nics, name)) for name in NIC_NAMES} for role, nics in self.engines.items()
            },
        }


def profiles_dir() -> Path:
    return Path(os.environ.get("AGENTSERVE_PROFILES_DIR", DEFAULT_PROFILES_DIR))


def available_profiles() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))


def load_profile(name_or_path: str | Path) -> HardwareProfile:
    """A profile by name (`profiles/<name>.yaml`, dir from $AGENTSERVE_PROFILES_DIR) or by file path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        path = profiles_dir() / f"{name_or_path}.yaml"
        if not path.is_file():
            raise ValueError(
                f"no hardware profile {name_or_path!r} in {profiles_dir()}; "
                f"available: {', '.join(available_profiles()) or 'none'}"
            )
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read hardware profile {path}: {exc}") from None
    return parse_profile(doc, source=str(path))


def parse_profile(doc: Any, source: str = "<profile>") -> HardwareProfile:
    """Validate a profile document; every problem is a ValueError naming the file and key."""
    top = _mapping(
        doc,
        source,
        required=("name",),
        optional=("description", "target", "burst_ms", "catchup_ms", "engines", "decode_per_prefill", "node"),
    )
    try:
        node = None
        if "node" in top:
            given = [key for key in ("engines", "decode_per_prefill") if key in top]
            if given:
                raise ValueError(f"{source}: {', '.join(given)} come from node; give either node or them")
            node = _node(top["node"], f"{source}: node")
            engines = {role: node.engine_nics() for role in ROLES}
            decode_per_prefill = node.decode_per_prefill
        else:
            missing = [key for key in ("engines", "decode_per_prefill") if key not in top]
            if missing:
                raise ValueError(f"{source}: missing key(s) {', '.join(missing)} (or a node topology)")
            engines = {}
            for role, nics in _mapping(top["engines"], f"{source}: engines", optional=ROLES).items():
                where = f"{source}: engines.{role}"
                spec = _mapping(nics, where, required=NIC_NAMES)
                engines[role] = RoleNICs(*(_nic(spec[name], f"{where}.{name}") for name in NIC_NAMES))
            decode_per_prefill = _number(top["decode_per_prefill"], f"{source}: decode_per_prefill")
        target = None
        if top.get("target") is not None:
            target = _target(top["target"], f"{source}: target")
        return HardwareProfile(
            name=str(top["name"]),
            description=str(top.get("description", "")),
            engines=engines,
            decode_per_prefill=decode_per_prefill,
            target=target,
            node=node,
            burst_ms=_number(top.get("burst_ms", DEFAULT_BURST_MS), f"{source}: burst_ms"),
            catchup_ms=_number(top.get("catchup_ms", DEFAULT_CATCHUP_MS), f"{source}: catchup_ms"),
        )
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(source) else f"{source}: {message}") from None


def _mapping(value: Any, where: str, required: tuple[str, ...] = (), optional: tuple[str, ...] = ()) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(value).__name__}")
    unknown = set(value) - set(required) - set(optional)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    missing = [key for key in required if key not in value]
    if missing:
        raise ValueError(f"{where}: missing key(s) {', '.join(missing)}")
    return value


def _target(value: Any, where: str) -> TargetSpec:
    t = _mapping(value, where, required=("model", "prefill_tokens_per_s"), optional=("kv_bytes_per_token",))
    model = str(t["model"])
    if "kv_bytes_per_token" in t:
        kv_bytes = _number(t["kv_bytes_per_token"], f"{where}.kv_bytes_per_token")
    elif model in TARGET_MODELS:
        kv_bytes = float(TARGET_MODELS[model].kv_bytes_per_token)
    else:
        raise ValueError(
            f"{where}: kv_bytes_per_token is required unless model is one of {', '.join(TARGET_MODELS)}, "
            f"got model {model!r}"
        )
    return TargetSpec(model, kv_bytes, _number(t["prefill_tokens_per_s"], f"{where}.prefill_tokens_per_s"))


def _node(value: Any, where: str) -> NodeTopology:
    spec = _mapping(
        value, where, required=("gpus", "snic", "cnic"), optional=("storage_nics", "pd_ratio", "gpu_tflops")
    )
    topology = NodeTopology(
        gpus=_count(spec["gpus"], f"{where}.gpus"),
        snic=_nic(spec["snic"], f"{where}.snic"),
        cnic=_nic(spec["cnic"], f"{where}.cnic"),
        storage_nics=_count(spec.get("storage_nics", 1), f"{where}.storage_nics"),
        gpu_tflops=_number(spec["gpu_tflops"], f"{where}.gpu_tflops") if "gpu_tflops" in spec else None,
    )
    try:
        return topology.with_pd_ratio(spec.get("pd_ratio", topology.pd_ratio))
    except ValueError as exc:
        raise ValueError(f"{where}.pd_ratio: {exc}") from None


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: expected a positive integer, got {value!r}")
    return value


def _nic(value: Any, where: str) -> NICSpec:
    spec = _mapping(value, where, required=("gbps",), optional=("latency_ms",))
    try:
        return NICSpec(
            _number(spec["gbps"], f"{where}.gbps"), _number(spec.get("latency_ms", 0.0), f"{where}.latency_ms")
        )
    except ValueError as exc:
        message = str(exc)
        raise ValueError(message if message.startswith(where) else f"{where}: {message}") from None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    return float(value)
