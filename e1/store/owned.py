"""What e1 may remove: only files it can show it wrote.

Every removal e1 makes goes through :func:`remove_owned`: it deletes the files a caller names *because
e1 recorded writing them* (a folder's manifest, the parts a compaction just read, the temporary
siblings e1 names with a random suffix), never a symlink (e1 writes none: the link and what it points at
are the user's), never anything not named. Folders left empty go too; a folder that still holds what
e1 did not write stays, and a replacement that would need it gone is refused in one line naming it.

    record_files(tmp)                          # after e1 filled a fresh folder: its manifest
    remove_owned(folder, recorded(folder))     # later: exactly those files, nothing the user added
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

from e1.errors import ResultsError

MANIFEST = ".e1-files.json"  # in a folder e1 filled: {"files": [relative path, ...]} of what it wrote


def record_files(folder: Path, files: Iterable[Path] | None = None) -> Path:
    """Write ``folder``'s manifest: ``files`` (default: every regular file under it, which e1 has just
    written into a fresh folder), as paths relative to ``folder``."""
    folder = Path(folder)
    if files is None:
        files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and p.name != MANIFEST]
    names = sorted({Path(p).relative_to(folder).as_posix() for p in files})
    (folder / MANIFEST).write_text(json.dumps({"files": names}) + "\n")
    return folder / MANIFEST


def recorded(folder: Path) -> list[str] | None:
    """The files ``folder``'s manifest names (with the manifest itself); None without a readable one."""
    try:
        names = json.loads((Path(folder) / MANIFEST).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    return [*map(str, names), MANIFEST] if isinstance(names, list) else None


def remove_owned(root: Path, names: Iterable[str], whole: bool = False, drop_root: bool = False) -> list[Path]:
    """Remove the entries ``names`` (relative to ``root``) that e1 can show it wrote; returns what stays in
    ``root`` (nothing when it is gone). A name that is a symlink, lies outside ``root`` or is not a regular
    file stays; ``whole``: the names are e1's own temporary folders (a random name e1 created), removed
    with everything in them. The folders under ``root`` the removal emptied go too (``drop_root``: and
    ``root``, when emptied); no other."""
    root = Path(root)
    if not root.is_dir() or root.is_symlink():
        return []
    base, emptied = root.resolve(), set()
    for name in names:
        path = root / name
        if path.is_symlink() or base not in path.resolve().parents:
            continue
        if whole and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_file():
            path.unlink(missing_ok=True)
        else:
            continue
        emptied.update(parent for parent in path.parents if (drop_root and parent == root) or root in parent.parents)
    for folder in sorted(emptied, key=lambda p: -len(p.parts)):  # deepest first
        if folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir()):
            folder.rmdir()
    return sorted(root.rglob("*")) if root.exists() else []


def replace_owned(folder: Path, what: str) -> None:
    """Clear ``folder`` for a new one of e1's to take its place: the files its manifest names go; a file
    there that e1 did not write is refused in one line, naming it, and nothing is removed."""
    folder = Path(folder)
    if not folder.exists() and not folder.is_symlink():
        return
    names = recorded(folder) or []
    foreign = [
        p
        for p in sorted(folder.rglob("*"))
        if (p.is_symlink() or p.is_file()) and p.relative_to(folder).as_posix() not in names
    ]
    if folder.is_symlink() or foreign:
        name = folder if folder.is_symlink() else foreign[0]
        raise ResultsError(
            f"{name} is not a file e1 wrote: e1 will not remove it to replace {what} {folder}",
            hint="move it out of the folder and rerun",
        )
    remove_owned(folder, names, drop_root=True)
