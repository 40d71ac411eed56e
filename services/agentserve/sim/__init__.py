"""agentserve sim: the scheduler's own policies driven in virtual time against the cost model.

A discrete-event simulator (`events`) of a PD cluster: storage and compute NICs as bandwidth links
(`nic`), prefill and decode engines as the cost model the emulated engines sleep by (`prefill`,
`decode`), placement by the scheduler's `GlobalScheduler` over an `EngineRegistry` whose clock is
virtual time (`cluster`). docs/sim.md states what is modelled and what is not.
"""
