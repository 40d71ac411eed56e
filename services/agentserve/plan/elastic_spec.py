"""The settings of `agentserve plan --elastic` (light: the parser reads the defaults from here).

The day: 24 hours of coding-agent sessions whose shapes (prompts, appends, outputs, tool calls and
think times) are the TraceLab sessions the repository ships (`traces/tracelab/round_trace.jsonl`),
each new session a copy of one of them with its tool times drawn again from all the recorded tool
latencies. Sessions arrive as a Poisson process whose rate follows a diurnal curve,

    rate(t) = peak * (trough + (1 - trough) * ((1 + cos(2 pi (t - peak_at) / day)) / 2) ** sharpness)

highest at `peak_at` (the 14th hour by default) and lowest twelve hours away; with trough 0.05 and sharpness 3 the mean
rate is 0.347 of the peak, so no deployment can save more than 1 - 0.347 = 0.653 of the
peak-sized deployment's GPU-hours on it (`pattern_bound` in the output).
"""

from __future__ import annotations

from dataclasses import dataclass

from agentserve.costmodel.models import KVDtype

DAY_S = 86_400.0


@dataclass(frozen=True)
class ElasticSpec:
    # the day
    peak_sessions_per_s: float = 0.1
    trough: float = 0.05  # lowest rate over the peak rate
    sharpness: float = 3.0  # exponent of the raised cosine: higher, a shorter busy part of the day
    peak_at_s: float = 14 * 3600.0
    day_s: float = DAY_S
    # the cluster: a dense target model, whose decode is the heavy part (its KV, even in FP8, fills a
    # GPU's pool with 2.8 contexts of 32K), engines of one GPU each with their static 50 Gbps share of
    # a node's storage NIC
    model: str = "dense-27b"
    kv_dtype: KVDtype = "fp8_e4m3"  # agentserve's FP8 KV blocks: half the BF16 bytes on the NICs and in the pools
    gpu: str = "h800"
    policy: str = "dualpath"
    slo: str = "ttft_first_p90=30s,ttft_later_p90=3s,tpot_p90=100ms"
    # the scaling policy
    startup_s: float = 120.0  # from adding an engine to its first turn (weights loaded, registered)
    interval_s: float = 30.0  # how often the controller reads its signals
    prefill_target_util: float = 0.6  # of the prefill GPUs' time, busy on turns offered lately
    backlog_target_s: float = 5.0  # a prefill backlog (queued compute per engine) above this adds engines
    kv_target: float = 0.9  # decode pool occupancy the controller sizes for, returns included
    scale_in_after_s: float = 600.0  # a role's need must stay below its count this long before a drain
    ewma_s: float = 120.0  # time constant of the offered-work average
    # scale out for the load `startup_s + interval_s` ahead: demand times the diurnal rate's growth
    # over that lead (an added engine serves only from then)
    forecast: bool = False
    decode_queue: bool = False  # a turn waiting for room in a decode pool adds a decode engine
    max_engines: int = 96  # per role
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.peak_sessions_per_s > 0 and 0 < self.trough <= 1 and self.sharpness > 0):
            raise ValueError("elastic day: peak rate > 0, trough in (0, 1], sharpness > 0")
        if not (self.day_s > 0 and self.interval_s > 0 and self.ewma_s > 0) or self.startup_s < 0:
            raise ValueError("elastic: day, interval and ewma must be > 0, startup >= 0")
        for name in ("prefill_target_util", "kv_target"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"elastic {name} must be in (0, 1], got {getattr(self, name)}")
        if self.max_engines < 1:
            raise ValueError(f"elastic max_engines must be >= 1, got {self.max_engines}")


ELASTIC_DEFAULTS = ElasticSpec()
# The scaling policy's settings `--scaling key=value,...` may change (the day, cluster and seed have
# options of their own or stay fixed).
SCALING_KEYS = (
    "interval_s",
    "prefill_target_util",
    "backlog_target_s",
    "kv_target",
    "scale_in_after_s",
    "ewma_s",
    "forecast",
    "decode_queue",
)


def scaling_settings(text: str) -> dict[str, float | bool]:
    """`key=value,...` over SCALING_KEYS (booleans as 0 or 1); ValueError naming a bad key or value."""
    out: dict[str, float | bool] = {}
    for item in (i.strip() for i in text.split(",") if i.strip()):
        key, sep, value = item.partition("=")
        if not sep or key not in SCALING_KEYS:
            raise ValueError(f"{item!r} is not key=value with a key among {', '.join(SCALING_KEYS)}")
        if isinstance(getattr(ELASTIC_DEFAULTS, key), bool):
            if value not in ("0", "1"):
                raise ValueError(f"{key} takes 0 or 1, got {value!r}")
            out[key] = value == "1"
            continue
        try:
            out[key] = float(value)
        except ValueError:
            raise ValueError(f"{key}={value!r} is not a number") from None
    return out
