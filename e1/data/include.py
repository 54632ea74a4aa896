"""``--include PATH``: load the user's own code, which registers rewards, benchmarks, prompt styles or modes.

    paths = load_includes(["my_rewards.py", "plugins/"])   # absolute paths, as config.json records them

A file is imported as a module; a folder with an ``__init__.py`` as a package; any other folder
as each of its ``*.py`` files (sorted; names starting with ``_`` left out). The code registers
what it brings the usual way (``@register_reward("shout")``, ``register(Benchmark(...))``,
``@register_prompt("shout")``, ``@register_mode``). Each path is imported once per process, so a
run that loads them again (a resume, after the command line did) registers nothing twice. A path that is not there, or code that fails to import, is one line:
the error's own message, not a traceback (``E1_DEBUG=1`` shows it).

User code never replaces e1's own: a reward, benchmark, prompt style, mode or length reward
registered under a name that e1 (or another include) holds is refused in one line naming the
include and the name (:class:`e1.names.Registry`, the gate every registration passes).
Nor by patching it: an include that rebinds, removes or overrides one of e1's own functions,
classes' attributes or constants as it is imported is refused in one line naming it, and what it
rebound is put back (:func:`e1.names.replaced`).

What was included is recorded by content: :func:`include_fingerprints` (``sha256:`` over the file,
or over every importable file of a folder, linked folders followed, sorted by relative path) goes
into ``config.json`` beside the paths, and a resume (``load_includes(paths, out=run_dir)``) refuses an include that changed
since, as it refuses a changed dataset (:func:`e1.store.check_datasets`): one run is never scored
by two versions of a reward.

The modules ``E1_MODES`` names (:func:`e1.names.mode_plugins`) are user code too: recorded the same
way (their paths under ``mode_plugins``, their fingerprints beside the includes'), checked the same way.

e1 runs only the code the command names: a run folder's ``config.json`` says what must match, never
what to import. A resume whose folder records code this command does not name is refused in one line
(pass ``--include`` again, or set ``E1_MODES``), before anything is imported (:func:`check_code`).

    paths = load_includes(["my_rewards.py"], out=Path("runs/x"))   # checked against the folder's record first

What runs is what was fingerprinted: an include's modules (a package's submodules too, whenever they
are imported) are compiled from their source, never from a ``__pycache__`` file, which Python trusts
by the source's size and modification time (an edit of equal size with its time set back would run
the old code under the new fingerprint); a single file runs the very bytes that were hashed.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterable
from pathlib import Path

from e1.errors import ConfigError, E1Error, ResultsError
from e1.names import MODES_ENV, e1_state, mode_plugins, replaced
from e1.store import CONFIG, INCLUDE_FINGERPRINTS, check_datasets, read_record

_LOADED: dict[Path, str] = {}  # resolved path -> the module name it was imported as
_IMPORTED: dict[Path, str] = {}  # resolved path -> the fingerprint of the code imported from it
_SHA = "sha256:"
_PREFIX = "e1_include_"  # every include module's name starts so (_module_name); its submodules' too


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """An include's module compiled from its source (``source``: the bytes already read and hashed),
    never from a cached ``.pyc``, which Python takes when the source's size and mtime match."""

    def __init__(self, fullname: str, path: str, source: bytes | None = None):
        super().__init__(fullname, path)
        self.source = source

    def get_code(self, fullname: str):
        path = self.get_filename(fullname)
        source = self.source if self.source is not None else self.get_data(path)
        return self.source_to_code(source, path)


class _IncludeFinder:
    """Finds an include package's submodules (``e1_include_*.x``) as Python would, loaded by :class:`_SourceLoader`;
    with ``top``, an ``E1_MODES`` module ``top`` and its package's modules."""

    def __init__(self, top: str = ""):
        self.top = top

    def find_spec(self, fullname: str, path=None, target=None):
        ours = fullname == self.top or fullname.startswith(f"{self.top}.") if self.top else "." in fullname
        if not ours or not (self.top or fullname.startswith(_PREFIX)):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            spec.loader = _SourceLoader(fullname, spec.origin)
        return spec


