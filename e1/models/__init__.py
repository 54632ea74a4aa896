"""Tiny models and character tokenizers built from a config, for the demo and the tests (no weights
downloaded): :mod:`e1.models.tiny`."""

from e1.models.tiny import build_char_tokenizer, build_tiny_model

__all__ = ["build_char_tokenizer", "build_tiny_model"]
