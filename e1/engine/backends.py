"""The backends ``--backend`` names: one registry of small objects, and the gate every name passes.

    >>> list(BACKENDS)
    ['hf', 'vllm', 'openai', 'gemini', 'anthropic']
    >>> BACKENDS["gemini"].kind, BACKENDS["gemini"].key_env
    ('hosted', 'GEMINI_API_KEY')
    >>> check_backend("vlm")
    Traceback (most recent call last):
    e1.errors.ConfigError: unknown backend 'vlm' (did you mean 'vllm'?)

A backend is where the model runs: in this process (``local``: transformers, vLLM; training takes
only these), behind any OpenAI-compatible server (``server``: :mod:`e1.engine.api.openai_engine`), or behind a
vendor's hosted reasoning API through its SDK (``hosted``: :mod:`e1.engine.api.hosted`). ``auto`` is no
backend of its own: :func:`resolve_backend` turns it into vllm or hf.

This module imports no engine (the engines read it: the API key variables, the served names); each
backend's loader sits beside :func:`e1.engine.load_engine`, the only place that picks one.
"""

from __future__ import annotations

from dataclasses import dataclass

from e1.errors import ConfigError, did_you_mean

AUTO = "auto"  # vLLM when it is installed and a CUDA GPU is visible, else transformers
KINDS = ("local", "server", "hosted")


@dataclass(frozen=True)
class Backend:
    """One ``--backend``: where the model runs (:data:`KINDS`) and the variable its API key is read
    from (served backends). Its loader is :data:`e1.engine.LOADERS` [name]."""

    name: str
    kind: str
    key_env: str | None = None

    @property
    def served(self) -> bool:
        """The model runs behind an API: no weights here, so nothing to train."""
        return self.kind != "local"


BACKENDS: dict[str, Backend] = {
    backend.name: backend
    for backend in (
        Backend("hf", "local"),
        Backend("vllm", "local"),
        Backend("openai", "server", key_env="OPENAI_API_KEY"),
        Backend("gemini", "hosted", key_env="GEMINI_API_KEY"),
        Backend("anthropic", "hosted", key_env="ANTHROPIC_API_KEY"),
    )
}
BACKEND_NAMES = (AUTO, *BACKENDS)  # what --backend takes
LOCAL_BACKENDS = (AUTO, *(name for name, backend in BACKENDS.items() if not backend.served))  # what training takes
API_BACKENDS = tuple(name for name, backend in BACKENDS.items() if backend.served)
HOSTED_BACKENDS = tuple(name for name, backend in BACKENDS.items() if backend.kind == "hosted")


def check_backend(name: str, *, local: bool = False) -> str:
    """The gate for a backend name: ``name`` itself, or a one-line error (a typo gets the closest
    names; ``local``: a served backend, which has no weights to train, is refused).

    >>> check_backend("openai", local=True)
    Traceback (most recent call last):
    e1.errors.ConfigError: --backend openai cannot train: the model runs behind an API, and training updates its weights here (use --backend hf, vllm or auto)
    """
    if name not in BACKEND_NAMES:
        raise ConfigError(f"unknown backend {name!r}", hint=did_you_mean(name, BACKEND_NAMES))
    if local and name not in LOCAL_BACKENDS:
        raise ConfigError(
            f"--backend {name} cannot train: the model runs behind an API, and training updates its weights here",
            hint=f"use --backend {', '.join(LOCAL_BACKENDS[1:])} or {AUTO}",
        )
    return name


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def resolve_backend(backend: str = AUTO) -> str:
    """The backend ``backend`` names (a key of :data:`BACKENDS`); ``auto`` picks vLLM when it is
    installed and a CUDA GPU is visible, else transformers (looking for the GPU imports torch).

    >>> resolve_backend("hf")
    'hf'
    """
    if check_backend(backend) != AUTO:
        return backend
    if not vllm_available():
        return "hf"
    import torch

    return "vllm" if torch.cuda.is_available() else "hf"