def load_includes(paths: Iterable[str | Path], out: Path | None = None) -> tuple[str, ...]:
    """Import each path (once per process); their absolute paths, in order, duplicates dropped.
    With ``out`` (a run directory), its record is checked first (:func:`check_code`): code it records
    that ``paths`` leave out, or that changed since, is refused before anything is imported."""
    wanted: dict[Path, str] = {}  # resolved path -> as it was typed, for messages
    for typed in paths:
        wanted.setdefault(Path(typed).expanduser().resolve(), str(typed))
    if out is not None:  # a missing include is _import's to name; a missing E1_MODES module, load_plugins'
        check_code(Path(out), include_fingerprints([*(path for path in wanted if path.exists()), *plugin_paths()]))
    for path, typed in wanted.items():
        if path not in _LOADED:
            _IMPORTED[path] = include_fingerprint(path, typed) if path.exists() else ""  # what is imported now
            before = e1_state()
            _LOADED[path] = _import(path, typed)
            if (
                name := replaced(before, by=(_PREFIX,))
            ) is not None:  # e1's own code is never replaced, not even by patching it
                raise ConfigError(
                    f"--include {typed}: it replaces e1's own {name}",
                    hint="leave e1's code as it is: register yours under a name of its own",
                )
    if out is not None:  # again, on what was imported: a file changed while it was being imported is refused too
        imported = [*(path for path in wanted if path in _IMPORTED), *plugin_paths()]
        check_datasets(Path(out), include_fingerprints(imported), key=INCLUDE_FINGERPRINTS)
    return tuple(map(str, wanted))


def plugin_source(path: Path) -> bytes:
    """The bytes of ``path`` (an ``E1_MODES`` file) the mode loader runs, read once: their fingerprint is the
    one config.json records for it, whatever the file holds by then (as :func:`load_includes` records)."""
    source = Path(path).read_bytes()
    _IMPORTED[Path(path).expanduser().resolve()] = _SHA + hashlib.sha256(source).hexdigest()[:24]
    return source


def import_plugin(item: str):
    """Import module ``item`` (an ``E1_MODES`` name) and its package's modules from their source, never from a
    cached ``.pyc`` (which Python takes when the source's size and mtime match): what runs is what is fingerprinted."""
    finder = _IncludeFinder(item.split(".")[0])
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(item)
    finally:
        sys.meta_path.remove(finder)


def include_fingerprints(paths: Iterable[str | Path]) -> dict[str, str]:
    """``{absolute path: fingerprint}`` of each include, as it was imported (as it is now if it was not)."""
    resolved = [Path(path).expanduser().resolve() for path in paths]
    return {str(path): _IMPORTED.get(path) or include_fingerprint(path, str(path)) for path in resolved}


def record_includes(record: dict) -> dict:
    """A config's record (``to_json``) with its ``include`` paths, the ``E1_MODES`` modules' (``mode_plugins``)
    and the fingerprints of both (:data:`~e1.store.INCLUDE_FINGERPRINTS`); without them when there are none
    (config.json stays as it was without user code)."""
    if not record.get("include"):
        record.pop("include", None)
    plugins = [str(path) for path in plugin_paths()]
    code = [*record.get("include", ()), *plugins]
    return {
        **record,
        **({"mode_plugins": plugins} if plugins else {}),
        **({INCLUDE_FINGERPRINTS: include_fingerprints(code)} if code else {}),
    }


def plugin_paths() -> list[Path]:
    """The file or folder of each module ``E1_MODES`` names (a .py file, or a module found on ``sys.path``
    as Python would find it, without importing anything); one not found is left to the mode loader to name."""
    found = []
    for item in mode_plugins():
        if item.endswith(".py"):
            found += [Path(item).expanduser().resolve()] if Path(item).expanduser().is_file() else []
            continue
        spec, path, parts = None, None, item.split(".")
        for depth in range(len(parts)):  # each package's folders, never its code
            name = ".".join(parts[: depth + 1])
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or not spec.origin:
                break
            path = spec.submodule_search_locations
        if spec is not None and spec.origin and Path(spec.origin).exists():
            origin = Path(spec.origin).resolve()
            found.append(origin.parent if spec.submodule_search_locations else origin)
    return list(dict.fromkeys(found))


