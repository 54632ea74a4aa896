"""Which steps save what (``--save-every``, ``--resume-every``), and that resuming from a resumable
checkpoint after weights-only saves gives exactly the uninterrupted run."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.grpo.config import TrainConfig
from tests.test_train import contains_char, small, write_problems


@given(steps=st.integers(1, 60), save_every=st.integers(1, 20), resume_every=st.one_of(st.none(), st.integers(1, 20)))
@settings(max_examples=200, deadline=None)
def test_save_kinds(steps, save_every, resume_every):
    config = TrainConfig(model="m", data="d", steps=steps, save_every=save_every, resume_every=resume_every)
    kinds = {step: config.save_kind(step) for step in range(1, steps + 1)}
    resumable = [step for step, kind in kinds.items() if kind == "resume"]
    assert resumable[-1] == steps  # a finished run can always be continued (--steps higher, --resume)
    gaps = [b - a for a, b in zip([0, *resumable], resumable)]
    assert max(gaps) <= (resume_every or save_every)  # a crash loses at most that many steps
    assert all(kinds[step] for step in range(save_every, steps + 1, save_every))  # every save_every step saves
    if resume_every is None:  # the default: every save is resumable, as before --resume-every
        assert set(kinds.values()) <= {"resume", None}


class Stop(Exception):
    pass


def stop_after(step: int):
    def on_step(row: dict) -> None:
        if row["step"] == step:
            raise Stop

    return on_step


@pytest.fixture(scope="module")
def runs(tiny_model_dir, tmp_path_factory):
    """A: 4 steps, weights every step, resumable every 2. B: the same, killed after step 3 (a
    weights-only save), then resumed (from step 2) to 4, keeping 1 checkpoint."""
    from e1.grpo.trainer import train

    root = tmp_path_factory.mktemp("saves")
    data = write_problems(root / "problems.jsonl", count=6)
    common = {"steps": 4, "save_every": 1, "resume_every": 2, "entropy_coef": 0.01}
    train(small(tiny_model_dir, data, root / "a", **common), reward=contains_char)
    with pytest.raises(Stop):
        train(
            small(tiny_model_dir, data, root / "b", keep_last=1, **common), reward=contains_char, on_step=stop_after(3)
        )
    killed = sorted(p.name for p in (root / "b" / "checkpoints").glob("step_*"))
    train(small(tiny_model_dir, data, root / "b", keep_last=1, resume=True, **common), reward=contains_char)
    return root / "a", root / "b", killed


def test_only_resume_points_hold_optimizer_state(runs):
    from e1.grpo.checkpoint import STATE, checkpoints, saved_models

    run_a, _, _ = runs
    assert [p.name for p in saved_models(run_a)] == ["step_1", "step_2", "step_3", "step_4"]
    assert [p.name for p in checkpoints(run_a)] == ["step_2", "step_4"]
    weights_only, resumable = (sum(f.stat().st_size for f in p.rglob("*")) for p in saved_models(run_a)[:2])
    assert not (run_a / "checkpoints" / "step_1" / STATE).exists()
    # fp32 AdamW: the trainer state adds two moments to the weights, ~3x the bytes in all
    assert 2.5 < resumable / weights_only < 3.5, (resumable, weights_only)


def test_resume_after_weights_only_saves_reproduces_the_run(runs):
    import pandas as pd
    import torch
    from safetensors.torch import load_file

    run_a, run_b, killed = runs
    # pruning keeps the newest save and the newest resumable one, which the resume needs
    assert killed == ["step_2", "step_3"]
    assert sorted(p.name for p in (run_b / "checkpoints").glob("step_*")) == ["step_4"]
    a, b = pd.read_parquet(run_a / "metrics.parquet"), pd.read_parquet(run_b / "metrics.parquet")
    assert list(a["step"]) == list(b["step"]) == [1, 2, 3, 4]
    for column in [c for c in a.columns if not c.endswith("_s")]:
        assert a[column].tolist() == pytest.approx(b[column].tolist(), abs=1e-6, nan_ok=True), column
    final_a, final_b = (load_file(run / "checkpoints" / "step_4" / "model.safetensors") for run in (run_a, run_b))
    assert all(torch.allclose(final_a[name], final_b[name], atol=1e-6) for name in final_a)
