"""e1 eval at real scale: append-only parts, exact resume after kill -9 (also from today's
single-file format and after one rank dies), scorer errors from the background thread, the run lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from e1.budget import Budget
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.errors import ResultsError, RewardError
from e1.eval.distributed import Group, Ranks
from e1.eval.run import EvalConfig, evaluate
from e1.store.lock import run_lock
from e1.store.results import SAMPLES, SUMMARY
from e1.store.samples import SampleStore
from tests.fakes import Interrupting

SAMPLING = Sampling(temperature=1.0, top_p=0.9, seed=5)
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def engine(tiny_engine):
    return HFEngine(tiny_engine.model, tiny_engine.tokenizer, tiny_engine.markers, batch_size=4)


def config(out, problems, **kw):
    base = dict(
        model="tiny",
        datasets=(str(problems),),
        budgets=(Budget(5, 5),),
        modes=(Mode("elastic"),),
        n=2,
        sampling=SAMPLING,
        out=out,
        batch_size=4,
    )
    return EvalConfig(**(base | kw))


@pytest.fixture
def full(tmp_path, problems_file, engine):
    """The uninterrupted run every resumed one must equal, row for row."""
    samples, _ = evaluate(config(tmp_path / "full", problems_file), engine=engine)
    return samples


def test_each_batch_is_written_once_as_a_part_and_compacted_at_the_end(tmp_path, problems_file, engine, full):
    out = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        evaluate(config(out, problems_file), engine=Interrupting(engine, fail_on=3))
    store = SampleStore(out)
    assert len(store.parts()) == 2 and not (out / SAMPLES).exists()  # 2 batches of 2 problems, never rewritten
    assert [len(pd.read_parquet(p)) for p in store.parts()] == [4, 4]
    resumed, summary = evaluate(config(out, problems_file), engine=engine)
    assert store.parts() == [] and len(pd.read_parquet(out / SAMPLES)) == 10
    pd.testing.assert_frame_equal(resumed, full)
    assert summary.equals(pd.read_parquet(out / SUMMARY))


def test_todays_single_file_run_directory_resumes(tmp_path, problems_file, engine, full):
    out = tmp_path / "old"
    evaluate(config(out, problems_file, limit=2), engine=engine)  # writes out/samples.parquet, no parts
    old = pd.read_parquet(out / SAMPLES).drop(columns=["tests_passed", "first_failure"])  # an older e1's file
    old.to_parquet(out / SAMPLES, index=False)
    counter = Interrupting(engine, fail_on=-1)
    resumed, _ = evaluate(config(out, problems_file), engine=counter)
    assert counter.calls == 2  # the 3 missing problems only
    pd.testing.assert_frame_equal(resumed, full, check_dtype=True)


KILLED_RUN = """
    import sys, time
    from e1.engine.hf.hf_engine import HFEngine
    from e1.eval.run import evaluate
    from tests.test_eval_scale import SAMPLING, config

    class Slow:  # leaves time to be killed between batches, and during them; from the 4th
        # batch on it never returns, so however late the kill comes the run cannot finish first
        def __init__(self, engine):
            self.engine, self.tokenizer, self.markers = engine, engine.tokenizer, engine.markers
            self.calls = 0
        def generate(self, *args, **kw):
            self.calls += 1
            time.sleep(0.3 if self.calls < 4 else 3600)
            return self.engine.generate(*args, **kw)

    engine = HFEngine.load(sys.argv[1], batch_size=4)
    evaluate(config(sys.argv[2], sys.argv[3], batch_size=2), engine=Slow(engine))
