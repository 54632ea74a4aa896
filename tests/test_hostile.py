"""Hostile programs, submitted as a model would (thinking, ``</think>``, a python block), scored
through eval's scorer. Each one's test expects what a *successful* attack would produce, so
the reward is 1.0 exactly when the attack works: every reward must be 0.0, the host untouched.

Categories: forged pass signals, objects equal to everything, host IPC (pathname, abstract,
TCP, UDP, DNS, raw sockets), files and secrets of the host, shared scratch between runs,
resource bombs (fork, threads, memory per process and per tree, disk, inodes, output, time),
privilege (setuid, rlimits, user namespaces), daemons and signals.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest

from e1.rewards.scoring import Scorer
from e1.sandbox import isolation

SECRET = f"s3cret-{uuid.uuid4().hex}"
TAG = uuid.uuid4().hex[:12]
SQUARE = [
    {
        "kind": "code",
        "code": "def check(candidate):\n    assert candidate(3) == 9\n    assert candidate(4) == 16\n",
        "entry_point": "square",
    }
]
SQUARE_CALL = [{"kind": "call", "fn": "square", "args": [3], "expected": 9}]
# where an honest solution must pass: room for a slow, loaded machine to start the interpreter
# (a forgery gets no more out of it: none of them waits)
HONEST_TIME_LIMIT_S = 10


def completion(code: str) -> str:
    return f"<think>I will win.</think>\n```python\n{code}\n```\n"


def stdio(expected: str) -> list[dict]:
    return [{"kind": "stdio", "input": "", "output": expected + "\n"}]


def leak(expression: str) -> str:
    """A program printing ``expression`` (which tries to reach the secret), or nothing."""
    return f"import os, socket, subprocess, sys\ntry:\n    print({expression})\nexcept BaseException:\n    pass"


FORGERIES = {
    "fake 'passed' replies on the harness channel": "import os\nfd = int(os.environ['E1_FDS'].split()[1])\n"
    "os.write(fd, b'{\"ok\": true}\\n' * 2 + b'{\"passed\": true}\\n')\nos._exit(0)",
    "print a pass marker and exit 0": "import os\nprint('PASSED', flush=True)\nos._exit(0)",
    "read expected values from main.py": "import re\nsrc = open('main.py').read()\n"
    "vals = [int(v) for v in re.findall(r'== (\\d+)', src)]\ndef square(x):\n    return vals.pop(0)",
    "object equal to everything": "class Any:\n    def __eq__(self, other):\n        return True\n"
    "def square(x):\n    return Any()",
    "int subclass equal to everything": "class Any(int):\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = int.__hash__\ndef square(x):\n    return Any(0)",
    "str subclass equal to everything": "class Any(str):\n    def __eq__(self, other):\n        return True\n"
    "def square(x):\n    return Any('')",
    "exit 0 before the tests": "import sys\nsys.exit(0)\ndef square(x):\n    return 0",
    "os._exit inside the candidate": "import os\ndef square(x):\n    os._exit(0)",
    "inspect the caller's frame": "import sys\ndef square(x):\n    f = sys._getframe(1)\n"
    "    consts = [c for c in f.f_code.co_consts if isinstance(c, int) and c > x]\n    return consts[0] if consts else 0",
    "gc scan for the checker's constants": "import gc\ndef square(x):\n"
    "    ints = [v for o in gc.get_objects() if isinstance(o, tuple) for v in o if type(v) is int and v > x]\n"
    "    return min(ints, default=0)",
    "kill the checker": "import os, signal\nfor pid in range(1, 400):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
    "    except OSError:\n        pass\ndef square(x):\n    return 0",
}


def test_forged_passes_score_zero():
    completions = [completion(code) for code in FORGERIES.values()]
    with Scorer(workers=2, time_limit_s=HONEST_TIME_LIMIT_S) as scorer:
        code = scorer.score(["code"] * len(completions), completions, [json.dumps(SQUARE)] * len(completions))
        call = scorer.score(["code"] * len(completions), completions, [json.dumps(SQUARE_CALL)] * len(completions))
        honest = scorer.score(["code"], [completion("def square(x):\n    return x * x")], [json.dumps(SQUARE)])
    assert {name: s.reward for name, s in zip(FORGERIES, code)} == dict.fromkeys(FORGERIES, 0.0)
    assert {name: s.reward for name, s in zip(FORGERIES, call)} == dict.fromkeys(FORGERIES, 0.0)
    assert honest[0].reward == 1.0  # the same machinery passes a correct solution


@pytest.fixture
def host_services(tmp_path, monkeypatch):
    """Servers on the host that hand SECRET to whoever connects, and files holding it."""
    monkeypatch.setenv("E1_HOSTILE_SECRET", SECRET)
    servers, contacted, tag = [], [], uuid.uuid4().hex[:12]
    run = (
        "/run" if os.access("/run", os.W_OK) else str(tmp_path)
    )  # an unprivileged rerun (test_hostile_bwrap) has no /run
    paths = {"unix": f"{run}/e1-hostile-{tag}.sock", "tmp_unix": str(tmp_path / "s.sock"), "abstract": f"\0e1-{tag}"}
    for address in paths.values():
        server = socket.socket(socket.AF_UNIX)
        server.bind(address)
        servers.append(server)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    servers.append(tcp)
    for server in servers:
        server.listen()
        threading.Thread(target=_answer, args=(server, contacted), daemon=True).start()
    files = [Path.home() / f".e1-hostile-{tag}", Path.cwd() / f".e1-hostile-{tag}", Path(f"/tmp/e1-hostile-{tag}")]
    for file in files:
        file.write_text(SECRET)
    yield {**paths, "tcp_port": tcp.getsockname()[1], "files": [str(f) for f in files]}, contacted
    for server in servers:
        server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread, releasing the address
        server.close()
    for file in files + [Path(paths["unix"])]:
        file.unlink(missing_ok=True)


def _answer(server: socket.socket, contacted: list) -> None:
    try:
        while True:
            connection, _ = server.accept()
            contacted.append(server.getsockname())
            connection.sendall(SECRET.encode() + b"\n")
            connection.close()
    except OSError:
        pass


def _reach(family: str, address: str) -> str:
    return (
        f"(lambda s: (s.settimeout(1), s.connect({address}), s.recv(100).decode().strip())[2])(socket.socket({family}))"
    )


def test_host_secrets_ipc_and_network_are_out_of_reach(host_services):
    services, contacted = host_services
    attempts = {
        "environment": "os.environ['E1_HOSTILE_SECRET']",
        "parent environ": "[l for l in open(f'/proc/{os.getppid()}/environ').read().split('\\0') if 'E1_HOSTILE' in l][0][18:]",
        "pid 1 environ": "open('/proc/1/environ').read().split('E1_HOSTILE_SECRET=')[1].split('\\0')[0]",
        **{f"file {path}": f"open({path!r}).read()" for path in services["files"]},
        "pathname socket under /run": _reach("socket.AF_UNIX", repr(services["unix"])),
        "pathname socket under /tmp": _reach("socket.AF_UNIX", repr(services["tmp_unix"])),
        "abstract socket": _reach("socket.AF_UNIX", repr(services["abstract"])),
        "tcp to localhost": _reach("socket.AF_INET", f"('127.0.0.1', {services['tcp_port']})"),
        "udp": "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53)) and " + repr(SECRET),
        "dns": f"socket.getaddrinfo('example.com', 80) and {SECRET!r}",
        "raw socket": f"socket.socket(socket.AF_INET, socket.SOCK_RAW, 1) and {SECRET!r}",
        "docker socket": _reach("socket.AF_UNIX", "'/var/run/docker.sock'"),
    }
    programs = [completion(leak(expression)) for expression in attempts.values()]
    with Scorer(workers=2, time_limit_s=2) as scorer:
        scored = scorer.score(["code"] * len(programs), programs, [json.dumps(stdio(SECRET))] * len(programs))
    assert {name: s.reward for name, s in zip(attempts, scored)} == dict.fromkeys(attempts, 0.0)
    assert contacted == []


PRIVILEGE = {
    "become root": "os.setuid(0) or 'ESCAPED'",
    "raise the process limit": "__import__('resource').setrlimit(__import__('resource').RLIMIT_NPROC, (10**6, 10**6)) or 'ESCAPED'",
    "new user namespace (syscall)": "'ESCAPED' if __import__('ctypes').CDLL(None).unshare(0x10000000) == 0 else ''",
    "new user namespace (unshare -U)": "'ESCAPED' if subprocess.run(['unshare', '-Ur', 'true']).returncode == 0 else ''",
    "write the interpreter": f"open({os.path.join(os.path.dirname(os.__file__), 'e1-pwned')!r}, 'w') and 'ESCAPED'",
    "write /etc": "open('/etc/e1-pwned', 'w') and 'ESCAPED'",
    "mount": "'ESCAPED' if subprocess.run(['mount', '-t', 'tmpfs', 'x', '/tmp']).returncode == 0 else ''",
    "see host processes": "'ESCAPED' if len([p for p in os.listdir('/proc') if p.isdigit()]) > 3 else ''",
}


def test_privilege_cannot_be_gained():
    programs = [completion(leak(expression)) for expression in PRIVILEGE.values()]
    with Scorer(workers=2, time_limit_s=2) as scorer:
        scored = scorer.score(["code"] * len(programs), programs, [json.dumps(stdio("ESCAPED"))] * len(programs))
    assert {name: s.reward for name, s in zip(PRIVILEGE, scored)} == dict.fromkeys(PRIVILEGE, 0.0)
    assert not Path("/etc/e1-pwned").exists()


BOMBS = {
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "thread bomb": "import threading, time\nwhile True:\n    threading.Thread(target=time.sleep, args=(9,)).start()",
    "memory in one process": "x = bytearray(1 << 40)\nprint('ESCAPED')",
    "memory across processes": "import os, time\nfor _ in range(12):\n    if os.fork() == 0:\n"
    "        x = bytearray(200 << 20)\n        time.sleep(3)\n        os._exit(0)\ntime.sleep(3)\nprint('ESCAPED')",
    "disk fill": "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))",
    "inode flood": "import os\nfor i in range(10**6):\n    open(f'f{i}', 'w').close()\nprint('ESCAPED')",
    "shm fill": "f = open('/dev/shm/big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))",
    "output flood": "import sys\nwhile True:\n    sys.stdout.write('ESCAPED\\n' * 8192)",
    "infinite loop": "while True:\n    pass",
    "daemon": f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(1)\n"
    f"    open('/tmp/e1-daemon-{TAG}', 'w')",
    "kill everything": "import os, signal\nos.kill(-1, signal.SIGKILL)\nprint('ESCAPED')",
    "leave files for the next run": f"open('/tmp/e1-left-{TAG}', 'w').write('x')\n"
    f"open('/dev/shm/e1-left-{TAG}', 'w').write('x')",
}


def test_bombs_are_contained_and_leave_nothing():
    start = time.monotonic()
    programs = [completion(code) for code in BOMBS.values()]
    with Scorer(workers=2, time_limit_s=1) as scorer:
        scored = scorer.score(["code"] * len(programs), programs, [json.dumps(stdio("ESCAPED"))] * len(programs))
        found = "import os\nprint('ESCAPED' if os.path.exists('/tmp/e1-left-{0}') or os.path.exists('/dev/shm/e1-left-{0}') else '')"
        later = scorer.score(["code"], [completion(found.format(TAG))], [json.dumps(stdio("ESCAPED"))])
    assert {name: s.reward for name, s in zip(BOMBS, scored)} == dict.fromkeys(BOMBS, 0.0)
    assert later[0].reward == 0.0
    assert time.monotonic() - start < 20
    time.sleep(1.2)
    assert not any(Path(p).exists() for p in (f"/tmp/e1-daemon-{TAG}", f"/tmp/e1-left-{TAG}"))


def test_predictable_names_cannot_crash_a_batch():
    squatted = [Path(f"/tmp/e1-run-{2_000_000_000 + n}") for n in range(50)]  # what used to be the next run directories
    made = [path for path in squatted if not path.exists()]
    try:
        for path in made:
            path.mkdir(exist_ok=True)
        good = completion("def square(x):\n    return x * x")
        with Scorer(workers=2, time_limit_s=HONEST_TIME_LIMIT_S) as scorer:
            scored = scorer.score(["code"] * 4, [good] * 4, [json.dumps(SQUARE)] * 4)
    finally:
        for path in made:  # leave the host's /tmp as it was
            path.rmdir()
    assert [s.reward for s in scored] == [1.0] * 4


def test_the_backend_in_use_isolates_everything():
    assert isolation().missing() in ([], ["cpu_share"]) or isolation().tree_limits is None


# --- runs of one batch cannot reach each other ----------------------------------------------------
# Each channel: a publisher that offers PEER_SECRET for 2 s, and a thief that looks for it as long.
# In GRPO a group's samples run side by side: one that reads another's answer would score 1.0.
PEER_SECRET = 7_000_000 + uuid.uuid4().int % 1_000_000
_RETRY = (
    "import time\nend = time.time() + 2\nwhile time.time() < end:\n    try:\n{body}\n        break\n"
    "    except Exception:\n        time.sleep(0.05)\n"
)
_LIBC = (
    "import ctypes, ctypes.util\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "rt = ctypes.CDLL(ctypes.util.find_library('rt') or 'librt.so.1', use_errno=True)\n"
)


def _indent(code: str) -> str:
    return "\n".join("        " + line for line in code.splitlines())


def _retry(code: str) -> str:
    return _RETRY.format(body=_indent(code))


def _serve(family: str, address: str) -> str:
    return (
        f"import socket\ns = socket.socket({family})\ns.bind({address})\ns.listen()\ns.settimeout(2)\n"
        f"c, _ = s.accept()\nc.sendall(b'{PEER_SECRET}')"
    )


def _fetch(family: str, address: str) -> str:
    return _retry(
        f"import socket\ns = socket.socket({family})\ns.settimeout(0.3)\ns.connect({address})\n"
        "print('GOT', s.recv(100).decode(), flush=True)"
    )


PEER_CHANNELS = {  # name -> (publisher, thief); {key} is a fresh number per example
    "tcp on loopback": (
        _serve("socket.AF_INET", "('127.0.0.1', {key})"),
        _fetch("socket.AF_INET", "('127.0.0.1', {key})"),
    ),
    "udp on loopback": (
        _retry(
            f"import socket\nfor _ in range(40):\n    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto("
            f"b'{PEER_SECRET}', ('127.0.0.1', {{key}}))\n    time.sleep(0.05)"
        ),
        (
            "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.settimeout(2)\n"
            "try:\n    s.bind(('127.0.0.1', {key}))\n    print('GOT', s.recv(100).decode())\nexcept OSError:\n    pass"
        ),
    ),
    "abstract unix socket": (
        _serve("socket.AF_UNIX", "'\\0e1-peer-{key}'"),
        _fetch("socket.AF_UNIX", "'\\0e1-peer-{key}'"),
    ),
    "unix socket in /tmp": (
        _serve("socket.AF_UNIX", "'/tmp/e1-peer-{key}'"),
        _fetch("socket.AF_UNIX", "'/tmp/e1-peer-{key}'"),
    ),
    "file in /tmp": (
        f"open('/tmp/e1-peer-{{key}}', 'w').write('{PEER_SECRET}')\nimport time\ntime.sleep(2)",
        _retry(
            "data = open('/tmp/e1-peer-{key}').read()\nassert data  # created, not written yet: try again\nprint('GOT', data, flush=True)"
        ),
    ),
    "POSIX shm (/dev/shm)": (
        f"open('/dev/shm/e1-peer-{{key}}', 'w').write('{PEER_SECRET}')\nimport time\ntime.sleep(2)",
        _retry(
            "data = open('/dev/shm/e1-peer-{key}').read()\nassert data  # created, not written yet: try again\nprint('GOT', data, flush=True)"
        ),
    ),
    "SysV semaphore": (
        _LIBC
        + f"sem = libc.semget({{key}}, 1, 0o1666)\nlibc.semctl(sem, 0, 16, ctypes.c_int({PEER_SECRET % 30_000}))\n"
        "import time\ntime.sleep(2)",
        _LIBC
        + _retry(
            "sem = libc.semget({key}, 1, 0)\nassert sem >= 0\n"
            f"assert libc.semctl(sem, 0, 12) == {PEER_SECRET % 30_000}\nprint('GOT', {PEER_SECRET})"
        ),
    ),
    "SysV shared memory": (
        _LIBC + f"libc.shmat.restype = ctypes.c_void_p\nshm = libc.shmget({{key}}, 4096, 0o1666)\n"
        f"ctypes.c_int.from_address(libc.shmat(shm, None, 0)).value = {PEER_SECRET}\nimport time\ntime.sleep(2)",
        _LIBC
        + _retry(
            "libc.shmat.restype = ctypes.c_void_p\nshm = libc.shmget({key}, 0, 0)\nassert shm >= 0\n"
            "print('GOT', ctypes.c_int.from_address(libc.shmat(shm, None, 0)).value, flush=True)"
        ),
    ),
    "SysV message queue": (
        _LIBC
        + f"q = libc.msgget({{key}}, 0o1666)\nmsg = ctypes.create_string_buffer(b'\\1\\0\\0\\0\\0\\0\\0\\0{PEER_SECRET}')\n"
        "libc.msgsnd(q, msg, 7, 0)\nimport time\ntime.sleep(2)",
        _LIBC
        + _retry(
            "q = libc.msgget({key}, 0)\nassert q >= 0\nbuf = ctypes.create_string_buffer(64)\n"
            "assert libc.msgrcv(q, buf, 7, 0, 0o4000) == 7\nprint('GOT', buf.raw[8:15].decode(), flush=True)"
        ),
    ),
    "POSIX message queue": (
        _LIBC + "q = rt.mq_open(b'/e1-peer-{key}', 0o101, 0o666, None)\n"
        f"rt.mq_send(q, b'{PEER_SECRET}', 7, 0)\nimport time\ntime.sleep(2)",
        _LIBC
        + _retry(
            "q = rt.mq_open(b'/e1-peer-{key}', 0o4000)\nassert q >= 0\nbuf = ctypes.create_string_buffer(8192)\n"
            "assert rt.mq_receive(q, buf, 8192, None) == 7\nprint('GOT', buf.raw[:7].decode(), flush=True)"
        ),
    ),
}
# Where the seccomp filter refuses the channel itself (or no loopback exists), it carries nothing
# even inside one run; every other channel works inside one run, so the thief would find a leak.
NO_CHANNEL_AT_ALL = {"tcp on loopback", "udp on loopback", "SysV shared memory", "SysV message queue"}


def _one_run(publisher: str, thief: str) -> str:
    """Publisher and thief as two processes of one run: the control that the thief works."""
    return f"import os\nif os.fork() == 0:\n    exec({publisher!r}, {{}})\n    os._exit(0)\nexec({thief!r}, {{}})"


@pytest.mark.parametrize("name", PEER_CHANNELS)
def test_concurrent_runs_cannot_pass_data_to_each_other(name):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    publisher, thief = PEER_CHANNELS[name]
    stolen = []

    @settings(max_examples=2, deadline=None, database=None)
    @given(st.integers(20_000, 60_000))
    def across_runs(key):
        from e1.sandbox import Limits, Sandbox

        with Sandbox(workers=3, limits=Limits(wall_s=10)) as box:
            runs = box.run_many(
                [
                    (publisher.replace("{key}", str(key)), b""),
                    (thief.replace("{key}", str(key)), b""),
                    (_one_run(publisher, thief).replace("{key}", str(key + 1)), b""),
                ]
            )
        assert str(PEER_SECRET).encode() not in runs[1].stdout, runs[1].stdout
        stolen.append(str(PEER_SECRET).encode() in runs[2].stdout)

    across_runs()
    assert all(stolen) or name in NO_CHANNEL_AT_ALL  # the thief does find the secret where a channel exists
