"""`e1 --help` start-up, side by side in one run: a bare interpreter, `e1 --help` as it ships (commands
load when used), and `e1 --help` with every command module imported first (how e1 started before
the commands loaded lazily). Each is a fresh `python` process, the runs take turns, best of N.

    python benchmarks/help_speed.py [--repeats 7]

Also prints the lines of each command's --help at 80 columns. The goal: `e1 --help` <= 0.2 s on a
quiet machine; on a shared one read the ratio to the bare interpreter and to the eager start.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_best

ROOT = Path(__file__).resolve().parents[1]
EAGER = ("import sys; from e1.cli.app import Root; import importlib; "
         "[importlib.import_module(entry.module) for entry in Root.LAZY.values()]; "
         "sys.argv = ['e1', '--help']; from e1.cli import main; main()")
COMMANDS = [[], ["eval"], ["sweep"], ["train"], ["serve"], ["data", "prepare"], ["elo"], ["view"], ["export"],
            ["demo"], ["help", "modes"]]


def run(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    best = interleaved_best(args.repeats, {
        "python -c pass": lambda: run("-c", "pass"),
        "e1 --help (lazy)": lambda: run("-m", "e1", "--help"),
        "e1 --help, every command imported": lambda: run("-c", EAGER),
    })
    bare, lazy, eager = (seconds for seconds, _ in best.values())
    for name, (seconds, _) in best.items():
        print(f"{name:36s} {seconds:6.3f} s")
    print(f"lazy / eager: {lazy / eager:.2f}x; above a bare interpreter: lazy {lazy - bare:.3f} s, "
          f"eager {eager - bare:.3f} s")
    for command in COMMANDS:
        text = run("-m", "e1", *command, *([] if command[:1] == ["help"] else ["--help"]))
        width = max(len(line) for line in text.splitlines())
        print(f"e1 {' '.join(command + ([] if command[:1] == ['help'] else ['--help'])):22s} "
              f"{len(text.splitlines()):4d} lines, widest {width}")


if __name__ == "__main__":
    main()