"""


@pytest.mark.parametrize("delay_s", [0.0, 0.35])
def test_resume_after_kill_9_is_exact(tmp_path, problems_file, engine, full, tiny_model_dir, delay_s):
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(KILLED_RUN), str(tiny_model_dir), str(out), str(problems_file)],
        env=env,
        stderr=subprocess.PIPE,
    )
    store = SampleStore(out)
    deadline = time.monotonic() + 120
    while not store.parts() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(delay_s)
    run.send_signal(signal.SIGKILL)
    run.wait()
    assert run.returncode == -signal.SIGKILL, run.stderr.read().decode()[-2000:]
    assert 1 <= len(store.parts()) < 5 and not (out / SAMPLES).exists()
    resumed, _ = evaluate(config(out, problems_file), engine=engine)
    pd.testing.assert_frame_equal(resumed, full)


def test_a_rank_that_dies_loses_only_its_batch_in_flight(tmp_path, problems_file, engine, full):
    out = tmp_path / "ranks"
    with pytest.raises(KeyboardInterrupt):  # rank 1 of 2 takes problems q1, q3 and dies on its 2nd batch
        evaluate(
            config(out, problems_file, batch_size=2),
            engine=Interrupting(engine, fail_on=2),
            group=Group(Ranks(rank=1, world=2)),
        )
    parts = SampleStore(out).parts()
    assert len(parts) == 1 and parts[0].name.startswith("part-r1-")
    assert sorted(set(pd.read_parquet(parts[0])["problem_id"])) == ["q1"]
    counter = Interrupting(engine, fail_on=-1)
    resumed, _ = evaluate(config(out, problems_file), engine=counter)  # any number of ranks may resume
    assert counter.calls == 2  # q0, q2, q3, q4 only: 2 problems per call (batch size 4, n = 2)
    pd.testing.assert_frame_equal(resumed, full)


def test_a_rank_other_than_0_writes_its_share_and_no_summary(tmp_path, problems_file, engine, full):
    out = tmp_path / "rank1"
    samples, summary = evaluate(
        config(out, problems_file, batch_size=2), engine=engine, group=Group(Ranks(rank=1, world=2))
    )
    assert samples is None and summary is None and not (out / SUMMARY).exists()
    written = SampleStore(out).read().sort_values(["problem_id", "sample_index"], ignore_index=True)
    assert sorted(set(written["problem_id"])) == ["q1", "q3"]  # items 1 and 3 of q0..q4
    expected = full[full["problem_id"].isin(["q1", "q3"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(written, expected)


def test_a_scorer_error_in_the_background_surfaces_and_keeps_earlier_batches(
    tmp_path, problems_file, engine, monkeypatch
):
    from e1.rewards.scoring import Scorer

    calls = []
    score = Scorer.score

    def failing(self, tasks, completions, golds):
        calls.append(len(tasks))
        if len(calls) == 2:
            raise RewardError("cannot parse the tests of q2", hint="check the dataset's tests column")
        return score(self, tasks, completions, golds)

    monkeypatch.setattr(Scorer, "score", failing)
    out = tmp_path / "err"
    with pytest.raises(RewardError, match="cannot parse the tests of q2"):
        evaluate(config(out, problems_file, batch_size=4), engine=engine)
    assert len(SampleStore(out).read()) == 4  # batch 1 was written; batch 2's error stopped the run


def test_one_process_per_run_directory(tmp_path, problems_file, engine):
    out = tmp_path / "locked"
    with run_lock(out, "e1 eval"):
        with pytest.raises(ResultsError, match="already in use"):
            evaluate(config(out, problems_file), engine=engine)

    class Refused(Group):  # rank 0 of this job could not take the lock: every other rank stops too
        def broadcast(self, value):
            return (f"{out} is in use by e1 eval (pid 1 on h)", "wait for it to finish")

    with pytest.raises(ResultsError, match="is in use by e1 eval"):
        evaluate(config(out, problems_file), engine=engine, group=Refused(Ranks(rank=1, world=2)))
    assert not SampleStore(out).parts()


def test_a_tensor_parallel_follower_decodes_its_shard_and_writes_nothing(tmp_path, problems_file, engine):
    out = tmp_path / "tp"
    counter = Interrupting(engine, fail_on=-1)  # rank 1 of a 2-rank tensor-parallel group: the only shard
    assert evaluate(config(out, problems_file), engine=counter, group=Group(Ranks(rank=1, world=2, tp=2))) == (
        None,
        None,
    )
    assert counter.calls == 3  # all 5 problems, 2 per call: it must join every decode of rank 0
    assert SampleStore(out).parts() == [] and not (out / SAMPLES).exists()
