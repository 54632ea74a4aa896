"""User code (``--include``, ``E1_MODES``) never replaces e1's own silently, and what it was is recorded.

Each registry (rewards, benchmarks, prompt styles, modes, length rewards) has one gate
(:class:`e1.names.Registry`): an include that registers a name e1 holds is refused in one line
naming the include and the name, and e1's definition stays. Each include is recorded in
``config.json`` with a content fingerprint; a resume with changed code is refused in one line with
the fix, as a changed dataset is; a run recorded before fingerprints were resumes as it did."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.data import include_fingerprints, load_includes, prompts, registry
from e1.engine.modes import REGISTRY as MODES
from e1.errors import E1Error, ResultsError
from e1.rewards import length
from e1.rewards import registry as rewards
from e1.store import CONFIG, INCLUDE_FINGERPRINTS, write_json

FIXTURES = Path(__file__).parent / "fixtures"

# each registry: the table, and the code of an include registering ``name`` there
REGISTRIES = {
    "reward task": (
        lambda: rewards._REWARDS,
        "from e1.rewards import register_reward\n"
        "@register_reward({name!r})\ndef mine(completions, answers, **columns):\n"
        "    return [1.0] * len(completions)\n",
    ),
    "benchmark": (
        lambda: registry._REGISTRY,
        "from e1.data import Benchmark, register\n"
        "register(Benchmark(name={name!r}, hub_id='me/mine', split='test', description='mine'))\n",
    ),
    "prompt style": (
        lambda: prompts._STYLES,
        "from e1.data.prompts import register_prompt\n@register_prompt({name!r})\ndef mine(row):\n    return 'x'\n",
    ),
    "mode": (
        lambda: MODES,
        "from e1.engine.modes import Mode, register\n"
        "@register\nclass Mine(Mode):\n    name = {name!r}\n    summary = 'mine'\n",
    ),
    "length reward": (
        lambda: length._SHAPINGS,
        "from e1.rewards.length import LengthShaping, register_shaping\n"
        "@register_shaping({name!r})\nclass Mine(LengthShaping):\n    pass\n",
    ),
}
BUILT_IN = {kind: sorted(table()) for kind, (table, _) in REGISTRIES.items()}


@settings(max_examples=30, deadline=None)
@given(data=st.data(), kind=st.sampled_from(sorted(REGISTRIES)))
def test_an_include_registering_a_built_in_name_is_refused_naming_both(data, kind):
    name = data.draw(st.sampled_from(BUILT_IN[kind]))
    table, code = REGISTRIES[kind]
    held = table()[name]
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "mine.py"
        file.write_text(code.format(name=name))
        with pytest.raises(E1Error) as info:
            load_includes([file])
    line = str(info.value)
    assert f"--include {file}" in line and f"{kind} {name!r}" in line and "e1's own" in line and "\n" not in line
    assert table()[name] is held  # e1's definition stays


# how an include might take a built-in's name out of its registry before registering its own
TABLES = {
    "reward task": "from e1.rewards import registry as r\ntable = r._REWARDS\n",
    "benchmark": "from e1.data import registry as r\ntable = r._REGISTRY\n",
    "prompt style": "from e1.data import prompts as r\ntable = r._STYLES\n",
    "mode": "from e1.engine.modes import REGISTRY as table\n",
    "length reward": "from e1.rewards import length as r\ntable = r._SHAPINGS\n",
}
REMOVALS = [
    "del table[{name!r}]\n",
    "table.pop({name!r})\n",
    "table.pop({name!r}, None)\n",
    "table.clear()\n",
    "while table:\n    table.popitem()\n",
]


@settings(max_examples=30, deadline=None)
@given(data=st.data(), kind=st.sampled_from(sorted(REGISTRIES)), removal=st.sampled_from(REMOVALS))
def test_an_include_cannot_remove_a_built_in_to_register_its_own(data, kind, removal):
    """Removing e1's own entry (``del``, ``pop``, ``popitem``, ``clear``), then registering the name,
    would replace it: the removal is refused in one line and every built-in stays."""
    name = data.draw(st.sampled_from(BUILT_IN[kind]))
    table, code = REGISTRIES[kind]
    held = dict(table())
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "mine.py"
        file.write_text(TABLES[kind] + removal.format(name=name) + code.format(name=name))
        with pytest.raises(E1Error) as info:
            load_includes([file])
    line = str(info.value)
    assert f"--include {file}" in line and "e1's own" in line and "\n" not in line
    assert all(table()[key] is value for key, value in held.items())  # nothing of e1's removed or replaced


def test_a_mode_from_e1_modes_named_like_a_built_in_is_refused(tmp_path):
    """The reported case: a ``truncate`` from ``E1_MODES`` decoded the run as the user's class."""
    file = tmp_path / "mine.py"
    file.write_text(REGISTRIES["mode"][1].format(name="truncate"))
    done = subprocess.run(
        [sys.executable, "-m", "e1", "eval", "--model", "m", "--datasets", "aime", "--mode", "truncate"],
        env={**os.environ, "E1_MODES": str(file)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == 1 and "Traceback" not in said and len(said.splitlines()) == 1, said
    assert f"E1_MODES: {file}: mode 'truncate' is e1's own" in said


def _write_include(root: Path, layout: str, files: dict[str, str]) -> Path:
    """An include as a file, a package (folder with __init__.py) or a plain folder of modules."""
    if layout == "file":
        path = root / "mine.py"
        path.write_text(next(iter(files.values())))
        return path
    path = root / "mine"
    for relative, text in files.items():
        (path / relative).parent.mkdir(parents=True, exist_ok=True)
        (path / relative).write_text(text)
    if layout == "package":
        (path / "__init__.py").write_text("")
    return path


sources = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30).map(lambda t: f"X = {t!r}\n")
modules = st.dictionaries(st.sampled_from(["b.py", "sub/c.py"]), sources, max_size=2).flatmap(
    lambda more: sources.map(lambda first: {"a.py": first, **more})
)  # a folder's modules: a.py at least


@settings(max_examples=25, deadline=None)
@given(layout=st.sampled_from(["file", "package", "folder"]), before=modules, data=st.data())
def test_a_resume_with_changed_include_code_is_refused(layout, before, data):
    changed_at = data.draw(st.sampled_from(sorted(before)))
    after = {**before, changed_at: data.draw(sources.filter(lambda text: text != before[changed_at]))}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        include, out = _write_include(root, layout, before), root / "run"
        out.mkdir()
        write_json({"include": [str(include)], INCLUDE_FINGERPRINTS: include_fingerprints([include])}, out / CONFIG)
        unchanged = include_fingerprints([include])
        _write_include(root, layout, after)
        if layout == "file" and changed_at != next(iter(before)):
            assert include_fingerprints([include]) == unchanged  # only the file's text counts
            return
        with pytest.raises(ResultsError) as info:
            load_includes([include], out=out)
        line = str(info.value)
        assert f"--include {include}" in line and f"restore {include} as it was" in line and "\n" not in line
        _write_include(root, layout, before)  # restored: the resume goes on, with the same code
        assert load_includes([include], out=out) == (str(include),)


def test_a_recorded_fingerprint_is_what_eval_writes_and_an_old_run_resumes(tmp_path):
    """config.json records each include's fingerprint (eval and train alike); a run folder written
    before fingerprints were recorded (tests/fixtures/old_run, or one with include paths only) resumes."""
    from e1.eval import EvalConfig
    from e1.grpo.config import TrainConfig

    include = tmp_path / "mine.py"
    include.write_text("X = 1\n")
    for config in (
        EvalConfig(model="m", datasets=("aime",), include=(str(include),), out=tmp_path / "e"),
        TrainConfig(model="m", data="aime", include=(str(include),), out=tmp_path / "t"),
    ):
        record = config.to_json()
        assert record["include"] == [str(include)] or record["include"] == (str(include),)
        assert record[INCLUDE_FINGERPRINTS] == include_fingerprints([include])
    without = EvalConfig(model="m", datasets=("aime",), out=tmp_path / "e").to_json()
    assert "include" not in without and INCLUDE_FINGERPRINTS not in without
    old = tmp_path / "old_run"
    shutil.copytree(FIXTURES / "old_run", old)
    assert load_includes([], out=old) == ()
    write_json({**json.loads((old / CONFIG).read_text()), "include": [str(include)]}, old / CONFIG)
    include.write_text("X = 2\n")  # no fingerprint was recorded: nothing to compare with
    assert load_includes([include], out=old) == (str(include),)


def test_e1_eval_refuses_a_changed_include_before_anything_loads(tmp_path):
    """The reported case: an include edited between a run and its resume scored one run by two versions."""
    include = tmp_path / "mine.py"
    include.write_text("X = 1\n")
    (tmp_path / "run").mkdir()
    write_json(
        {"kind": "eval", "include": [str(include)], INCLUDE_FINGERPRINTS: include_fingerprints([include])},
        tmp_path / "run" / CONFIG,
    )
    include.write_text("X = 2\n")
    done = subprocess.run(
        [sys.executable, "-m", "e1", "eval", "--model", "nowhere", "--datasets", "aime", "--out", "run"]
        + ["--include", str(include)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == 1 and "Traceback" not in said and len(said.splitlines()) == 1, said
    assert f"--include {include} (it changed since" in said and f"restore {include} as it was" in said


def test_code_that_names_itself_after_an_e1_module_replaces_nothing(tmp_path):
    """e1's own definition is replaced by nothing but itself: a class claiming the built-in's module
    and name (``__module__``, ``__qualname__``) is still someone else's."""
    held = MODES["truncate"]
    file = tmp_path / "spoof.py"
    file.write_text(
        "from e1.engine.modes import Mode, register\n"
        f"Spoof = type({held.__qualname__!r}, (Mode,), {{'name': 'truncate', 'summary': 'mine',\n"
        f"                                      '__module__': {held.__module__!r}}})\n"
        "register(Spoof)\n"
    )
    with pytest.raises(E1Error, match="mode 'truncate' is e1's own"):
        load_includes([file])
    assert MODES["truncate"] is held


@settings(max_examples=20, deadline=None)
@given(
    layout=st.sampled_from(["file", "package", "folder"]),
    values=st.lists(st.integers(10, 99), min_size=2, max_size=2, unique=True),
)
def test_what_runs_is_what_was_fingerprinted_whatever_pycache_holds(layout, values):
    """An include edited to text of equal size, its modification time set back (``cp -p``, ``touch -r``),
    beside the ``__pycache__`` of its old text: Python would run the old code (it trusts a .pyc by the
    source's size and mtime) under the new fingerprint. e1 compiles an include from its source."""
    import py_compile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        value = f"VALUE = {values[0]}\n"
        files = {
            "file": {"mine.py": value},  # a package's module imports its submodule
            "package": {"mine/__init__.py": "from .sub import VALUE\n", "mine/sub.py": value},
            "folder": {"mine/a.py": value, "mine/b.py": value},
        }[layout]
        for relative, text in files.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text)
            py_compile.compile(str(root / relative))  # the old code's bytecode, as an earlier import left it
        for relative in files:
            file, stamp = root / relative, (root / relative).stat().st_mtime_ns
            file.write_text(file.read_text().replace(str(values[0]), str(values[1])))  # the same size
            os.utime(file, ns=(stamp, stamp))
        include = root / ("mine.py" if layout == "file" else "mine")
        load_includes([include])
        ran = [
            module.VALUE
            for module in list(sys.modules.values())
            if str(getattr(module, "__file__", None) or "").startswith(str(include)) and hasattr(module, "VALUE")
        ]
        assert ran and set(ran) == {values[1]}, ran  # the code the fingerprint is of


@settings(max_examples=15, deadline=None)
@given(
    how=st.sampled_from(["linked folder", "linked file", "sourceless .pyc", "link loop"]),
    values=st.lists(st.integers(10, 99), min_size=2, max_size=2, unique=True),
)
def test_a_change_to_any_code_a_package_imports_changes_its_fingerprint(how, values):
    """Code the package imports through a linked folder or file, or from a ``.pyc`` with no source,
    is its code too: changing it is a changed include (a link back up is no endless walk)."""
    import py_compile

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        package, elsewhere = root / "mine", root / "elsewhere"
        package.mkdir()
        elsewhere.mkdir()
        code = elsewhere / "sub.py"
        code.write_text(f"VALUE = {values[0]}\n")
        (package / "__init__.py").write_text(
            "from .sub import VALUE\n" if how != "linked folder" else "from .linked.sub import VALUE\n"
        )
        if how == "linked folder":
            (package / "linked").symlink_to(elsewhere, target_is_directory=True)
        elif how == "sourceless .pyc":
            py_compile.compile(str(code), cfile=str(package / "sub.pyc"))
        else:
            (package / "sub.py").symlink_to(code)
            if how == "link loop":
                (package / "again").symlink_to(package, target_is_directory=True)
        before = include_fingerprints([package])
        code.write_text(f"VALUE = {values[1]}\n")
        if how == "sourceless .pyc":
            py_compile.compile(str(code), cfile=str(package / "sub.pyc"))
        assert include_fingerprints([package]) != before


# what an include might rebind of e1's own at import: a module's function, a class's method, a constant
PATCHES = [
    "import e1.rewards.math as m\nm.solution_of = lambda c: str(c).rpartition('</think>')[2]\n",
    "from e1.engine.modes.truncate import Truncate\nTruncate.output_cap = lambda self, budget: 3\n",
    "import e1.rewards.registry as r\nr.solution_of = lambda c: c\n",
    "from e1.data import CompletionText\nCompletionText.of = classmethod(lambda cls, c: cls(c, c))\n",
    "import e1.rewards.math as m\ndel m.solution_of\n",
    "from e1.rewards import registry as r\ndict.__setitem__(r._REWARDS, 'math', lambda c, a, **k: [1.0] * len(c))\n",
    "import e1.report.elo as m\ndef mine(*a, **k):\n    return 0\nm.model_score = mine\n",  # loaded here first
    "from e1.engine.modes.truncate import Truncate\nTruncate.summary_of_mine = 1\nTruncate.__str__ = lambda s: 'x'\n",
]


@settings(max_examples=20, deadline=None)
@given(patch=st.sampled_from(PATCHES), extra=sources)
def test_an_include_that_patches_e1_at_import_is_refused_and_undone(patch, extra):
    """A module that rebinds e1's own functions, methods or constants as it is imported replaces e1's
    code as surely as a registration would: refused in one line naming what, and put back."""
    from e1.names import e1_state

    before = e1_state()
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "mine.py"
        file.write_text(extra + patch)
        with pytest.raises(E1Error) as info:
            load_includes([file])
    line = str(info.value)
    assert f"--include {file}: it replaces e1's own e1." in line and "\n" not in line
    after = e1_state()
    assert all(after.get(key) is value for key, value in before.items() if value is not None)
    assert not [key for key in after if len(key) == 3 and key[:2] in before and key not in before]  # nothing added


PLANT = "import pathlib\npathlib.Path({marker!r}).write_text('ran')\n"  # code the folder names, not the user
RECORDS = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["eval", "sweep", "train"]),
        "budgets": st.just([{"think": 4, "solve": 4}]),
        "modes": st.just(["elastic"]),
        "extra": st.text(max_size=5),
    },
)


