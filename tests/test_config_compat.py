"""Run directories written before the engine and scoring settings became specs (EngineSpec,
ScoringSpec) still resume: ``config.json`` keeps its flat keys, today's code writes the same file,
and the run-identity checks read the old one as before.

The fixtures are the files e1 wrote at commit 0d4ee68 (tests/fixtures/README.md), with every
setting that moved into a spec given a non-default value.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.spec import EngineSpec
from e1.errors import ResultsError
from e1.eval.run import EvalConfig, evaluate
from e1.grpo.config_file import build_config
from e1.rewards.scoring import ScoringSpec
from e1.store import MODE_FORMAT, MODE_FORMAT_KEY
from tests.test_run_dir_identity import boxed, problems, write_jsonl
from tests.test_train import contains_char, write_problems

FIXTURES = Path(__file__).parent / "fixtures"
# the settings the fixtures were written with (flat: as a config file and the CLI give them)
ENGINE = {
    "backend": "hf",
    "dtype": "float32",
    "device": "cpu",
    "gpu_memory_utilization": 0.5,
    "max_model_len": 4096,
    "think_start": "<think>",
    "think_end": "</think>",
}
SCORING = {"workers": 2, "max_tests": 3, "test_time_limit_s": 2.5, "sandbox": "none"}
TRAIN = {
    "model": "tiny",
    "data": "problems.jsonl",
    "out": "run",
    "think": 4,
    "solve": 4,
    "steps": 1,
    "prompts_per_step": 2,
    "samples_per_prompt": 2,
    "mini_batch_prompts": 2,
    "micro_batch": 4,
    "lr": 1e-2,
    "temperature": 1.0,
    "save_every": 1,
    "device": "cpu",
    "gpu_memory_utilization": 0.3,
    "think_start": "<think>",
    "think_end": "</think>",
    **SCORING,
}
# what the commands add beside the config itself (which e1, which run, which data)
ADDED = {"speculative": ""}  # settings declared after the fixtures were written: recorded at their defaults
RUN_KEYS = ("kind", "e1_version", "dataset_fingerprints", "markers", "resumed_from", "world_size", "model_identity")


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def on_disk(record: dict) -> dict:
    """``record`` as config.json holds it (tuples are lists there)."""
    return json.loads(json.dumps(record, default=str))


def without(record: dict, *keys: str) -> dict:
    return {key: value for key, value in record.items() if key not in keys}


def eval_config(engine: dict | None = None, scoring: dict | None = None) -> EvalConfig:
    return EvalConfig(
        model="scripted",
        datasets=("probs.jsonl",),
        budgets=(Budget(2, 40),),
        modes=(Mode("elastic"),),
        n=1,
        sampling=Sampling(temperature=0.0),
        out=Path("run"),
        batch_size=8,
        engine=EngineSpec(**ENGINE | (engine or {})),
        scoring=ScoringSpec(**SCORING | (scoring or {})),
    )


def test_the_configs_keep_their_flat_keys_on_disk():
    eval_record, train_record = fixture("eval-config.json"), fixture("train-config.json")
    assert (
        on_disk(eval_config().to_json())
        == without(eval_record, *RUN_KEYS)
        | {
            "model_identity": "scripted",
            MODE_FORMAT_KEY: MODE_FORMAT,
        }
        | ADDED
    )
    assert (
        on_disk(build_config(**TRAIN).to_json())
        == without(train_record, *RUN_KEYS) | {"model_identity": "tiny"} | ADDED
    )


def test_an_eval_run_written_before_the_specs_resumes_and_records_the_same_config(tiny_engine):
    write_jsonl(Path("probs.jsonl"), problems(0))
    old = fixture("eval-config.json")
    Path("run").mkdir()
    Path("run/config.json").write_text(json.dumps(old))
    samples, _ = evaluate(eval_config(), engine=boxed(tiny_engine))
    assert len(samples) == 3  # every problem generated and scored: nothing refused
    record = json.loads(Path("run/config.json").read_text())
    assert record["weights_dtype"] == "float32"  # recorded beside the settings: the dtype the engine decoded in
    # the same record, now saying how its mode texts read (its elastic reads as it did)
    assert (
        without(record, "e1_version", "weights_dtype")
        == without(old, "e1_version") | {MODE_FORMAT_KEY: MODE_FORMAT} | ADDED
    )


@pytest.mark.parametrize(
    "engine, scoring, key",
    [
        ({"think_end": "</reason>"}, {}, "think_end"),
        ({}, {"max_tests": 4}, "max_tests"),
        ({}, {"test_time_limit_s": 3.0}, "test_time_limit_s"),
    ],
)
def test_an_eval_run_written_before_the_specs_refuses_other_settings(tiny_engine, engine, scoring, key):
    write_jsonl(Path("probs.jsonl"), problems(0))
    Path("run").mkdir()
    Path("run/config.json").write_text(json.dumps(fixture("eval-config.json")))
    with pytest.raises(ResultsError, match=f"different {key}"):
        evaluate(eval_config(engine, scoring), engine=boxed(tiny_engine))


def test_a_training_run_written_before_the_specs_resumes(tiny_model_dir):
    from e1.grpo.trainer import train
    from e1.store.run_identity import model_identity

    shutil.copytree(tiny_model_dir, "tiny")
    write_problems(Path("problems.jsonl"), count=4)
    train(build_config(**TRAIN), reward=contains_char)  # step 1 and its checkpoint
    # the old record, of this session's tiny model (it is built afresh for each test session)
    old = fixture("train-config.json") | {"model_identity": model_identity("tiny")}
    Path("run/config.json").write_text(json.dumps(old))
    with pytest.raises(ResultsError, match="different think_end"):
        train(build_config(**TRAIN | {"steps": 2, "resume": True, "think_end": "</reason>"}), reward=contains_char)
    train(build_config(**TRAIN | {"steps": 2, "resume": True}), reward=contains_char)
    assert pd.read_parquet("run/metrics.parquet")["step"].tolist() == [1, 2]
    record = json.loads(Path("run/config.json").read_text())
    assert record["resumed_from"].endswith("step_1")
    changed = ("steps", "resume", "resumed_from", "e1_version")
    assert without(record, *changed) == without(old, *changed) | ADDED
