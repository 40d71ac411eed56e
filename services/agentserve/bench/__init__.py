"""The benchmarks, driving the services from outside (no service imports this package), in three parts:

- `common`: what more than one bench uses: the one statistics module (`stats`: one percentile
  definition), report files and plots, the cluster harness (`cluster`, `target`, `spans`, `policy`),
  and `workloads` (the trace model, readers and generator the paper benches and `replay` drive,
  and that `agentserve.sim` reads; it lives here because several benches import it and none owns it).
- `micro`: one component at a time: engine, kvstore (`micro.kvstore`), fabric, handoff,
  layerwise, materialise, overload, soak, prefill FLOPs and kernels, batch invariance, perplexity.
- `papers`: a paper's results from one invocation on a local cluster: `dualpath`, `agentaware`,
  `tokendance`, and `replay` (trace replay and the SLO capacity search the others build on).
"""