@settings(max_examples=15, deadline=None)
@given(
    record=RECORDS,
    where=st.sampled_from(["include", "fingerprint", "both"]),
    fingerprint=st.sampled_from(["as it is", "other"]),
    passed=st.sets(st.sampled_from(["mine_a.py", "mine_b.py"]), max_size=2),
    cli=st.booleans(),
)
def test_code_a_run_folder_names_and_the_command_does_not_never_runs(record, where, fingerprint, passed, cli):
    """e1 runs only the code the command names: a config.json naming a planted module (which would write a
    marker as it is imported) is refused in one line naming it and how to pass it, and nothing runs,
    neither the planted module nor any the command names (the folder's record is checked first)."""
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        marker, plant, out = root / "ran.txt", root / "planted.py", root / "run"
        plant.write_text(PLANT.format(marker=str(marker)))
        mine = []
        for name in sorted(passed):
            (root / name).write_text(PLANT.format(marker=str(root / f"{name}.ran")))
            mine.append(root / name)
        out.mkdir()
        digest = include_fingerprints([plant])[str(plant)] if fingerprint == "as it is" else "sha256:0"
        named = {
            **({"include": [str(plant)]} if where != "fingerprint" else {}),
            **({INCLUDE_FINGERPRINTS: {str(plant): digest}} if where != "include" else {}),
        }
        write_json({**record, **named}, out / CONFIG)
        if cli:
            args = ["eval", "--model", "nowhere", "--datasets", "aime", "--out", str(out)]
            args += [a for path in mine for a in ("--include", str(path))]
            done = subprocess.run(
                [sys.executable, "-m", "e1", *args],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
                env={**os.environ, "COLUMNS": "400"},
            )
            said = done.stdout + done.stderr
            assert done.returncode == 1 and len(said.strip().splitlines()) == 1, said
        else:
            with pytest.raises(ResultsError) as info:
                load_includes(mine, out=out)
            said = str(info.value)
        assert f"{plant}, which this command does not name" in said and f"pass --include {plant}" in said
        assert not marker.exists() and not list(root.glob("*.ran"))


