"""Nothing lost: a kill -9 right after a checkpoint leaves no hole in metrics.parquet, and a second
process writing into a run directory is refused while the first finishes with every row."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

# trains 3 steps (checkpoint every step) and kills itself with SIGKILL right after checkpoint step_2 is
# written: the window in which metrics.parquet used to miss the checkpointed step for good
KILL_AFTER_CHECKPOINT = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    import e1.grpo.trainer as trainer
    from e1.grpo.config import TrainConfig

    real = trainer.save_checkpoint
    def save_then_die(config, state, *args, **kwargs):
        path = real(config, state, *args, **kwargs)
        if state.step == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return path
    trainer.save_checkpoint = save_then_die
    model, data, out = sys.argv[1:4]
    trainer.train(TrainConfig(model=model, data=data, out=Path(out), think=4, solve=4, steps=3, prompts_per_step=2,
                              samples_per_prompt=2, mini_batch_prompts=2, micro_batch=4, temperature=1.0,
                              save_every=1, lr=1e-2), reward=lambda completions, answers, **_: [1.0, 0.0] * (len(completions) // 2))
""")


def write_problems(path, count=4):
    path.write_text(
        "".join(json.dumps({"problem": f"What is {i} + {i}?", "answer": str(2 * i)}) + "\n" for i in range(count))
    )
    return path


def env():
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def contend(first_args: list[str], second_args: list[str], out):
    """Start ``first_args``; once it holds ``out`` (its config.json, written under the lock, exists)
    freeze it, run ``second_args`` to the end, then let the first finish: (first, second, first's stderr).
    Freezing makes the second try while the first holds the lock, however fast either runs."""
    first = subprocess.Popen(first_args, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not (out / "config.json").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr and first.stderr.read()
            time.sleep(0.1)
        first.send_signal(signal.SIGSTOP)
        try:
            second = subprocess.run(second_args, env=env(), capture_output=True, text=True, timeout=300)
        finally:
            first.send_signal(signal.SIGCONT)
    finally:
        _, errors = first.communicate(timeout=600)
    return first, second, errors


def test_kill_9_right_after_a_checkpoint_leaves_no_hole_in_metrics(tiny_model_dir, tmp_path):
    import pandas as pd

    from e1.grpo.config import TrainConfig
    from e1.grpo.trainer import train

    data, out = write_problems(tmp_path / "p.jsonl"), tmp_path / "run"
    killed = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_CHECKPOINT, str(tiny_model_dir), str(data), str(out)],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert killed.returncode == -9, killed.stderr
    assert (out / "checkpoints" / "step_2").is_dir()
    assert list(pd.read_parquet(out / "metrics.parquet")["step"]) == [1, 2]  # step 2's row landed before it
    train(
        TrainConfig(
            model=str(tiny_model_dir),
            data=str(data),
            out=out,
            think=4,
            solve=4,
            steps=3,
            prompts_per_step=2,
            samples_per_prompt=2,
            mini_batch_prompts=2,
            micro_batch=4,
            temperature=1.0,
            save_every=1,
            lr=1e-2,
            resume=True,
        ),
        reward=lambda completions, answers, **_: [1.0, 0.0] * (len(completions) // 2),
    )
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert list(metrics["step"]) == [1, 2, 3]  # no hole, no duplicate
    assert metrics["save_s"].notna().tolist() == [True, False, True]  # step 2's save time was never known


def test_a_second_train_into_one_out_is_refused_and_the_first_loses_nothing(tiny_model_dir, tmp_path):
    import pandas as pd

    data, out = write_problems(tmp_path / "p.jsonl"), tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "e1",
        "train",
        "--model",
        str(tiny_model_dir),
        "--data",
        str(data),
        "--out",
        str(out),
        "--think",
        "4",
        "--solve",
        "4",
        "--prompts-per-step",
        "2",
        "--samples-per-prompt",
        "2",
        "--mini-batch-prompts",
        "2",
        "--micro-batch",
        "4",
        "--save-every",
        "5",
        "--temperature",
        "1",
    ]
    first, second, errors = contend([*args, "--steps", "12"], [*args, "--steps", "3", "--resume"], out)
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and f"in use by e1 train (pid {first.pid}" in lines[0], second.stderr
    assert first.returncode == 0, errors
    assert list(pd.read_parquet(out / "metrics.parquet")["step"]) == list(range(1, 13))
    assert json.loads((out / "config.json").read_text())["steps"] == 12  # the refused run wrote nothing


@pytest.mark.parametrize("stage", ["state", "keys"])
def test_a_damaged_trainer_state_is_named_with_a_way_out(tmp_path, stage):
    import torch

    from e1.errors import ResultsError
    from e1.grpo.checkpoint import STATE, load_checkpoint

    checkpoint = tmp_path / "checkpoints" / "step_3"
    checkpoint.mkdir(parents=True)
    if stage == "state":
        (checkpoint / STATE).write_bytes(b"not a torch file")
    else:
        torch.save({"weights": 1}, checkpoint / STATE)  # a foreign file
    with pytest.raises(ResultsError, match=f"cannot read .*step_3.*{STATE}") as err:
        load_checkpoint(checkpoint, strategy=None)
    assert "move" in err.value.hint and "step_3" in err.value.hint


def test_a_second_eval_into_one_out_is_refused_and_no_sample_is_lost(tiny_model_dir, tmp_path):
    """Two `e1 eval` with different budgets into one --out (the case that once lost 800 samples)."""
    import pandas as pd

    data, out = write_problems(tmp_path / "p.jsonl", count=12), tmp_path / "run"
    args = [
        sys.executable,
        "-m",
        "e1",
        "eval",
        "--model",
        str(tiny_model_dir),
        "--datasets",
        str(data),
        "--out",
        str(out),
        "--n",
        "2",
        "--batch-size",
        "2",
        "--temperature",
        "1",
    ]
    first, second, errors = contend(
        [*args, "--think", "8", "--solve", "4"], [*args, "--think", "4", "--solve", "4"], out
    )
    assert second.returncode == 1
    lines = second.stderr.strip().splitlines()
    # refused in one line: the folder is in use, or (once the first wrote config.json) it holds other budgets
    assert f"in use by e1 eval (pid {first.pid}" in lines[-1] or "holds a run of budgets" in lines[-1], second.stderr
    assert first.returncode == 0, errors
    samples = pd.read_parquet(out / "samples.parquet")
    assert len(samples) == 12 * 2 and set(samples["think_budget"]) == {
        8
    }  # every sample of the first, none of the second
    assert not (out / ".e1.lock").exists()