def include_fingerprint(path: Path, given: str) -> str:
    """``sha256:`` over a file's bytes, or over every file Python can import (``.py``, ``.pyc``, ``.so``)
    under a folder, linked folders followed as Python's imports follow them (hidden folders and
    ``__pycache__`` left out): each one's relative path, its size and its bytes, sorted by relative path."""
    if path.is_file():
        return _SHA + hashlib.sha256(_read(path, given)).hexdigest()[:24]
    digest = hashlib.sha256()
    for relative, file in sorted(_importable(path)):
        content = _read(file, given)
        digest.update(f"{relative}\0{len(content)}\0".encode() + content)
    return _SHA + digest.hexdigest()[:24]


def _importable(root: Path) -> list[tuple[str, Path]]:
    """Each importable file under ``root`` with its path relative to it, through linked folders (each real
    folder once: a link back up is no loop)."""
    import os

    suffixes, seen, found = tuple(importlib.machinery.all_suffixes()), set(), []
    for folder, dirs, files in os.walk(root, followlinks=True):
        info = os.stat(folder)
        if (info.st_dev, info.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((info.st_dev, info.st_ino))
        dirs[:] = [name for name in dirs if not name.startswith(".") and name != "__pycache__"]
        found += [
            (Path(folder, name).relative_to(root).as_posix(), Path(folder, name))
            for name in files
            if name.endswith(suffixes)
        ]
    return found


def _read(file: Path, given: str) -> bytes:
    if not file.is_file():  # a named pipe is never opened: reading it waits for a writer
        raise ConfigError(f"--include {given}: {file} is not a regular file", hint="check the path")
    try:
        return file.read_bytes()
    except OSError as err:
        raise ConfigError(
            f"--include {given}: cannot read {file}: {err.strerror or err}", hint="check the path"
        ) from None


def check_code(out: Path, fingerprints: dict[str, str]) -> None:
    """Refuse a resume into ``out`` whose ``config.json`` records code (an include) that ``fingerprints``
    (``{absolute path: fingerprint}`` of the code this command names) leaves out, or that changed since:
    one line each, naming it. Reads the record only: nothing is imported."""
    for path, flag in recorded_code(out).items():
        if path not in fingerprints:
            how = f"set {MODES_ENV}={path}" if flag == MODES_ENV else f"pass {flag} {path}"
            raise ResultsError(
                f"{out} was run with {flag} {path}, which this command does not name (e1 runs only the code you name)",
                hint=f"{how} to resume it, or use another --out",
            )
    check_datasets(Path(out), fingerprints, key=INCLUDE_FINGERPRINTS)


def recorded_code(out: Path | None) -> dict[str, str]:
    """``{absolute path: the flag that names it}`` of the code a run directory's ``config.json`` records (its
    includes, by path and by fingerprint); none when there is no run there yet. A value e1 does not write
    there is refused in one line."""
    record = read_record(Path(out) / CONFIG) if out is not None else None
    found: dict[str, str] = {}
    for key, flag in ((INCLUDE_FINGERPRINTS, "--include"), ("include", "--include"), ("mode_plugins", MODES_ENV)):
        value = (record or {}).get(key) or []
        if not isinstance(value, (list, dict)) or not all(isinstance(path, str) and "\0" not in path for path in value):
            raise ResultsError(
                f"{out}/{CONFIG} records {key} e1 did not write ({str(value)[:60]})",
                hint="restore config.json as e1 wrote it, or use another --out",
            )
        found.update({str(Path(path).expanduser().resolve()): flag for path in value})
    return found


def _import(path: Path, given: str) -> str:
    """Import a file, a package folder, or every module of a plain folder; the module name used."""
    if path.is_file() and path.suffix == ".py":
        source = _read(path, given)  # read once: the bytes hashed are the bytes run
        _IMPORTED[path] = _SHA + hashlib.sha256(source).hexdigest()[:24]
        return _import_module(path, _module_name(path), given, source=source)
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
    return f"{_PREFIX}{stem}_{digest}"


def _import_module(file: Path, name: str, given: str, package: Path | None = None, source: bytes | None = None) -> str:
    if not any(isinstance(finder, _IncludeFinder) and not finder.top for finder in sys.meta_path):
        sys.meta_path.insert(0, _IncludeFinder())
    spec = importlib.util.spec_from_file_location(
        name,
        file,
        loader=_SourceLoader(name, str(file), source),
        submodule_search_locations=[str(package)] if package else None,
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
