"""Engine options, checked before anything loads (the backends themselves: :mod:`e1.engine.backends`).

>>> check_markers("<think>", "</think>")
>>> check_device("cpu")
'cpu'
"""

from __future__ import annotations

from e1.engine.backends import check_backend, vllm_available  # noqa: F401  (vllm_available: e1.engine.vllm.vllm_engine reads it here)
from e1.errors import ConfigError, did_you_mean
from e1.names import DIGITS

DEVICE_KINDS = ("auto", "cpu", "cuda", "mps")
DTYPES = (
    "auto",
    "float32",
    "fp32",
    "bfloat16",
    "bf16",
    "float16",
    "fp16",
)  # as e1.engine.hf.hf_engine.weights_dtype reads them


def check_device(device: str) -> str:
    """Refuse a device name torch does not know, before anything loads; ``cuda`` and ``cuda:N``
    are also checked against the GPUs present (that imports torch).

    >>> check_device("cuda:x")
    Traceback (most recent call last):
    e1.errors.ConfigError: unknown device 'cuda:x' (use auto, cpu, cuda or cuda:N)
    """
    kind, _, index = device.partition(":")
    if kind not in DEVICE_KINDS or (index and not DIGITS.matches(index)) or (index and kind == "auto"):
        raise ConfigError(f"unknown device {device!r}", hint="use auto, cpu, cuda or cuda:N")
    if kind == "cuda":
        import torch

        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if int(index or 0) >= count:
            found = "this torch is a CPU build" if torch.version.cuda is None else f"{count} CUDA GPU(s) visible"
            raise ConfigError(f"--device {device}: no such GPU ({found})", hint="use --device cpu or auto")
    if kind == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise ConfigError("--device mps: no Apple GPU here", hint="use --device cpu or auto")
    return device


def check_markers(think_start: str | None, think_end: str | None) -> None:
    """The two think markers must differ (an end marker equal to the start would end thinking at once)."""
    for name, marker in (("--think-start", think_start), ("--think-end", think_end)):
        if marker is not None and not marker.strip():
            raise ConfigError(f"{name} is empty", hint="leave it out to use the tokenizer's marker")
    if think_start is not None and think_start == think_end:
        raise ConfigError(
            f"--think-start and --think-end are both {think_start!r}",
            hint="pass two different markers, e.g. <think> and </think>",
        )


def check_engine_options(backend: str, device: str, dtype: str) -> None:
    """The engine's names, refused before anything loads (its numbers: :class:`~e1.engine.spec.EngineSpec`'s fields)."""
    check_backend(backend)
    check_device(device)
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}", hint=did_you_mean(dtype, DTYPES))
