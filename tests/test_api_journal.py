"""Every received reply is journalled before a run's abort propagates, so a rerun sends no answered request.

The invariant (:mod:`e1.engine.api.client`): a reply the gate accepted reaches the journal before the
run stops, whatever stops it: a failed request (the server died), or the caller's abort (Ctrl-C), with
other requests in flight; the probes' replies too. Counted at the stand-in: across the aborted run and
its rerun, no request body is answered twice.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from e1.engine.api.client import row_task, run_rows
from e1.errors import E1Error
from tests.test_api_backend import StandIn, _eval, tokenizer_dir  # noqa: F401  (tokenizer_dir: a fixture)


def _counting(stand_in: StandIn, answered: Counter, dies_after: int | None = None):
    """Count every request the stand-in answers (probes included); after ``dies_after`` answers it goes away,
    the requests then in flight still answered (their handlers run on)."""

    def fault(path, body):
        if dies_after is not None and sum(answered.values()) >= dies_after:
            if not getattr(stand_in, "stopping", False):
                stand_in.stopping = True
                threading.Thread(target=stand_in.stop).start()
            return "drop"
        time.sleep(0.05)  # requests overlap: some are in flight as the server goes
        if isinstance(body.get("prompt"), list) and stand_in.decode is None:
            return None  # refused (HTTP 400: it takes text only), not answered
        answered[json.dumps(body, sort_keys=True)] += 1
        return None

    stand_in.fault = fault


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dies_after=st.integers(1, 6))  # of 9 answers in all: the probe, 4 problems x 2 calls
def test_a_rerun_after_the_server_died_sends_no_answered_request(tokenizer_dir, dies_after):
    answered: Counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        first = StandIn().start()
        _counting(first, answered, dies_after)
        with pytest.raises(E1Error):
            _eval(first.url, tokenizer_dir, Path(tmp), batch_size=4)
        back = StandIn(first.port).start()  # the server comes back on the same address
        try:
            _counting(back, answered)
            samples, _ = _eval(back.url, tokenizer_dir, Path(tmp), batch_size=4)
        finally:
            back.stop()
    assert sorted(samples["problem_id"]) == ["p0", "p1", "p2", "p3"]
    assert max(answered.values()) == 1, [body[:120] for body, count in answered.items() if count > 1]


@settings(max_examples=30, deadline=None)
@given(count=st.integers(2, 12), concurrency=st.integers(1, 4), interrupter=st.integers(0, 11))
def test_an_abort_of_the_caller_lets_every_request_in_flight_finish_and_starts_no_other(
    count, concurrency, interrupter
):
    """Ctrl-C while rows are in flight: each started row finishes (its reply journalled) before the
    KeyboardInterrupt propagates, and no row that had not started is sent."""
    interrupter %= count
    started, finished = set(), set()

    def row(index: int):
        started.add(index)
        if index == interrupter:
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, as the main thread waits
        time.sleep(0.05)
        finished.add(index)
        return index

    with pytest.raises(KeyboardInterrupt):
        run_rows([row_task((i, 0), row, i) for i in range(count)], concurrency)
        time.sleep(1)  # (the interrupt may land just after the rows: it is still raised here)
    assert started == finished and len(started) <= interrupter + concurrency
