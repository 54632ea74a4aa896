"""A mode added in one file (tests/modes/halfway.py) works on every surface: the registry and its wire
format, e1 eval and e1 sweep, both local backends token for token, e1 serve and --backend openai on it.

The file reaches every process e1 starts (vLLM's engine core, the server) through ``E1_MODES``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from e1.budget import Budget
from e1.engine.base import Sampling
from e1.engine.modes import PLUGINS_ENV, REGISTRY, Mode, names
from e1.errors import ConfigError

TOY = str(Path(__file__).parent / "modes" / "halfway.py")
GREEDY = Sampling(temperature=0.0, max_tokens=40)
PROBLEMS = ["What is 2 + 3?", "The sum of the digits is 12.", "Let x = 7. Then 2x + 1 = 15."]


@pytest.fixture(scope="module", autouse=True)
def toy_mode():
    patch = pytest.MonkeyPatch()
    patch.setenv(PLUGINS_ENV, TOY)
    yield
    patch.undo()
    import e1.engine.modes.mode as base

    REGISTRY.pop("halfway", None)  # the other modules' tests see the built-in modes only
    base._loaded.discard(TOY)


def test_the_toy_mode_is_registered_parsed_and_bounded():
    assert "halfway" in names()
    mode = Mode.parse("halfway:fraction=0.25")
    assert str(mode) == "halfway:fraction=0.25" and Mode.parse(str(mode)) == mode == Mode("halfway", fraction=0.25)
    assert mode.think_limit(Budget(8, 4)) == 2 and str(Mode.parse("halfway")) == "halfway"
    with pytest.raises(ConfigError, match="fraction"):
        Mode.parse("halfway:fraction=2")
    with pytest.raises(ConfigError, match="does not fit mode 'halfway'"):
        Mode.parse("halfway:grace=3")


def test_e1_eval_and_sweep_run_the_toy_mode(tmp_path, tiny_model_dir):
    from typer.testing import CliRunner

    from e1.cli.app import app
    from e1.store.results import read_parquet

    data = tmp_path / "problems.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"p{i}", "problem": p, "answer": "5"}) + "\n" for i, p in enumerate(PROBLEMS))
    )
    common = [
        "--model",
        str(tiny_model_dir),
        "--datasets",
        str(data),
        "--backend",
        "hf",
        "--n",
        "2",
        "--temperature",
        "0",
    ]
    evaluated = CliRunner().invoke(
        app,
        [
            "eval",
            *common,
            "--mode",
            "halfway:fraction=0.25",
            "--think",
            "8",
            "--solve",
            "4",
            "--out",
            str(tmp_path / "eval"),
        ],
    )
    assert evaluated.exit_code == 0, evaluated.output
    samples = read_parquet(tmp_path / "eval" / "samples.parquet")
    assert set(samples["mode"]) == {"halfway:fraction=0.25"} and (samples["think_tokens"] <= 2).all()
    assert samples["forced"].any()  # the tiny model rarely closes thinking itself: cut at 2 tokens
    swept = CliRunner().invoke(
        app,
        [
            "sweep",
            *common,
            "--modes",
            "halfway,elastic",
            "--think",
            "4,8",
            "--solve",
            "4",
            "--out",
            str(tmp_path / "sweep"),
        ],
    )
    assert swept.exit_code == 0, swept.output
    curves = read_parquet(next((tmp_path / "sweep").rglob("curves.parquet")))
    assert set(curves["mode"]) == {"halfway", "elastic"}
    halfway = curves[curves["mode"] == "halfway"].set_index("think_budget")["mean_think_tokens"]
    assert halfway[4] <= 2 and halfway[8] <= 4


@pytest.fixture(scope="module")
def server(e1_serve):
    return e1_serve  # conftest's: shared by the modules that serve with no options


def test_both_local_backends_and_e1_serve_decode_the_toy_mode_alike(server):
    """vLLM (its logits processor rebuilds the mode from its text in the engine process), the transformers
    backend, and --backend openai against e1 serve (the mode travels as budget_mode): the same records."""
    from e1.data.prompts import build_prompt
    from e1.engine.api.openai_engine import BUDGET_FIELDS, ApiSettings, OpenAIEngine
    from tests.fakes import engine_pair

    url, path = server
    mode, budget = Mode.parse("halfway:fraction=0.5"), Budget(9, 5)
    vllm_engine, hf = engine_pair(path)
    prompts = [build_prompt(hf.tokenizer, p) for p in PROBLEMS]
    theirs = hf.generate(prompts, budget, mode, GREEDY, n=2)
    ours = vllm_engine.generate(prompts, budget, mode, GREEDY, n=2)
    assert [(c.token_ids, c.forced_mask, c.think_tokens) for c in ours] == [
        (c.token_ids, c.forced_mask, c.think_tokens) for c in theirs
    ]
    assert all(c.think_tokens <= math.floor(0.5 * 9) for c in theirs) and any(c.forced for c in theirs)
    api = OpenAIEngine.load(path, ApiSettings(url + "/v1", tokenizer=path), [mode])
    assert api.describe()["methods"][str(mode)] == BUDGET_FIELDS
    hf.max_context = api.max_context
    expected = hf.generate(prompts, budget, mode, GREEDY, seeds=[1, 2, 3])
    served = api.generate(prompts, budget, mode, GREEDY, seeds=[1, 2, 3])
    assert [(c.token_ids, c.think_tokens, c.solve_tokens, c.forced) for c in served] == [
        (c.token_ids, c.think_tokens, c.solve_tokens, c.forced) for c in expected
    ]
