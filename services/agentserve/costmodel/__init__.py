"""Cost models of target LLMs (KV bytes and FLOPs per token), torch-free: what a profile's
bandwidths are compared against, e.g. the cache-compute ratio of an agent turn."""
