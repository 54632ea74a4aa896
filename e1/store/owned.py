"""What e1 may remove or replace: only files it can show it wrote, as it wrote them.

Every removal e1 makes goes through :func:`remove_owned`: it deletes the files a caller names *because
e1 recorded writing them* (a folder's manifest, the parts a compaction just read, the temporary
siblings e1 names with a random suffix), never a symlink (e1 writes none: the link and what it points at
are the user's), never anything not named. A manifest records each file's stamp as e1 left it
(:func:`e1.store.digest.stat_stamp`: size, modification and change time, inode): a file changed since, or
anything else now at its name (a symlink, a folder, a named pipe, a socket), is the user's
(:func:`owned_names`). Folders left empty go too; a folder that still holds what e1 did not write stays,
and a replacement that would need it gone is refused in one line naming it, before anything is removed.

Nothing here opens a file that is not regular (``lstat`` first): opening a named pipe waits for a writer.

    record_files(tmp)                          # after e1 filled a fresh folder: its manifest
    remove_owned(folder, recorded(folder))     # later: exactly those files, as e1 left them
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from e1.errors import ResultsError
from e1.store.digest import stat_stamp

MANIFEST = ".e1-files.json"  # in a folder e1 filled: {"files": [relative path, ...], "stamps": {path: stamp}}
_MANIFEST_BYTES = 64 << 20  # a manifest larger than this is no manifest e1 wrote


def stamps(folder: Path, names: Iterable[str]) -> dict[str, list[int] | None]:
    """Each named file's stamp as e1 leaves it (None for what is not a regular file)."""
    return {name: _stamp(Path(folder) / name) for name in names}


def _stamp(path: Path) -> list[int] | None:
    try:
        info = path.lstat()
    except (OSError, ValueError):
        return None
    return list(stat_stamp(info)) if stat.S_ISREG(info.st_mode) else None


def read_manifest(path: Path) -> dict | None:
    """The JSON object in ``path`` when it is a regular file of a manifest's size; None otherwise (a symlink,
    a folder or a named pipe at its name is no manifest, and is never opened)."""
    try:
        info = Path(path).lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MANIFEST_BYTES:
            return None
        record = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def owned_names(folder: Path, record: dict) -> set[str] | None:
    """The files manifest ``record`` lists that are still as e1 left them (a regular file of the stamp
    recorded); None when it lists no files. A manifest without stamps owns none: nothing shows them unchanged."""
    names, kept = record.get("files"), record.get("stamps")
    if not isinstance(names, list):
        return None
    kept = kept if isinstance(kept, dict) else {}
    return {
        str(name)
        for name in names
        if isinstance(kept.get(str(name)), list) and kept[str(name)] == _stamp(Path(folder) / str(name))
    }


def record_files(folder: Path, files: Iterable[Path] | None = None) -> Path:
    """Write ``folder``'s manifest: ``files`` (default: every regular file under it, which e1 has just
    written into a fresh folder), as paths relative to ``folder``, each with its stamp."""
    folder = Path(folder)
    if files is None:
        files = [p for p in _entries(folder) if p.name != MANIFEST and _stamp(p) is not None]
    names = sorted({Path(p).relative_to(folder).as_posix() for p in files})
    (folder / MANIFEST).write_text(json.dumps({"files": names, "stamps": stamps(folder, names)}) + "\n")
    return folder / MANIFEST


def recorded(folder: Path) -> list[str] | None:
    """The files ``folder``'s manifest names that are still as e1 left them, with the manifest itself; None
    without a manifest (a symlink, folder or pipe at its name is none)."""
    record = read_manifest(Path(folder) / MANIFEST)
    names = owned_names(folder, record) if record is not None else None
    return None if names is None else [*sorted(names), MANIFEST]


def remove_owned(root: Path, names: Iterable[str], whole: bool = False, drop_root: bool = False) -> list[Path]:
    """Remove the entries ``names`` (relative to ``root``) that e1 can show it wrote; returns what stays in
    ``root`` (nothing when it is gone). A name that is a symlink, lies outside ``root`` or is not a regular
    file stays; ``whole``: the names are e1's own temporary folders (a random name e1 created), removed
    with everything in them. The folders under ``root`` the removal emptied go too (``drop_root``: and
    ``root``, when emptied); no other."""
    root = Path(root)
    if not _is(root, stat.S_ISDIR):
        return []
    base, emptied = root.resolve(), set()
    for name in names:
        path = root / name
        if not (_is(path, stat.S_ISREG) or (whole and _is(path, stat.S_ISDIR))) or base not in path.resolve().parents:
            continue
        if _is(path, stat.S_ISDIR):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        emptied.update(parent for parent in path.parents if (drop_root and parent == root) or root in parent.parents)
    for folder in sorted(emptied, key=lambda p: -len(p.parts)):  # deepest first
        if _is(folder, stat.S_ISDIR) and not any(folder.iterdir()):
            folder.rmdir()
    return _entries(root) if _is(root, stat.S_ISDIR) else []


def replace_owned(folder: Path, what: str) -> None:
    """Clear ``folder`` for a new one of e1's to take its place: the files its manifest names, as e1 left
    them, go. Anything removing them would leave (a file e1 did not write or that changed since, a symlink,
    a named pipe, an empty folder; ``folder`` itself not a folder, or one without a manifest) is refused in one line naming it, before
    anything is removed."""
    folder = Path(folder)
    if not os.path.lexists(folder):
        return
    listed = recorded(folder) if _is(folder, stat.S_ISDIR) else None
    names = listed or []
    foreign = [p for p in _entries(folder) if _stays(p, folder, names)] if _is(folder, stat.S_ISDIR) else [folder]
    foreign = foreign or ([folder] if listed is None else [])  # an empty folder no manifest names is the user's
    foreign = foreign or remove_owned(folder, names, drop_root=True)  # what appeared meanwhile stays, refused
    if foreign:
        raise ResultsError(
            f"{foreign[0]} is not a file e1 wrote (or it changed since): e1 will not remove it to replace {what} "
            f"{folder}",
            hint="move it out of the folder and rerun",
        )


def _stays(path: Path, folder: Path, names: list[str]) -> bool:
    """Whether removing ``names`` from ``folder`` leaves ``path``: anything but a regular file or a folder,
    a file not named, or an empty folder (e1 records files, and writes no empty folder)."""
    if _is(path, stat.S_ISREG):
        return path.relative_to(folder).as_posix() not in names
    try:
        return not _is(path, stat.S_ISDIR) or not any(path.iterdir())
    except OSError:  # a folder e1 cannot read is none it wrote
        return True


def _is(path: Path, kind) -> bool:
    """Whether ``path`` itself (never what a symlink there points at) is of ``kind`` (``stat.S_ISDIR``, ...)."""
    try:
        return kind(path.lstat().st_mode)
    except (OSError, ValueError):
        return False


def _entries(folder: Path) -> list[Path]:
    """Everything under ``folder``, sorted; a symlinked folder is listed, never entered."""
    found = []
    for top, dirs, files in os.walk(folder):
        found += [Path(top) / name for name in (*dirs, *files)]
    return sorted(found)
