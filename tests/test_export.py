"""e1 export: each format is read back by its consumer's own code (lm-eval's schema, file-name parsers
and table renderer; datasets' parquet and json readers and lighteval's Doc/ModelResponse and tracker;
huggingface_hub's eval-results and model-card parsers) and compared with the run's parquet files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from e1.budget import Budget
from e1.cli.app import app
from e1.engine.base import Mode, Sampling
from e1.errors import ConfigError
from e1.eval.run import EvalConfig, evaluate
from e1.report.export import export, model_folder, task_name


@pytest.fixture(scope="module")
def run_dir(tiny_engine, tmp_path_factory):
    """An eval run on a local file (toy) and on a registered hub benchmark (math500): its rows are written
    here, recorded as read from the hub (as `e1 data prepare math500` records them), since tests never download."""
    from e1.data.preparation import _write_parquet, prepare_file

    root = tmp_path_factory.mktemp("export-run")
    toy, math = root / "toy.jsonl", root / "math500.jsonl"
    toy.write_text(
        "".join(json.dumps({"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": "2"}) + "\n" for i in range(3))
    )
    math.write_text(
        "".join(json.dumps({"unique_id": f"m{i}", "problem": f"Compute {i}.", "answer": "3"}) + "\n" for i in range(2))
    )
    prepared = prepare_file(math, "math500", root / "data").path
    _write_parquet(pd.read_parquet(prepared), prepared, {"source": "hub HuggingFaceH4/MATH-500", "options": {}})
    config = EvalConfig(
        model="org/tiny",
        datasets=(str(toy), "math500"),
        data_dir=root / "data",
        budgets=(Budget(4, 8), Budget(8, 8)),
        modes=(Mode("elastic"), Mode("truncate")),
        n=2,
        sampling=Sampling(temperature=0.0),
        out=root / "run",
    )
    evaluate(config, engine=tiny_engine)
    return root / "run"


def _cells(run_dir: Path):
    summary = pd.read_parquet(run_dir / "summary.parquet")
    samples = pd.read_parquet(run_dir / "samples.parquet")
    return summary, samples


def test_lm_eval_export_loads_with_lm_eval_s_own_schema_and_readers(run_dir, tmp_path):
    pytest.importorskip("lm_eval", reason="pip install lm-eval (e1[test]): its own code reads the export back")
    from datasets import load_dataset
    from lm_eval import utils
    from lm_eval.result_schema import EvalResults, SampleResult
    from pydantic import TypeAdapter

    written, _ = export(run_dir, "lm-eval", tmp_path / "lm")
    names = [path.as_posix() for path in written]
    (results_file,) = utils.get_results_filenames(names)
    sample_files = utils.get_sample_results_filenames(names)
    results = json.loads(Path(results_file).read_text())
    # lm-eval's TypedDict types a task config's values as str | bool | None, yet lm-eval itself writes
    # nested ones (metadata, generation_kwargs) and ints (repeats, num_fewshot): we write what it writes
    TypeAdapter(EvalResults).validate_python({key: value for key, value in results.items() if key != "configs"})
    for config in results["configs"].values():
        assert {"task", "output_type", "repeats", "num_fewshot", "generation_kwargs"} <= set(config)
        assert config["output_type"] == "generate_until" and config["metadata"]["version"] >= 1
    assert Path(results_file).parent.name == "org__tiny" == utils.sanitize_model_name("org/tiny")
    summary, samples = _cells(run_dir)
    assert len(sample_files) == len(summary) == len(results["results"])
    for row in summary.to_dict("records"):
        task = task_name(row["dataset"], row["mode"], row["think_budget"], row["solve_budget"])
        assert results["results"][task]["exact_match,none"] == pytest.approx(row["accuracy"])
        assert results["results"][task][f"pass@{row['k']},none"] == pytest.approx(row["pass_at_k"])
        (file,) = [f for f in sample_files if utils.get_file_task_name(Path(f).name) == task]
        assert utils.get_file_datetime(Path(file).name) == utils.get_file_datetime(
            Path(results_file).name
        ).removesuffix(".json")
        docs = load_dataset("json", data_files=file, split="train")  # as lm-eval's metadata card loads them
        cell = samples[
            (samples["dataset"] == row["dataset"])
            & (samples["mode"] == row["mode"])
            & (samples["think_budget"] == row["think_budget"])
        ]
        assert len(docs) == row["problems"]
        for doc in map(json.loads, Path(file).read_text().splitlines()):
            TypeAdapter(SampleResult).validate_python(doc)
            mine = cell[cell["problem_id"] == doc["doc"]["id"]].sort_values("sample_index")
            assert doc["exact_match"] == pytest.approx(mine["correct"].mean())
            # what e1 measured survives lm-eval's schema: per sample in resps order, and the cell
            measured = doc["doc"]["e1"]
            assert measured["think_tokens"] == mine["think_tokens"].tolist()
            assert measured["solve_tokens"] == mine["solve_tokens"].tolist()
            assert measured["forced"] == mine["forced"].tolist() and measured["correct"] == mine["correct"].tolist()
            assert (measured["mode"], measured["think_budget"], measured["solve_budget"]) == (
                row["mode"],
                row["think_budget"],
                row["solve_budget"],
            )
            assert doc["forced_rate"] == pytest.approx(mine["forced"].mean())
            assert doc["filtered_resps"] == [["" if pd.isna(a) else a for a in mine["extracted_answer"].tolist()]]
            assert len(doc["resps"][0]) == 2 and doc["arguments"]["gen_args_0"]["arg_0"] == mine["prompt"].iloc[0]
    table = utils.make_table(results)  # what `lm_eval` prints
    shown = sum(1 for metrics in results["results"].values() for key in metrics if "," in key and "_stderr" not in key)
    assert len(table.strip().split("\n")) == 2 + shown  # one line per task and metric (stderr beside its metric)
    assert all(task in table for task in results["results"])


def test_lighteval_details_load_with_datasets_and_lighteval(run_dir, tmp_path):
    from datasets import load_dataset

    written, _ = export(run_dir, "lighteval", tmp_path / "le")
    details = [p for p in written if p.suffix == ".parquet"]
    summary, samples = _cells(run_dir)
    assert len(details) == len(summary)
    for path in details:
        rows = load_dataset("parquet", data_files=str(path), split="train")
        assert rows.column_names == ["doc", "metric", "model_response"]
        for row in rows:
            mine = samples[
                (samples["problem_id"] == row["doc"]["id"]) & (samples["dataset"] == row["doc"]["specific"]["dataset"])
            ]
            specific = row["doc"]["specific"]
            mine = mine[
                (mine["think_budget"] == specific["think_budget"])
                & (mine["solve_budget"] == specific["solve_budget"])
                & (mine["mode"] == specific["mode"])
            ].sort_values("sample_index")
            assert (
                specific["think_tokens"] == mine["think_tokens"].tolist()
                and specific["forced"] == mine["forced"].tolist()
            )
            assert specific["solve_tokens"] == mine["solve_tokens"].tolist()
            assert row["metric"]["forced_rate"] == pytest.approx(mine["forced"].mean())
            total = specific["think_budget"] + specific["solve_budget"]
            if Mode.parse(specific["mode"]) == Mode("truncate"):  # it stops at t + s, nothing added
                assert row["doc"]["generation_size"] == total
            else:  # elastic adds its grace window past t
                assert total <= row["doc"]["generation_size"] < total + 64
            assert len(row["model_response"]["text"]) == row["doc"]["num_samples"] == 2
            assert row["model_response"]["input"] == row["doc"]["query"] != ""
            assert 0.0 <= row["metric"]["exact_match"] <= 1.0
    results = json.loads(next(p for p in written if p.suffix == ".json").read_text())
    largest = max(t + s for t, s in zip(samples["think_budget"], samples["solve_budget"]))  # 16: t = 8, s = 8
    assert largest <= results["config_general"]["generation_parameters"]["max_new_tokens"] < 64  # not 32768
    assert "max_tokens" not in results["config_general"]["generation_parameters"]
    assert set(results["results"]) == {p.stem.removeprefix("details_").rsplit("_", 1)[0] for p in details} | {"all"}


def test_lighteval_reads_the_details_with_its_own_tracker(run_dir, tmp_path):
    pytest.importorskip("lighteval", reason="pip install lighteval (its tracker reads the details back)")
    from lighteval.logging.evaluation_tracker import EvaluationTracker
    from lighteval.models.model_output import ModelResponse
    from lighteval.tasks.requests import Doc

    written, _ = export(run_dir, "lighteval", tmp_path / "le")
    tracker = EvaluationTracker(output_dir=str(tmp_path / "le"))
    tracker.general_config_logger.model_name = "org/tiny"
    date_id = next(p for p in written if p.suffix == ".parquet").parent.name
    files = [p.stem.removeprefix("details_").removesuffix(f"_{date_id}") for p in written if p.suffix == ".parquet"]
    loaded = tracker.load_details_datasets(
        date_id, [name.removesuffix("|0") for name in files]
    )  # tasks, few-shot apart
    assert sorted(loaded) == sorted(files) and len(files) == 8
    samples = pd.read_parquet(run_dir / "samples.parquet")
    for dataset in loaded.values():
        for row in dataset:
            doc, response = Doc(**row["doc"]), ModelResponse(**row["model_response"])
            assert doc.num_samples == len(response.text) == 2 and response.input == doc.query
            kept = doc.specific  # what e1 measured, through lighteval's own Doc
            mine = samples[
                (samples["dataset"] == kept["dataset"])
                & (samples["problem_id"] == doc.id)
                & (samples["mode"] == kept["mode"])
                & (samples["think_budget"] == kept["think_budget"])
                & (samples["solve_budget"] == kept["solve_budget"])
            ].sort_values("sample_index")
            assert kept["think_tokens"] == mine["think_tokens"].tolist() and kept["forced"] == mine["forced"].tolist()
            assert kept["solve_tokens"] == mine["solve_tokens"].tolist()
            assert doc.generation_size >= kept["think_budget"] + kept["solve_budget"]
            assert row["metric"]["forced_rate"] == pytest.approx(mine["forced"].mean())


def test_hub_export_parses_as_eval_results_and_model_index(run_dir, tmp_path):
    import yaml
    from huggingface_hub import ModelCard, parse_eval_result_entries

    written, skipped = export(run_dir, "hub", tmp_path / "hub")
    assert skipped == ["skipped toy (not read from a registered hub dataset: the Hub cannot name it)"]
    summary, _ = _cells(run_dir)
    math = summary[summary["dataset"] == "math500"]
    (yaml_file,) = [p for p in written if p.suffix == ".yaml"]
    assert yaml_file.relative_to(tmp_path / "hub").as_posix() == "org__tiny/.eval_results/math500.yaml"
    entries = parse_eval_result_entries(yaml.safe_load(yaml_file.read_text()))
    assert {e.dataset_id for e in entries} == {"HuggingFaceH4/MATH-500"} and len(entries) == len(math)
    assert sorted(e.value for e in entries) == sorted(round(100 * a, 2) for a in math["accuracy"])
    card = ModelCard.load(next(p for p in written if p.name == "README.md"))
    assert card.data.model_name == "org/tiny"
    assert sorted(r.metric_value for r in card.data.eval_results) == sorted(e.value for e in entries)


def test_sweep_exports_each_model(tiny_engine, tmp_path):
    pytest.importorskip("lm_eval", reason="pip install lm-eval (e1[test])")
    from e1.eval.sweep import sweep
    from tests.test_sweep import Loader, sweep_config

    problems = tmp_path / "toy.jsonl"
    problems.write_text(json.dumps({"id": "q0", "problem": "What is 1?", "answer": "2"}) + "\n")
    _, summary, _ = sweep(sweep_config(tmp_path / "sweep", problems, n=1), load_engine=Loader(tiny_engine))
    written, _ = export(tmp_path / "sweep", "lm-eval")
    results = {p.parent.name: json.loads(p.read_text()) for p in written if p.name.startswith("results_")}
    assert sorted(results) == ["m__A", "m__B"]
    for model, rows in summary.groupby("model"):
        accuracies = {task: r["exact_match,none"] for task, r in results[model_folder(model)]["results"].items()}
        assert sorted(accuracies.values()) == pytest.approx(sorted(rows["accuracy"]))


CELL = st.tuples(
    st.text(min_size=1, max_size=12), st.text(min_size=1, max_size=20), st.integers(0, 10**6), st.integers(1, 10**6)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # a loaded machine
@given(st.lists(CELL, min_size=2, max_size=6, unique=True))
def test_task_names_are_distinct_file_safe_and_read_back_by_lm_eval(cells):
    utils = pytest.importorskip("lm_eval.utils", reason="pip install lm-eval (e1[test])")

    names = [task_name(*cell) for cell in cells]
    assert len(set(names)) == len(cells)
    for name in names:
        assert "/" not in name and "\\" not in name and ":" not in name and "|" not in name
        assert utils.get_file_task_name(f"samples_{name}_2026-01-01T00-00-00.jsonl") == name


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(min_size=0, max_size=12), min_size=1, max_size=4).map("/".join))
def test_model_folders_are_visible_and_match_lm_eval_s_sanitizer_for_hub_ids(model):
    utils = pytest.importorskip("lm_eval.utils", reason="pip install lm-eval (e1[test])")
    folder = model_folder(model)
    assert folder and not folder.startswith(".") and "/" not in folder  # ./tiny is tiny, not the hidden .__tiny
    if all(part and not part.startswith(".") for part in model.split("/")):  # a hub id: named as lm-eval names it
        assert folder == utils.sanitize_model_name(model)


def test_bad_input_is_one_clear_line(run_dir, tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'lm-eval'"):
        export(run_dir, "lmeval")
    with pytest.raises(ConfigError, match="no such run directory"):
        export(tmp_path / "nowhere", "hub")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match="not a finished e1 eval or sweep run"):
        export(tmp_path / "half", "lm-eval")
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "lightevl"])
    assert result.exit_code != 0 and "lighteval" in str(result.exception.hint)
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "hub", "--out", str(tmp_path / "c")])
    assert result.exit_code == 0 and "wrote" in result.output and "note: skipped toy" in result.output
    assert "Examples" in CliRunner().invoke(app, ["export", "--help"]).output


def _as_model(run_dir: Path, model: str, into: Path) -> Path:
    """A copy of the run whose config names ``model`` (an eval run's samples take their model from it)."""
    import shutil

    copy = shutil.copytree(run_dir, into)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "model": model}))
    return copy


