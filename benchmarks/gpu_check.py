"""The GPU check: every speed and memory figure of issue [G] in one table, each part <= 10 minutes.

    python benchmarks/gpu_check.py model  --out /tmp/gc          # a Qwen2-1.5B-shaped random model (~1 min)
    python benchmarks/gpu_check.py engine --out /tmp/gc          # transformers: elastic/none, e1/generate at b=64,256
    python benchmarks/gpu_check.py vllm   --out /tmp/gc          # vLLM: plain, elastic, two calls, thinking_token_budget
    python benchmarks/gpu_check.py train  --out /tmp/gc --strategies vllm,hf      # one GRPO step each
    python benchmarks/gpu_check.py train  --out /tmp/gc --strategies zero2,zero3  # (split: <= 10 min a call)
    python benchmarks/gpu_check.py serve  --out /tmp/gc          # e1 serve: budgeted vs plain at concurrency 32
    python benchmarks/gpu_check.py table  --out /tmp/gc          # the one table, from what the parts wrote
    python benchmarks/gpu_check.py all --tiny --out /tmp/gc      # every part, small, on a CPU (a dry run)

    python benchmarks/gpu_check.py call1 --out $OUT/gc   # a lent device's first call: wheels only, no vLLM yet
    python benchmarks/gpu_check.py call2 --out $OUT/gc   # its second call (vLLM unpacked): every vLLM row, serve

The two calls fit a lent device (about 15 minutes, vLLM carried in the second call; see README.md): call1
builds the model (kept in /tmp/gpu_check_model, which lives while the machine is warm) and runs the
transformers and DeepSpeed parts (engine: e1/generate and elastic/none; train: hf and ZeRO-3 steps with
peak memory and save time); call2 runs the vLLM parts (engine_vllm.py's plain, elastic, two calls, soft,
stop=, early-exit rows; V1 vs V2 where e1 has a V2 processor; serve with its raw vLLM baseline; the
vLLM-colocated GRPO step). Each part runs under a time guard (its cap, and what is left of ``--budget``):
a part cut short records what it finished, and the next part still runs. Rows are written as each part
ends: OUT/results.json, OUT/results.jsonl (one row a line) and OUT/table.md.

Nothing is downloaded: the model is random weights in Qwen2-1.5B's shape (hidden 1536, 28 layers,
12 heads, 2 KV heads, MLP 8960, vocabulary 151,936, bf16) with a byte-level tokenizer trained on the
spot by ``e1.models.tiny.build_tokenizer`` (``<think>``/``</think>`` special, a chat template whose
generation prompt opens thinking). Random weights almost never close thinking, so every row thinks to
its budget: throughput does not depend on the weights, accuracy is 0.

Each part runs the side-by-side benchmark it names (``engine.py``, ``engine_vllm.py``, ``serve.py``)
or ``e1 train`` in a child process (so one part's GPU memory is free before the next), and merges
its rows into ``OUT/results.json``: ``{part: {row: {"value", "unit", "goal"}}}``. Peak memory of a
training run is the device's used memory polled every 0.2 s by ``nvidia-smi`` (on a CPU: the
resident memory of the run's process tree), minus what was used before it started. On a machine with
no network, run it from wheels made beforehand (``../shared/gpu/README.md``'s recipe: carry the two
wheelhouse parts, ``source`` its setup, then run the parts, one call each).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import string
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTS = ("model", "engine", "vllm", "train", "serve")
STRATEGIES = {  # name -> (launcher, e1 train flags); DeepSpeed needs a torchrun launch even on one GPU
    "vllm": ([], ["--backend", "vllm", "--gpu-memory-utilization", "0.3"]),
    "hf": ([], ["--backend", "hf"]),
    "zero2": (["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"], ["--deepspeed", "zero2"]),
    # one GPU is a world of one: ZeRO-3 shards nothing, so the memory options make its figure (the
    # estimate behind them: benchmarks/grpo_memory.py; the H200's 73.6 GiB was float32 without them)
    "zero3": (
        ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1"],
        ["--deepspeed", "zero3", "--dtype", "bfloat16", "--activation-checkpointing", "--ref-offload"],
    ),
}
# the shape: 16 prompts x 4 samples, t=512, s=256 (tiny: a CPU dry run)
TRAIN_SHAPE = {
    False: dict(prompts=16, samples=4, think=512, solve=256),
    True: dict(prompts=4, samples=2, think=16, solve=8),
}


def build_model(out: Path, tiny: bool) -> Path:
    """A random Qwen2-1.5B-shaped model (``tiny``: hidden 128, 2 layers) with a tokenizer made here."""
    if (out / "config.json").exists():
        return out
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from e1.models.tiny import DEFAULT_CORPUS, build_tokenizer

    rng = random.Random(0)
    words = [
        "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(4000 if tiny else 200_000)
    ]
    tokenizer = build_tokenizer(
        [*DEFAULT_CORPUS, *(" ".join(words[i : i + 32]) for i in range(0, len(words), 32))],
        vocab_size=1024 if tiny else 151_648,
    )
    shape = (
        dict(
            vocab_size=(len(tokenizer) + 63) // 64 * 64,
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
        if tiny
        else dict(
            vocab_size=151_936,
            hidden_size=1536,
            intermediate_size=8960,
            num_hidden_layers=28,
            num_attention_heads=12,
            num_key_value_heads=2,
        )
    )
    config = Qwen2Config(
        max_position_embeddings=4096,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
        **shape,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(config)
    model = model.to(torch.float32 if tiny else torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


class Cut(Exception):
    """A part's child did not finish: ``log`` holds what it printed (rows may be recovered from it)."""

    def __init__(self, message: str, log: Path):
        super().__init__(message)
        self.log = log


