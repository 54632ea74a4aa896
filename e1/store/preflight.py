"""Checks that run before any model loads, so a bad input fails in seconds, not after minutes of loading.

    check_writable(Path("runs/x"))                        # --out: a directory we can create or write
    check_model_path("./my-model")                        # a local-looking model path must exist
    check_context("./my-model", [Budget(1024, 1024)], [Mode()])   # modes a budget bounds   # budgets against config.json

Nothing here imports torch or writes a file.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Sequence
from pathlib import Path

from e1.budget import Budget
from e1.errors import ConfigError, DataError, ModelError, ResultsError

CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


def check_out(out: Path | str, flag: str = "--out") -> Path:
    """Refuse an empty path (``--out ''`` would write into the current directory); returns it as a Path."""
    if not str(out).strip():
        raise ConfigError(f"{flag} is empty", hint="name a directory, e.g. runs/x; '.' is the current one")
    return Path(out)


def check_writable(out: Path, flag: str = "--out") -> None:
    """``out`` is a directory that exists and is writable, or could be created: its nearest existing
    ancestor is a writable directory. Creates nothing."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ResultsError(f"{flag} {out} is a file", hint="pass a directory")
    existing = out.absolute()
    while not existing.exists():  # the filesystem root always exists
        existing = existing.parent
    if not existing.is_dir():
        raise ResultsError(f"cannot create {flag} {out}: {existing} is a file", hint="pass a directory path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ResultsError(
            f"cannot write into {flag} {out}: {existing} is not writable", hint=f"pass a {flag} you can write to"
        )


def path_kind(path: Path | str) -> str | None:
    """What is at ``path`` when it is not a regular file, in words (None: nothing is there)."""
    import stat

    path = Path(path)
    if not os.path.lexists(path):
        return None
    try:
        mode = path.stat().st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "a symlink loop"
        return f"a broken symlink (to {os.readlink(path)})" if path.is_symlink() else f"unreadable ({err.strerror})"
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a file"),
    )
    return next(words for test, words in kinds if test(mode))


def missing_file(spec: str | Path, wanted: str = "a data file", hint: str = "check the path") -> DataError:
    """The error for ``spec`` that is not a regular file: what it is instead (a directory, a FIFO,
    ``/dev/null``'s character device, a symlink loop), or that there is no such file."""
    kind = path_kind(Path(spec).expanduser())
    if kind is None:
        return DataError(f"{spec}: no such file", hint=hint)
    return DataError(f"{spec} is {kind}, not {wanted}", hint=hint)


def looks_local(model: str) -> bool:
    """A model spelled as a path (``./m``, ``/abs/m``, ``~/m``, ``a/b/c``), not as a hub id ``org/name``."""
    return model.startswith((".", "/", "~")) or model.count("/") > 1 or os.sep != "/" and os.sep in model


def check_model_path(model: str) -> None:
    """A model given as a path must be an existing folder (a hub id is looked up when it loads)."""
    path = Path(model).expanduser()
    if path.suffix.lower() == ".gguf" and path.is_file():
        raise ModelError(f"model {model!r} is a GGUF file, which e1 cannot load", hint=_GGUF_HINT)
    if path.exists() and not path.is_dir():
        raise ModelError(f"model {model!r} is a file", hint="pass the model's folder (with config.json) or a hub id")
    if not path.exists() and looks_local(model):
        raise ModelError(f"no model folder {model!r}", hint="check the path, or pass a Hugging Face hub id")
    if path.is_dir() and not (path / "config.json").exists():
        _check_model_folder(model, path)


_GGUF_HINT = (
    "e1 loads Hugging Face models (config.json, safetensors weights, tokenizer files): "
    "pass the model the GGUF was converted from, e.g. its hub id"
)


def _check_model_folder(model: str, path: Path) -> None:
    """A folder without config.json: say what it holds instead (nothing, or only GGUF files)."""
    entries = sorted(entry.name for entry in path.iterdir() if not entry.name.startswith("."))
    if not entries:
        raise ModelError(
            f"model folder {model!r} is empty",
            hint="copy or download a Hugging Face model into it (config.json, weights, tokenizer "
            "files), or pass a hub id",
        )
    ggufs = [name for name in entries if name.lower().endswith(".gguf")]
    if ggufs:
        raise ModelError(
            f"model folder {model!r} holds a GGUF file ({ggufs[0]}), which e1 cannot load", hint=_GGUF_HINT
        )


def config_context(model: str) -> int | None:
    """The context length in a local model folder's config.json (None: unknown or not local)."""
    try:
        config = json.loads((Path(model).expanduser() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    config = config.get("text_config", config) if isinstance(config, dict) else {}
    values = [config.get(name) for name in CONTEXT_FIELDS]
    return next((v for v in values if isinstance(v, int) and not isinstance(v, bool) and v > 0), None)


def check_context(model: str, budgets: Sequence[Budget], modes: Sequence, max_model_len: int | None = None) -> None:
    """Refuse a budget that cannot fit the model's context even with an empty prompt: every mode a
    budget bounds needs at least ``t + s`` tokens (the engine checks exactly later). ``modes``: those
    modes only (``mode.bounded``; mode ``none`` is only capped by the context)."""
    context = max_model_len or config_context(model)
    if context is None:
        return
    for mode in modes:
        for budget in budgets:
            if budget.total > context:
                raise ConfigError(
                    f"the {mode} budget t={budget.think} s={budget.solve} needs at least {budget.total} tokens, "
                    f"more than the context of {model} ({context})",
                    hint="lower --think/--solve or use a model with a longer context",
                )