@pytest.mark.parametrize(
    "model", ["../../../../x", "..", ".", "/abs/../../../y", "a/./../../z", "x\n# <b>y</b> [l](j:1)"]
)
def test_a_model_name_never_writes_outside_out(run_dir, tmp_path, model):
    run = _as_model(run_dir, model, tmp_path / "nest" / "deeper" / "run")
    before = {p for p in tmp_path.rglob("*")}
    for fmt in ("lm-eval", "lighteval", "hub"):
        out = tmp_path / "nest" / "deeper" / "out" / fmt
        written, _ = export(run, fmt, out)
        assert written and all(out.resolve() in path.resolve().parents for path in written), fmt
    made = {p.resolve() for p in tmp_path.rglob("*")} - {p.resolve() for p in before}
    outs = (tmp_path / "nest" / "deeper" / "out").resolve()
    assert all(p == outs or outs in p.parents for p in made)  # nothing made anywhere else
    body = next(p for p in made if p.name == "README.md").read_text().split("\n---\n", 1)[1]  # after the YAML
    assert body.count("\n# ") == 1 and "<b>" not in body and "[l](" not in body  # the name is one heading, as text


def test_out_naming_a_file_is_one_line_naming_the_option(run_dir, tmp_path):
    (tmp_path / "file").write_text("x")
    result = CliRunner().invoke(app, ["export", str(run_dir), "--format", "lm-eval", "--out", str(tmp_path / "file")])
    assert result.exit_code != 0 and "--out" in str(result.exception) and "is a file" in str(result.exception)
    under = CliRunner().invoke(app, ["export", str(run_dir), "-f", "hub", "-o", str(tmp_path / "file" / "sub")])
    assert under.exit_code != 0 and "--out" in str(under.exception)


