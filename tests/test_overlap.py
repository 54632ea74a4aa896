"""overlapped(): the second stage of batch k runs while the first stage of batch k + 1 runs."""

from __future__ import annotations

import threading

import pytest

from e1.errors import RewardError
from e1.eval.overlap import overlapped


def test_results_come_in_order_on_the_callers_thread():
    seen, threads = [], set()
    overlapped(
        range(5),
        produce=lambda x: x * 10,
        finish=lambda y: y + 1,
        emit=lambda v: (seen.append(v), threads.add(threading.current_thread())),
    )
    assert seen == [1, 11, 21, 31, 41] and threads == {threading.current_thread()}


def test_finish_of_one_batch_runs_while_the_next_is_produced():
    # produce(k+1) waits until finish(k) has started: run one after the other, this would never end
    started = [threading.Event() for _ in range(3)]

    def produce(k):
        if k > 0:
            assert started[k - 1].wait(timeout=10), f"batch {k - 1} was not being finished while batch {k} was produced"
        return k

    def finish(k):
        started[k].set()
        return k

    seen = []
    overlapped(range(3), produce, finish, seen.append)
    assert seen == [0, 1, 2]


def test_two_batches_are_finished_at_once_and_still_emitted_in_order():
    # finish(0) waits until finish(1) has started: with one batch in finish at a time it never would
    one_started, wait_s = threading.Event(), [10.0]

    def finish(k):
        if k == 0:
            assert one_started.wait(timeout=wait_s[0]), "batch 1 was not finished while batch 0 was"
        else:
            one_started.set()
        return k

    seen = []
    overlapped(range(4), lambda k: k, finish, seen.append, depth=2)
    assert seen == [0, 1, 2, 3]
    one_started.clear()
    wait_s[0] = 0.5
    with pytest.raises(AssertionError, match="batch 1 was not finished"):
        overlapped(range(2), lambda k: k, finish, [].append, depth=1)


def test_an_error_in_finish_surfaces_with_its_type_and_stops_the_run():
    produced, seen = [], []

    def finish(k):
        if k == 1:
            raise RewardError("bad tests for problem 1", hint="fix the dataset")
        return k

    with pytest.raises(RewardError, match="bad tests for problem 1"):
        overlapped(range(5), lambda k: produced.append(k) or k, finish, seen.append)
    # batch 2 (and, depth 2, perhaps 3) was produced while 1 failed; 4 never
    assert seen == [0] and produced[:3] == [0, 1, 2] and len(produced) <= 4


def test_an_error_in_produce_first_emits_the_batch_being_finished():
    seen = []

    def produce(k):
        if k == 2:
            raise KeyboardInterrupt
        return k

    with pytest.raises(KeyboardInterrupt):
        overlapped(range(5), produce, lambda k: k, seen.append)
    assert seen == [0, 1]  # batch 1 was being scored when batch 2's generation died: kept
