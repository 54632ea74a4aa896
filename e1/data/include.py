"""``--include PATH``: load the user's own code, which registers rewards, benchmarks, prompt styles or modes.

    paths = load_includes(["my_rewards.py", "plugins/"])   # absolute paths, as config.json records them

A file is imported as a module; a folder with an ``__init__.py`` as a package; any other folder
as each of its ``*.py`` files (sorted; names starting with ``_`` left out). The code registers
what it brings the usual way (``@register_reward("shout")``, ``register(Benchmark(...))``,
``@register_prompt("shout")``, ``@register_mode``). Each path is imported once per process, so a
run that loads the includes its ``config.json`` recorded (a resume) after the command line did
registers nothing twice. A path that is not there, or code that fails to import, is one line:
the error's own message, not a traceback (``E1_DEBUG=1`` shows it).

User code never replaces e1's own: a reward, benchmark, prompt style, mode or length reward
registered under a name that e1 (or another include) holds is refused in one line naming the
include and the name (:class:`e1.names.Registry`, the gate every registration passes).

What was included is recorded by content: :func:`include_fingerprints` (``sha256:`` over the file,
or over every ``.py`` file of a folder, sorted by relative path) goes into ``config.json`` beside
the paths, and a resume (``load_includes(paths, out=run_dir)``) refuses an include that changed
since, as it refuses a changed dataset (:func:`e1.store.check_datasets`): one run is never scored
by two versions of a reward.

    paths = load_includes(["my_rewards.py"], out=Path("runs/x"))   # its recorded includes first, each checked
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from e1.errors import ConfigError, E1Error
from e1.store import CONFIG, INCLUDE_FINGERPRINTS, check_datasets

_LOADED: dict[Path, str] = {}  # resolved path -> the module name it was imported as
_IMPORTED: dict[Path, str] = {}  # resolved path -> the fingerprint of the code imported from it


def load_includes(paths: Iterable[str | Path], out: Path | None = None) -> tuple[str, ...]:
    """Import each path (once per process); their absolute paths, in order, duplicates dropped.
    With ``out`` (a run directory), the includes its ``config.json`` recorded come first, and an
    include whose code changed since that run is refused before anything is imported."""
    wanted: dict[Path, str] = {}  # resolved path -> as it was typed (or recorded), for messages
    for typed in [*recorded_includes(out), *paths]:
        wanted.setdefault(Path(typed).expanduser().resolve(), str(typed))
    if out is not None:  # a missing include is _import's to name
        check_datasets(
            Path(out), include_fingerprints(path for path in wanted if path.exists()), key=INCLUDE_FINGERPRINTS
        )
    for path, typed in wanted.items():
        if path not in _LOADED:
            _IMPORTED[path] = include_fingerprint(path, typed) if path.exists() else ""  # what is imported now
            _LOADED[path] = _import(path, typed)
    return tuple(map(str, wanted))


def include_fingerprints(paths: Iterable[str | Path]) -> dict[str, str]:
    """``{absolute path: fingerprint}`` of each include, as it was imported (as it is now if it was not)."""
    resolved = [Path(path).expanduser().resolve() for path in paths]
    return {str(path): _IMPORTED.get(path) or include_fingerprint(path, str(path)) for path in resolved}


def record_includes(record: dict) -> dict:
    """A config's record (``to_json``) with its ``include`` paths and :data:`~e1.store.INCLUDE_FINGERPRINTS`
    when it has includes; without either when it has none (config.json stays as it was without --include)."""
    if not record.get("include"):
        record.pop("include", None)
        return record
    return {**record, INCLUDE_FINGERPRINTS: include_fingerprints(record["include"])}


def include_fingerprint(path: Path, given: str) -> str:
    """``sha256:`` over a file's bytes, or over every ``.py`` file under a folder (hidden folders left
    out): each one's relative path, its size and its bytes, sorted by relative path."""
    if path.is_file():
        return "sha256:" + hashlib.sha256(_read(path, given)).hexdigest()[:24]
    digest = hashlib.sha256()
    files = sorted(
        (file.relative_to(path).as_posix(), file)
        for file in path.rglob("*.py")
        if not any(part.startswith(".") for part in file.relative_to(path).parts[:-1])
    )
    for relative, file in files:
        content = _read(file, given)
        digest.update(f"{relative}\0{len(content)}\0".encode() + content)
    return "sha256:" + digest.hexdigest()[:24]


def _read(file: Path, given: str) -> bytes:
    try:
        return file.read_bytes()
    except OSError as err:
        raise ConfigError(
            f"--include {given}: cannot read {file}: {err.strerror or err}", hint="check the path"
        ) from None


def recorded_includes(out: Path | None) -> list[str]:
    """The includes a run directory's ``config.json`` recorded (none when there is no run there yet)."""
    import json

    config = Path(out) / CONFIG if out is not None else None
    if config is None or not config.is_file():
        return []
    try:
        recorded = json.loads(config.read_text()).get("include") or []
    except (OSError, ValueError, AttributeError):
        return []  # an unreadable config.json is the run directory check's to report
    return [str(path) for path in recorded] if isinstance(recorded, list) else []


def _import(path: Path, given: str) -> str:
    """Import a file, a package folder, or every module of a plain folder; the module name used."""
    if path.is_file() and path.suffix == ".py":
        return _import_module(path, _module_name(path), given)
    if path.is_dir() and (path / "__init__.py").is_file():
        return _import_module(path / "__init__.py", _module_name(path), given, package=path)
    if path.is_dir():
        modules = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        if not modules:
            raise ConfigError(
                f"--include {given}: the folder holds no .py file",
                hint="point at a module or a package",
            )
        for module in modules:
            _import_module(module, _module_name(module), given)
        return _module_name(path)
    if path.exists():
        raise ConfigError(
            f"--include {given}: not a .py file or a folder",
            hint="point at a module or a package",
        )
    raise ConfigError(f"--include {given}: no such file or folder", hint="check the path")


def _module_name(path: Path) -> str:
    """A name no other module has: the stem and a digest of the full path (two ``rewards.py`` differ)."""
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:8]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"e1_include_{stem}_{digest}"


def _import_module(file: Path, name: str, given: str, package: Path | None = None) -> str:
    spec = importlib.util.spec_from_file_location(
        name, file, submodule_search_locations=[str(package)] if package else None
    )
    if spec is None or spec.loader is None:
        raise ConfigError(
            f"--include {given}: cannot import {file}",
            hint="point at a .py file or a package",
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a package's submodules import it by this name
    try:
        spec.loader.exec_module(module)
    except E1Error as err:  # e.g. a reward registered twice: its own message and hint
        sys.modules.pop(name, None)
        raise type(err)(f"--include {given}: {err.message}", hint=err.hint) from err
    except BaseException as err:  # the user's code: any error it raises, as one line
        sys.modules.pop(name, None)
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        where = "" if isinstance(err, SyntaxError) else _where(err, file)  # a SyntaxError names its line
        raise ConfigError(
            f"--include {given}: {type(err).__name__}: {err}{where}",
            hint="fix the code (E1_DEBUG=1 shows the traceback)",
        ) from err
    return name


def _where(err: BaseException, file: Path) -> str:
    """`` (at NAME.py line N)`` for the innermost frame in the included code, if any."""
    tb, found = err.__traceback__, None
    folder = file.parent
    while tb is not None:
        frame_file = Path(tb.tb_frame.f_code.co_filename)
        if frame_file.parent == folder or folder in frame_file.parents:
            found = f" (at {frame_file.name} line {tb.tb_lineno})"
        tb = tb.tb_next
    return found or ""
