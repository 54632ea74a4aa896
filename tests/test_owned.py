"""e1 removes only files it can show it wrote: a bundle written again, a run's parts compacted, old
checkpoints pruned, each beside files, folders and symlinks the user added (hypothesis writes them)."""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.errors import E1Error
from e1.store import SampleStore
from tests.test_view import eval_run, sample_rows

CASES = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
NAMES = st.sampled_from(
    [
        "notes.txt",
        "data/mine.csv",
        "data/r0/extra.js",
        "data/r1/p9.js",
        "static/mine.css",
        "deep/a/b.txt",
        "data/r5/p0.js",
        "data/r1/own/x.txt",
    ]
)
EXTRAS = st.dictionaries(NAMES, st.sampled_from(["file", "folder", "link"]), min_size=1, max_size=5)


def _add(folder: Path, extras: dict[str, str], outside: Path) -> dict[Path, str]:
    """The user's additions: a file, an empty folder, or a symlink to a file of theirs outside."""
    added = {}
    for name, kind in extras.items():
        path = folder / name
        if path.exists() or path.is_symlink() or any(p.is_file() for p in path.parents):
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if kind == "file":
            path.write_text(f"mine: {name}")
        elif kind == "folder":
            path.mkdir()
        else:
            os.symlink(outside, path)
        added[path] = kind
    return added


def _intact(added: dict[Path, str], outside: Path) -> None:
    for path, kind in added.items():
        if kind == "file":
            assert path.read_text().startswith("mine: ")
        assert {"file": path.is_file() and not path.is_symlink(), "folder": path.is_dir(), "link": path.is_symlink()}[
            kind
        ], path
    assert outside.read_text() == "the user's own"


@CASES
@given(extras=EXTRAS)
def test_a_bundle_written_again_removes_only_its_own_files(tmp_path_factory, extras):
    pytest.importorskip("plotly")
    from e1.view.bundle import write_bundle

    root = tmp_path_factory.mktemp("bundle")
    outside = root / "elsewhere.txt"
    outside.write_text("the user's own")
    runs = [eval_run(root / "runs" / name) for name in ("a", "b")]
    out = root / "share"
    write_bundle(runs, out)
    added = _add(out, extras, outside)
    written = write_bundle(runs[:1], out)  # run b dropped: its files go, the user's stay
    _intact(added, outside)
    assert not (out / "data" / "r1" / "p0.js").exists() and (out / "data" / "r0" / "p0.js").is_file()
    mine = set(added) | {p for a in added for p in a.parents}
    left = {p for p in out.rglob("*") if p.is_file() and not p.is_symlink() and p not in mine}
    assert left == set(written)  # nothing of the earlier bundle's is left over, nothing of the user's is gone


@pytest.mark.parametrize("name", ["data/index.js", "index.html", "static/app.js", "data/r0/p0.js"])
def test_a_users_file_where_the_bundle_writes_is_refused_naming_it(tmp_path, name):
    pytest.importorskip("plotly")
    from e1.view.bundle import write_bundle

    runs = [eval_run(tmp_path / "runs" / "a")]
    out = tmp_path / "share"
    write_bundle(runs, out)
    marker = json.loads((out / "e1-bundle.json").read_text())
    (out / "e1-bundle.json").write_text(json.dumps({**marker, "files": [f for f in marker["files"] if f != name]}))
    (out / name).write_text("mine")
    with pytest.raises(E1Error, match=f"{name} is not a file e1 wrote"):
        write_bundle(runs, out)
    assert (out / name).read_text() == "mine"


def test_a_bundle_from_before_the_manifest_keeps_the_users_files(tmp_path):
    """The case reported: an earlier bundle (its marker lists no files) with notes.txt and data/mine.csv."""
    pytest.importorskip("plotly")
    from e1.view.bundle import write_bundle

    runs = [eval_run(tmp_path / "runs" / "a")]
    out = tmp_path / "share"
    write_bundle(runs, out)
    (out / "e1-bundle.json").write_text(json.dumps({"runs": ["a"]}))
    (out / "notes.txt").write_text("notes")
    (out / "data" / "mine.csv").write_text("a,b")
    write_bundle(runs, out)
    assert (out / "notes.txt").read_text() == "notes" and (out / "data" / "mine.csv").read_text() == "a,b"


