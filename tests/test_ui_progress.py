"""Progress where users look: plain lines when stderr is not a terminal (SLURM logs, nohup, CI)."""

from __future__ import annotations

import io

from rich.console import Console

from e1.report.ui import RichProgress


def plain_progress(interval_s: float) -> tuple[RichProgress, io.StringIO]:
    sink = io.StringIO()
    return RichProgress(Console(file=sink, force_terminal=False, width=200), interval_s=interval_s), sink


def test_redirected_progress_prints_stage_count_rate_and_eta_lines():
    progress, sink = plain_progress(interval_s=0.0)  # a line on every advance
    with progress.stage("loading ./m[v2]"):
        pass
    with progress.task("generating 4 samples", total=4) as bar:
        bar.advance(1)
        bar.status("reward 0.5")
        bar.advance(3)
    lines = sink.getvalue().splitlines()
    assert lines[0] == "loading ./m[v2] ..."  # plain text: brackets are not markup
    assert lines[1].startswith("loading ./m[v2]: done in ")
    assert lines[2] == "generating 4 samples: 0/4"
    assert lines[3].startswith("generating 4 samples: 1/4 (25%), ") and "/s, eta " in lines[3]
    assert lines[4].startswith("generating 4 samples: 4/4 (100%)") and lines[4].endswith("reward 0.5")
    assert "took 0:00:00" in lines[5] and len(lines) == 6


def test_redirected_progress_waits_for_its_interval():
    progress, sink = plain_progress(interval_s=3600.0)
    with progress.task("training 100 steps", total=100) as bar:
        for _ in range(100):
            bar.advance(1)
    lines = sink.getvalue().splitlines()
    assert len(lines) == 2  # the start and the end, nothing in between within the hour
    assert lines[1].startswith("training 100 steps: 100/100 (100%)")
