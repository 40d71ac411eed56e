"""The systems `bench dualpath` compares: each a set of scheduler and engine settings, named by
the config fields the services read (`--flag` per field, see agentserve.common.config).

- baseline: the prefill engine with the least load, every store hit over its own storage NIC
  (path A), the turn's decode engine relays nothing, blocks loaded then computed (no layerwise).
- layerwise: the baseline with layerwise prefill (a layer's KV arrives while the one before it
  computes; the pool holds about one layer of cached KV per prefill).
- dualpath: DualPath as the paper builds it: prefill engine by storage read queue and unfinished
  prefill tokens, path by the shorter read queue, relay engine chosen on its own, layerwise
  prefill and batches by compute quota.
- dualpath-split: dualpath whose reads are split over both paths in proportion to free bandwidth.

Every policy runs in DualPath's regime: a session keeps no KV on its decode engine between turns
(scheduler `session_kv=store`: dropped at the turn's end, it is in the store) nor on its prefill
engine (`keep_kv=false`: dropped after the handoff, as at the paper's scale the other agents'
contexts push it out of HBM by the agent's next turn), so every hit of a later turn is read from
the store, over the prefill side's storage NIC (path A) or a decode
side's (path B); the baseline reads the same store over the prefill side's NICs only.

A policy this build cannot run is reported unavailable with the reason (`common.policy.unsupported`);
the baseline's own values are what a service without the setting does anyway (`common.policy.IMPLICIT`).
"""

from __future__ import annotations

from agentserve.bench.common.policy import Policy

POLICY_NAMES = ("baseline", "layerwise", "dualpath", "dualpath-split")


# The regime every policy runs in (module docstring), the baseline included.
REGIME_SCHEDULER = {"session_kv": "store"}
REGIME_PREFILL = {"keep_kv": False}
_BASE_SCHEDULER = {
    **REGIME_SCHEDULER,
    "prefill_policy": "least-loaded",
    "kv_path_policy": "always-a",
    "relay_policy": "turn-decode",
}
_DUALPATH_SCHEDULER = {
    **REGIME_SCHEDULER,
    "prefill_policy": "dualpath",
    "kv_path_policy": "dualpath",
    "relay_policy": "dualpath",
}
_PLAIN_PREFILL = {**REGIME_PREFILL, "layerwise": False, "prefill_batching": "fcfs"}
_DUALPATH_PREFILL = {**REGIME_PREFILL, "layerwise": True, "prefill_batching": "compute-quota"}


def policies() -> dict[str, Policy]:
    return {
        "baseline": Policy(
            "baseline", "least-loaded prefill, path A only, no layerwise", _BASE_SCHEDULER, _PLAIN_PREFILL
        ),
        "layerwise": Policy(
            "layerwise",
            "baseline + layerwise prefill",
            _BASE_SCHEDULER,
            {**_PLAIN_PREFILL, "layerwise": True},
        ),
        "dualpath": Policy(
            "dualpath",
            "DualPath: read-queue prefill choice, dual-path loading, relay choice, layerwise, compute-quota batches",
            _DUALPATH_SCHEDULER,
            _DUALPATH_PREFILL,
        ),
        "dualpath-split": Policy(
            "dualpath-split",
            "DualPath with each request's reads split over both paths by free bandwidth",
            {**_DUALPATH_SCHEDULER, "kv_path_policy": "split"},
            _DUALPATH_PREFILL,
        ),
    }
