"""Tests for the dataset registry, canonical preparation and `e1 data`.

Hub datasets are served from local mirrors (E1_HUB_MIRROR) built in tmp_path with a few rows in
each real dataset's schema, so the real `datasets.load_dataset` call runs fully offline.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import e1.data
from e1.cli.app import app
from e1.data import Benchmark, load_dataset, prepare, prepare_file, schema
from e1.data.registry import register
from e1.errors import DataError

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()

OLYMPIAD_README = """---
configs:
- config_name: OE_TO_maths_en_COMP
  data_files:
  - split: train
    path: OE_TO_maths_en_COMP/train-*
- config_name: OE_TO_physics_en_COMP
  data_files:
  - split: train
    path: OE_TO_physics_en_COMP/train-*
---
# OlympiadBench
"""


def _parquet(path: Path, frame: pd.DataFrame) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(path, index=False)


@pytest.fixture
def mirror(tmp_path, monkeypatch) -> Path:
    """A hub mirror holding every registered math benchmark, each in its hub layout and schema."""
    root = tmp_path / "mirror"
    _parquet(
        root / "HuggingFaceH4/aime_2024/data/train-00000-of-00001.parquet",
        pd.DataFrame(
            {
                "id": [60, 61, 62],
                "problem": ["Find x.", "Find y.", "Find z."],
                "solution": ["...", "...", "..."],
                "answer": ["204", "25", "116"],
                "url": ["u0", "u1", "u2"],
                "year": ["2024", "2024", "2024"],
            }
        ),
    )
    _parquet(
        root / "MathArena/aime_2025/data/train-00000-of-00001.parquet",
        pd.DataFrame(
            {
                "problem_idx": [1, 2],
                "problem": ["Sum of bases.", "Heptagon area."],
                "answer": [70, 588],  # int64 on the hub
                "problem_type": [["Number Theory"], ["Geometry"]],
            }
        ),
    )
    math500 = root / "HuggingFaceH4/MATH-500"
    math500.mkdir(parents=True)
    rows = [
        {
            "problem": "Convert (0,3).",
            "solution": "...",
            "answer": "\\left( 3, \\frac{\\pi}{2} \\right)",
            "subject": "Precalculus",
            "level": 2,
            "unique_id": "test/precalculus/807.json",
        },
        {
            "problem": "Define p.",
            "solution": "...",
            "answer": "p - q",
            "subject": "Intermediate Algebra",
            "level": 5,
            "unique_id": "test/intermediate_algebra/1994.json",
        },
    ]
    (math500 / "test.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    _parquet(
        root / "AI-MO/aimo-validation-amc/data/train-00000-of-00001.parquet",
        pd.DataFrame({"id": [0, 1], "problem": ["AMC one", "AMC two"], "answer": [342.0, 2.5], "url": ["a", "b"]}),
    )
    _parquet(
        root / "math-ai/minervamath/data/test-00000-of-00001.parquet",
        pd.DataFrame({"question": ["Compute the redshift.", "Find the mass."], "answer": ["0.5", "3e8"]}),
    )
    olympiad = root / "Hothan/OlympiadBench"
    olympiad.mkdir(parents=True)
    (olympiad / "README.md").write_text(OLYMPIAD_README)
    _parquet(
        olympiad / "OE_TO_maths_en_COMP/train-00000-of-00001.parquet",
        pd.DataFrame(
            {
                "id": [1606, 1607],
                "question": ["Xenia and Sergey play.", "Find all pairs."],
                "solution": [["sol a"], ["sol b"]],
                "final_answer": [["$1$"], ["$(1,2)$", "$(3,4)$"]],
                "is_multiple_answer": [False, True],
                "unit": [None, None],
                "answer_type": ["Numerical", "Tuple"],
            }
        ),
    )
    _parquet(
        olympiad / "OE_TO_physics_en_COMP/train-00000-of-00001.parquet",
        pd.DataFrame({"id": [9], "question": ["physics"], "final_answer": [["$g$"]]}),
    )
    deepscaler = root / "agentica-org/DeepScaleR-Preview-Dataset"
    deepscaler.mkdir(parents=True)
    records = [
        {"problem": "Train one", "answer": "7", "solution": "..."},
        {"problem": "Train two", "answer": "", "solution": "..."},  # the hub has a few rows like this
        {"problem": "Train three", "answer": "\\frac{1}{2}", "solution": "..."},
    ]
    (deepscaler / "deepscaler.json").write_text(json.dumps(records))
    monkeypatch.setenv("E1_HUB_MIRROR", str(root))
    return root


def _data_dir() -> Path:
    return Path(os.environ["E1_DATA_DIR"])


# ---- registry ----


def test_registry_holds_the_math_benchmarks():
    names = ["aime", "aime25", "amc", "deepscaler", "gsm8k", "math500", "minerva", "olympiad_bench"]
    assert [b.name for b in e1.data.benchmarks() if b.task == "math"] == names  # code ones: test_data_code.py
    for benchmark in e1.data.benchmarks():
        assert benchmark.task_version >= 1 and benchmark.description
    olympiad = e1.data.get_benchmark("olympiad_bench")
    assert (olympiad.hub_id, olympiad.config, olympiad.split) == (
        "Hothan/OlympiadBench",
        "OE_TO_maths_en_COMP",
        "train",
    )
    assert e1.data.get_benchmark("minerva").fields.problem == "question"


def test_unknown_name_suggests_the_closest():
    with pytest.raises(DataError) as info:
        e1.data.get_benchmark("math50")
    assert "unknown dataset 'math50'" in info.value.message and "'math500'" in info.value.hint


def test_register_rejects_duplicates_and_bad_benchmarks():
    with pytest.raises(DataError, match="benchmark 'aime' is e1's own"):
        register(Benchmark(name="aime", hub_id="x/y", split="train", description="again"))
    with pytest.raises(DataError, match="bad dataset name"):
        Benchmark(name="no spaces", hub_id="x/y", split="train", description="d")
    with pytest.raises(DataError, match="extra_columns"):
        Benchmark(name="code", hub_id="x/y", split="test", description="d", extra_columns=("answer",))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (342.0, "342"),
        (2.5, "2.5"),
        (70, "70"),
        (" 7 ", "7"),
        (["$1$"], "$1$"),
        (["a", "b"], "a, b"),
        (None, ""),
        (float("nan"), ""),
        ([], ""),
    ],
)
def test_render_answer(value, expected):
    assert schema.render_answer(value) == expected


# ---- hub path through a local mirror ----


@pytest.mark.parametrize(
    ("name", "ids", "problems", "answers"),
    [
        ("aime", ["60", "61", "62"], ["Find x.", "Find y.", "Find z."], ["204", "25", "116"]),
        ("aime25", ["1", "2"], ["Sum of bases.", "Heptagon area."], ["70", "588"]),
        (
            "math500",
            ["test/precalculus/807.json", "test/intermediate_algebra/1994.json"],
            ["Convert (0,3).", "Define p."],
            ["\\left( 3, \\frac{\\pi}{2} \\right)", "p - q"],
        ),
        ("amc", ["amc-0", "amc-1"], ["AMC one", "AMC two"], ["342", "2.5"]),
        ("minerva", ["minerva-0", "minerva-1"], ["Compute the redshift.", "Find the mass."], ["0.5", "3e8"]),
        (
            "olympiad_bench",
            ["1606", "1607"],
            ["Xenia and Sergey play.", "Find all pairs."],
            ["$1$", "$(1,2)$, $(3,4)$"],
        ),
        # the row without an answer (index 1) is skipped; ids keep the source row index
        ("deepscaler", ["deepscaler-0", "deepscaler-2"], ["Train one", "Train three"], ["7", "\\frac{1}{2}"]),
    ],
)
def test_prepare_from_mirror_writes_canonical_parquet(mirror, tmp_path, name, ids, problems, answers):
    [path] = prepare([name], tmp_path / "out")
    assert path == tmp_path / "out" / f"{name}.parquet"
    frame = pd.read_parquet(path)
    assert list(frame.columns) == list(schema.COLUMNS)
    assert frame["id"].tolist() == ids
    assert frame["problem"].tolist() == problems
    assert frame["answer"].tolist() == answers
    assert set(frame["dataset"]) == {name} and set(frame["task"]) == {"math"}
    assert frame["task_version"].dtype == "int64" and set(frame["task_version"]) == {1}
    assert os.listdir(tmp_path / "out") == [f"{name}.parquet"]  # no temp file left behind


def test_prepare_reports_skipped_rows(mirror):
    result = e1.data.prepare_benchmark("deepscaler")
    assert (result.rows, result.skipped_rows, result.path) == (2, 1, _data_dir() / "deepscaler.parquet")


def test_prepare_checks_every_name_before_downloading(mirror):
    with pytest.raises(DataError, match="unknown dataset 'aimee'"):
        prepare(["aime", "aimee"])
    assert not (_data_dir() / "aime.parquet").exists()


def test_mirror_without_the_dataset_names_the_missing_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("E1_HUB_MIRROR", str(tmp_path / "empty-mirror"))
    with pytest.raises(DataError) as info:
        prepare(["aime"])
    assert "empty-mirror/HuggingFaceH4/aime_2024 does not exist" in info.value.message
    assert "hf download HuggingFaceH4/aime_2024" in info.value.hint


def test_mirror_config_needs_the_readme_that_lists_it(mirror):
    (mirror / "Hothan/OlympiadBench/README.md").unlink()
    with pytest.raises(DataError) as info:
        prepare(["olympiad_bench"])
    assert "config OE_TO_maths_en_COMP, split train" in info.value.message and "README.md" in info.value.hint


def test_offline_hub_is_one_data_error():
    with pytest.raises(DataError) as info:
        prepare(["math500"])
    assert "could not reach the Hugging Face hub for math500 (HuggingFaceH4/MATH-500)" in info.value.message
    assert "--from FILE --name math500" in info.value.hint and "E1_HUB_MIRROR" in info.value.hint


# ---- local files ----


def test_prepare_jsonl_with_custom_fields(tmp_path):
    source = tmp_path / "mine.jsonl"
    source.write_text('{"q": "1+1?", "a": 2, "key": "k1"}\n\n{"q": "2+2?", "a": 4.0, "key": "k2"}\n')
    result = prepare_file(source, problem_field="q", answer_field="a", id_field="key")
    frame = pd.read_parquet(result.path)
    assert result.path == _data_dir() / "mine.parquet"
    assert frame.to_dict("list") == {
        "id": ["k1", "k2"],
        "dataset": ["mine", "mine"],
        "problem": ["1+1?", "2+2?"],
        "answer": ["2", "4"],
        "task": ["math", "math"],
        "task_version": [1, 1],
    }


@pytest.mark.parametrize("shape", ["list", "data"])
def test_prepare_json_list_or_data_object(tmp_path, shape):
    rows = [{"problem": "p1", "answer": "a1", "id": 7}, {"problem": "p2", "answer": "a2", "id": 8}]
    source = tmp_path / "set.json"
    source.write_text(json.dumps(rows if shape == "list" else {"data": rows}))
    frame = pd.read_parquet(prepare_file(source, "named", tmp_path).path)
    assert frame["id"].tolist() == ["7", "8"]  # an id field in every row is used by default
    assert set(frame["dataset"]) == {"named"}


def test_prepare_csv_keeps_answers_as_text_and_numbers_rows(tmp_path):
    source = tmp_path / "sheet.csv"
    source.write_text('problem,answer\n"multi\nline",007\nsecond,1.50\n')
    frame = pd.read_parquet(prepare_file(source).path)
    assert frame["problem"].tolist() == ["multi\nline", "second"]
    assert frame["answer"].tolist() == ["007", "1.50"]  # text stays text: no float parsing
    assert frame["id"].tolist() == ["sheet-0", "sheet-1"]


def test_prepare_parquet_with_list_answers(tmp_path):
    source = tmp_path / "ob.parquet"
    pd.DataFrame({"question": ["q"], "final_answer": [["$x$", "$y$"]]}).to_parquet(source)
    frame = pd.read_parquet(prepare_file(source, problem_field="question", answer_field="final_answer").path)
    assert frame["answer"].tolist() == ["$x$, $y$"]


def test_from_file_with_a_registered_name_uses_its_fields(tmp_path):
    source = tmp_path / "minerva_download.jsonl"
    source.write_text('{"question": "Q1", "answer": "1"}\n')
    frame = pd.read_parquet(prepare_file(source, "minerva").path)
    assert frame[["id", "dataset", "problem"]].values.tolist() == [["minerva-0", "minerva", "Q1"]]


@pytest.mark.parametrize(
    ("filename", "content", "message"),
    [
        (
            "rows.jsonl",
            '{"problem": "p", "answer": "1"}\n{"problem": "p"}\n',
            "rows.jsonl: line 2: field 'answer' is missing",
        ),
        (
            "rows.jsonl",
            '{"problem": "p", "answer": "1"}\n\n{"problem": "p", "answer": "  "}\n',
            "line 3: field 'answer' is empty",
        ),
        ("rows.jsonl", '{"problem": "p", "answer": "1"}\n{"problem": \n', "rows.jsonl: line 2: not valid JSON"),
        ("rows.jsonl", '["p", "1"]\n', "line 1: expected a JSON object, got list"),
        ("rows.jsonl", "", "rows.jsonl: the file has no rows"),
        ("rows.json", '{"problem": "p"}', "top level is a dict, not a list"),
        ("rows.json", "[1, 2]", "rows.json: row 1: expected a JSON object"),
        ("rows.json", "   \n", "rows.json: the file has no rows"),
        ("rows.csv", "question,answer\nq,1\n", "rows.csv: line 2: field 'problem' is missing"),
        ("rows.txt", "problem", "unsupported file type '.txt'"),
        ("rows.parquet", "not parquet", "not a readable parquet file"),
        (
            "rows.jsonl",
            '{"problem": "p", "answer": "1", "id": 3}\n{"problem": "q", "answer": "2", "id": 3}\n',
            "line 2: id '3' is also used at line 1",
        ),
    ],
)
def test_bad_files_name_file_row_and_field(tmp_path, filename, content, message):
    source = tmp_path / filename
    source.write_text(content)
    with pytest.raises(DataError) as info:
        prepare_file(source)
    assert message in info.value.message and info.value.hint
    assert not _data_dir().exists() or not list(_data_dir().iterdir())  # nothing half-written


def test_missing_field_hint_lists_the_fields(tmp_path):
    source = tmp_path / "f.jsonl"
    source.write_text('{"question": "q", "solution": "s"}\n')
    with pytest.raises(DataError) as info:
        prepare_file(source)
    assert "question, solution" in info.value.hint and "--problem-field" in info.value.hint


def test_explicit_id_field_must_exist(tmp_path):
    source = tmp_path / "f.jsonl"
    source.write_text('{"problem": "p", "answer": "1"}\n')
    with pytest.raises(DataError, match="line 1: field 'uid' is missing"):
        prepare_file(source, id_field="uid")


def test_missing_file():
    with pytest.raises(DataError, match="nowhere.jsonl: no such file"):
        prepare_file(Path("nowhere.jsonl"))


# ---- load_dataset ----


def test_load_dataset_prepares_a_registered_name_once(mirror, monkeypatch):
    frame = load_dataset("amc")
    assert frame["answer"].tolist() == ["342", "2.5"]
    assert (_data_dir() / "amc.parquet").is_file()
    monkeypatch.delenv("E1_HUB_MIRROR")  # now offline: the prepared file must be used
    assert load_dataset("amc")["id"].tolist() == ["amc-0", "amc-1"]


def test_load_dataset_reprepares_a_stale_task_version(mirror):
    path = _data_dir() / "aime.parquet"
    path.parent.mkdir(parents=True)
    stale = pd.DataFrame(
        {"id": ["x"], "dataset": ["aime"], "problem": ["old"], "answer": ["1"], "task": ["math"], "task_version": [0]}
    )
    stale.to_parquet(path)
    assert load_dataset("aime")["problem"].tolist() == ["Find x.", "Find y.", "Find z."]


def test_load_dataset_from_files(tmp_path):
    jsonl = tmp_path / "my set.jsonl"
    jsonl.write_text('{"problem": "p", "answer": 3.0}\n')
    frame = load_dataset(str(jsonl))
    assert frame.values.tolist() == [["my-set-0", "my-set", "p", "3", "math", 1]]
    canonical = tmp_path / "canon.parquet"
    extra = frame.assign(tests='["t"]')  # a canonical parquet (even with extra columns) is used as is
    extra.to_parquet(canonical)
    assert load_dataset(str(canonical)).equals(pd.read_parquet(canonical))


def test_load_dataset_finds_datasets_prepared_from_files(tmp_path):
    source = tmp_path / "x.jsonl"
    source.write_text('{"problem": "p", "answer": "1"}\n')
    prepare_file(source, "mine")
    assert load_dataset("mine")["dataset"].tolist() == ["mine"]
    with pytest.raises(DataError) as info:
        load_dataset("mien")
    assert "'mine'" in info.value.hint


def test_load_dataset_unknown_spec():
    with pytest.raises(DataError, match="missing.jsonl: no such file"):
        load_dataset("data/missing.jsonl")
    with pytest.raises(DataError) as info:
        load_dataset("minervaa")
    assert "'minerva'" in info.value.hint


# ---- CLI ----


def test_cli_prepare_and_list(mirror, tmp_path):
    out = tmp_path / "out"
    args = ["data", "prepare", "aime", "olympiad_bench", "--out", str(out)]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert f"aime: 3 rows → {out / 'aime.parquet'}" in result.output
    assert f"olympiad_bench: 2 rows → {out / 'olympiad_bench.parquet'}" in result.output
    assert "expected 30 rows" in result.output  # a mirror with a handful of rows is flagged
    listing = runner.invoke(app, ["data", "list", "--data-dir", str(out)], env={"COLUMNS": "300"})
    assert listing.exit_code == 0
    rows = [line.split() for line in listing.output.splitlines() if line.startswith("  ") and line.strip()]
    cells = {row[0]: row for row in rows}
    assert cells["aime"] == ["aime", "math", "HuggingFaceH4/aime_2024", "train", "30", "yes"] + cells["aime"][6:]
    assert cells["olympiad_bench"][5] == "yes" and cells["amc"][5] == "no"


def test_cli_prepare_from_file(tmp_path):
    source = tmp_path / "p.jsonl"
    source.write_text('{"question": "q", "gold": ["5"]}\n')
    args = [
        "data",
        "prepare",
        "--from",
        str(source),
        "--name",
        "mine",
        "--problem-field",
        "question",
        "--answer-field",
        "gold",
        "--out",
        str(tmp_path),
    ]
    result = runner.invoke(app, args, env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert f"mine: 1 rows → {tmp_path / 'mine.parquet'}" in result.output
    assert pd.read_parquet(tmp_path / "mine.parquet")["answer"].tolist() == ["5"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["data", "prepare", "aime", "--from", "x.jsonl"], "not both"),
        (["data", "prepare", "aime", "--problem-field", "q"], "only apply with --from"),
        (["data", "prepare", "--out", "somewhere"], "nothing to prepare"),
        (["data", "prepare", "--from", "x.yaml"], "no such file"),
    ],
)
def test_cli_prepare_option_errors(args, message):
    result = runner.invoke(app, args)
    assert isinstance(result.exception, DataError) and message in str(result.exception)


@pytest.mark.parametrize("command", [["data"], ["data", "list"], ["data", "prepare"]])
def test_help_has_examples(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and re.search(r"Examples?:\s*\n[\s\n]*e1 data ", result.output)  # each on its own line
    if command[-1] == "prepare":
        assert "E1_HUB_MIRROR" in result.output


def _e1(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "300"}
    return subprocess.run([sys.executable, "-m", "e1", *args], capture_output=True, text=True, env=env, timeout=120)


def test_real_cli_unknown_name_is_one_red_line():
    done = _e1("data", "prepare", "nope")
    assert done.returncode == 1 and done.stdout == ""
    known = ", ".join(e1.data.benchmark_names())
    assert done.stderr.strip().splitlines() == [f"error: unknown dataset 'nope' (known datasets: {known})"]


def test_real_cli_offline_hub_is_one_line():
    done = _e1("data", "prepare", "aime")
    assert done.returncode == 1
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: could not reach the Hugging Face hub for aime") and "--from FILE" in line


def test_data_modules_import_no_heavy_libraries():
    heavy = "{'pandas', 'datasets', 'pyarrow', 'torch'}"
    code = f"import sys, e1.commands.data, e1.data; print(sorted({heavy} & set(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "[]", done.stderr


# ---- dataset_names: the names specs load under, known before loading (the one-grid check compares them) ----

STEMS = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9 ._+-]{0,12}", fullmatch=True)
DATASET_NAMES = st.from_regex(r"[a-z][a-z0-9_.-]{0,8}", fullmatch=True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    files=st.lists(
        st.tuples(
            STEMS,
            st.sampled_from(["jsonl", "csv", "canonical"]),
            st.lists(DATASET_NAMES, min_size=1, max_size=2, unique=True),
            st.sampled_from(["absolute", "relative", "dotted"]),
        ),
        min_size=1,
        max_size=3,
        unique_by=lambda file: file[0],
    )
)
def test_dataset_names_are_the_names_the_specs_load_under(tmp_path_factory, monkeypatch, files):
    """Whatever the files are called and however their paths are typed, ``dataset_names`` (no loading)
    gives the names ``load_datasets`` keys them by: a file's stem, or the names a prepared parquet holds."""
    from e1.data import dataset_names, load_datasets

    folder = tmp_path_factory.mktemp("specs")
    monkeypatch.chdir(folder.parent)
    specs = []
    for stem, kind, names, typed in files:
        if kind == "canonical":
            path = folder / f"{stem}.parquet"
            pd.DataFrame(
                {
                    "id": [f"p{i}" for i in range(len(names))],
                    "dataset": names,
                    "problem": "p",
                    "answer": "1",
                    "task": "math",
                    "task_version": 1,
                }
            ).to_parquet(path)
        elif kind == "jsonl":
            path = folder / f"{stem}.jsonl"
            path.write_text(json.dumps({"problem": "p", "answer": "1"}) + "\n")
        else:
            path = folder / f"{stem}.csv"
            path.write_text("problem,answer\np,1\n")
        relative = path.relative_to(folder.parent)
        specs.append({"absolute": str(path), "relative": str(relative), "dotted": f"./{relative}"}[typed])
    try:
        loaded = load_datasets(specs)
    except DataError:  # two different files under one name: refused before any run, nothing to compare
        return
    assert dataset_names(specs) == sorted(loaded)
    assert dataset_names([*specs, *reversed(specs)]) == sorted(loaded)  # a set: order and repeats aside


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=st.floats(0, 1), length=st.integers(1, 64), byte=st.sampled_from([0x00, 0xFF, 0x0A, 0x80]))
def test_a_damaged_parquet_is_read_or_one_line_naming_it(tmp_path_factory, monkeypatch, start, length, byte):
    """Damage anywhere in a prepared parquet (its pages, their headers, the footer): every reader
    (the names a run compares, a run's load, ``--from``'s records) reads it or raises one printable
    DataError line naming the file, never pyarrow's own error."""
    from e1.data import dataset_names, load_datasets

    folder = tmp_path_factory.mktemp("damaged")
    monkeypatch.chdir(folder)
    path = folder / "aime_2024.parquet"
    pd.DataFrame(
        {
            "id": [f"a{i}" for i in range(20)],
            "dataset": "aime",
            "problem": [f"What is {i} + {i}?" for i in range(20)],
            "answer": "2",
            "task": "math",
            "task_version": 1,
        }
    ).to_parquet(path)
    raw = bytearray(path.read_bytes())
    at = int(start * (len(raw) - 1))
    raw[at : at + length] = bytes([byte]) * len(raw[at : at + length])
    path.write_bytes(bytes(raw))
    for read in (
        lambda: dataset_names([path.name]),
        lambda: load_datasets([str(path)]),
        lambda: prepare_file(path, name="copy", out_dir=folder / "prepared"),
    ):
        try:
            read()
        except DataError as err:
            assert err.message.startswith(f"{path.name}: ") or err.message.startswith(f"{path}: "), err.message
            assert err.message.isprintable(), err.message
