"""`e1 --help` start-up, side by side in one run: a bare interpreter, `e1 --help` as it ships (commands
load when used), and `e1 --help` with every command module imported first (the import half of how e1
started before the commands loaded lazily; the old root help also imported typer's renderer). Each is a fresh `python` process, the runs take turns, best of N.

    python benchmarks/help_speed.py [--repeats 7]

Also prints the lines of each command's --help at 80 columns. The goal: `e1 --help` <= 0.2 s on a
quiet machine; on a shared one read the ratio to the bare interpreter and to the eager start.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import interleaved_best

ROOT = Path(__file__).resolve().parents[1]
EAGER = (
    "import sys; from e1.cli.app import Root; import importlib; "
    "[importlib.import_module(entry.module) for entry in Root.LAZY.values()]; "
    "sys.argv = ['e1', '--help']; from e1.cli import main; main()"
)
COMMANDS = [
    [],
    ["eval"],
    ["sweep"],
    ["train"],
    ["serve"],
    ["data", "prepare"],
    ["elo"],
    ["view"],
    ["export"],
    ["demo"],
    ["help", "modes"],
]


def run(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=ROOT, check=True).stdout


def cpu(*args: str) -> float:
    """CPU seconds (user + system) of one run: steadier than wall time on a shared machine."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run(*args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    runs = {
        "python -c pass": ("-c", "pass"),
        "e1 --help": ("-m", "e1", "--help"),
        "e1 --help, every command imported": ("-c", EAGER),
    }
    used = {name: [] for name in runs}
    best = interleaved_best(
        args.repeats, {name: lambda name=name: used[name].append(cpu(*runs[name])) for name in runs}
    )
    for name, (seconds, _) in best.items():
        print(f"{name:36s} wall {seconds:6.3f} s   cpu {min(used[name]):6.3f} s  (best of {args.repeats})")
    (bare, lazy, eager) = (min(used[name]) for name in runs)
    print(
        f"cpu: e1 --help / every command imported {lazy / eager:.2f}x; above a bare interpreter "
        f"{lazy - bare:.3f} s vs {eager - bare:.3f} s"
    )
    for command in COMMANDS:
        text = run("-m", "e1", *command, *([] if command[:1] == ["help"] else ["--help"]))
        width = max(len(line) for line in text.splitlines())
        print(
            f"e1 {' '.join(command + ([] if command[:1] == ['help'] else ['--help'])):22s} "
            f"{len(text.splitlines()):4d} lines, widest {width}"
        )


if __name__ == "__main__":
    main()
