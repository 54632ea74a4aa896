"""e1 view without a browser: finding runs, reading only what a request needs, the guard, the command.

The page itself is tested in a real browser in tests/test_view_browser.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from e1.errors import ConfigError
from e1.store.results import samples_frame, write_json, write_parquet
from e1.view.runs import Run, find_runs
from e1.view.tables import (
    SampleFilter,
    curve_points,
    facets,
    metrics,
    problem_ids,
    problem_samples,
    problem_text,
    sample_list,
    sample_page,
)

TEXTS = {"think_text", "solution_text", "extracted_answer", "gold", "first_failure"}


def sample_rows(model_answer: str = "3") -> list[dict]:
    """2 problems × 2 modes × 2 think budgets × 2 samples = 16 rows. Elastic thinks until forced at t;
    truncate never answers. Answers: p1's gold is 3, p2's is 4; the model always says ``model_answer``."""
    rows = []
    for pid, gold in (("p1", "3"), ("p2", "4")):
        for mode in ("elastic", "truncate"):
            for think in (4, 8):
                for index in range(2):
                    answered = mode == "elastic"
                    rows.append(
                        {
                            "dataset": "toy",
                            "problem_id": pid,
                            "sample_index": index,
                            "mode": mode,
                            "think_budget": think,
                            "solve_budget": 2,
                            "prompt_tokens": 5,
                            "think_tokens": think,
                            "solve_tokens": 2 if answered else 0,
                            "forced": answered,
                            "finish_reason": "stop" if answered else "length",
                            "think_text": "x" * think,
                            "solution_text": f"\\boxed{{{model_answer}}}" if answered else "",
                            "extracted_answer": model_answer if answered else None,
                            "gold": gold,
                            "reward": float(answered and model_answer == gold),
                            "correct": answered and model_answer == gold,
                            "tests_passed": float("nan"),
                            "first_failure": None,
                            "think_end": "budget" if answered else "open",
                        }
                    )
    return rows


def eval_run(path, rows=None, datasets=("toy.jsonl",), root=None):
    write_json({"model": "m/A", "datasets": list(datasets), "data_dir": None}, path / "config.json")
    write_parquet(samples_frame(rows or sample_rows()), path / "samples.parquet")
    summary = pd.DataFrame(
        [
            {
                "dataset": "toy",
                "mode": "elastic",
                "think_budget": t,
                "solve_budget": 2,
                "problems": 2,
                "samples_per_problem": 2,
                "accuracy": 0.5,
                "accuracy_ci_low": 0.0,
                "accuracy_ci_high": 1.0,
                "mean_total_tokens": t + 2.0,
                "forced_rate": 1.0,
            }
            for t in (4, 8)
        ]
    )
    write_parquet(summary, path / "summary.parquet")
    return Run(str(path), path, root)


def test_find_runs_walks_a_demo_folder_and_skips_a_sweeps_per_model_runs(tmp_path):
    demo = tmp_path / "demo"
    eval_run(demo / "eval" / "base-none")
    eval_run(demo / "curves" / "models" / "m--A")  # repeats the sweep's own samples: not listed
    write_parquet(pd.DataFrame({"model": ["m/A"]}), demo / "curves" / "curves.parquet")
    write_json({}, demo / "curves" / "config.json")
    write_parquet(pd.DataFrame({"step": [1, 2], "reward_mean": [0.1, 0.4]}), demo / "e1" / "metrics.parquet")
    write_json({"model": "base"}, demo / "e1" / "config.json")
    eval_run(demo / "e1" / "eval" / "step_2")  # a training run's validation
    eval_run(demo / "e1" / "checkpoints" / "step_2")  # never searched
    runs = find_runs([demo, demo / "e1"])  # a run reached twice is listed once
    assert [(run.name, run.kind) for run in runs] == [
        (f"{demo}/curves", "sweep"),
        (f"{demo}/e1", "train"),
        (f"{demo}/e1/eval/step_2", "eval"),
        (f"{demo}/eval/base-none", "eval"),
    ]


def test_a_folder_without_runs_is_one_clear_error(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no e1 run in it"):
        find_runs([tmp_path / "empty"])
    with pytest.raises(ConfigError, match="no such directory"):
        find_runs([tmp_path / "nowhere"])


def test_a_page_holds_keys_and_counts_but_no_texts(tmp_path):
    run = eval_run(tmp_path / "run")
    everything = sample_page(run, SampleFilter())
    assert (everything["total"], everything["correct"], everything["forced"]) == (16, 4, 8)  # p1 elastic: 2 budgets × 2
    assert not TEXTS & set(everything["rows"][0])  # a page never reads the text columns
    assert [(r["problem_id"], r["sample_index"], r["mode"], r["think_budget"]) for r in everything["rows"][:3]] == [
        ("p1", 0, "elastic", 4),
        ("p1", 0, "elastic", 8),
        ("p1", 0, "truncate", 4),
    ]  # results order
    page = sample_page(run, SampleFilter(mode="elastic", forced=True), offset=6, limit=5)
    assert page["total"] == 8 and len(page["rows"]) == 2  # the last 2 of 8
    assert sample_page(run, SampleFilter(correct=True, think=8))["total"] == 2
    assert sample_page(run, SampleFilter(model="any"))["total"] == 16  # an eval run has no model column to filter
    assert facets(run) == {
        "samples": 16,
        "models": ["m/A"],
        "datasets": ["toy"],
        "modes": ["elastic", "truncate"],
        "budgets": [[4, 2], [8, 2]],
    }


def test_texts_are_read_one_problem_at_a_time(tmp_path):
    run = eval_run(tmp_path / "run")
    with pytest.raises(ValueError, match="one problem at a time"):
        problem_samples(run, SampleFilter(mode="elastic"))
    shown = problem_samples(run, SampleFilter(dataset="toy", problem_id="p2", mode="elastic", think=8))
    assert [(r["sample_index"], r["think_text"], r["extracted_answer"], r["gold"]) for r in shown] == [
        (0, "xxxxxxxx", "3", "4"),
        (1, "xxxxxxxx", "3", "4"),
    ]
    assert problem_ids(run, SampleFilter(dataset="toy")) == ["p1", "p2"]


def test_problem_text_is_the_stored_prompt_else_the_local_dataset_else_said_missing(tmp_path):
    run = eval_run(tmp_path / "run", datasets=(str(tmp_path / "toy.jsonl"),), root=tmp_path)  # e1 view tmp_path
    assert problem_text(run, "toy", "p1") == {
        "text": None,
        "source": "not stored: neither the prompt nor the run's dataset is on this machine",
    }
    (tmp_path / "toy.jsonl").write_text(
        "".join(json.dumps({"id": pid, "problem": f"Solve {pid}.", "answer": "1"}) + "\n" for pid in ("p1", "p2"))
    )
    found = problem_text(run, "toy", "p2")
    assert found["text"] == "Solve p2." and "toy.jsonl" in found["source"]
    with_prompts = [dict(row, prompt=f"<|user|>{row['problem_id']}") for row in sample_rows()]
    write_parquet(pd.DataFrame(with_prompts), run.path / "samples.parquet")
    assert problem_text(run, "toy", "p1") == {"text": "<|user|>p1", "source": "prompt"}


def test_curves_and_metrics_come_from_their_files(tmp_path):
    run = eval_run(tmp_path / "run")
    points = curve_points(run)
    assert [(p["model"], p["think_budget"], p["accuracy"], p["mean_total_tokens"]) for p in points] == [
        ("m/A", 4, 0.5, 6.0),
        ("m/A", 8, 0.5, 10.0),
    ]
    write_parquet(pd.DataFrame({"step": [2, 1], "kl": [0.2, 0.1], "note": ["b", "a"]}), run.path / "metrics.parquet")
    assert metrics(run) == {
        "run": str(run.path),
        "columns": ["step", "kl"],
        "rows": [{"step": 1, "kl": 0.1}, {"step": 2, "kl": 0.2}],
    }  # by step, numbers only


@pytest.fixture
def client(tmp_path):
    def make(token=None, hosts=frozenset({"testserver"})):
        pytest.importorskip("starlette")
        pytest.importorskip("httpx")
        from starlette.testclient import TestClient

        from e1.view.server import build_app

        return TestClient(build_app([eval_run(tmp_path / "run")], token, hosts and set(hosts), 8765))

    return make


def test_the_api_answers_bad_queries_with_one_line(client):
    api = client()
    assert api.get("/api/samples", params={"run": 0, "forced": "true"}).json()["total"] == 8
    for query, message in (
        ({"run": 5}, "run must be one of 0..0"),
        ({"run": 0, "think": "1k"}, "think must be a whole number"),
        ({"run": 0, "text": "true"}, "one problem at a time"),
    ):
        response = api.get("/api/samples", params=query)
        assert response.status_code == 400 and message in response.json()["error"]
    assert api.get("/static/../server.py").status_code == 404
    pytest.importorskip("plotly")
    bundled = api.get("/static/plotly.min.js")  # the plotly package's own copy: no network needed
    assert bundled.status_code == 200 and "plotly.js" in bundled.text[:1000].lower()


def _app(runs):
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from e1.view.server import build_app

    return TestClient(build_app(runs, None, {"testserver"}, 8765))


def test_a_damaged_run_is_listed_as_bad_and_the_others_still_load(tmp_path):
    good = eval_run(tmp_path / "good")
    broken = eval_run(tmp_path / "broken")
    (broken.path / "samples").mkdir()
    (broken.path / "samples" / "part-r0-bad.parquet").write_bytes(b"not parquet")
    strings = eval_run(tmp_path / "strings")
    write_parquet(
        pd.DataFrame([dict(r, think_budget=f"{r['think_budget']}k") for r in sample_rows()]),
        strings.path / "samples.parquet",
    )  # a budget column of strings: not an e1 samples file
    metrics = eval_run(tmp_path / "metrics")
    write_parquet(pd.DataFrame({"loss": [1.0]}), metrics.path / "metrics.parquet")  # no step column
    api = _app([broken, good, strings, metrics])
    listed = api.get("/api/runs")
    assert listed.status_code == 200
    runs = listed.json()
    assert [run["error"] is None for run in runs] == [False, True, False, False]
    assert "cannot read the parts" in runs[0]["error"] and "think_budget" in runs[2]["error"]
    assert runs[1]["facets"]["samples"] == 16 and runs[0]["facets"]["samples"] == 0
    assert {p["run_id"] for p in api.get("/api/curves").json()} == {1}  # the good run's curves still draw
    assert api.get("/api/metrics").status_code == 200
    for run in (0, 2):  # asking a bad run for samples is one line, not a traceback
        response = api.get("/api/samples", params={"run": run, "think": 4})
        assert response.status_code == 400 and "\n" not in response.json()["error"]
    for think in ("1" + "0" * 26, "-" + "9" * 19, "9" * 5000):  # past int64: 400, never 500
        response = api.get("/api/samples", params={"run": 1, "think": think})
        assert response.status_code == 400 and "whole number" in response.json()["error"]


def test_a_kill_between_compaction_and_cleanup_shows_each_sample_once(tmp_path):
    run = eval_run(tmp_path / "run")  # 16 samples in samples.parquet
    (run.path / "samples").mkdir()
    write_parquet(samples_frame(sample_rows()[:8]), run.path / "samples" / "part-r0-0.parquet")  # not yet removed
    assert facets(run)["samples"] == 16 and sample_page(run, SampleFilter())["total"] == 16
    assert len(problem_samples(run, SampleFilter(dataset="toy", problem_id="p1"))) == 8


def test_a_dataset_file_outside_the_folders_given_is_never_read(tmp_path, monkeypatch):
    monkeypatch.setenv("E1_DATA_DIR", str(tmp_path / "data"))
    secret = tmp_path / "elsewhere" / "toy.jsonl"
    secret.parent.mkdir()
    secret.write_text(json.dumps({"id": "p1", "problem": "SECRET", "answer": "1"}) + "\n")
    for spec, data_dir in ((str(secret), None), ("../elsewhere/toy.jsonl", None), ("toy", str(secret.parent))):
        run = eval_run(tmp_path / "views" / "run", datasets=(spec,), root=tmp_path / "views")
        config = json.loads((run.path / "config.json").read_text())
        write_json({**config, "data_dir": data_dir}, run.path / "config.json")
        monkeypatch.chdir(run.path)
        (secret.parent / "toy.parquet").write_bytes(b"")  # a prepared-looking file in the config's data_dir
        assert problem_text(run, "toy", "p1")["text"] is None, spec
    inside = tmp_path / "views" / "toy.jsonl"  # under the folder given to e1 view: read
    inside.write_text(json.dumps({"id": "p1", "problem": "Solve p1.", "answer": "1"}) + "\n")
    run = eval_run(tmp_path / "views" / "run", datasets=(str(inside),), root=tmp_path / "views")
    assert problem_text(run, "toy", "p1")["text"] == "Solve p1."


def test_loopback_serving_refuses_foreign_host_headers(client):
    api = client(hosts={"127.0.0.1", "localhost"})
    assert api.get("/api/runs", headers={"host": "127.0.0.1:8765"}).status_code == 200
    assert api.get("/api/runs", headers={"host": "evil.example:8765"}).status_code == 400  # DNS rebinding


def test_a_token_is_asked_for_once_then_kept_in_a_cookie(client):
    api = client(token="s3cret-token", hosts=None)
    assert api.get("/api/runs").status_code == 401
    assert api.get("/", params={"token": "wrong-token"}).status_code == 401
    opened = api.get("/", params={"token": "s3cret-token"}, follow_redirects=False)
    assert opened.status_code == 303 and "httponly" in opened.headers["set-cookie"].lower()
    assert api.get("/api/runs").status_code == 200  # the client keeps the cookie, as a browser does
    assert (
        client(token="s3cret-token", hosts=None)
        .get("/api/runs", headers={"authorization": "Bearer s3cret-token"})
        .status_code
        == 200
    )


def test_view_settings_are_checked_before_anything_starts(monkeypatch):
    from pathlib import Path

    from e1.view import server

    with pytest.raises(ConfigError, match="pass --token"):
        server.ViewConfig(paths=(Path("runs"),), host="0.0.0.0")
    with pytest.raises(ConfigError, match="too short"):
        server.ViewConfig(paths=(Path("runs"),), token="abc")
    server.ViewConfig(paths=(Path("runs"),), host="::1")  # loopback needs no token
    monkeypatch.setattr(server.importlib.util, "find_spec", lambda name: None if name == "plotly" else object())
    with pytest.raises(ConfigError, match=r"needs plotly \(pip install -e '\.\[view\]'.*pip install plotly"):
        server.check_installed()


def test_command_refuses_an_exposed_address_without_a_token(tmp_path):
    eval_run(tmp_path / "run")
    result = subprocess.run(
        [sys.executable, "-m", "e1", "view", str(tmp_path / "run"), "--host", "0.0.0.0"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "pass --token" in result.stderr


def test_the_list_holds_problem_answer_and_gold_but_never_the_thinking_or_solution(tmp_path):
    (tmp_path / "toy.jsonl").write_text(
        "".join(
            json.dumps({"id": pid, "problem": f"Solve {pid}. " + "long " * 100, "answer": "1"}) + "\n"
            for pid in ("p1", "p2")
        )
    )
    run = eval_run(tmp_path / "run", datasets=(str(tmp_path / "toy.jsonl"),), root=tmp_path)
    listed = sample_list(run, SampleFilter(mode="elastic"))
    assert listed["total"] == 8 and not listed["truncated"]
    assert not {"think_text", "solution_text", "prompt"} & set(listed["rows"][0])
    by_hand = [("p1", "3", "3", True)] * 4 + [("p2", "3", "4", False)] * 4  # the model says 3; golds 3 and 4
    assert [(r["problem_id"], r["extracted_answer"], r["gold"], r["correct"]) for r in listed["rows"]] == by_hand
    preview = listed["rows"][0]["problem"]
    assert preview.startswith("Solve p1. long") and len(preview) == 240 and preview.endswith("…")  # a preview only


def test_the_list_api_takes_the_filters_and_refuses_bad_ones(client):
    api = client()
    assert api.get("/api/list", params={"run": 0, "correct": "true"}).json()["total"] == 4
    for query in ({"run": 9}, {"run": 0, "forced": "maybe"}, {"run": "0; drop"}):
        response = api.get("/api/list", params=query)
        assert response.status_code == 400 and "\n" not in response.json()["error"]


def _bundle_value(path):
    """What a bundle data file hands the page (the JSON inside ``e1Bundle.put(key, ...);``)."""
    text = path.read_text()
    assert text.startswith("e1Bundle.put(") and text.endswith(");\n") and text.isascii()
    key, _, body = text[len("e1Bundle.put(") : -3].partition(", ")
    return json.loads(key), json.loads(body)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=60), st.text(max_size=30))
def test_a_bundle_holds_any_text_as_data_that_cannot_end_its_script(tmp_path_factory, think, pid):
    """Texts from a run (hypothesis writes them: quotes, </script>, U+2028, ...) come back unchanged from the
    bundle's data files, which are ASCII: no text can close the call they sit in."""
    pytest.importorskip("plotly")
    from e1.view.bundle import write_bundle

    root = tmp_path_factory.mktemp("bundle")
    rows = [
        dict(row, think_text=think + "</script><script>alert(1)//\u2028", problem_id=pid or "p")
        for row in sample_rows()[:2]
    ]
    run = eval_run(root / "run", rows=rows)
    write_bundle([run], root / "out")
    ((key, value),) = [_bundle_value(p) for p in (root / "out" / "data" / "r0").glob("p*.js")]
    assert key == "r0/p0" and {r["think_text"] for r in value["rows"]} == {think + "</script><script>alert(1)//\u2028"}
    _, index = _bundle_value(root / "out" / "data" / "index.js")
    assert index["problems"] == {"0": {f"toy\u0000{pid or 'p'}": 0}}


