"""--backend openai against a real `e1 serve` (vLLM on the CPU, the chatty tiny model): every mode is
exact, row for row the transformers backend's records, with the tokenizer (token ids replayed) and
without it (chat messages, the server's counts and texts); `e1 eval` writes how it ran."""

from __future__ import annotations

import json

import pytest

from e1.budget import Budget
from e1.data.prompts import build_prompt
from e1.engine.api.openai_engine import BUDGET_FIELDS, BUDGET_SERVER, ApiSettings, OpenAIEngine
from e1.engine.base import Mode, Sampling

MODES = ["elastic", "elastic:exit=qwen", "elastic:grace=4", "truncate", "budget-forcing", "none"]
PROBLEMS = ["What is 2 + 3?", "The sum of the digits is 12.", "Let x = 7. Then 2x + 1 = 15.", "First add the numbers."]


@pytest.fixture(scope="module")
def server(e1_serve):
    return e1_serve  # conftest's: shared by the modules that serve with no options


@pytest.fixture(scope="module")
def engines(server):
    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec

    url, path = server
    api = OpenAIEngine.load(path, ApiSettings(url + "/v1", tokenizer=path), MODES)
    chat = OpenAIEngine.load(path, ApiSettings(url + "/v1"), MODES)
    local = HFEngine.load(path, EngineSpec(dtype="float32", device="cpu"))
    local.max_context = api.max_context  # the served context (256), as the vLLM tests align them
    return api, chat, local


def _record(c, ids: bool = True) -> tuple:
    counts = (
        c.think_tokens,
        c.solve_tokens,
        c.forced,
        c.closed,
        c.finish_reason,
        c.think_text,
        c.solution_text,
        c.prompt_tokens,
    )
    return counts + ((c.token_ids, c.forced_mask) if ids else ())


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_is_exact_against_e1_serve(engines, mode):
    api, chat, local = engines
    assert api.server == chat.server == BUDGET_SERVER and api.describe()["methods"][mode] == BUDGET_FIELDS
    sampling = Sampling(temperature=0, max_tokens=40)
    for budget in [Budget(12, 6)] + ([Budget(0, 5)] if mode == "elastic" else []):
        expected = local.generate(
            [build_prompt(local.tokenizer, p) for p in PROBLEMS], budget, mode, sampling, seeds=[1, 2, 3, 4]
        )
        exact = api.generate(
            [build_prompt(api.tokenizer, p) for p in PROBLEMS], budget, mode, sampling, seeds=[1, 2, 3, 4]
        )
        served = chat.generate(
            [build_prompt(chat.tokenizer, p) for p in PROBLEMS], budget, mode, sampling, seeds=[1, 2, 3, 4]
        )  # chat messages: the server applies the template
        assert [_record(c) for c in exact] == [_record(c) for c in expected]  # token for token
        assert [_record(c, ids=False) for c in served] == [_record(c, ids=False) for c in expected]
    assert any(c.forced for c in expected) or Mode.parse(mode).name in ("truncate", "none")


def test_e1_eval_runs_against_e1_serve_and_records_how(server, tmp_path):
    from typer.testing import CliRunner

    from e1.cli.app import app
    from e1.store.results import read_parquet

    url, path = server
    data = tmp_path / "problems.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"p{i}", "problem": p, "answer": "5"}) + "\n" for i, p in enumerate(PROBLEMS))
    )
    common = [
        "--datasets",
        str(data),
        "--think",
        "12",
        "--solve",
        "6",
        "--n",
        "2",
        "--temperature",
        "0",
        "--workers",
        "1",
    ]
    served = CliRunner().invoke(
        app,
        [
            "eval",
            "--backend",
            "openai",
            "--api-url",
            url + "/v1",
            "--model",
            path,
            "--tokenizer",
            path,
            "--concurrency",
            "4",
            *common,
            "--out",
            str(tmp_path / "api"),
        ],
    )
    assert served.exit_code == 0, served.output
    said = " ".join(served.output.split())  # the terminal wraps the line where the paths' lengths put it
    assert "served by" in said and "budget fields" in said
    local = CliRunner().invoke(
        app,
        [
            "eval",
            "--backend",
            "hf",
            "--model",
            path,
            "--dtype",
            "float32",
            "--device",
            "cpu",
            *common,
            "--out",
            str(tmp_path / "hf"),
        ],
    )
    assert local.exit_code == 0, local.output
    columns = ["problem_id", "sample_index", "think_tokens", "solve_tokens", "forced", "think_text", "solution_text"]
    assert read_parquet(tmp_path / "api" / "samples.parquet")[columns].equals(
        read_parquet(tmp_path / "hf" / "samples.parquet")[columns]
    )
    record = json.loads((tmp_path / "api" / "config.json").read_text())["api_method"]
    assert record["server"] == BUDGET_SERVER and record["methods"] == {"elastic": BUDGET_FIELDS}
    assert record["token_exact"] and "token for token as --backend vllm/hf" in said  # recorded and said
