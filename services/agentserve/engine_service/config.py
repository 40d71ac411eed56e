"""EngineServiceConfig: the settings every engine process runs with (a prefill engine's add to them in
`prefill.config`, a decode engine's in `decode.config`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentserve.common.config import config_prefix
from agentserve.common.internal_tls import internal_tls
from agentserve.costmodel.models import KVDtype
from agentserve.engine.emulation_config import ComputeMode, EmulationConfig
from agentserve.engine.engine_config import EngineConfig
from agentserve.engine.speculative.config import SpeculativeConfig
from agentserve.kv.eviction import DEFAULT_EVICTION_POLICY


@dataclass(frozen=True)
class EngineServiceConfig:
    host: str = "0.0.0.0"
    grpc_port: int = 50053
    metrics_port: int = 0
    advertise_host: str = ""  # what peers dial; empty = this host's address
    engine_id: str = ""  # empty = role-address
    model_dir: str = ""  # empty = the embedded default model
    model_name: str = "agentserve-tiny"
    dtype: str = "fp32"
    kv_cache_mb: int = 256
    block_size: int = 16
    max_batch_size: int = 64
    num_threads: int = 0
    eviction_policy: str = DEFAULT_EVICTION_POLICY  # the KV pool's, see `kv.eviction`
    critical_reserve: float = 0.0  # the pool's share held for critical-path sessions (EngineConfig)
    # Prefill scheduling inside the engine (`engine.engine_config.EngineConfig`, checked there).
    layerwise: bool = False  # a prefill computes while its cached KV still arrives, one layer staged at a time
    prefill_batching: str = "fcfs"  # fcfs | compute-quota
    prefill_token_budget: int = 8192
    prefill_attention_tokens: int = 0
    # Bit-identical logits whatever a sequence is batched with (`EngineConfig.batch_invariant`).
    batch_invariant: bool = True
    kv_dtype: KVDtype = "auto"  # fp8_e4m3: KV held, stored and moved as FP8 (`EngineConfig.kv_dtype`)
    device: str = "cpu"  # auto | cpu | cuda | cuda:N: where the model and its KV pool run (`EngineConfig.device`)
    # Speculative decoding (`EngineConfig.speculative`): --speculative-method ngram|draft, -k, -ngram,
    # -draft-layers; drafts verified in one forward per decode step. Off by default.
    speculative: SpeculativeConfig = field(default_factory=SpeculativeConfig)
    layerwise_min_read_kb: int = 64  # a layerwise path-A read of a block carries whole layers >= this (`layer_loads`)
    # A MoE model's per-forward expert counts as JSON lines to this path (`engine.expert_load`); "" = off.
    record_expert_load: str = ""
    # A MoE model's expert replicas over expert-parallel ranks (`engine.expert_placement`, JSON, an
    # EPLB plan): the router splits a replicated expert's tokens over them; "" = one copy each.
    expert_placement: str = ""
    scheduler_address: str = "127.0.0.1:50061"  # the scheduler's internal port
    # Dial only decode engines the scheduler registered (engine_service/peer_allowlist.py); False:
    # any address a prefill request names, for rigs of engines without a scheduler (engine tests).
    peer_allowlist: bool = True
    # The internal plane's mutual TLS (common/internal_tls.py): ca.pem, cert.pem, key.pem; "" = plain.
    internal_tls_dir: str = ""
    kvstore_address: str = "127.0.0.1:50052"
    # Deadline of each store call (a whole load or persist stream): a hung store costs a turn at most
    # this, then the turn recomputes (a dead one answers at once). 0 = no deadline.
    kvstore_timeout_ms: int = 10_000
    heartbeat_interval_ms: int = 1000
    # A drain (SIGTERM, `agentserve drain`) waits this long for the engine's turns to finish and its
    # deregistration, then stops the engine anyway (compose's stop_grace_period is longer).
    drain_timeout_s: float = 30.0
    fabric_profile: str = "local-unshaped"  # profiles/<name>.yaml (or a .yaml path): this engine's snic and cnic
    fabric_prefill_tokens_per_s: float = 0.0  # local compute speed the profile is scaled by; 0 = measure
    # The node's storage NIC shared with the other engines naming the same bucket file, worth
    # snic_group_engines per-engine shares (agentserve.fabric.shared_bucket); empty = a static share.
    snic_group: str = ""
    snic_group_engines: int = 0
    # real: run the model; emulated: forwards take the target model's time on the target GPU, the
    # KV pool is the target's size, the fabric is dilated by time_dilation. The emulation's settings
    # are the engine's own flags (--target-model, --time-dilation, ...), read when compute is emulated.
    compute: ComputeMode = "real"
    emulation: EmulationConfig = field(default_factory=EmulationConfig, metadata=config_prefix(""))

    def __post_init__(self) -> None:
        for name in (
            "grpc_port",
            "kv_cache_mb",
            "block_size",
            "max_batch_size",
            "heartbeat_interval_ms",
            "drain_timeout_s",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.fabric_profile:
            raise ValueError("fabric_profile must not be empty (local-unshaped: no shaping)")
        if not self.fabric_prefill_tokens_per_s >= 0:
            raise ValueError(f"fabric_prefill_tokens_per_s must be >= 0, got {self.fabric_prefill_tokens_per_s}")
        self.engine_config()  # the engine's settings, checked where they are declared
        if self.kvstore_timeout_ms < 0:
            raise ValueError(f"kvstore_timeout_ms must be >= 0 (0: no deadline), got {self.kvstore_timeout_ms}")
        if self.layerwise_min_read_kb < 0:
            raise ValueError(f"layerwise_min_read_kb must be >= 0, got {self.layerwise_min_read_kb}")
        if bool(self.snic_group) != (self.snic_group_engines > 0):
            raise ValueError("snic_group and a positive snic_group_engines go together (or neither)")
        if self.compute == "emulated":
            self.emulation.pool_blocks(self.block_size)  # ValueErrors name the setting
        if not 0 <= self.metrics_port < 65536:
            raise ValueError(f"metrics_port must be a port number, got {self.metrics_port}")
        internal_tls(self.internal_tls_dir)  # unreadable credentials fail at start-up, naming the setting
        for name in ("scheduler_address", "kvstore_address"):
            value = getattr(self, name)
            if value and ":" not in value:
                raise ValueError(f"{name} must be host:port, got {value!r}")

    def engine_config(self) -> EngineConfig:
        """The engine this process runs (ValueError naming a bad setting)."""
        return EngineConfig(
            block_size=self.block_size,
            kv_cache_bytes=self.kv_cache_mb << 20,
            dtype=self.dtype,
            max_batch_size=self.max_batch_size,
            num_threads=self.num_threads,
            eviction_policy=self.eviction_policy,
            critical_reserve=self.critical_reserve,
            layerwise=self.layerwise,
            prefill_batching=self.prefill_batching,
            prefill_token_budget=self.prefill_token_budget,
            prefill_attention_tokens=self.prefill_attention_tokens,
            batch_invariant=self.batch_invariant,
            kv_dtype=self.kv_dtype,
            device=self.device,
            speculative=self.speculative,
            compute=self.compute,
            emulation=self.emulation,
            expert_placement=self.expert_placement,
        )