def test_a_bundle_holds_only_the_page_and_values_and_refuses_a_folder_of_other_files(tmp_path):
    pytest.importorskip("plotly")
    from e1.cli.app import app

    (tmp_path / "toy.jsonl").write_text(json.dumps({"id": "p1", "problem": "SECRET statement", "answer": "3"}) + "\n")
    eval_run(tmp_path / "runs" / "run", datasets=(str(tmp_path / "toy.jsonl"),))
    runner = CliRunner()
    out = tmp_path / "share"
    result = runner.invoke(app, ["view", str(tmp_path / "runs"), "--bundle", str(out)])
    assert result.exit_code == 0, result.output
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert files == [
        "data/index.js",
        "data/r0/p0.js",
        "data/r0/p1.js",
        "e1-bundle.json",
        "index.html",
        "static/app.js",
        "static/bundle.js",
        "static/plotly.min.js",
        "static/style.css",
    ]
    everything = "".join(p.read_text() for p in out.rglob("*.js") if "plotly" not in p.name)
    assert "SECRET" not in everything  # a dataset file outside the folder given is not read, so not shipped
    assert '<script src="data/index.js">' in (out / "index.html").read_text()
    again = runner.invoke(app, ["view", str(tmp_path / "runs"), "--bundle", str(out)])  # an earlier bundle: rewritten
    assert again.exit_code == 0
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    refused = runner.invoke(app, ["view", str(tmp_path / "runs"), "--bundle", str(tmp_path / "mine")])
    assert isinstance(refused.exception, ConfigError) and "not an e1 view bundle" in str(refused.exception)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
