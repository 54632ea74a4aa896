"""`e1 serve` speed: budgeted vs plain requests on the same server, and e1's server vs a raw `vllm serve`.

    python benchmarks/serve.py [--requests 64 --tokens 128 --hidden 128 --layers 4 --repeats 3] [--no-raw]

Starts `e1 serve` once (a random tiny model that rarely writes ``</think>`` or EOS) and sends the same
prompts through the `openai` client at concurrency 1 and 32, as

- budgeted: ``thinking_budget = t``, ``solution_budget = s`` (elastic): t + forced ``</think>``
  + s + the forced EOS tokens, through e1's middleware and logits processor;
- plain: ``budget_mode = none``, ``max_tokens`` = the same number of tokens (the middleware
  still counts phases; the logits processor leaves the request alone).

Before it, a raw `vllm serve` of the same model (no e1 middleware nor logits processor) answers the plain
requests: e1 serve's plain / raw shows the middleware's own cost. Neither server is told a model runner
(e1 serve sets none), so both run the one vLLM picks for the model: the same one. Skipped with one line where vLLM's server cannot start.

Runs take turns (best of --repeats). Everything is compared per token actually generated: a model may end
some requests early (EOS), and the counts are printed, not asserted. Prints mean latency per request,
output tokens per second and the ratios (goal: budgeted / plain <= 1.05x per token at concurrency 32, and
e1 serve / raw vLLM <= 1.05x). The raw server runs before e1's, not interleaved with it.
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


def start_server(
    model: str, port: int, log_path: str, max_model_len: int = 1024, dtype: str = "float32", raw: bool = False
):
    """``e1 serve`` (``raw``: vLLM's own server, nothing of e1) on ``port``, once healthy; SystemExit if it is not."""
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    if raw:
        from e1.engine import server_entry

        command = [
            sys.executable,
            "-m",
            server_entry(),
            "--model",
            model,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--max-model-len",
            str(max_model_len),
            "--disable-uvicorn-access-log",
        ]
        command += [] if _on_gpu() else ["--enforce-eager"]
    else:
        command = [
            sys.executable,
            "-m",
            "e1",
            "serve",
            "--model",
            model,
            "--port",
            str(port),
            "--dtype",
            dtype,
            "--max-model-len",
            str(max_model_len),
            "--",
            "--disable-uvicorn-access-log",
        ]
    process = subprocess.Popen(command, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 300
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise SystemExit(f"the {'raw vLLM' if raw else 'e1'} server did not start; see {log_path}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200:
                return process
        except OSError:
            time.sleep(1)


def _on_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stop(server) -> None:
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()


async def send_all(client, model: str, problems: list[str], concurrency: int, extra: dict, max_tokens: int | None):
    """(mean seconds per request, total completion tokens) for all problems, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one(problem: str):
        async with gate:
            start = time.perf_counter()
            response = await client.chat.completions.create(
                model=model,
                messages=[{"role": "user", "content": problem}],
                temperature=0,
                max_tokens=max_tokens,
                extra_body=extra,
            )
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

    parser.add_argument("--no-raw", action="store_true", help="skip the raw `vllm serve` baseline")
    args = parser.parse_args()

    import openai

    from e1.models.tiny import build_tiny_model

    think = args.tokens // 2
    solve = args.tokens - think
    budgeted = {"thinking_budget": think, "solution_budget": solve}
    plain = {"budget_mode": "none"}
    total = think + 1 + solve + 1  # t, the forced </think>, s, the forced EOS: the most a request writes
    problems = [f"Problem {i}: what is {i} * {i + 7}?" for i in range(args.requests)]
    concurrencies = list(map(int, args.concurrency.split(",")))
    with tempfile.TemporaryDirectory() as tmp:
        path = args.model or str(
            build_tiny_model(
                f"{tmp}/m",
                hidden_size=args.hidden,
                layers=args.layers,
                heads=args.hidden // 32,
                intermediate_size=4 * args.hidden,
            )
        )
        length = args.max_model_len or max(1024, args.tokens + 512)
        dtype = "auto" if args.model else "float32"
        loop = asyncio.new_event_loop()

        def runner(port):
            client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=600)

            def run(concurrency, extra, max_tokens):
                return lambda: loop.run_until_complete(send_all(client, path, problems, concurrency, extra, max_tokens))

            return run

        raw = {}
        if not args.no_raw:
            port = free_port()
            try:
                server = start_server(path, port, f"{tmp}/raw.log", length, dtype, raw=True)
            except SystemExit as err:
                print(f"raw vLLM baseline skipped: {err}")
            else:
                try:
                    run = runner(port)
                    for concurrency in concurrencies:
                        fn = run(concurrency, {}, total)
                        fn()  # warm up
                        raw[concurrency] = interleaved_best(args.repeats, {"raw": fn})["raw"]
                finally:
                    stop(server)
        port = free_port()
        server = start_server(path, port, f"{tmp}/server.log", length, dtype)
        try:
            ratios = report(args, think, solve, total, runner(port), budgeted, plain, raw)
            if args.json:
                with open(args.json, "w") as sink:
                    json.dump({"ratios": ratios}, sink)
        finally:
            stop(server)


def per_token(secs: float, tokens: int) -> float:
    return secs / max(tokens, 1)


def report(args, think, solve, total, run, budgeted, plain, raw: dict) -> dict:
    """Print the table; returns ``{concurrency: {what: ratio}}``: budgeted / plain (latency, time per token)
    and, with a raw baseline, e1 serve's plain / raw vLLM per token."""
    shape = args.model or f"hidden {args.hidden}, layers {args.layers}"
    print(
        f"model: {shape}; {args.requests} requests; t={think} s={solve} (at most {total} tokens each, "
        f"{total * args.requests} a run); greedy; best of {args.repeats}; ratios per token generated"
    )
    ratios = {}
    print(
        f"  {'concurrency':>11} {'request':12} {'latency':>9} {'tokens':>8} {'tok/s':>8} {'latency x':>10} "
        f"{'per token x plain':>18}"
    )
    for concurrency in map(int, args.concurrency.split(",")):
        runs = {"budgeted": run(concurrency, budgeted, None), "plain": run(concurrency, plain, total)}
        for fn in runs.values():  # warm up both paths
            fn()
        results = interleaved_best(args.repeats, runs)
        if concurrency in raw:
            results["raw vLLM"] = raw[concurrency]
        plain_s, (plain_latency, plain_tokens) = results["plain"]
        for name, (secs, (latency, tokens)) in results.items():
            print(
                f"  {concurrency:11d} {name:12} {latency:8.3f}s {tokens:8d} {tokens / secs:8.0f} "
                f"{latency / plain_latency:9.3f}x {per_token(secs, tokens) / per_token(plain_s, plain_tokens):17.3f}x"
            )
        secs, (latency, tokens) = results["budgeted"]
        ratios[concurrency] = {
            "latency": latency / plain_latency,
            "time per token": per_token(secs, tokens) / per_token(plain_s, plain_tokens),
        }
        if concurrency in raw:
            raw_s, (_, raw_tokens) = raw[concurrency]
            ratios[concurrency]["e1 serve / raw vLLM per token"] = per_token(plain_s, plain_tokens) / per_token(
                raw_s, raw_tokens
            )
            print(
                f"  {'':11} e1 serve (plain) / raw vLLM per token: {ratios[concurrency]['e1 serve / raw vLLM per token']:.3f}x"
            )
        short = {
            name: total * args.requests - tokens
            for name, (_, (_, tokens)) in results.items()
            if tokens < total * args.requests
        }
        if short:
            print(
                f"  {'':11} ended early (EOS before the budget): "
                + ", ".join(f"{n} {k} tokens short" for n, k in short.items())
            )
    print("goal: budgeted <= 1.05x plain per token at concurrency 32; e1 serve <= 1.05x raw vLLM per token")
    return ratios


if __name__ == "__main__":
    main()