@contextlib.contextmanager
def _mode_plugins(value: str, path: Path):
    """``E1_MODES=value`` with ``path`` on sys.path (where a module name is found), for the block."""
    old = os.environ.get("E1_MODES")
    os.environ["E1_MODES"] = value
    sys.path.insert(0, str(path))
    try:
        yield
    finally:
        sys.path.remove(str(path))
        os.environ.pop("E1_MODES") if old is None else os.environ.__setitem__("E1_MODES", old)


@settings(max_examples=20, deadline=None)
@given(
    how=st.sampled_from(["file", "module", "package"]),
    before=sources,
    data=st.data(),
    resume=st.sampled_from(["changed", "unset", "same"]),
)
def test_an_e1_modes_module_is_recorded_and_checked_as_an_include_is(how, before, data, resume):
    """config.json fingerprints each E1_MODES module through the includes' record; a resume with its code
    changed, or without it, is refused in one line naming it, before anything is imported."""
    from e1.eval import EvalConfig

    after = data.draw(sources.filter(lambda text: text != before))
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        name = f"mymodes_{abs(hash((how, before))) % 10**8}"
        code = {"file": root / f"{name}.py", "module": root / f"{name}.py", "package": root / name / "__init__.py"}[how]
        code.parent.mkdir(exist_ok=True)
        code.write_text(before)
        item = str(code) if how == "file" else name
        out = root / "run"
        out.mkdir()
        with _mode_plugins(item, root):
            record = EvalConfig(model="m", datasets=("aime",), out=out).to_json()
            recorded = Path(record["mode_plugins"][0])
            assert recorded == (code if how != "package" else code.parent).resolve()
            assert set(record[INCLUDE_FINGERPRINTS]) == {str(recorded)}
            write_json(record, out / CONFIG)
            if resume == "changed":
                code.write_text(after)
            with _mode_plugins("" if resume == "unset" else item, root):
                if resume == "same":
                    assert load_includes([], out=out) == ()
                    return
                with pytest.raises(ResultsError) as info:
                    load_includes([], out=out)
        line = str(info.value)
        assert "\n" not in line and str(recorded) in line
        assert ("it changed since" if resume == "changed" else f"set E1_MODES={recorded}") in line