# ---- what e1 measured, where the data came from, where the files land, and pushing to a hub ----


def test_a_local_file_prepared_as_aime_is_exported_as_that_file_and_says_so(tiny_engine, tmp_path):
    from e1.data.preparation import prepare_file

    local = tmp_path / "my-aime.jsonl"
    local.write_text(
        "".join(json.dumps({"id": f"a{i}", "problem": f"Find {i}.", "answer": str(i)}) + "\n" for i in range(3))
    )
    prepare_file(local, "aime", tmp_path / "data")  # e1 data prepare --from my-aime.jsonl --name aime
    evaluate(
        EvalConfig(
            model="org/tiny",
            datasets=("aime",),
            data_dir=tmp_path / "data",
            budgets=(Budget(4, 8),),
            modes=(Mode("elastic"),),
            n=1,
            sampling=Sampling(temperature=0.0),
            out=tmp_path / "run",
        ),
        engine=tiny_engine,
    )
    result = CliRunner().invoke(app, ["export", str(tmp_path / "run"), "-f", "lm-eval", "-o", str(tmp_path / "lm")])
    assert result.exit_code == 0, result.output
    assert (
        f"note: aime: the run's data came from file {local.resolve()}, not the hub's HuggingFaceH4/aime_2024"
        in " ".join(result.output.split())
    )
    (results_file,) = (tmp_path / "lm").rglob("results_*.json")
    (config,) = json.loads(results_file.read_text())["configs"].values()
    assert config["dataset_path"] == str(local.resolve()) and config["dataset_name"] is None
    assert config["metadata"]["e1_source"] == f"file {local.resolve()}" and config["metadata"]["e1_fingerprint"]
    with pytest.raises(ConfigError, match="nothing to export to the hub"):  # the Hub cannot name a local file
        export(tmp_path / "run", "hub", tmp_path / "hub")


