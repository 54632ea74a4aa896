"""Every input a user can get wrong: one line saying what and how to fix it, the right exit code,
no traceback, and nothing written where nothing should be.

Each case runs the real entry point (:func:`e1.cli.app.main`) in-process. ``{x}`` in an argument is
a path from :func:`workspace`: ``{tiny}`` a working tiny model, ``{trunc}`` one with a truncated
weights file, ``{notok}`` one without tokenizer files, ``{data}`` a one-problem jsonl, ``{file}`` a
plain file, ``{out}`` a run directory that must not exist afterwards (unless the case says so).
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
from pathlib import Path

import pytest

EVAL = ["eval", "--model", "{tiny}", "--datasets", "{data}", "--n", "1", "--think", "8", "--solve", "8", "--out", "{out}"]
SWEEP = ["sweep", "--model", "{tiny}", "--datasets", "{data}", "--n", "1", "--think", "8", "--solve", "8", "--out", "{out}"]
TRAIN = ["train", "--model", "{tiny}", "--data", "{data}", "--out", "{out}"]
USAGE = 2  # typer's own usage errors (a boxed message, no traceback)

# (id, arguments, exit code, text the message must contain)
CASES = [
    # budgets and modes
    ("think-negative", [*EVAL, "--think", "-1"], 1, "think budget"),
    ("think-garbage", [*EVAL, "--think", "1x"], 1, "think budget"),
    ("think-k", [*EVAL, "--think", "k"], 1, "think budget"),
    ("think-empty", [*EVAL, "--think", ""], 1, "think budget"),
    ("think-fraction", [*EVAL, "--think", "1.3k"], 1, "think budget"),
    ("solve-zero", [*EVAL, "--solve", "0"], 1, "solve budget must be >= 1"),
    ("mode-typo", [*EVAL, "--mode", "trunc"], 1, "did you mean 'truncate'"),
    ("mode-bad-wait", [*EVAL, "--mode", "budget-forcing:wait=x"], 1, "wait"),
    ("budget-over-context", [*EVAL, "--think", "4k"], 1, "more than the context"),
    # sampling and batching
    ("n-zero", [*EVAL, "--n", "0"], 1, "--n must be >= 1"),
    ("n-text", [*EVAL, "--n", "abc"], USAGE, "Invalid value"),
    ("batch-zero", [*EVAL, "--batch-size", "0"], 1, "--batch-size must be >= 1"),
    ("limit-zero", [*EVAL, "--limit", "0"], 1, "--limit must be >= 1"),
    ("temperature-negative", [*EVAL, "--temperature", "-1"], 1, "temperature"),
    ("top-p-zero", [*EVAL, "--top-p", "0"], 1, "top"),
    ("top-p-two", [*EVAL, "--top-p", "2"], 1, "top"),
    ("top-k-negative", [*EVAL, "--top-k", "-1"], 1, "top"),
    ("max-tokens-zero", [*EVAL, "--max-tokens", "0"], 1, "--max-tokens must be >= 1"),
    ("unknown-option", [*EVAL, "--thinking", "8"], USAGE, "No such option"),
    # code tests
    ("workers-zero", [*EVAL, "--workers", "0"], 1, "--workers must be >= 1"),
    ("max-tests-zero", [*EVAL, "--max-tests", "0"], 1, "--max-tests must be >= 1"),
    ("test-time-zero", [*EVAL, "--test-time-limit", "0"], 1, "--test-time-limit must be in (0, 86400]"),
    # engine settings
    ("tp-zero", [*EVAL, "--tp", "0"], 1, "--tp must be >= 1"),
    ("gpu-memory-seven", [*EVAL, "--gpu-memory-utilization", "7"], 1, "--gpu-memory-utilization must be in (0, 1]"),
    ("gpu-memory-zero", [*EVAL, "--gpu-memory-utilization", "0"], 1, "--gpu-memory-utilization must be in (0, 1]"),
    ("max-model-len-zero", [*EVAL, "--max-model-len", "0"], 1, "--max-model-len must be >= 1"),
    ("backend-typo", [*EVAL, "--backend", "vlm"], 1, "did you mean 'vllm'"),
    ("device-tpu", [*EVAL, "--device", "tpu"], 1, "unknown device 'tpu'"),
    ("device-cuda-x", [*EVAL, "--device", "cuda:x"], 1, "unknown device 'cuda:x'"),
    ("dtype-typo", [*EVAL, "--dtype", "float33"], 1, "unknown dtype"),
    ("markers-equal", [*EVAL, "--think-start", "<t>", "--think-end", "<t>"], 1, "both '<t>'"),
    ("marker-empty", [*EVAL, "--think-end", ""], 1, "--think-end is empty"),
    # --out
    ("out-empty", [*EVAL, "--out", ""], 1, "--out is empty"),
    ("out-is-file", [*EVAL, "--out", "{file}"], 1, "is a file"),
    ("out-under-file", [*EVAL, "--out", "{file}/run"], 1, "is a file"),
    ("out-markup-path", [*EVAL, "--model", "./no[/x]", "--out", "{tmp}/[bold]x[/bold]"], 1, "./no[/x]"),
    # models
    ("model-missing", [*EVAL, "--model", "./no-model"], 1, "no model folder './no-model'"),
    ("model-is-file", [*EVAL, "--model", "{file}"], 1, "is a file"),
    ("model-markup", [*EVAL, "--model", "./m[bold]x[/bold]"], 1, "m[bold]x[/bold]"),
    ("model-truncated-weights", [*EVAL, "--model", "{trunc}"], 1, "damaged or incomplete"),
    ("model-without-tokenizer", [*EVAL, "--model", "{notok}"], 1, "has no tokenizer files"),
    # data
    ("dataset-unknown", [*EVAL, "--datasets", "aimee"], 1, "aime"),
    ("dataset-file-missing", [*EVAL, "--datasets", "{tmp}/nope.jsonl"], 1, "nope.jsonl"),
    ("dataset-file-empty", [*EVAL, "--datasets", "{empty}"], 1, "empty.jsonl"),
    ("no-dataset", ["eval", "--model", "{tiny}", "--out", "{out}"], USAGE, "--datasets"),
    # run directories holding something else
    ("samples-garbage", [*EVAL, "--out", "{garbage_run}"], 1, "cannot read"),
    ("samples-foreign", [*EVAL, "--out", "{foreign_run}"], 1, "without e1's columns"),
    ("run-of-another-model", [*EVAL, "--out", "{other_run}"], 1, "different model"),
    # sweep
    ("sweep-model-missing", [*SWEEP, "--model", "./nope"], 1, "no model folder './nope'"),
    ("sweep-model-twice", [*SWEEP, "--model", "{tiny}"], 1, "the same --model is given twice"),
    ("sweep-mode-typo", [*SWEEP, "--modes", "elastc"], 1, "did you mean 'elastic'"),
    ("sweep-think-garbage", [*SWEEP, "--think", "8,1x"], 1, "think budget"),
    ("sweep-out-empty", [*SWEEP, "--out", ""], 1, "--out is empty"),
    ("sweep-tp-zero", [*SWEEP, "--tp", "0"], 1, "--tp must be >= 1"),
    # data commands
    ("data-list-dir-is-file", ["data", "list", "--data-dir", "{file}"], 1, "is a file"),
    ("data-dir-empty", [*EVAL, "--data-dir", ""], 1, "--data-dir is empty"),
    ("prepare-unknown", ["data", "prepare", "aimee"], 1, "aime"),
    ("prepare-name-without-from", ["data", "prepare", "--name", "x"], 1, "only apply with --from"),
    ("prepare-from-missing", ["data", "prepare", "--from", "{tmp}/nope.jsonl", "--out", "{out}"], 1, "nope.jsonl"),
    ("prepare-from-and-names", ["data", "prepare", "aime", "--from", "{data}", "--out", "{out}"], 1, "not both"),
    ("prepare-from-builtin-fields", ["data", "prepare", "--from", "{data}", "--name", "humaneval", "--out", "{out}"],
     1, "field 'prompt' is missing"),
    ("prepare-out-under-file", ["data", "prepare", "--from", "{data}", "--name", "x", "--out", "{file}/d"], 1,
     "cannot write"),
    ("prepare-from-empty", ["data", "prepare", "--from", ""], 1, "--from is empty"),
    # training
    ("train-steps-float", [*TRAIN, "--config", "{toml:steps = 2.5}"], 1, "steps must be a whole number, got 2.5"),
    ("train-prompts-bool", [*TRAIN, "--config", "{toml:prompts_per_step = true}"], 1,
     "prompts_per_step must be a whole number, got True"),
    ("train-lr-string", [*TRAIN, "--config", "{toml:lr = \"fast\"}"], 1, "lr must be a number, got 'fast'"),
    ("train-unknown-key", [*TRAIN, "--config", "{toml:stpes = 3}"], 1, "did you mean 'steps'"),
    ("train-config-missing", [*TRAIN, "--config", "{tmp}/nope.toml"], 1, "no such config file"),
    ("train-config-syntax", [*TRAIN, "--config", "{toml:steps = }"], 1, "cannot parse"),
    ("train-resume-nothing", [*TRAIN, "--resume"], 1, "holds no training run"),
    ("train-no-model", ["train", "--data", "{data}", "--out", "{out}"], 1, "no model given"),
    ("train-algo-typo", [*TRAIN, "--algo", "grop"], 1, "did you mean 'grpo'"),
    ("train-markers-equal", [*TRAIN, "--think-start", "<t>", "--think-end", "<t>"], 1, "both '<t>'"),
    ("train-device-tpu", [*TRAIN, "--device", "tpu"], 1, "unknown device 'tpu'"),
    ("train-tp-zero", [*TRAIN, "--tp", "0"], 1, "tp must be >= 1"),
    ("train-gpu-memory-seven", [*TRAIN, "--gpu-memory-utilization", "7"], 1, "gpu_memory_utilization must be in"),
    ("train-out-empty", [*TRAIN, "--out", ""], 1, "--out is empty"),
    ("train-steps-text", [*TRAIN, "--steps", "2.5"], USAGE, "Invalid value"),
    # demo and elo
    ("demo-out-is-file", ["demo", "--out", "{file}"], 1, "is a file"),
    ("demo-out-empty", ["demo", "--out", ""], 1, "--out is empty"),
    ("elo-api-url", ["elo", "fetch", "--contests", "1", "--api-url", "notaurl", "--out", "{out}"], 1,
     "--api-url 'notaurl' is not an http(s) URL"),
    ("elo-fetch-out-empty", ["elo", "fetch", "--contests", "1", "--out", ""], 1, "--out is empty"),
    ("elo-needs-contests", ["elo", "--results", "{garbage_run}"], 1, "needs --results and --contests"),
]


@pytest.fixture(scope="module")
def workspace(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """The files the cases name, built once."""
    import pandas as pd

    root = tmp_path_factory.mktemp("bad-inputs")
    trunc, notok = root / "trunc", root / "notok"
    shutil.copytree(tiny_model_dir, trunc)
    with open(trunc / "model.safetensors", "r+b") as weights:
        weights.truncate(1000)
    shutil.copytree(tiny_model_dir, notok)
    for path in notok.iterdir():
        if path.name.startswith("tokenizer") or path.name == "chat_template.jinja":
            path.unlink()
    (root / "data.jsonl").write_text(json.dumps({"problem": "What is 1 + 1?", "answer": "2"}) + "\n")
    (root / "empty.jsonl").write_text("")
    (root / "file").write_text("not a directory")
    for name, write in (("garbage_run", lambda p: p.write_bytes(b"PAR1 garbage")),
                        ("foreign_run", lambda p: pd.DataFrame({"x": [1]}).to_parquet(p))):
        (root / name).mkdir()
        write(root / name / "samples.parquet")
    (root / "other_run").mkdir()
    (root / "other_run" / "config.json").write_text(json.dumps({"model": "someone/else", "n": 1}))
    return {"tiny": tiny_model_dir, "trunc": trunc, "notok": notok, "data": root / "data.jsonl",
            "empty": root / "empty.jsonl", "file": root / "file", "garbage_run": root / "garbage_run",
            "foreign_run": root / "foreign_run", "other_run": root / "other_run"}


def expand(argument: str, paths: dict, tmp_path: Path) -> str:
    if argument.startswith("{toml:"):
        config = tmp_path / "train.toml"
        config.write_text(argument[len("{toml:"):-1] + "\n")
        return str(config)
    return argument.format(**{name: str(path) for name, path in paths.items()}, tmp=tmp_path, out=tmp_path / "out")


def run_main(args: list[str], capsys) -> tuple[int, str]:
    """``e1 ARGS`` through the console entry point: (exit code, stderr)."""
    from e1.cli.app import main

    before, argv = signal.getsignal(signal.SIGINT), sys.argv
    sys.argv = ["e1", *args]
    try:
        main()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.argv = argv
        signal.signal(signal.SIGINT, before)
    return code, capsys.readouterr().err


def snapshot(paths: dict) -> dict[str, tuple]:
    """What the shared fixtures hold, to check that no case changed them."""
    return {name: tuple(sorted(p.name for p in path.iterdir())) if path.is_dir() else (path.stat().st_size,)
            for name, path in paths.items()}


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_with_nothing_written(case, workspace, tmp_path, capsys):
    _, arguments, code, needle = case
    before = snapshot(workspace)
    exit_code, err = run_main([expand(a, workspace, tmp_path) for a in arguments], capsys)
    assert exit_code == code, err
    assert "Traceback" not in err and "please report it" not in err, err
    assert needle in " ".join(err.split()), err
    if code != USAGE:  # the one error line, after the stage a log shows when a model starts loading
        *progress, last = err.strip().splitlines()
        assert last.startswith("error: ") and all(line.startswith("loading ") for line in progress), err
    assert not (tmp_path / "out").exists(), "a refused command created its --out"
    assert snapshot(workspace) == before


def test_the_table_covers_every_command_and_enough_cases():
    commands = {case[1][0] for case in CASES}
    assert commands == {"eval", "sweep", "data", "train", "demo", "elo"}
    assert len(CASES) >= 60


def test_device_cuda_on_a_machine_without_one_is_named(workspace, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    code, err = run_main([expand(a, workspace, tmp_path) for a in [*EVAL, "--device", "cuda"]], capsys)
    assert code == 1 and err.strip().splitlines() == [err.strip()] and "--device cuda: no such GPU" in err, err
    assert not (tmp_path / "out").exists()


def test_ctrl_c_says_what_was_kept_and_how_to_resume(tmp_path, capsys, monkeypatch):
    import e1.cli.app as cli
    from e1.store.lock import run_lock

    with run_lock(tmp_path / "run", "e1 eval"), pytest.raises(cli.Interrupted) as caught:
        cli._on_sigint(signal.SIGINT, None)  # what e1's SIGINT handler raises mid-run
    assert str(tmp_path / "run") in str(caught.value) and "rerun the same command to resume" in str(caught.value)

    def interrupted(**_):
        raise caught.value

    monkeypatch.setattr(cli, "app", interrupted)
    code, err = run_main(["eval"], capsys)
    assert code == 130 and err.strip().splitlines() == [f"error: {caught.value}"]
