"""Budgeted decoding: one ``generate`` for every backend (see :mod:`e1.engine.base`).

    engine = load_engine("./my-model", EngineSpec(backend="auto"))   # vLLM when installed and a GPU is there
    completions = engine.generate(prompts, Budget(1024, 1024), Mode.parse("elastic"), Sampling())

    engine = load_engine("my-model", EngineSpec(backend="openai"), api=ApiSettings("http://127.0.0.1:8000/v1"))

The backends are named in :mod:`e1.engine.backends`; :data:`LOADERS` holds each one's loader and
:func:`load_engine` is the one place that picks it (eval, sweep and training rollouts load through it).
Heavy libraries load inside the loaders, never at import.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from e1.engine.api.settings import API_FLAGS, API_NUMBERS, ApiSettings
from e1.engine.backends import (
    API_BACKENDS,
    AUTO,
    BACKEND_NAMES,
    BACKENDS,
    HOSTED_BACKENDS,
    LOCAL_BACKENDS,
    Backend,
    check_backend,
    resolve_backend,
    vllm_available,
)
from e1.engine.base import Completion, Sampling
from e1.engine.drafter import check_drafted, parse_drafter
from e1.engine.early_exit_state import EarlyExitState, replay_round, transition_ids
from e1.engine.load_options import DEVICE_KINDS, DTYPES, check_device, check_engine_options, check_markers
from e1.engine.markers import (
    DEFAULT_END,
    PROMPT_CLOSED,
    Markers,
    exit_ids,
    generation_eos,
    resolve_markers,
    sentence_end_ids,
)
from e1.engine.modes import Mode
from e1.engine.modes import names as mode_names
from e1.engine.modes import reference as modes_reference
from e1.engine.modes import usage as modes_usage
from e1.engine.modes.mode import MAX_MODE_TEXT
from e1.engine.row_engine import ModeIds, RowEngine, build_state, prefilled
from e1.engine.row_state import T_ANSWER, T_SOLVE, T_THINK, THINK_ENDS, RowState, worst_case_tokens
from e1.engine.seeds import derive_seed, problem_seed, prompt_seeds, sample_seed
from e1.engine.spec import ENGINE_NUMBERS, EngineSpec
from e1.engine.stop import StopPattern
from e1.engine.vllm.compat import check_runner, has_v2_processors, server_entry
from e1.errors import ConfigError

# Names from modules that import torch, vLLM or the API clients' reply schemas (pydantic) at the top:
# loaded on first use (``__getattr__``), so that importing e1.engine (and so `e1 --help` and tab
# completion) stays instant. "module:name" where the module's name differs.
_LAZY = {
    **dict.fromkeys(("OpenAIEngine", "api_identity", "check_api"), "e1.engine.api.openai_engine"),
    "RequestError": "e1.engine.api.replies",
    "bounded_client": "e1.engine.api.replies",
    "transport_reason": "e1.engine.api.replies",
    "HostedEngine": "e1.engine.api.hosted",
    "HFEngine": "e1.engine.hf.hf_engine",
    "cache_keyword": "e1.engine.hf.hf_engine",
    "context_length": "e1.engine.hf.hf_engine",
    "draw_tokens": "e1.engine.hf.sampling",
    "load_model": "e1.engine.hf.hf_engine",
    "load_tokenizer": "e1.engine.hf.hf_engine",
    "weights_dtype": "e1.engine.hf.hf_engine",
    "VLLMEngine": "e1.engine.vllm.vllm_engine",
    "KEY": "e1.engine.vllm.processor",
    "BudgetProcessor": "e1.engine.vllm.processor",
    "budget_args": "e1.engine.vllm.processor",
    "AnyRunnerProcessor": "e1.engine.vllm.v2_processor",
    "V2BudgetProcessor": "e1.engine.vllm.v2_processor",
}

__all__ = [
    "MAX_MODE_TEXT",
    "API_BACKENDS",
    "API_FLAGS",
    "API_NUMBERS",
    "ApiSettings",
    "AUTO",
    "BACKENDS",
    "BACKEND_NAMES",
    "DEFAULT_END",
    "DEVICE_KINDS",
    "DTYPES",
    "ENGINE_NUMBERS",
    "HOSTED_BACKENDS",
    "LOADERS",
    "LOCAL_BACKENDS",
    "T_ANSWER",
    "T_SOLVE",
    "T_THINK",
    "Backend",
    "Completion",
    "EarlyExitState",
    "EngineSpec",
    "Markers",
    "Mode",
    "RowEngine",
    "RowState",
    "Sampling",
    "StopPattern",
    "check_backend",
    "check_device",
    "check_runner",
    "check_engine_options",
    "check_markers",
    "derive_seed",
    "exit_ids",
    "generation_eos",
    "has_v2_processors",
    "load_engine",
    "mode_names",
    "modes_reference",
    "modes_usage",
    "problem_seed",
    "prompt_seeds",
    "replay_round",
    "resolve_backend",
    "resolve_markers",
    "sample_seed",
    "sentence_end_ids",
    "server_entry",
    "build_state",
    "prefilled",
    "PROMPT_CLOSED",
    "THINK_ENDS",
    "ModeIds",
    "transition_ids",
    "vllm_available",
    "worst_case_tokens",
    *_LAZY,
]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'e1.engine' has no attribute {name!r}")
    import importlib

    module, _, attribute = _LAZY[name].partition(":")
    return getattr(importlib.import_module(module), attribute or name)


def load_engine(
    model: str,
    spec: EngineSpec = EngineSpec(),
    *,
    batch_size: int = 64,
    api=None,
    modes: Sequence = (),
    journal: Path | None = None,
    **vllm_options,
):
    """An engine for ``model`` as ``spec`` says (its backend, ``auto`` included, dtype, device,
    vLLM settings and think markers: one :class:`~e1.engine.spec.EngineSpec`, checked when built).
    What is not a setting of the engine but of the run: ``batch_size`` (transformers; vLLM batches
    by itself), ``vllm_options`` (more ``vllm.LLM`` options: seed, colocate, sleep_mode, ...), and
    for the backends behind an API ``api`` (an :class:`e1.engine.api.openai_engine.ApiSettings`), ``modes`` (each
    one's method is checked and recorded at load) and ``journal`` (the replies a resumed run reads back)."""
    name = resolve_backend(spec.backend)
    if parse_drafter(spec.speculative) is not None:
        if name != "vllm":
            raise ConfigError(
                f"--speculative runs on vLLM only, and the backend here is {name}",
                hint="use --backend vllm, or leave --speculative out",
            )
        for mode in modes:  # before vLLM spends a minute loading (generate checks again)
            check_drafted(Mode.parse(mode))
    return LOADERS[name](
        model,
        spec,
        batch_size=batch_size,
        api=api,
        modes=[Mode.parse(m) for m in modes],
        journal=journal,
        vllm_options=vllm_options,
    )


def _load_hf(model: str, spec: EngineSpec, *, batch_size: int, **_):
    from e1.engine.hf.hf_engine import HFEngine

    return HFEngine.load(model, spec, batch_size=batch_size)


def _load_vllm(model: str, spec: EngineSpec, *, vllm_options: dict, **_):
    from e1.engine.vllm.vllm_engine import VLLMEngine

    return VLLMEngine.load(model, spec, **vllm_options)


def _load_openai(model: str, spec: EngineSpec, *, api, modes: list, journal, **_):
    from e1.engine.api.openai_engine import OpenAIEngine, check_api

    check_api("openai", api, modes)  # no --api-url: one line saying so
    return OpenAIEngine.load(model, api, modes, think_start=spec.think_start, think_end=spec.think_end, journal=journal)


def _hosted(name: str) -> Callable[..., object]:
    def load(model: str, spec: EngineSpec, *, api, modes: list, journal, **_):
        from e1.engine.api.hosted import HostedEngine
        from e1.engine.api.openai_engine import ApiSettings, check_api

        api = api or ApiSettings(None, backend=name)  # None: the vendor's own endpoint
        check_api(name, api, modes)
        return HostedEngine.load(model, api, modes, journal=journal)

    return load


# each backend's loader: (model, spec, **run) -> engine; the names are BACKENDS' (tests/test_backends.py)
LOADERS: dict[str, Callable[..., object]] = {
    "hf": _load_hf,
    "vllm": _load_vllm,
    "openai": _load_openai,
    "gemini": _hosted("gemini"),
    "anthropic": _hosted("anthropic"),
}
