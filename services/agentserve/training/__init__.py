"""Training the embedded default model on the shipped corpus (CPU, deterministic)."""
