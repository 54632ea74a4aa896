"""`e1 serve` speed: budgeted vs plain requests on the same server, side by side.

    python benchmarks/serve.py [--requests 64 --tokens 128 --hidden 128 --layers 4 --repeats 3]

Starts `e1 serve` once (a random tiny model that practically never writes ``</think>`` or EOS,
so every request writes its whole budget) and sends the same prompts through the `openai`
client at concurrency 1 and 32, as

- budgeted: ``thinking_budget = t``, ``solution_budget = s`` (elastic): t + forced ``</think>``
  + s + the forced EOS tokens, through e1's middleware and logits processor;
- plain: ``budget_mode = none``, ``max_tokens`` = the same number of tokens (the middleware
  still counts phases; the logits processor leaves the request alone).

Runs take turns (best of --repeats). Prints mean latency per request, output tokens per second
and the budgeted/plain ratios (goal: <= 1.05x). vLLM's own `vllm bench serve` measures the same
from outside; this script needs no dataset and checks the token counts it compares.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_best  # noqa: E402


def start_server(model: str, port: int, log_path: str, max_model_len: int = 1024, dtype: str = "float32"):
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    command = [sys.executable, "-m", "e1", "serve", "--model", model, "--port", str(port), "--dtype", dtype,
               "--max-model-len", str(max_model_len), "--", "--disable-uvicorn-access-log"]
    process = subprocess.Popen(command, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the server did not start; see {log_path}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                return process
        except OSError:
            time.sleep(1)


async def send_all(client, model: str, problems: list[str], concurrency: int, extra: dict, max_tokens: int | None):
    """(mean seconds per request, total completion tokens) for all problems, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one(problem: str):
        async with gate:
            start = time.perf_counter()
            response = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": problem}], temperature=0,
                max_tokens=max_tokens, extra_body=extra)
            return time.perf_counter() - start, response.usage.completion_tokens

    results = await asyncio.gather(*(one(p) for p in problems))
    return sum(r[0] for r in results) / len(results), sum(r[1] for r in results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128, help="thinking + solution budget per request")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--model", help="an existing model folder (default: a tiny random one, built here)")
    parser.add_argument("--max-model-len", type=int, default=None, help="default: 1024, or tokens + 512")
    parser.add_argument("--json", help="also write the ratios to this file (benchmarks/gpu_check.py reads it)")
    args = parser.parse_args()

    import openai

    from e1.models.tiny import build_tiny_model

    think = args.tokens // 2
    solve = args.tokens - think
    budgeted = {"thinking_budget": think, "solution_budget": solve}
    plain = {"budget_mode": "none"}
    total = think + 1 + solve + 1  # t, the forced </think>, s, the forced EOS
    problems = [f"Problem {i}: what is {i} * {i + 7}?" for i in range(args.requests)]
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as sock:
        path = args.model or str(build_tiny_model(f"{tmp}/m", hidden_size=args.hidden, layers=args.layers,
                                                  heads=args.hidden // 32, intermediate_size=4 * args.hidden))
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        sock.close()
        length = args.max_model_len or max(1024, args.tokens + 512)
        server = start_server(path, port, f"{tmp}/server.log", length, "auto" if args.model else "float32")
        try:
            client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=600)
            loop = asyncio.new_event_loop()

            def run(concurrency, extra, max_tokens):
                return lambda: loop.run_until_complete(send_all(client, path, problems, concurrency, extra, max_tokens))

            ratios = report(args, think, solve, total, run, budgeted, plain)
            if args.json:
                with open(args.json, "w") as sink:
                    json.dump({"ratios": ratios}, sink)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)


def report(args, think, solve, total, run, budgeted, plain) -> dict:
    """Print the table; returns ``{concurrency: {"latency": x, "time per token": x}}`` (budgeted / plain)."""
    shape = args.model or f"hidden {args.hidden}, layers {args.layers}"
    print(f"model: {shape}; {args.requests} requests; t={think} s={solve} "
          f"({total} tokens each); greedy; best of {args.repeats}")
    ratios = {}
    print(f"  {'concurrency':>11} {'request':9} {'latency':>9} {'tok/s':>8} {'latency x':>10} {'tok/s x':>8}")
    for concurrency in map(int, args.concurrency.split(",")):
        runs = {"budgeted": run(concurrency, budgeted, None), "plain": run(concurrency, plain, total)}
        for fn in runs.values():  # warm up both paths
            fn()
        results = interleaved_best(args.repeats, runs)
        (plain_s, (plain_latency, plain_tokens)) = results["plain"]
        for name, (secs, (latency, tokens)) in results.items():
            assert tokens == total * args.requests, f"{name}: {tokens} tokens, expected {total * args.requests}"
            print(f"  {concurrency:11d} {name:9} {latency:8.3f}s {tokens / secs:8.0f} {latency / plain_latency:9.3f}x "
                  f"{(plain_tokens / plain_s) / (tokens / secs):7.3f}x")
        secs, (latency, tokens) = results["budgeted"]
        ratios[concurrency] = {"latency": latency / plain_latency, "time per token": (plain_tokens / plain_s) / (tokens / secs)}
    print("goal: budgeted <= 1.05x plain (latency, and time per token = inverse throughput)")
    return ratios


if __name__ == "__main__":
    main()