@pytest.mark.parametrize(
    "model, folder", [("./tiny", "tiny"), ("../models/.tiny", "models__tiny"), ("/abs/tiny", "abs__tiny")]
)
def test_a_local_model_lands_in_a_visible_folder(run_dir, tmp_path, model, folder):
    run = _as_model(run_dir, model, tmp_path / "run")
    written, _ = export(run, "lm-eval", tmp_path / "lm")
    assert {p.parent.name for p in written} == {folder}
    written, _ = export(run, "lighteval", tmp_path / "le")
    assert all(not part.startswith(".") for p in written for part in p.relative_to(tmp_path / "le").parts)


def test_budgets_added_after_the_summary_are_exported_from_their_samples(run_dir, tmp_path):
    import shutil

    run = Path(shutil.copytree(run_dir, tmp_path / "run"))
    samples = pd.read_parquet(run / "samples.parquet")
    grown = samples[samples["think_budget"] == 8].assign(think_budget=16)  # a later eval added t = 16
    grown.loc[grown.index[:1], "correct"] = ~grown.loc[grown.index[:1], "correct"]
    pd.concat([samples, grown]).to_parquet(run / "samples.parquet")  # summary.parquet still has t = 4, 8 only
    written, _ = export(run, "lm-eval", tmp_path / "lm")
    (results_file,) = [p for p in written if p.name.startswith("results_")]
    results = json.loads(results_file.read_text())["results"]
    for (dataset, mode), cell in grown.groupby(["dataset", "mode"]):
        task = task_name(dataset, mode, 16, 8)
        assert results[task]["exact_match,none"] == pytest.approx(cell["correct"].mean())  # from its samples
    assert len(results) == len(pd.read_parquet(run / "summary.parquet")) + grown.groupby(["dataset", "mode"]).ngroups


