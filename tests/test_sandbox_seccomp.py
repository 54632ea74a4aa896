"""The seccomp filter, twice: as a pure function (run through a classic-BPF interpreter written
here, over generated syscalls) and as the kernel applies it to real runs on each confining backend."""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.sandbox import Limits, SandboxError, run_sandboxed, seccomp

ALLOW, EPERM, ENOSYS, EAFNOSUPPORT = 0x7FFF0000, 0x50001, 0x50026, 0x50061
FOREIGN_ARCHES = [0x40000003, 0x40000028, 0xC00000B7, 0xC000003E, 0, 0xFFFFFFFF]  # i386, arm, aarch64, x86_64


def bpf(program: bytes, data: bytes) -> int:
    """A classic-BPF interpreter (loads, conditional and plain jumps, returns; what a seccomp
    filter may hold) run over ``data`` (a packed ``struct seccomp_data``)."""
    lines = [struct.unpack("HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    pc, acc = 0, 0
    for _ in range(len(lines)):  # no backward jumps in classic BPF: one pass at most
        code, jt, jf, k = lines[pc]
        pc += 1
        kind, op, source = code & 0x07, code & 0xF0, code & 0x08
        assert source == 0, "only constant operands"
        if kind == 0x00:  # BPF_LD
            assert code == 0x20 and k % 4 == 0 and k + 4 <= len(data)  # W|ABS, aligned, in bounds
            acc = struct.unpack_from("<I", data, k)[0]
        elif kind == 0x06:  # BPF_RET
            return k
        elif kind == 0x05:  # BPF_JMP
            if op == 0x00:  # JA
                pc += k
                continue
            taken = {0x10: acc == k, 0x20: acc > k, 0x30: acc >= k, 0x40: acc & k != 0}[op]
            pc += jt if taken else jf
        else:
            raise AssertionError(f"instruction {code:#x} not expected in the filter")
    raise AssertionError("fell off the end of the filter")


def seccomp_data(arch: int, nr: int, args: list[int]) -> bytes:
    return struct.pack("<IIQ6Q", nr, arch, 0, *args)


def expected(machine: str, arch: int, nr: int, args: list[int]) -> int:
    """The policy, written out plainly (see e1/sandbox/seccomp.py)."""
    names = {number: name for name, number in seccomp.SYSCALLS[machine].items()}
    if arch != seccomp.AUDIT_ARCH[machine] or nr & 0x40000000 or nr >= 0x40000000:
        return ENOSYS
    name, first = names.get(nr), args[0] & 0xFFFFFFFF
    if name in (
        "add_key",
        "request_key",
        "keyctl",
        "memfd_create",
        "setxattr",
        "lsetxattr",
        "fsetxattr",
        "setxattrat",
        "shmget",
        "msgget",
    ):
        return EPERM
    if name in ("unshare", "clone"):
        return EPERM if first & 0x10000000 else ALLOW
    if name == "clone3":
        return ENOSYS
    if name in ("socket", "socketpair"):
        return ALLOW if first in (1, 2, 10) else EAFNOSUPPORT
    if name == "prctl":
        return EPERM if first == 1 else ALLOW
    return ALLOW


MACHINES = sorted(seccomp.SYSCALLS)
u64 = st.integers(0, (1 << 64) - 1)
interesting_first_args = st.sampled_from([0, 1, 2, 10, 16, 17, 40, 0x10000000, 0x10000011, 1 << 32 | 40, 1 << 32 | 1])


@st.composite
def syscalls(draw, machine: str):
    native = seccomp.AUDIT_ARCH[machine]
    arch = draw(st.one_of(st.just(native), st.sampled_from(FOREIGN_ARCHES), st.integers(0, (1 << 32) - 1)))
    known = list(seccomp.SYSCALLS[machine].values())
    nr = draw(
        st.one_of(
            st.sampled_from(known),
            st.sampled_from([n | 0x40000000 for n in known]),
            st.integers(0, 1000),
            st.integers(0, (1 << 32) - 1),
        )
    )
    args = [draw(st.one_of(interesting_first_args, u64))] + draw(st.lists(u64, min_size=5, max_size=5))
    return arch, nr, args


@pytest.mark.parametrize("machine", MACHINES)
@settings(max_examples=1000, deadline=None)
@given(data=st.data())
def test_the_filter_is_the_policy_for_every_syscall(machine, data):
    arch, nr, args = data.draw(syscalls(machine))
    program = seccomp.filter_program(machine)
    assert bpf(program, seccomp_data(arch, nr, args)) == expected(machine, arch, nr, args)


@pytest.mark.parametrize("machine", MACHINES)
def test_ordinary_syscalls_pass_and_every_denied_class_is_denied(machine):
    program, native, nr = seccomp.filter_program(machine), seccomp.AUDIT_ARCH[machine], seccomp.SYSCALLS[machine]
    run = lambda number, *args, arch=native: bpf(program, seccomp_data(arch, number, [*args, 0, 0, 0, 0, 0, 0][:6]))  # noqa: E731
    judged = set(nr.values())
    assert {run(n) for n in range(0, 460) if n not in judged} == {ALLOW}  # read, write, open, mmap, ...
    assert run(nr["socket"], 1) == run(nr["socket"], 2) == run(nr["socket"], 10) == run(nr["socketpair"], 1) == ALLOW
    assert run(nr["socket"], 40) == run(nr["socket"], 16) == run(nr["socketpair"], 40) == EAFNOSUPPORT
    assert [run(nr[name]) for name in ("add_key", "request_key", "keyctl")] == [EPERM] * 3
    assert (
        run(nr["clone"], 0x10000000 | 17) == run(nr["unshare"], 0x10000000) == EPERM and run(nr["clone"], 17) == ALLOW
    )
    assert run(nr["prctl"], 1) == EPERM and run(nr["prctl"], 15) == ALLOW  # PR_SET_NAME is fine
    assert run(39 | 0x40000000) == ENOSYS  # x32 getpid
    assert {run(n, arch=0x40000003) for n in range(0, 400)} == {ENOSYS}  # i386: every number refused


# --- the kernel applies it to real runs -------------------------------------------------------

PROBE = """
import ctypes, errno, mmap, os, platform, socket
libc = ctypes.CDLL(None, use_errno=True)
NR = {nr!r}

def attempt(name, call):
    try:
        call()
        print(name, "allowed")
    except OSError as err:
        print(name, errno.errorcode.get(err.errno, err.errno))

def syscall(name, *args):
    if libc.syscall(NR[name], *args) < 0:
        raise OSError(ctypes.get_errno(), name)

attempt("unix", lambda: socket.socket(socket.AF_UNIX).close())
attempt("inet6", lambda: socket.socket(socket.AF_INET6).close())
attempt("vsock", lambda: socket.socket(40, socket.SOCK_STREAM))
attempt("uevent", lambda: socket.socket(16, socket.SOCK_DGRAM, 15))
attempt("vsock pair", lambda: socket.socketpair(40, socket.SOCK_STREAM))
attempt("add_key", lambda: syscall("add_key", b"user", b"e1-left", b"secret", ctypes.c_size_t(6), ctypes.c_long(-4)))
attempt("keyctl", lambda: syscall("keyctl", ctypes.c_long(0), ctypes.c_long(-4), ctypes.c_long(0)))
attempt("pdeathsig", lambda: syscall("prctl", ctypes.c_long(1), ctypes.c_long(0)))
attempt("memfd", lambda: os.memfd_create("x"))
attempt("xattr", lambda: os.setxattr("/tmp", "user.e1", b"x" * 100))
attempt("shmget", lambda: syscall("shmget", ctypes.c_long(0), ctypes.c_size_t(1 << 20), ctypes.c_long(0o1600)))
attempt("msgget", lambda: syscall("msgget", ctypes.c_long(0), ctypes.c_long(0o1600)))
if platform.machine() == "x86_64":  # getpid through the i386 ABI: mov eax, 20; int 0x80; ret
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(bytes.fromhex("b814000000cd80c3"))
    print("i386 getpid", ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(page)))())
"""
REFUSED = {
    "vsock": "EAFNOSUPPORT",
    "uevent": "EAFNOSUPPORT",
    "vsock pair": "EAFNOSUPPORT",
    "add_key": "EPERM",
    "keyctl": "EPERM",
    "pdeathsig": "EPERM",
    "memfd": "EPERM",
    "xattr": "EPERM",
    "shmget": "EPERM",
    "msgget": "EPERM",
}


@pytest.mark.parametrize("backend", ["unshare", "bwrap"])
def test_real_runs_get_the_filter(backend):
    program = PROBE.format(nr=seccomp.SYSCALLS[os.uname().machine])
    try:
        result = run_sandboxed(program, b"", Limits(wall_s=20), backend=backend)
    except SandboxError as err:
        pytest.skip(f"no {backend} backend here: {err}")
    assert result.ok, result.stderr
    seen = dict(line.rsplit(" ", 1) for line in result.stdout.decode().splitlines())
    assert seen.pop("unix") == seen.pop("inet6") == "allowed"
    if "i386 getpid" in seen:
        assert seen.pop("i386 getpid") == "-38"  # -ENOSYS: refused, not the pid
    assert seen == REFUSED
