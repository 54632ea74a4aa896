"""Names that become paths (e1.store.paths), and what a killed write leaves (e1.store.results.remove_leftovers)."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.errors import ResultsError
from e1.store import file_name, inside, run_lock
from e1.store.results import remove_leftovers, write_text

# names as they arrive: model ids, paths, dataset names, config values; '..', '/', '~', control characters
NAMES = st.one_of(
    st.text(max_size=80),
    st.text(alphabet="./~\\-_ a\n\x00é", max_size=20),
    st.sampled_from(["", ".", "..", "../../../../x", "/etc/passwd", "~", "a/../..", "org/name"]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NAMES)
def test_a_name_becomes_one_file_name_inside_the_root(tmp_path_factory, name):
    root = tmp_path_factory.getbasetemp() / "root"
    made = file_name(name)
    assert made and made not in (".", "..") and "/" not in made and "\x00" not in made
    assert len(made.encode("utf-8", "surrogatepass")) <= 255  # any file system takes it
    path = inside(root, made)
    assert path.parent == root and root.resolve() in path.resolve().parents


@settings(max_examples=400, deadline=None)
@given(NAMES, NAMES)
def test_distinct_names_stay_distinct(first, second):
    assert (file_name(first) == file_name(second)) == (first == second)


def test_a_safe_name_is_kept_and_a_changed_one_says_so():
    assert file_name("Salesforce__E1-Math-1.5B") == "Salesforce__E1-Math-1.5B"
    assert file_name("details_aime_elastic_t4_s8|0_2025-01-01T00-00-00.parquet").endswith(
        "|0_2025-01-01T00-00-00.parquet"
    )
    for name in ("..", ".", "", "../../x", "a/b", ".hidden"):
        assert "~" in file_name(name)  # changed: a digest of the whole name keeps it apart


def test_inside_refuses_what_lies_outside_its_root(tmp_path):
    root = tmp_path / "out"
    assert inside(root, "a", "b.json") == root / "a" / "b.json"
    for parts in (("..", "x"), ("a", "..", "..", "x"), ("/etc/passwd",), (str(tmp_path),), (".",)):
        with pytest.raises(ResultsError, match="would lie outside"):
            inside(root, *parts)
    root.mkdir()
    os.symlink(tmp_path, root / "link")  # a symlink is followed: what it points at must be inside too
    with pytest.raises(ResultsError, match="would lie outside"):
        inside(root, "link", "x")


def test_taking_a_run_removes_what_a_killed_write_left(tmp_path):
    out = tmp_path / "run"
    write_text("{}", out / "config.json")
    leftovers = [out / ".summary.parquet.0a1b2c3d.tmp", out / "samples" / ".part-r0-00.parquet.deadbeef.tmp"]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1 half")
    (out / "checkpoints" / ".step_4.0123abcd.tmp").mkdir(parents=True)  # a folder written atomically
    nested = out / "models" / "m"  # a run of its own (a sweep's model): its own lock cleans it
    write_text("{}", nested / "config.json")
    (nested / ".summary.parquet.00000000.tmp").write_bytes(b"x")
    kept = [out / "notes.tmp", out / ".e1.lock.bak", out / "summary.parquet"]
    for path in kept:
        path.write_bytes(b"x")
    with run_lock(out, "e1 eval"):
        assert (
            not any(path.exists() for path in leftovers) and not (out / "checkpoints" / ".step_4.0123abcd.tmp").exists()
        )
        assert all(path.exists() for path in kept) and (nested / ".summary.parquet.00000000.tmp").exists()
    assert remove_leftovers(nested) == [nested / ".summary.parquet.00000000.tmp"]