class HubStandIn:
    """A local stand-in for the Hub's HTTP API: the calls huggingface_hub makes to create a repository and
    upload a folder (create, validate-yaml, preupload, commit), answered as the Hub answers them; it keeps
    the files committed and who asked."""

    def __init__(self):
        import base64
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.calls, self.files = [], {}
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, code, value):
                data = json.dumps(value).encode()
                self.send_response(code)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                hub.calls.append(("GET", self.path, self.headers.get("authorization")))
                self._send(404, {"error": "not here"})

            def do_POST(self):
                import yaml

                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                hub.calls.append(("POST", self.path, self.headers.get("authorization")))
                parts = self.path.split("?")[0].strip("/").split("/")
                if parts[:3] == ["api", "repos", "create"]:
                    asked = json.loads(body)
                    return self._send(200, {"url": f"{hub.url}/{asked['organization']}/{asked['name']}"})
                if parts[:2] == ["api", "validate-yaml"]:
                    yaml.safe_load(json.loads(body)["content"])
                    return self._send(200, {"errors": [], "warnings": []})
                if parts[:2] == ["api", "models"] and parts[4:5] == ["preupload"]:
                    files = json.loads(body)["files"]
                    return self._send(
                        200,
                        {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]},
                    )
                if parts[:2] == ["api", "models"] and parts[4:5] == ["commit"]:
                    for line in body.decode().splitlines():
                        item = json.loads(line)
                        if item["key"] == "file":
                            hub.files[("/".join(parts[2:4]), item["value"]["path"])] = base64.b64decode(
                                item["value"]["content"]
                            )
                    oid = "a" * 40
                    return self._send(
                        200, {"commitUrl": f"{hub.url}/{parts[2]}/{parts[3]}/commit/{oid}", "commitOid": oid}
                    )
                self._send(404, {"error": "not here"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_push_uploads_the_eval_results_through_huggingface_hub(run_dir, tmp_path):
    """`e1 export --format hub --push` as a user runs it, with HF_ENDPOINT naming a local stand-in."""
    import os
    import subprocess
    import sys

    import yaml
    from huggingface_hub import parse_eval_result_entries

    hub = HubStandIn()
    env = {
        **os.environ,
        "HF_ENDPOINT": hub.url,
        "HF_TOKEN": "hf_stand_in_token",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": "0",  # the hub is the local stand-in
        "PYTHONPATH": str(Path(__file__).parent.parent),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "e1",
            "export",
            str(run_dir),
            "-f",
            "hub",
            "-o",
            str(tmp_path / "hub"),
            "--push",
            "my-org/tiny-evals",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert f"pushed the eval results to my-org/tiny-evals: {hub.url}/my-org/tiny-evals/commit/" in result.stdout
    local = tmp_path / "hub" / "org__tiny" / ".eval_results" / "math500.yaml"
    assert hub.files == {("my-org/tiny-evals", ".eval_results/math500.yaml"): local.read_bytes()}  # not the README
    entries = parse_eval_result_entries(yaml.safe_load(hub.files["my-org/tiny-evals", ".eval_results/math500.yaml"]))
    assert {e.dataset_id for e in entries} == {"HuggingFaceH4/MATH-500"}
    assert all(auth == "Bearer hf_stand_in_token" for method, _, auth in hub.calls if method == "POST")


@settings(max_examples=80, deadline=None)
@given(
    st.one_of(
        st.text(max_size=40),
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,10}/[A-Za-z0-9][A-Za-z0-9._-]{0,10}", fullmatch=True),
    )
)
def test_a_push_target_is_an_owner_name_repo_id_or_one_clear_line(repo):
    from huggingface_hub.utils import validate_repo_id

    from e1.report.export import check_repo_id

    try:
        accepted = check_repo_id(repo)
    except ConfigError as err:
        assert "\n" not in str(err) and "--push" in str(err)
        return
    owner, name = accepted.split("/")
    validate_repo_id(accepted)  # huggingface_hub agrees
    assert owner and name and ".." not in accepted and "--" not in accepted and "/" not in owner + name


def test_push_needs_the_hub_format_and_a_repo_id_before_anything_is_written(run_dir, tmp_path):
    result = CliRunner().invoke(
        app, ["export", str(run_dir), "-f", "lm-eval", "-o", str(tmp_path / "a"), "--push", "o/n"]
    )
    assert isinstance(result.exception, ConfigError) and "--format hub" in result.exception.hint
    result = CliRunner().invoke(app, ["export", str(run_dir), "-f", "hub", "-o", str(tmp_path / "b"), "--push", "../x"])
    assert isinstance(result.exception, ConfigError) and "not a hub repository id" in str(result.exception)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
