"""A MoE engine's routing on /metrics: tokens the router sent to each expert of each sparse layer,
as `agentserve_engine_expert_tokens_total{layer, expert}`, read at scrape time from the model's
`ExpertLoad`; with an expert placement (`--expert-placement`) also the copies each expert-parallel
rank computed after the router's split, as `agentserve_engine_expert_rank_tokens_total{layer,
rank}`. A dense or emulated engine exports none. `record_expert_load` starts the recording mode
(`--record-expert-load PATH`).

Summed over experts, a layer's counter is top_k times the tokens it computed; a layer's spread
over experts is the imbalance an expert-parallel deployment would see (`eplb`)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from agentserve.engine.emulated_model import EmulatedModel
from agentserve.engine.expert_load import ExpertLoad, LoadRecorder
from agentserve.engine.model import CausalLM

EXPERT_TOKENS = "agentserve_engine_expert_tokens"  # the sample is `..._total`
RANK_TOKENS = "agentserve_engine_expert_rank_tokens"


class ExpertLoadCollector(Collector):
    """Reads the counts tensor once per scrape without the engine's lock: at worst one layer of one
    forward behind the others."""

    def __init__(self, load: ExpertLoad) -> None:
        self._load = load

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield _family()
        yield _rank_family()

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = _family()
        for layer, counts in zip(self._load.layers, self._load.snapshot(), strict=True):
            for expert, tokens in enumerate(counts):
                family.add_metric([str(layer), str(expert)], tokens)
        yield family
        per_rank = self._load.rank_snapshot()
        if per_rank is None:
            return
        ranks = _rank_family()
        for layer, counts in zip(self._load.layers, per_rank, strict=True):
            for rank, tokens in enumerate(counts):
                ranks.add_metric([str(layer), str(rank)], tokens)
        yield ranks


def _family() -> CounterMetricFamily:
    return CounterMetricFamily(
        EXPERT_TOKENS, "Tokens routed to each expert of each sparse (MoE) layer", labels=["layer", "expert"]
    )


def _rank_family() -> CounterMetricFamily:
    return CounterMetricFamily(
        RANK_TOKENS,
        "Routed token copies each expert-parallel rank computed, per sparse layer (after the replica split)",
        labels=["layer", "rank"],
    )


def register_expert_metrics(model: CausalLM | EmulatedModel) -> ExpertLoadCollector | None:
    """Registers the collector for a model with expert counts; None (nothing exported) otherwise."""
    if not isinstance(model, CausalLM) or model.expert_load is None:
        return None
    collector = ExpertLoadCollector(model.expert_load)
    REGISTRY.register(collector)
    return collector


def record_expert_load(model: CausalLM | EmulatedModel, path: str) -> LoadRecorder:
    """`--record-expert-load PATH`: each forward's expert counts to `path` (`expert_load.LoadRecorder`)."""
    if not isinstance(model, CausalLM) or model.expert_load is None:
        raise ValueError(f"record_expert_load={path!r} needs a MoE model (qwen2_moe, mixtral) computed for real")
    return model.expert_load.record_to(path)
