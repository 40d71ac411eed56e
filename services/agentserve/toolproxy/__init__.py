"""The tool-call proxy: agents call their tools through it (`POST /tools/{name}`), and it tells the
scheduler when each session starts and stops waiting, with a predicted wait, so the scheduler can
offload idle KV during the wait and prefetch it back in time (TokenCake)."""