@CASES
@given(
    extras=st.dictionaries(
        st.sampled_from(["notes.txt", "part-mine.parquet", "part-r0-zz.parquet", "sub/x.txt"]),
        st.sampled_from(["file", "folder", "link"]),
        min_size=1,
        max_size=3,
    )
)
def test_compaction_removes_only_the_parts_it_folded_in(tmp_path_factory, extras):
    out = tmp_path_factory.mktemp("run")
    outside = out.parent / f"{out.name}-elsewhere.txt"
    outside.write_text("the user's own")
    store = SampleStore(out)
    rows = sample_rows()
    store.append(rows[:8])
    store.append(rows[8:])
    added = _add(store.parts_dir, extras, outside)
    assert len(store.compact()) == 16
    _intact(added, outside)
    assert not list(store.parts_dir.glob("part-r0-????????????????.parquet"))


def test_pruning_checkpoints_removes_only_what_each_save_recorded(tmp_path):
    from e1.grpo.checkpoint import STATE, _prune, saved_models
    from e1.store import record_files

    for step in (1, 2, 3):
        folder = tmp_path / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"w")
        (folder / STATE).write_bytes(b"s")
        record_files(folder)
    (tmp_path / "checkpoints" / "step_1" / "my_eval.json").write_text("{}")
    _prune(SimpleNamespace(out=tmp_path, keep_last=1))
    assert [p.name for p in saved_models(tmp_path)] == ["step_1", "step_3"]
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "step_1").iterdir()) == ["my_eval.json"]


@CASES
@given(
    tree=st.dictionaries(
        st.sampled_from(["a", "b/c", "b/d", "e/f/g", "h"]), st.sampled_from(["file", "link"]), min_size=1
    ),
    named=st.sets(st.sampled_from(["a", "b/c", "b/d", "e/f/g", "h", "../x", "b"])),
)
def test_remove_owned_removes_exactly_the_named_regular_files(tmp_path_factory, tree, named):
    from e1.store import remove_owned

    root = tmp_path_factory.mktemp("owned") / "root"
    outside = root.parent / "x"
    outside.write_text("the user's own")
    root.mkdir()
    for name, kind in tree.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name) if kind == "file" else os.symlink(outside, root / name)
    remove_owned(root, named)
    for name, kind in tree.items():
        gone = kind == "file" and name in named
        assert ((root / name).exists() or (root / name).is_symlink()) != gone, name
    assert outside.read_text() == "the user's own" and root.is_dir()


