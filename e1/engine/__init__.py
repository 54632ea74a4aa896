"""Budgeted decoding: one ``generate`` for every backend (see :mod:`e1.engine.base`).

    engine = load_engine("./my-model", backend="auto")   # vLLM when installed and a GPU is there
    completions = engine.generate(prompts, Budget(1024, 1024), Mode.parse("elastic"), Sampling())

Heavy libraries load inside :func:`load_engine`, never at import.
"""

from __future__ import annotations

from e1.engine.api import API_FLAGS, API_NUMBERS, HOSTED_BACKENDS, ApiSettings, OpenAIEngine, api_identity, check_api
from e1.engine.api_client import RequestError
from e1.engine.base import Completion, Mode, Sampling
from e1.engine.early_exit import EarlyExitState, replay_round, transition_ids, trial_room
from e1.engine.hosted import HostedEngine
from e1.engine.markers import DEFAULT_END, Markers, exit_ids, resolve_markers, sentence_end_ids
from e1.engine.options import (BACKENDS, DEVICE_KINDS, DTYPES, ENGINE_NUMBERS, check_device, check_engine_options,
                               check_markers, resolve_backend, vllm_available)
from e1.engine.row_state import T_ANSWER, T_SOLVE, T_THINK, RowState, worst_case_tokens
from e1.engine.seeds import derive_seed, problem_seed, sample_seed
from e1.engine.stop import StopPattern
from e1.engine.vllm_compat import server_entry, use_v1_runner

# Names from modules that import torch or vLLM at the top: loaded on first use (``__getattr__``),
# so that importing e1.engine stays instant. "module:name" where the module's name differs.
_LAZY = {
    "HFEngine": "e1.engine.hf", "cache_keyword": "e1.engine.hf", "context_length": "e1.engine.hf",
    "generation_eos": "e1.engine.hf:_generation_eos", "load_model": "e1.engine.hf", "load_tokenizer": "e1.engine.hf",
    "VLLMEngine": "e1.engine.vllm",
    "KEY": "e1.engine.vllm_processor", "BudgetProcessor": "e1.engine.vllm_processor",
    "budget_args": "e1.engine.vllm_processor",
}

__all__ = ["API_FLAGS", "API_NUMBERS", "BACKENDS", "DEFAULT_END", "DEVICE_KINDS", "DTYPES", "ENGINE_NUMBERS",
           "HOSTED_BACKENDS", "T_ANSWER", "T_SOLVE", "T_THINK", "ApiSettings", "Completion", "EarlyExitState",
           "HostedEngine", "Markers", "Mode", "OpenAIEngine", "RequestError", "RowState", "Sampling", "StopPattern",
           "api_identity", "check_api", "check_device", "check_engine_options", "check_markers", "derive_seed",
           "exit_ids", "load_engine", "problem_seed", "replay_round", "resolve_backend", "resolve_markers",
           "sample_seed", "sentence_end_ids", "server_entry", "transition_ids", "trial_room", "use_v1_runner",
           "vllm_available", "worst_case_tokens", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'e1.engine' has no attribute {name!r}")
    import importlib

    module, _, attribute = _LAZY[name].partition(":")
    return getattr(importlib.import_module(module), attribute or name)


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
