"""Speculative decoding: drafts proposed cheaply, verified by the target in one forward per step."""