def run_json(args: list[str], log: Path, timeout: float, env: dict | None = None) -> dict:
    """Run a benchmark script with ``--json PATH``; its results, or Cut naming the log. A child past
    ``timeout`` is ended with its whole process group (vLLM's engine process holds the GPU's memory)."""
    result = log.with_suffix(".json")
    result.unlink(missing_ok=True)
    with open(log, "w") as sink:
        process = subprocess.Popen(
            [sys.executable, *args, "--json", str(result)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        try:
            code = process.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            end_group(process)
            raise Cut(f"{Path(args[0]).name} cut after {timeout:.0f} s", log) from None
    if code or not result.exists():
        raise Cut(f"{Path(args[0]).name} failed (exit {code}); see {log}", log)
    return json.loads(result.read_text())


def end_group(process) -> None:
    import signal

    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait)
            return
        except (ProcessLookupError, PermissionError):
            return
        except subprocess.TimeoutExpired:
            continue


def ran_lines(log: Path) -> dict:
    """``{run: (seconds, tokens)}`` from engine_vllm.py's "ran NAME: Xs, N tokens" lines (a cut run's rows)."""
    import re

    found = {}
    for match in re.finditer(r"^  ran (.+): ([0-9.]+)s, (\d+) tokens$", log.read_text(errors="replace"), re.MULTILINE):
        name, secs, tokens = match.group(1), float(match.group(2)), int(match.group(3))
        if name not in found or secs / max(tokens, 1) < found[name][0] / max(found[name][1], 1):
            found[name] = (secs, tokens)
    return found


def part_engine(model: Path, out: Path, tiny: bool, timeout: float = 600) -> dict:
    tokens, batches = ("32", "4,8") if tiny else ("1024", "64,256")
    found = run_json(
        [
            str(HERE / "engine.py"),
            "--model",
            str(model),
            "--batch",
            batches.split(",")[0],
            "--tokens",
            tokens,
            "--compare-batches",
            batches,
            "--no-modes",
            "--repeats",
            "1" if tiny else "2",
        ],
        out / "engine.log",
        timeout,
    )
    rows = {
        f"b={batches.split(',')[0]}: elastic / none per token": {
            "value": found["elastic_per_token"],
            "unit": "x",
            "goal": "<= 1.03",
        }
    }
    for batch in batches.split(","):
        figures = found[f"b={batch}"]
        rows[f"b={batch}: e1 greedy / model.generate()"] = {
            "value": figures["e1_vs_generate"],
            "unit": "x",
            "goal": "<= 1.0",
        }
        rows[f"b={batch}: bucketed / exact key lengths"] = {
            "value": figures["bucketed_vs_exact"],
            "unit": "x",
            "goal": "",
        }
        rows[f"b={batch}: e1 greedy cold shape / warm"] = {
            "value": figures["cold_vs_warm"],
            "unit": "x",
            "goal": "<= 1.1",
        }
        rows[f"b={batch}: e1 greedy tok/s"] = {"value": figures["tokens_per_s"], "unit": "tok/s", "goal": ""}
    return rows


def part_vllm(model: Path, out: Path, tiny: bool, timeout: float = 600) -> dict:
    """engine_vllm.py's rows (per token vs plain); a cut run keeps the runs it finished."""
    batch, tokens = (8, 32) if tiny else (256, 2048)  # t = s = 1k as in the paper
    command = [
        str(HERE / "engine_vllm.py"),
        "--model",
        str(model),
        "--batch",
        str(batch),
        "--tokens",
        str(tokens),
        "--repeats",
        "1",
        "--no-warmup",
        "--skip",
        "thinking_token_budget",
    ]  # measured: 5.23x
    try:
        found = run_json(command, out / "vllm.log", timeout)
    except Cut as cut:
        runs = ran_lines(cut.log)
        if "plain vLLM" not in runs:
            raise
        base = runs["plain vLLM"][0] / runs["plain vLLM"][1]
        found = {
            "per_token": {name: (secs / tokens) / base for name, (secs, tokens) in runs.items()},
            "tokens_per_s": {name: tokens / secs for name, (secs, tokens) in runs.items()},
        }
        print(f"vllm: {cut} (kept the {len(runs)} runs it finished)", flush=True)
    rows = {
        f"{name} / plain per token": dict(value=ratio, unit="x", goal=VLLM_GOALS.get(name, ""))
        for name, ratio in found["per_token"].items()
        if name != "plain vLLM"
    }
    rows["plain vLLM tok/s"] = dict(value=found["tokens_per_s"]["plain vLLM"], unit="tok/s", goal="")
    return rows


VLLM_GOALS = {"e1 elastic": "<= 1.01", "e1 soft": "<= 1.03", "e1 elastic:stop": "<= 1.03"}
V2_MODULE = HERE.parent / "e1" / "engine" / "vllm" / "v2_processor.py"


def part_v2(model: Path, out: Path, tiny: bool, timeout: float = 600) -> dict:
    """e1 elastic on vLLM's Model Runner V2 (e1's V2 processor) vs V1, where e1 has a V2 processor."""
    if not V2_MODULE.exists():
        return {
            "V1 vs V2: skipped (no e1/engine/vllm/v2_processor.py in this checkout)": dict(value="-", unit="", goal="")
        }
    if "--runner" not in (HERE / "engine_vllm.py").read_text():
        return {"V1 vs V2: skipped (engine_vllm.py has no --runner option yet)": dict(value="-", unit="", goal="")}
    from e1.engine.vllm.compat import has_v2_processors

    if not has_v2_processors():  # vLLM before 0.32 (the device's 0.26): runner V2 loads no custom processor
        return {
            "V1 vs V2: skipped (this vLLM's runner V2 loads no custom logits processors; 0.32+ does)": dict(
                value="-", unit="", goal=""
            )
        }
    batch, tokens = (8, 32) if tiny else (256, 2048)
    rows = {}
    for runner in ("v1", "v2"):
        found = run_json(
            [
                str(HERE / "engine_vllm.py"),
                "--model",
                str(model),
                "--batch",
                str(batch),
                "--tokens",
                str(tokens),
                "--repeats",
                "1",
                "--no-warmup",
                "--runner",
                runner,
                "--skip",
                "two calls,thinking_token_budget,e1 early-exit,plain vLLM + text",
            ],
            out / f"vllm_{runner}.log",
            timeout / 2,
        )
        rows[f"{runner}: e1 elastic / plain per token"] = dict(
            value=found["per_token"]["e1 elastic"], unit="x", goal=""
        )
        rows[f"{runner}: plain vLLM tok/s"] = dict(value=found["tokens_per_s"]["plain vLLM"], unit="tok/s", goal="")
    return rows


def part_serve(model: Path, out: Path, tiny: bool, timeout: float = 600) -> dict:
    found = run_json(
        [
            str(HERE / "serve.py"),
            "--model",
            str(model),
            "--concurrency",
            "32",
            "--requests",
            "32" if tiny else "128",
            "--tokens",
            "32" if tiny else "1024",
            "--repeats",
            "1" if tiny else "2",
        ],
        out / "serve.log",
        timeout,
    )
    return {
        f"c={c}: " + (what if "/" in what else f"budgeted / plain {what}"): dict(value=value, unit="x", goal="<= 1.05")
        for c, ratios in found["ratios"].items()
        for what, value in ratios.items()
    }


def sums_file(path: Path, count: int = 64) -> Path:
    rng = random.Random(0)
    with open(path, "w") as sink:
        for _ in range(count):
            a, b = rng.randint(1, 99), rng.randint(1, 99)
            sink.write(json.dumps({"problem": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n")
    return path


def part_train(model: Path, out: Path, tiny: bool, strategies: list[str], timeout: float = 600) -> dict:
    import pandas as pd

    shape, rows = TRAIN_SHAPE[tiny], {}
    data = sums_file(out / "sums.jsonl")
    deadline = time.monotonic() + timeout
    for name in strategies:
        launcher, flags = STRATEGIES[name]
        left = deadline - time.monotonic()
        if left < 30:
            rows[f"{name}: not run (the part's time ran out)"] = dict(value="-", unit="", goal="")
            continue
        run_dir = out / f"train_{name}"
        shutil.rmtree(run_dir, ignore_errors=True)
        command = [
            sys.executable,
            *launcher,
            "-m",
            "e1",
            "train",
            "--model",
            str(model),
            "--data",
            str(data),
            "--out",
            str(run_dir),
            "--steps",
            "2",
            "--prompts-per-step",
            str(shape["prompts"]),
            "--samples-per-prompt",
            str(shape["samples"]),
            "--mini-batch-prompts",
            str(shape["prompts"]),
            "--think",
            str(shape["think"]),
            "--solve",
            str(shape["solve"]),
            "--save-every",
            "1",
            "--eval-every",
            "1000",
            *flags,
        ]
        if tiny:
            command += ["--device", "cpu"]
        with open(out / f"train_{name}.log", "w") as sink, PeakMemory() as peak:
            process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
            peak.watch(process.pid)
            try:
                code = process.wait(timeout=left)
            except subprocess.TimeoutExpired:
                end_group(process)
                code = "cut"
        if code:
            rows[f"{name}: peak memory so far ({peak.where})"] = dict(value=peak.gib, unit="GiB", goal="")
            rows[f"{name}: failed (exit {code}); see train_{name}.log"] = dict(value="-", unit="", goal="")
            continue
        step = pd.read_parquet(run_dir / "metrics.parquet").iloc[-1]  # step 2: warm shapes
        phases = ", ".join(f"{col[:-2]} {step[col]:.1f}" for col in ("rollout_s", "update_s", "save_s") if col in step)
        rows[f"{name}: s/step ({phases})"] = dict(value=float(step["step_s"]), unit="s", goal="")
        rows[f"{name}: peak memory ({peak.where})"] = dict(
            value=peak.gib, unit="GiB", goal="< 40" if name == "zero3" and not tiny else ""
        )
    return rows


class PeakMemory:
    """The most memory a run used above what was used when it started: the GPU's (nvidia-smi), else
    the resident memory of the run's process tree (psutil)."""

    def __init__(self):
        self.gpu = shutil.which("nvidia-smi") is not None
        self.where = "GPU" if self.gpu else "RSS"
        self.peak = self.base = 0
        self.pid, self.stop = None, threading.Event()

    def __enter__(self):
        self.base = self.read() if self.gpu else 0
        self.thread = threading.Thread(target=self.poll, daemon=True)
        self.thread.start()
        return self

    def watch(self, pid: int) -> None:
        self.pid = pid

    def read(self) -> int:
        if self.gpu:
            used = subprocess.run(
                ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.split()
            return int(used[0]) * 2**20 if used else 0
        import psutil

        if self.pid is None:
            return 0
        try:
            root = psutil.Process(self.pid)
            return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
        except psutil.Error:
            return 0

    def poll(self) -> None:
        while not self.stop.wait(0.2):
            self.peak = max(self.peak, self.read())

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    @property
    def gib(self) -> float:
        return round(max(0, self.peak - self.base) / 2**30, 2)


def merge(out: Path, part: str, rows: dict) -> None:
    """A part's rows into OUT/results.json (a rerun replaces its rows), OUT/results.jsonl and OUT/table.md."""
    path = out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[part] = rows
    path.write_text(json.dumps(results, indent=1))
    with open(out / "results.jsonl", "a") as sink:
        sink.writelines(
            json.dumps({"part": part, "figure": name, **row, "at": time.strftime("%H:%M:%S")}) + "\n"
            for name, row in rows.items()
        )
    lines = ["| part | figure | value | unit | goal |", "|---|---|---|---|---|"]
    for done, figures in results.items():
        for name, row in figures.items():
            value = row["value"]
            lines.append(
                f"| {done} | {name} | {f'{value:.3f}' if isinstance(value, float) else value} | {row['unit']} "
                f"| {row['goal']} |"
            )
    (out / "table.md").write_text("\n".join(lines) + "\n")


def table(out: Path) -> str:
    path = out / "results.json"
    if not path.exists():
        raise SystemExit(f"no results in {out}: run a part first")
    results = json.loads(path.read_text())
    lines = [f"{'part':10} {'figure':58} {'value':>10} {'unit':6} goal"]
    for part, rows in results.items():
        for name, row in rows.items():
            value = row["value"]
            shown = f"{value:10.3f}" if isinstance(value, float) else f"{value!s:>10}"
            lines.append(f"{part:10} {name[:58]:58} {shown} {row['unit']:6} {row['goal']}")
    return "\n".join(lines)


# a lent device's two calls: (part, cap in seconds); call1 has no vLLM yet (its wheels come in call2)
CALLS = {
    "call1": (("model", 120), ("engine", 210), ("train", 270)),
    "call2": (("vllm", 280), ("v2", 60), ("serve", 150), ("train-vllm", 90)),
}
CALL_STRATEGIES = {"train": ["hf", "zero3"], "train-vllm": ["vllm"]}


def run_part(part: str, model: Path, out: Path, tiny: bool, strategies: list[str], timeout: float) -> dict:
    if part == "model":
        started = time.perf_counter()
        build_model(model, tiny)
        return {"build": dict(value=round(time.perf_counter() - started, 1), unit="s", goal="")}
    if not (model / "config.json").exists():
        raise SystemExit(f"no model in {model}: run `gpu_check.py model --out ...` first (or --model)")
    if part in ("train", "train-vllm"):
        return part_train(model, out, tiny, strategies, timeout)
    return {"engine": part_engine, "vllm": part_vllm, "v2": part_v2, "serve": part_serve}[part](
        model, out, tiny, timeout
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("part", choices=(*PARTS, "v2", "table", "all", *CALLS))
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ["OUT"]) / "gpu_check" if os.environ.get("OUT") else Path("/tmp/gpu_check"),
        help="where rows go (default: $OUT/gpu_check, else /tmp/gpu_check)",
    )
    parser.add_argument(
        "--model",
        type=Path,
        help="an existing model folder (default: OUT/model; call1/call2: /tmp/gpu_check_model, kept out of $OUT)",
    )
    parser.add_argument("--tiny", action="store_true", help="a small model and shapes: check the script on a CPU")
    parser.add_argument("--strategies", default=None, help="train: " + ", ".join(STRATEGIES))
    parser.add_argument("--budget", type=float, default=540, help="call1/call2: seconds for the whole call")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    calls = args.part in CALLS
    model = args.model or (
        Path("/tmp/gpu_check_model" + ("_tiny" if args.tiny else "")) if calls else args.out / "model"
    )
    chosen = [s for s in (args.strategies or ",".join(STRATEGIES)).split(",") if s]
    unknown = sorted(set(chosen) - set(STRATEGIES))
    if unknown:
        raise SystemExit(f"unknown strategies {unknown}: choose from {', '.join(STRATEGIES)}")
    plan = (
        CALLS[args.part]
        if calls
        else [(p, 600) for p in (PARTS if args.part == "all" else [] if args.part == "table" else [args.part])]
    )
    deadline = time.monotonic() + (args.budget if calls else 1e9)
    for part, cap in plan:
        left = deadline - time.monotonic()
        if left < 20:
            merge(args.out, part, {"not run: the call's time ran out": dict(value="-", unit="", goal="")})
            print(f"{part}: not run (the call's time ran out)", flush=True)
            continue
        strategies = CALL_STRATEGIES.get(part, chosen) if calls and args.strategies is None else chosen
        started = time.perf_counter()
        try:
            rows = run_part(part, model, args.out, args.tiny, strategies, min(cap, left - 10))
        except Cut as cut:
            rows = {f"cut: {cut}": dict(value="-", unit="", goal="")}
        merge(args.out, part, rows)
        print(f"{part}: done in {time.perf_counter() - started:.0f} s", flush=True)
    print(table(args.out))


if __name__ == "__main__":
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    main()
