"""Structured output: the grammar a request's output decodes under, built without torch.

`grammar` builds and validates it (the scheduler rejects bad schemas with it); the engines compile
and apply it in `agentserve.engine.grammar`.
"""
