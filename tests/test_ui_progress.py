"""Progress where users look: plain lines when stderr is not a terminal (SLURM logs, nohup, CI)."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from e1.report import WorkEta
from e1.report.progress import RichProgress


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


# Time left under batches: a simulated clock, no sleeps. A batch is a list of generate calls run one
# after another; a call's rows decode together, each finishing after its own length (10 ms a token),
# so the call lasts as long as its longest row, which its cap (t + s) bounds. The long row
# lands in [0.8, 1] x cap ("the long ones near the budget set the time"); the others anywhere below.

TOKEN_S = 0.01
LONGEST = 0.8  # a call's longest row takes at least this share of its cap: a = 0.8, b = 1 per unit of work

calls = st.tuples(
    st.sampled_from([256, 1024, 4096]), st.floats(LONGEST, 1.0), st.lists(st.floats(0.0, 1.0), min_size=0, max_size=15)
)
batches = st.lists(st.lists(calls, min_size=1, max_size=3), min_size=2, max_size=6)


def replay(plan, estimators):
    """Run ``plan`` on a simulated clock; at each finished sample, the true seconds left and each
    estimator's (None while it has none). ``estimators``: {name: (make(total, clock), on_batch)}."""
    now = [0.0]
    total = sum(1 + len(rows) for batch in plan for _, _, rows in batch)
    made = {name: make(total, lambda: now[0]) for name, (make, _) in estimators.items()}
    weights = [sum(cap for cap, _, _ in batch) for batch in plan]
    end = sum(TOKEN_S * cap * longest for batch in plan for cap, longest, _ in batch)
    seen, done_work = [], 0
    for batch_index, (batch, weight) in enumerate(zip(plan, weights)):
        for cap, longest, rows in batch:
            start = now[0]
            for finish in sorted(TOKEN_S * cap * longest * share for share in [1.0, *rows]):
                now[0] = start + finish
                for estimator in made.values():
                    estimator.advance(1)
                seen.append((batch_index, end - now[0], {name: e.remaining() for name, e in made.items()}))
        done_work += weight
        for name, (_, on_batch) in estimators.items():
            on_batch(made[name], done_work, sum(weights))
    return seen, TOKEN_S * max(weights)


class RichEta:
    """rich's own time remaining (the bar's column before): its rate of finished samples."""

    def __init__(self, total, clock):
        from rich.progress import Progress

        self.progress = Progress(get_time=clock, disable=True)
        self.task = self.progress.add_task("x", total=total)

    def advance(self, amount):
        self.progress.advance(self.task, amount)

    def remaining(self):
        return self.progress.tasks[0].time_remaining


ESTIMATORS = {
    "work": (WorkEta, lambda eta, done, total: eta.work(done, total)),
    "rich": (RichEta, lambda eta, done, total: None),
}


def under_estimates(seen, name, widest_batch):
    """Points after the first batch where ``name`` says less than the bound allows: under by more
    than (1 - a/b) x (time left + a batch's worst case)."""
    slack = 1 - LONGEST
    return [
        (left, est[name])
        for batch, left, est in seen
        if batch >= 1 and est[name] is not None and left - est[name] > slack * (left + widest_batch) + 1e-6
    ]


@settings(max_examples=200, deadline=None)
@given(batches)
def test_work_eta_never_under_estimates_beyond_its_bound_once_a_batch_is_done(plan):
    seen, widest = replay(plan, ESTIMATORS)
    assert under_estimates(seen, "work", widest) == []
    for batch, _, est in seen:
        if batch >= 1:  # a boundary passed: an estimate, never negative
            assert est["work"] is not None and est["work"] >= 0


def test_sample_rate_eta_runs_short_where_work_eta_does_not():
    # 4 batches of one call (cap 1024): 15 rows finish at once, the 16th at the cap
    plan = [[(1024, 1.0, [0.02 * k for k in range(1, 16)])] for _ in range(4)]
    seen, widest = replay(plan, ESTIMATORS)
    assert under_estimates(seen, "work", widest) == []
    short = under_estimates(seen, "rich", widest)
    assert short, "rich's sample rate should run short here"
    # late in the second batch's short rows: over 2.5 batches left (27.6 s), rich says 15 s
    _, left, est = [point for point in seen if point[0] == 1][-2]
    assert left > 2.5 * 10.24 and est["rich"] < 0.6 * left and abs(est["work"] - left) < 1e-6


def test_work_eta_counts_down_between_boundaries_and_falls_back_before_the_first():
    now = [0.0]
    eta = WorkEta(10, clock=lambda: now[0])
    assert eta.remaining() is None  # nothing finished yet
    now[0] = 10.0
    eta.advance(5)
    assert eta.remaining() == 10.0  # before any batch ended: time so far / done x left
    eta.work(1, 4)
    assert eta.remaining() == 30.0  # 10 s per unit, 3 units left
    now[0] = 15.0
    eta.advance(4)  # samples finishing inside a batch do not move it
    assert eta.remaining() == 25.0
    now[0] = 100.0
    assert eta.remaining() == 0.0  # never below 0


def test_the_plain_line_shows_work_eta_once_a_batch_ends():
    progress, sink = plain_progress(interval_s=0.0)
    with progress.task("generating 4 samples", total=4) as bar:
        bar.advance(2)
        bar.work(4, 4)  # every unit of work done: nothing left
        bar.advance(2)
    assert "eta 0:00:00" in sink.getvalue().splitlines()[-2]
