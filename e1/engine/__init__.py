"""Budgeted decoding: one ``generate`` for every backend (see :mod:`e1.engine.base`).

    engine = load_engine("./my-model", backend="auto")   # vLLM when installed and a GPU is there
    completions = engine.generate(prompts, Budget(1024, 1024), Mode.parse("elastic"), Sampling())

Heavy libraries load inside :func:`load_engine`, never at import.
"""

from __future__ import annotations

from e1.engine.options import (BACKENDS, DEVICE_KINDS, DTYPES, check_device, check_engine_options, check_markers,
                               resolve_backend, vllm_available)

__all__ = ["BACKENDS", "DEVICE_KINDS", "DTYPES", "check_device", "check_engine_options", "check_markers", "load_engine",
           "resolve_backend", "vllm_available"]


def load_engine(model: str, backend: str = "auto", *, dtype: str = "auto", device: str = "auto", batch_size: int = 64,
                think_start: str | None = None, think_end: str | None = None, tp: int = 1,
                gpu_memory_utilization: float = 0.9, max_model_len: int | None = None, **vllm_options):
    """An engine for ``model``; ``device`` and ``batch_size`` apply to transformers, ``tp``,
    ``gpu_memory_utilization`` and ``max_model_len`` to vLLM (which batches by itself)."""
    if resolve_backend(backend) == "vllm":
        from e1.engine.vllm import VLLMEngine

        return VLLMEngine.load(model, dtype=dtype, tp=tp, gpu_memory_utilization=gpu_memory_utilization,
                               max_model_len=max_model_len, think_start=think_start, think_end=think_end,
                               **vllm_options)
    from e1.engine.hf import HFEngine

    return HFEngine.load(model, dtype=dtype, device=device, batch_size=batch_size, think_start=think_start,
                         think_end=think_end)
