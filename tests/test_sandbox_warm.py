"""The root sandbox runs Python source in a fork of an interpreter it started once (no start-up
per run). A program must not be able to tell, except by the few documented signs (three frames
of the runner below its own, so the recursion limit comes three frames sooner; ``sys.flags.no_site``
with site-packages): every program here gives the same exit status, stdout and stderr as the
same program in a new interpreter (``E1_SANDBOX_FRESH=1``) in the same sandbox.
"""

from __future__ import annotations

import json

import pytest

from e1.sandbox import Limits, isolation, run_sandboxed

pytestmark = pytest.mark.skipif(isolation().mode != "unshare", reason="the fork server is the root (unshare) backend's")

LIMITS = Limits(wall_s=10)
STDIN = b"abc\nrest of the input\n"

PROGRAMS = {
    "prints": "print('hello', 41 + 1)",
    "reads stdin": "line = input()\nprint(line[::-1])\nimport sys\nprint(repr(sys.stdin.read()))",
    "unicode": "print('h\u00e9llo \u2713')\nimport sys\nsys.stderr.write('\\udcff\\n')",
    "raises": "def f():\n    raise ValueError('boom')\nf()",
    "raises in handling": "try:\n    1 / 0\nexcept ZeroDivisionError:\n    raise KeyError(2)",
    "syntax error": "def (:\n",
    "exit code": "raise SystemExit(3)",
    "exit message": "import sys\nsys.exit('bye')",
    "exit None": "import sys\nsys.exit(None)",
    "exit list": "import sys\nsys.exit([1, 2])",
    "keyboard interrupt": "raise KeyboardInterrupt",
    "no exception current": "import sys\nprint(sys.exc_info())",
    "atexit": "import atexit\natexit.register(lambda: print('at exit'))\nprint('first', end=' ')",
    "threads joined": "import threading, time\nthreading.Thread(target=lambda: (time.sleep(0.2), print('late'))).start()\nprint('early')",
    "daemon thread": "import threading, time\nthreading.Thread(target=time.sleep, args=(30,), daemon=True).start()\nprint('done')",
    "unclosed file on fd 1": "f = open(1, 'w')\nf.write('through a second object')",
    "stdout replaced": "import sys\nsys.stdout = open(sys.stdout.fileno(), 'w', buffering=1 << 16)\nprint('swapped')",
    "finaliser": "class A:\n    def __del__(self):\n        print('finalised')\na = A()\nprint('made')",
    "os._exit": "import os\nprint('buffered, lost')\nos._exit(4)",
    "stdout closed": "import os\nos.close(1)\nprint('x')",
    "stderr None": "import sys\nsys.stderr = None\nraise ValueError(1)",
    "exit in a thread": "import threading, sys\nt = threading.Thread(target=sys.exit, args=(3,))\nt.start()\nt.join()\nprint('after')",
}

STATE = """
import json, os, signal, sys
streams = [[s.name, s.encoding, s.errors, s.line_buffering, s.write_through, s.seekable(), s.mode,
            type(s.buffer).__name__] for s in (sys.stdin, sys.stdout, sys.stderr)]
print(json.dumps({
    "globals": sorted((k, type(v).__name__) for k, v in globals().items() if k not in ("json", "os", "signal", "sys")),
    "file": __file__, "name": __name__, "argv": sys.argv, "orig_argv": sys.orig_argv, "path": sys.path,
    "flags": list(sys.flags), "streams": streams, "same": [sys.stdout is sys.__stdout__, sys.stdin is sys.__stdin__],
    "signals": [str(signal.getsignal(n)) for n in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM)],
    "hash": hash("abc"), "environ": dict(os.environ), "cwd": os.getcwd(), "pid": os.getpid(),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd"))[:3],
    "caps": [line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff")],
    "main": sys.modules["__main__"].__dict__ is globals(), "builtins": [hasattr(__builtins__, n) for n in ("exit", "help")],
}))
"""


@pytest.fixture(scope="module")
def fresh():
    """An unshare backend that execs a new interpreter for every run."""
    from e1.sandbox.unshare import UnshareBackend

    backend = UnshareBackend(fresh=True)
    yield backend
    backend.close()


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_behaves_as_in_a_new_interpreter(name, fresh):
    warm = run_sandboxed(PROGRAMS[name], STDIN, LIMITS)
    new = fresh.run(PROGRAMS[name], STDIN, LIMITS, False, ())
    assert (warm.returncode, warm.stdout, warm.stderr) == (new.returncode, new.stdout, new.stderr)


@pytest.mark.parametrize("site_packages", [False, True])
def test_the_interpreter_state_a_program_sees_is_a_new_interpreters(site_packages, fresh):
    warm = json.loads(run_sandboxed(STATE, b"", LIMITS, site_packages=site_packages).stdout)
    new = json.loads(fresh.run(STATE, b"", LIMITS, site_packages, ()).stdout)
    if site_packages:  # the documented difference: site.main() ran in a -S interpreter
        assert warm["flags"][5:7] == [0, 1] and new["flags"][5:7] == [1, 0]  # no_user_site, no_site
        warm["flags"][5:7] = new["flags"][5:7]
        assert any(path.endswith("site-packages") for path in warm["path"])
    assert warm == new
    assert warm["pid"] == 1 and warm["fds"] == [0, 1, 2] and warm["caps"] == ["0000000000000000"] and warm["main"]


def test_nothing_of_an_earlier_run_is_left_in_a_later_one():
    run_sandboxed(
        "import os\nos.environ['LEFT'] = 'x'\nopen('/tmp/left', 'w').write('x')\nimport json\nLEFT = 1", b"", LIMITS
    )
    later = run_sandboxed(
        "import os, sys\nprint('LEFT' in os.environ, os.path.exists('/tmp/left'), 'LEFT' in dir(), "
        "sys.modules['__main__'].__dict__ is globals())",
        b"",
        LIMITS,
    )
    assert later.stdout == b"False False False True\n"


def test_site_packages_are_importable_and_the_harness_still_sees_plain_python():
    result = run_sandboxed(
        "import numpy, sys\nprint(int(numpy.arange(4).sum()), 'exit' in dir(__builtins__))",
        b"",
        LIMITS,
        site_packages=True,
    )
    assert result.ok and result.stdout == b"6 True\n"
