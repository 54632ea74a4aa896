"""Every input a user can get wrong: one line saying what and how to fix it, the right exit code,
no traceback, and nothing written where nothing should be.

Each case runs the real entry point (:func:`e1.cli.app.main`) in-process. ``{x}`` in an argument is
a path from :func:`workspace`: ``{tiny}`` a working tiny model, ``{trunc}`` one with a truncated
weights file, ``{notok}`` one without tokenizer files, ``{data}`` a one-problem jsonl, ``{file}`` a
plain file, ``{out}`` a run directory that must not exist afterwards (unless the case says so).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

EVAL = [
    "eval",
    "--model",
    "{tiny}",
    "--datasets",
    "{data}",
    "--n",
    "1",
    "--think",
    "8",
    "--solve",
    "8",
    "--out",
    "{out}",
]
SWEEP = [
    "sweep",
    "--model",
    "{tiny}",
    "--datasets",
    "{data}",
    "--n",
    "1",
    "--think",
    "8",
    "--solve",
    "8",
    "--out",
    "{out}",
]
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
    (
        "prepare-from-builtin-fields",
        ["data", "prepare", "--from", "{data}", "--name", "humaneval", "--out", "{out}"],
        1,
        "field 'prompt' is missing",
    ),
    (
        "prepare-out-under-file",
        ["data", "prepare", "--from", "{data}", "--name", "x", "--out", "{file}/d"],
        1,
        "cannot write",
    ),
    ("prepare-from-empty", ["data", "prepare", "--from", ""], 1, "--from is empty"),
    # training
    ("train-steps-float", [*TRAIN, "--config", "{toml:steps = 2.5}"], 1, "steps must be a whole number, got 2.5"),
    (
        "train-prompts-bool",
        [*TRAIN, "--config", "{toml:prompts_per_step = true}"],
        1,
        "prompts_per_step must be a whole number, got True",
    ),
    ("train-lr-string", [*TRAIN, "--config", '{toml:lr = "fast"}'], 1, "lr must be a number, got 'fast'"),
    ("train-unknown-key", [*TRAIN, "--config", "{toml:stpes = 3}"], 1, "did you mean 'steps'"),
    ("train-config-missing", [*TRAIN, "--config", "{tmp}/nope.toml"], 1, "no such config file"),
    ("train-config-syntax", [*TRAIN, "--config", "{toml:steps = }"], 1, "cannot parse"),
    ("train-resume-nothing", [*TRAIN, "--resume"], 1, "holds no training run"),
    ("train-no-model", ["train", "--data", "{data}", "--out", "{out}"], 1, "no model given"),
    ("train-algo-typo", [*TRAIN, "--algo", "grop"], 1, "did you mean 'grpo'"),
    ("train-markers-equal", [*TRAIN, "--think-start", "<t>", "--think-end", "<t>"], 1, "both '<t>'"),
    ("train-device-tpu", [*TRAIN, "--device", "tpu"], 1, "unknown device 'tpu'"),
    ("train-tp-zero", [*TRAIN, "--tp", "0"], 1, "tp must be >= 1"),
    ("train-gpu-memory-seven", [*TRAIN, "--gpu-memory-utilization", "7"], 1, "--gpu-memory-utilization must be in"),
    ("train-resume-every-zero", [*TRAIN, "--resume-every", "0"], 1, "resume_every must be >= 1"),
    ("train-kv-cache-negative", [*TRAIN, "--kv-cache-gib", "-1"], 1, "kv_cache_gib must be in"),
    ("train-out-empty", [*TRAIN, "--out", ""], 1, "--out is empty"),
    ("train-steps-text", [*TRAIN, "--steps", "2.5"], USAGE, "Invalid value"),
    # demo and elo
    ("demo-out-is-file", ["demo", "--out", "{file}"], 1, "is a file"),
    ("demo-out-empty", ["demo", "--out", ""], 1, "--out is empty"),
    (
        "elo-api-url",
        ["elo", "fetch", "--contests", "1", "--api-url", "notaurl", "--out", "{out}"],
        1,
        "--api-url 'notaurl' is not an http(s) URL",
    ),
    ("elo-fetch-out-empty", ["elo", "fetch", "--contests", "1", "--out", ""], 1, "--out is empty"),
    ("elo-needs-contests", ["elo", "--results", "{garbage_run}"], 1, "needs --results and --contests"),
    # every number is checked for what it is: NaN, inf and 23 or 400 digits are refused before anything loads
    ("temperature-nan", [*EVAL, "--temperature", "nan"], 1, "--temperature must be a finite number"),
    ("top-p-inf", [*EVAL, "--top-p", "inf"], 1, "--top-p must be a finite number"),
    ("seed-23-digits", [*EVAL, "--seed", "9" * 23], 1, "--seed must be <= 9223372036854775807"),
    ("think-400-digits", [*EVAL, "--think", "9" * 400], 1, "think budget must be <= 2147483647"),
    ("gpu-memory-nan", [*EVAL, "--gpu-memory-utilization", "nan"], 1, "--gpu-memory-utilization must be a finite"),
    ("test-time-inf", [*EVAL, "--test-time-limit", "inf"], 1, "--test-time-limit must be a finite number"),
    ("sweep-temperature-nan", [*SWEEP, "--temperature", "nan"], 1, "--temperature must be a finite number"),
    ("train-lr-inf", [*TRAIN, "--lr", "inf"], 1, "lr must be a finite number"),
    ("train-weight-decay-nan", [*TRAIN, "--weight-decay", "nan"], 1, "weight_decay must be a finite number"),
    ("train-kl-coef-nan", [*TRAIN, "--kl-coef", "nan"], 1, "kl_coef must be a finite number"),
    ("train-seed-23-digits", [*TRAIN, "--seed", "9" * 23], 1, "seed must be <= 9223372036854775807"),
    ("train-think-400-digits", [*TRAIN, "--think", "9" * 400], 1, "think budget must be <= 2147483647"),
    ("train-lr-nan-in-toml", [*TRAIN, "--config", "{toml:lr = nan}"], 1, "lr must be a finite number"),
    ("demo-seed-23-digits", ["demo", "--out", "{out}", "--seed", "9" * 23], 1, "--seed must be <= 9223372036854775807"),
    (
        "elo-min-participants-negative",
        ["elo", "--results", "{garbage_run}", "--contests", "{tmp}", "--min-participants", "-1"],
        1,
        "--min-participants must be >= 0",
    ),
    (
        "elo-pass-n-23-digits",
        ["elo", "--results", "{garbage_run}", "--contests", "{tmp}", "--pass-n", "9" * 23],
        1,
        "--pass-n must be <= 1000000",
    ),
    (
        "serve-gpu-memory-nan",
        ["serve", "--model", "{tiny}", "--gpu-memory-utilization", "nan", "--print-command"],
        1,
        "--gpu-memory-utilization must be a finite number",
    ),
    ("mode-wait-23-digits", [*EVAL, "--mode", "budget-forcing:wait=" + "9" * 23], 1, "wait must be <= 1000"),
    (
        "train-length-reward-nan",
        [*TRAIN, "--length-reward", "cosine:exceed=nan"],
        1,
        "cosine exceed must be a finite number",
    ),
    (
        "serve-port-23-digits",
        ["serve", "--model", "{tiny}", "--port", "9" * 23, "--print-command"],
        1,
        "--port must be <= 65535",
    ),
    # errors that name the right cause
    ("dataset-fifo", [*EVAL, "--datasets", "{fifo}"], 1, "is a FIFO (named pipe), not a data file"),
    ("dataset-symlink-loop", [*EVAL, "--datasets", "{loop}"], 1, "is a symlink loop, not a data file"),
    ("dataset-dev-null", [*EVAL, "--datasets", "/dev/null"], 1, "/dev/null is a character device"),
    ("dataset-directory", [*EVAL, "--datasets", "{tmp}"], 1, "is a directory, not a data file"),
    ("dataset-row-without-answer", [*EVAL, "--datasets", "{noanswer}"], 1, "e1 data prepare --from"),
    ("prepare-from-fifo", ["data", "prepare", "--from", "{fifo}", "--out", "{out}"], 1, "is a FIFO (named pipe)"),
    ("model-empty-folder", [*EVAL, "--model", "{emptymodel}"], 1, "emptymodel' is empty"),
    (
        "model-gguf-folder",
        [*EVAL, "--model", "{gguf}"],
        1,
        "holds a GGUF file (model-Q4_K_M.gguf), which e1 cannot load",
    ),
    ("train-model-empty-folder", [*TRAIN, "--model", "{emptymodel}"], 1, "emptymodel' is empty"),
    ("train-yaml-lr-fix-is-a-yaml-float", [*TRAIN, "--config", "{yaml:lr: fast}"], 1, "write e.g. lr: 1.0e-06"),
    ("elo-results-malformed", ["elo", "--results", "{badjson}", "--contests", "{tmp}"], 1, "--results file"),
    (
        "train-resume-truncated-checkpoint",
        [*TRAIN, "--out", "{ckpt_run}", "--resume", "--think", "8", "--solve", "8"],
        1,
        "step_1 away",
    ),
    ("sandbox-bogus-math-data", [*EVAL, "--sandbox", "bogus"], 1, "--sandbox 'bogus': unknown sandbox backend"),
    ("train-sandbox-bogus-math-data", [*TRAIN, "--sandbox", "bogus"], 1, "--sandbox 'bogus': unknown sandbox"),
    (
        "serve-print-command-model-missing",
        ["serve", "--model", "./no-model", "--print-command"],
        1,
        "no model folder './no-model'",
    ),
    (
        "serve-print-command-budget-over-context",
        ["serve", "--model", "{tiny}", "--think", "4k", "--solve", "1k", "--print-command"],
        1,
        "more than the context",
    ),
    (
        "demo-readme-missing-folder",
        ["demo", "--out", "{out}", "--readme", "{tmp}/missing/README.md"],
        1,
        "its folder does not exist",
    ),
]
# what these cases were told before: the wrong cause, which their message must not say
WRONG_CAUSES = {
    **dict.fromkeys(
        ("dataset-fifo", "dataset-symlink-loop", "dataset-dev-null", "dataset-directory", "prepare-from-fifo"),
        "no such file",
    ),
    "dataset-row-without-answer": "choose the fields with --problem-field, --answer-field",  # e1 eval has none
    **dict.fromkeys(("model-empty-folder", "model-gguf-folder", "train-model-empty-folder"), "no tokenizer files"),
    "train-yaml-lr-fix-is-a-yaml-float": "lr: 1e-06",
    "elo-results-malformed": "fetch again",
    "train-resume-truncated-checkpoint": "download the model again",
}


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
    for name, write in (
        ("garbage_run", lambda p: p.write_bytes(b"PAR1 garbage")),
        ("foreign_run", lambda p: pd.DataFrame({"x": [1]}).to_parquet(p)),
    ):
        (root / name).mkdir()
        write(root / name / "samples.parquet")
    (root / "other_run").mkdir()
    (root / "other_run" / "config.json").write_text(json.dumps({"model": "someone/else", "n": 1}))
    return {
        "tiny": tiny_model_dir,
        "trunc": trunc,
        "notok": notok,
        "data": root / "data.jsonl",
        "empty": root / "empty.jsonl",
        "file": root / "file",
        "garbage_run": root / "garbage_run",
        "foreign_run": root / "foreign_run",
        "other_run": root / "other_run",
        **odd_paths(root, trunc),
    }


def odd_paths(root: Path, trunc: Path) -> dict[str, Path]:
    """Paths that are not what they are given as: a FIFO, a symlink loop, an empty model folder, one
    holding a GGUF, a jsonl without answers, a malformed results file, a run with a truncated checkpoint."""
    os.mkfifo(root / "fifo.jsonl")
    (root / "loop.jsonl").symlink_to(root / "loop.jsonl")
    (root / "emptymodel").mkdir()
    (root / "gguf").mkdir()
    (root / "gguf" / "model-Q4_K_M.gguf").write_bytes(b"GGUF\x03\x00\x00\x00")
    (root / "noanswer.jsonl").write_text(json.dumps({"problem": "What is 1 + 1?", "solution": "2"}) + "\n")
    (root / "bad.json").write_text('{"1971A": [true, ')
    step = root / "ckpt_run" / "checkpoints" / "step_1"
    shutil.copytree(trunc, step)
    (step / "trainer_state.pt").write_bytes(b"")
    return {
        "fifo": root / "fifo.jsonl",
        "loop": root / "loop.jsonl",
        "emptymodel": root / "emptymodel",
        "gguf": root / "gguf",
        "noanswer": root / "noanswer.jsonl",
        "badjson": root / "bad.json",
        "ckpt_run": root / "ckpt_run",
    }


def expand(argument: str, paths: dict, tmp_path: Path) -> str:
    for kind in ("toml", "yaml"):
        if argument.startswith(f"{{{kind}:"):
            config = tmp_path / f"train.{kind}"
            config.write_text(argument[len(kind) + 2 : -1] + "\n")
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
    return {
        name: tuple(sorted(p.name for p in path.iterdir())) if path.is_dir() else (path.lstat().st_size,)
        for name, path in paths.items()
    }


@pytest.mark.parametrize("case", CASES, ids=[case[0] for case in CASES])
def test_bad_input_is_one_line_with_nothing_written(case, workspace, tmp_path, capsys):
    name, arguments, code, needle = case
    before = snapshot(workspace)
    exit_code, err = run_main([expand(a, workspace, tmp_path) for a in arguments], capsys)
    assert exit_code == code, err
    assert "Traceback" not in err and "please report it" not in err, err
    assert needle in " ".join(err.split()), err
    assert WRONG_CAUSES.get(name, "\0") not in " ".join(err.split()), err
    if code != USAGE:  # the one error line, after the stage a log shows when a model starts loading
        *progress, last = err.strip().splitlines()
        assert last.startswith("error: ") and all(line.startswith("loading ") for line in progress), err
    assert not (tmp_path / "out").exists(), "a refused command created its --out"
    assert snapshot(workspace) == before


def test_the_table_covers_every_command_and_enough_cases():
    commands = {case[1][0] for case in CASES}
    assert commands == {"eval", "sweep", "data", "train", "demo", "elo", "serve"}
    assert len(CASES) >= 115


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


@pytest.mark.parametrize("arguments", [EVAL, TRAIN], ids=["eval", "train"])
def test_a_bogus_e1_sandbox_is_refused_with_math_data_before_loading(
    arguments, workspace, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("E1_SANDBOX", "bogus")
    code, err = run_main([expand(a, workspace, tmp_path) for a in arguments], capsys)
    assert code == 1 and err.strip().splitlines() == [err.strip()], err
    assert "(E1_SANDBOX) 'bogus': unknown sandbox backend" in err, err
    assert not (tmp_path / "out").exists()


def test_train_deepspeed_without_deepspeed_is_refused_before_loading(workspace, tmp_path, capsys, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *rest: None if name == "deepspeed" else find_spec(name, *rest)
    )
    code, err = run_main([expand(a, workspace, tmp_path) for a in [*TRAIN, "--deepspeed", "zero2"]], capsys)
    assert code == 1 and err.strip().splitlines() == [err.strip()], err
    assert "--deepspeed zero2 needs DeepSpeed, which is not installed" in err and "pip install" in err, err
    assert not (tmp_path / "out").exists()
