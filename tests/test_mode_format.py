"""A bare ``early-exit`` is DEER's recipe now; runs recorded before keep the meaning they had.

A run directory records ``mode_format`` 2 in its ``config.json``; one without it was written when a
bare ``early-exit`` meant e1's variant, and every reader rewrites its stored texts through
``Mode.legacy`` (config and samples alike), so a resume matches its samples and decodes nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.budget import Budget
from e1.engine.modes import Mode
from e1.errors import ResultsError
from e1.store import MODE_FORMAT, MODE_FORMAT_KEY, SampleStore, mode_format

OLD_RUN = Path(__file__).parent / "fixtures" / "old_run"  # written by e1 at 0d4ee68: two early-exit modes
OLD_EARLY_EXIT = ("early-exit:threshold=0.95:trial=4:at=para", "early-exit:tries=2")

# early-exit's options as a run before the recipes could write them (recipe= and confidence= came later)
LEGACY_OPTIONS = st.fixed_dictionaries(
    {},
    optional={
        "threshold": st.floats(min_value=0.01, max_value=1, allow_nan=False).map(lambda x: round(x, 3)),
        "trial": st.integers(1, 1024),
        "tries": st.integers(0, 1 << 20),
        "at": st.sampled_from(["para", "wait", "para+wait", "alt", "wait+alt", "Hmm", "so: then, 'x'"]),
        "grace": st.integers(0, 64),
        "exit": st.sampled_from(["qwen", "Time is up."]),
    },
)


@settings(max_examples=200, deadline=None)
@given(LEGACY_OPTIONS, st.sampled_from([None, "deer", "e1"]), st.sampled_from([None, "mean", "geometric", "min"]))
def test_texts_round_trip_and_an_old_text_reads_as_e1_s_recipe(values, recipe, confidence):
    text = str(Mode("early-exit", **values))  # what an old run stored: no recipe=
    assert "recipe" not in Mode.option_keys(text)
    assert Mode.parse(text).recipe == "deer"  # given today, a bare early-exit is DEER's
    upgraded = Mode.legacy(text)
    assert Mode.parse(upgraded) == Mode.parse(text + ":recipe=e1") == Mode("early-exit", **values, recipe="e1")
    assert str(Mode.parse(upgraded)) == upgraded and Mode.legacy(upgraded) == upgraded  # once is enough
    extra = {key: value for key, value in (("recipe", recipe), ("confidence", confidence)) if value is not None}
    mode = Mode("early-exit", **values, **extra)
    assert Mode.parse(str(mode)) == mode
    if recipe is not None:  # a text that names its recipe is read as written
        assert Mode.parse(Mode.legacy(f"{text}:recipe={recipe}")) == Mode.parse(f"{text}:recipe={recipe}")


@given(
    st.sampled_from(
        [
            "elastic",
            "elastic:grace=4",
            "soft:start=0.5:strength=4:shape=exp",
            "budget-forcing:answer=s1",
            "none",
            "truncate",
            "nonsense:x=1",
            "early-exit:bogus=1",
            "",
            "early-exit:at='open",
        ]
    )
)
def test_other_texts_and_texts_that_do_not_parse_are_left_as_they_are(text):
    assert Mode.legacy(text) == text


@given(st.integers(0, 8), st.sampled_from([None, "qwen"]))
def test_an_old_budget_forcing_text_reads_as_the_text_it_forced_then(wait, exit):
    """Before s1's layout, budget-forcing forced ``</think>Final Answer:``: today's ``answer=inline``."""
    options = {key: value for key, value in (("wait", wait), ("exit", exit)) if value}
    text = str(Mode("budget-forcing", **options))
    upgraded = Mode.legacy(text)
    assert Mode.parse(upgraded) == Mode.parse(text).replace(answer="inline") and Mode.legacy(upgraded) == upgraded


def test_defaults_of_a_bare_early_exit_are_deer_s_and_recipe_e1_keeps_the_old_variant():
    deer, e1 = Mode.parse("early-exit"), Mode.parse("early-exit:recipe=e1")
    assert deer == Mode.parse("early-exit:recipe=deer") and str(deer) == "early-exit"
    assert (deer.trial_cap, deer.trial_tokens, deer.transition_texts, deer.text_transitions) == (
        10,
        20,
        ("Wait", " Wait"),
        True,
    )
    assert (e1.trial_cap, e1.trial_tokens, e1.transition_texts, e1.text_transitions) == (
        None,
        16,
        ("\n\n", "Wait", " Wait"),
        False,
    )
    assert deer.is_confident(0.96) and not deer.is_confident(0.95) and e1.is_confident(0.95)


def _old_run(tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    return run


def test_an_old_run_s_samples_and_summary_read_with_e1_s_recipe_named(tmp_path):
    run = _old_run(tmp_path)
    assert mode_format(run) == 1 and MODE_FORMAT_KEY not in json.loads((run / "config.json").read_text())
    stored = pd.read_parquet(run / "samples.parquet")
    store = SampleStore(run, legacy=Mode.legacy)
    read = store.read()
    assert sorted(read["mode"]) == sorted(map(Mode.legacy, stored["mode"]))
    for label in read["mode"].unique():
        mode = Mode.parse(label)
        assert not mode.trials or mode.recipe == "e1"
    assert len(read) == len(stored)  # each sample once: no label was merged or split
    # a filter on today's label finds the old rows (the viewer filters so)
    found = store.table(where=ds.field("mode") == "early-exit:tries=2:recipe=e1")
    assert found.num_rows == 2
    assert store.table(where=ds.field("mode") == "early-exit:tries=2").num_rows == 0
    summary = store.labelled(pd.read_parquet(run / "summary.parquet"))
    assert set(summary["mode"]) == set(read["mode"])
    assert SampleStore(run).read()["mode"].equals(stored["mode"].astype("string"))  # no rewrite given: as stored


def _eval_config(out, data, model, modes):
    from e1.engine.base import Sampling
    from e1.eval.run import EvalConfig

    return EvalConfig(
        model=str(model),
        datasets=(str(data),),
        budgets=(Budget(4, 4),),
        modes=tuple(modes),
        n=1,
        sampling=Sampling(temperature=0.0, max_tokens=12),
        out=out,
        batch_size=8,
    )


def _toy_data(tmp_path) -> Path:
    data = tmp_path / "toy.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(2)
        )
    )
    return data


class _Counting:
    """The tiny engine, counting what it is asked to decode."""

    def __init__(self, engine):
        self.engine, self.modes = engine, []

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, prompts, budget, mode, *args, **kwargs):
        self.modes.append(str(mode))
        return self.engine.generate(prompts, budget, mode, *args, **kwargs)


def test_an_old_run_resumes_with_its_meaning_and_a_bare_early_exit_is_deer_s(tmp_path, tiny_model_dir, tiny_engine):
    from e1.eval.run import evaluate

    run, data = _old_run(tmp_path), _toy_data(tmp_path)
    old = json.loads((run / "config.json").read_text())
    old_modes = [Mode.parse(Mode.legacy(m)) for m in old["modes"]]
    engine = _Counting(tiny_engine)
    resumed, _ = evaluate(_eval_config(run, data, tiny_model_dir, old_modes), engine=engine)
    assert engine.modes == []  # nothing decoded again
    config = json.loads((run / "config.json").read_text())
    assert config[MODE_FORMAT_KEY] == MODE_FORMAT and config["modes"] == [Mode.legacy(m) for m in old["modes"]]
    on_disk = pd.read_parquet(run / "samples.parquet")  # the labels were written so, once
    assert set(on_disk["mode"]) == set(resumed["mode"]) >= {Mode.legacy(m) for m in OLD_EARLY_EXIT}
    # today's bare early-exit added to that folder: one grid per folder, so it is refused in one line
    deer = [Mode.parse(m) for m in OLD_EARLY_EXIT]
    with pytest.raises(ResultsError, match="holds a run of modes"):
        evaluate(_eval_config(run, data, tiny_model_dir, [*old_modes, *deer]), engine=engine)
    assert engine.modes == []
    for label in OLD_EARLY_EXIT:
        assert Mode.parse(label).recipe == "deer" and Mode.parse(Mode.legacy(label)).recipe == "e1"
    # in a folder of its own the same bare texts decode DEER's recipe, and are read back as written
    fresh, _ = evaluate(_eval_config(tmp_path / "deer", data, tiny_model_dir, deer), engine=engine)
    assert sorted(engine.modes) == sorted(OLD_EARLY_EXIT) and set(fresh["mode"]) == set(OLD_EARLY_EXIT)
    assert set(SampleStore(tmp_path / "deer", legacy=Mode.legacy).read()["mode"]) == set(OLD_EARLY_EXIT)


def test_a_fresh_run_records_the_format_and_deer_s_meaning(tmp_path, tiny_model_dir, tiny_engine):
    from e1.eval.run import evaluate

    out = tmp_path / "fresh"
    samples, _ = evaluate(
        _eval_config(out, _toy_data(tmp_path), tiny_model_dir, [Mode.parse("early-exit")]), engine=tiny_engine
    )
    config = json.loads((out / "config.json").read_text())
    assert config[MODE_FORMAT_KEY] == MODE_FORMAT and config["modes"] == ["early-exit"]
    mode = Mode.parse(config["modes"][0])
    assert (mode.recipe, mode.trial_cap, mode.transition_texts) == ("deer", 10, ("Wait", " Wait"))
    assert set(SampleStore(out, legacy=Mode.legacy).read()["mode"]) == {"early-exit"} == set(samples["mode"])


@settings(max_examples=20, deadline=None)
@given(
    st.lists(
        st.sampled_from([*OLD_EARLY_EXIT, "elastic", "early-exit:recipe=e1", "early-exit:trial=3:recipe=e1"]),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
)
def test_an_interrupted_old_run_s_parts_are_upgraded_once_and_read_the_same_before_and_after(
    tmp_path_factory, labels, compacted
):
    from tests.test_samples_store import row

    out = tmp_path_factory.mktemp("old")
    (out / "config.json").write_text(json.dumps({"kind": "eval", "modes": sorted(set(labels))}))  # no mode_format
    store = SampleStore(out, legacy=Mode.legacy)
    for index, label in enumerate(labels):  # one part per batch, as an interrupted run leaves them
        SampleStore(out).append([row("q", index) | {"mode": label}])
    if compacted:
        SampleStore(out).compact()
    before = store.read().sort_values("sample_index", ignore_index=True)
    assert list(before["mode"]) == [Mode.legacy(label) for label in labels]
    assert store.upgrade() and not store.parts()
    on_disk = pd.read_parquet(out / "samples.parquet")
    assert set(on_disk["mode"]) == {Mode.legacy(label) for label in labels}
    assert (
        store.read().sort_values("sample_index", ignore_index=True).equals(before)
    )  # the same rows, still read through the rewrite (idempotent)