@settings(max_examples=15, deadline=None)
@given(before=sources, data=st.data())
def test_an_e1_modes_file_changed_after_it_ran_is_recorded_as_it_ran(before, data):
    """The fingerprint config.json records for an ``E1_MODES`` file is that of the bytes the mode loader ran,
    not of what the file holds when the record is written: a resume then refuses the changed file."""
    from e1.data.include import include_fingerprint
    from e1.engine.modes import mode as mode_module
    from e1.eval import EvalConfig

    after = data.draw(sources.filter(lambda text: text != before))
    with tempfile.TemporaryDirectory() as folder:
        code = Path(folder) / "ran_modes.py"
        code.write_text(before)
        expected = include_fingerprint(code, str(code))
        with _mode_plugins(str(code), Path(folder)):
            mode_module._loaded.discard(str(code))
            mode_module.load_plugins()  # the run's modes load: ``before`` runs
            code.write_text(after)
            record = EvalConfig(model="m", datasets=("aime",), out=Path(folder) / "run").to_json()
        assert record[INCLUDE_FINGERPRINTS] == {str(code.resolve()): expected}


@settings(max_examples=10, deadline=None)
@given(before=st.text("abcdef", min_size=4, max_size=4), data=st.data(), package=st.booleans())
def test_an_e1_modes_module_runs_from_its_source_whatever_pycache_holds(before, data, package):
    """A module ``E1_MODES`` names by name runs from its source (what config.json fingerprints), not from a
    ``.pyc`` Python would take because the edited source kept its size and modification time."""
    import importlib.util
    import py_compile

    from e1.engine.modes import mode as mode_module

    after = data.draw(st.text("abcdef", min_size=4, max_size=4).filter(lambda text: text != before))
    with tempfile.TemporaryDirectory() as folder:
        name = f"pyc_modes_{abs(hash((before, after, package))) % 10**8}"
        code = Path(folder) / name / "__init__.py" if package else Path(folder) / f"{name}.py"
        code.parent.mkdir(exist_ok=True)
        code.write_text(f"X = {before!r}\n")
        kept = code.stat()
        py_compile.compile(str(code), cfile=importlib.util.cache_from_source(str(code)))
        code.write_text(f"X = {after!r}\n")
        os.utime(code, ns=(kept.st_atime_ns, kept.st_mtime_ns))
        with _mode_plugins(name, Path(folder)):
            mode_module._loaded.discard(name)
            mode_module.load_plugins()
        assert sys.modules.pop(name).X == after
