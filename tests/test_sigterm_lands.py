"""SIGTERM (``kill``, ``timeout``, a scheduler's preemption, ``docker stop``) lands a run as Ctrl-C does:
the requests in flight finish (their replies journalled by :func:`e1.engine.api.client.run_rows`)
before e1 exits with one line, so a rerun sends no answered request again. Before, SIGTERM's default
action ended the process at once and every reply in flight was paid for and lost.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_RUN = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import e1.cli.app as cli
    from e1.engine.api.client import row_task, run_rows

    marks = Path(sys.argv[1])

    def row(index):
        (marks / f"started-{index}").touch()
        time.sleep(float(sys.argv[3]))
        (marks / f"finished-{index}").touch()  # the reply, journalled
        return index

    cli.app = lambda prog_name: run_rows([row_task((i, 0), row, i) for i in range(int(sys.argv[2]))], 3)
    cli.main()
""")


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.integers(4, 12), row_s=st.sampled_from([0.3, 0.6]))
def test_sigterm_lets_every_request_in_flight_finish_and_exits_in_one_line(tmp_path_factory, rows, row_s):
    marks = tmp_path_factory.mktemp("marks")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.Popen(
        [sys.executable, "-c", _RUN, str(marks), str(rows), str(row_s)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        end = time.monotonic() + 60
        while not list(marks.glob("started-*")) and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    started = {p.name.split("-")[1] for p in marks.glob("started-*")}
    finished = {p.name.split("-")[1] for p in marks.glob("finished-*")}
    assert started and started == finished, (proc.returncode, err[-300:])
    assert proc.returncode == 128 + signal.SIGTERM
    assert "rerun the same command" in err and "Traceback" not in err
