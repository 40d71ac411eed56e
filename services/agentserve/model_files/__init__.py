"""What a Hugging Face model folder holds besides its weights: presets, the tokenizer and its files.

Torch-free by rule, so the scheduler (which needs the tokenizer, never the model) stays torch-free.
"""