@contextlib.contextmanager
def _within(seconds: int):
    """A hang (a named pipe opened for reading waits for a writer) fails the run instead of blocking it."""
    faulthandler.dump_traceback_later(seconds, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _edit(path: Path, kind: str, outside: Path) -> None:
    """The user's change at a name e1 wrote: other content; other bytes of the same size with the time set
    back (``touch -r``); a symlink to a file of theirs; an empty folder; a named pipe; a socket."""
    if kind in ("content", "same size"):
        before = path.stat()
        path.write_bytes(b"m" * before.st_size if kind == "same size" else b"mine")
        if kind == "same size":
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        return
    path.unlink()
    make = {
        "link": lambda: os.symlink(outside, path),
        "folder": path.mkdir,
        "pipe": lambda: os.mkfifo(path),
        "socket": lambda: os.mknod(path, stat.S_IFSOCK | 0o600),
    }
    make[kind]()


def _snapshot(folder: Path) -> dict:
    """Every entry under ``folder``: its kind, mode and modification time, and a regular file's bytes (a pipe
    is never opened)."""
    found = {}
    for path in [folder, *folder.rglob("*")]:
        info = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        found[path.relative_to(folder).as_posix()] = (stat.S_IFMT(info.st_mode), info.st_mtime_ns, data)
    return found


EDITS = st.sampled_from(["content", "same size", "link", "folder", "pipe", "socket"])


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(index=st.integers(0, 50), kind=EDITS)
def test_a_bundle_file_the_user_changed_is_refused_untouched_and_the_next_write_after_moving_it_holds(
    tmp_path_factory, index, kind
):
    pytest.importorskip("plotly")
    from e1.view.bundle import MARKER, write_bundle

    root = tmp_path_factory.mktemp("edited")
    outside = root / "elsewhere.txt"
    outside.write_text("the user's own")
    runs = [eval_run(root / "runs" / "a")]
    out = root / "share"
    with _within(120):
        names = sorted(p.relative_to(out).as_posix() for p in write_bundle(runs, out) if p.name != MARKER)
        name = names[index % len(names)]
        _edit(out / name, kind, outside)
        mine = _snapshot(out / name)
        with pytest.raises(E1Error, match=f"{name} (is not a file e1 wrote|would lie outside)") as refused:
            write_bundle(runs, out)
        assert "\n" not in refused.value.message and outside.read_text() == "the user's own"
        assert _snapshot(out / name) == mine
        (out / name).rename(root / "moved")  # the user keeps theirs elsewhere: the bundle writes again
        assert {p.relative_to(out).as_posix() for p in write_bundle(runs, out)} == {*names, MARKER}


@CASES
@given(target=st.sampled_from(["a.bin", "sub/b.bin", ".e1-files.json", "sub"]), kind=EDITS)
def test_a_folder_e1_wrote_and_the_user_changed_is_never_replaced(tmp_path_factory, target, kind):
    from e1.store import atomic_write

    root = tmp_path_factory.mktemp("replace")
    outside = root / "elsewhere.txt"
    outside.write_text("the user's own")

    def write(folder: Path) -> None:
        (folder / "sub").mkdir()
        (folder / "a.bin").write_bytes(b"e1's a")
        (folder / "sub" / "b.bin").write_bytes(b"e1's b")

    with _within(60):
        folder = atomic_write(root / "tensorboard", write, directory=True)
        if target == "sub":  # a file of the user's in a folder e1 made
            target = "sub/mine.txt"
            (folder / target).write_text("mine")
        else:
            _edit(folder / target, kind, outside)
        before = _snapshot(folder)
        with pytest.raises(E1Error, match="is not a file e1 wrote") as refused:
            atomic_write(folder, write, directory=True)
        assert "\n" not in refused.value.message and _snapshot(folder) == before
        assert outside.read_text() == "the user's own" and not list(root.glob(".*tmp*"))


@CASES
@given(kind=st.sampled_from(["empty folder", "file", "link", "pipe", "socket"]))
def test_what_the_user_put_where_e1_writes_a_folder_is_refused_untouched(tmp_path_factory, kind):
    from e1.store import atomic_write

    root = tmp_path_factory.mktemp("theirs")
    (root / "elsewhere").mkdir()
    path = root / "tensorboard"
    make = {
        "empty folder": path.mkdir,
        "file": lambda: path.write_text("mine"),
        "link": lambda: os.symlink(root / "elsewhere", path),
        "pipe": lambda: os.mkfifo(path),
        "socket": lambda: os.mknod(path, stat.S_IFSOCK | 0o600),
    }
    make[kind]()
    before = {**_snapshot(root), ".": None}  # the folder above: e1's own temporary sibling came and went
    with _within(60), pytest.raises(E1Error, match="is not a file e1 wrote") as refused:
        atomic_write(path, lambda folder: (folder / "a.bin").write_bytes(b"e1's"), directory=True)
    assert "\n" not in refused.value.message and {**_snapshot(root), ".": None} == before


@CASES
@given(kind=EDITS, keep=st.booleans())
def test_pruning_leaves_a_checkpoint_file_the_user_changed(tmp_path_factory, kind, keep):
    from e1.grpo.checkpoint import STATE, _prune, saved_models
    from e1.store import record_files

    root = tmp_path_factory.mktemp("prune")
    outside = root / "elsewhere.txt"
    outside.write_text("the user's own")
    for step in (1, 2):
        folder = root / "checkpoints" / f"step_{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / STATE).write_bytes(b"s")
        record_files(folder)
    changed = root / "checkpoints" / "step_1" / ("model.safetensors" if keep else STATE)
    _edit(changed, kind, outside)
    mine = _snapshot(changed)
    with _within(60):
        _prune(SimpleNamespace(out=root, keep_last=1))
    assert _snapshot(changed) == mine and [p.name for p in saved_models(root)][-1] == "step_2"
    assert sorted(p.name for p in changed.parent.iterdir()) == [changed.name]
