"""The seccomp filter every confined run gets (unshare: installed by the fork server; bwrap:
``bwrap --seccomp FD``). Built here, in importable code, as a classic BPF program
(tests/test_sandbox_seccomp.py runs it through a BPF interpreter of its own).

What it refuses, for this machine's own syscall ABI (``x86_64`` or ``aarch64``):

- every syscall of another ABI (i386 ``int 0x80`` on x86_64, arm32 on aarch64) and every
  number with the x32 bit (0x40000000) set: ENOSYS. Without this check the filter below
  would judge foreign numbers by native ones and let everything through.
- new user namespaces (``unshare``/``clone`` with CLONE_NEWUSER: EPERM; ``clone3``, whose
  flags a filter cannot read: ENOSYS, so libc falls back to ``clone``).
- socket families other than AF_UNIX, AF_INET, AF_INET6 (``socket``, ``socketpair``):
  EAFNOSUPPORT. AF_VSOCK shares the host's port space whatever the network namespace, and
  AF_NETLINK's kobject-uevent sockets hear the host's device events.
- the kernel keyring (``add_key``, ``request_key``, ``keyctl``): EPERM. Keys outlive the run
  (and its memory limit) and are found by the next run with the same uid.
- ``prctl(PR_SET_PDEATHSIG)``: EPERM. A run's PID 1 dies with the fork server through it.
- ``memfd_create``, the ``*setxattr*`` calls, and new System V shared memory segments and message
  queues (``shmget``, ``msgget``): EPERM. What they hold is outside RLIMIT_AS and the tmpfs size
  caps, which is all that bounds memory on the bwrap backend (no cgroup).

    >>> len(filter_program("x86_64")) % 8     # struct sock_filter: u16 code, u8 jt, u8 jf, u32 k
    0
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

CLONE_NEWUSER = 0x10000000
X32_BIT = 0x40000000
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
PR_SET_PDEATHSIG = 1
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
SYSCALLS = {
    "x86_64": {
        "unshare": 272,
        "clone": 56,
        "clone3": 435,
        "socket": 41,
        "socketpair": 53,
        "add_key": 248,
        "request_key": 249,
        "keyctl": 250,
        "prctl": 157,
        "memfd_create": 319,
        "setxattr": 188,
        "lsetxattr": 189,
        "fsetxattr": 190,
        "setxattrat": 463,
        "shmget": 29,
        "msgget": 68,
    },
    "aarch64": {
        "unshare": 97,
        "clone": 220,
        "clone3": 435,
        "socket": 198,
        "socketpair": 199,
        "add_key": 217,
        "request_key": 218,
        "keyctl": 219,
        "prctl": 167,
        "memfd_create": 279,
        "setxattr": 5,
        "lsetxattr": 6,
        "fsetxattr": 7,
        "setxattrat": 463,
        "shmget": 194,
        "msgget": 186,
    },
}
# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (native byte order,
# both machines little-endian: an argument's low 32 bits are at 16 + 8 * i)
NR, ARCH, ARG0 = 0, 4, 16
LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|{JEQ,JGE,JSET}|K, BPF_RET|K
ALLOW, ERRNO = 0x7FFF0000, 0x00050000
EPERM, ENOSYS, EAFNOSUPPORT = ERRNO | 1, ERRNO | 38, ERRNO | 97
REFUSED = (
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
)


def filter_program(machine: str | None = None) -> bytes:
    """The filter as packed ``struct sock_filter`` lines (what PR_SET_SECCOMP and bwrap take)."""
    machine = machine or os.uname().machine
    nr = SYSCALLS[machine]
    dispatch = [(nr[name], "eperm") for name in REFUSED] + [
        (nr["unshare"], "clone flags"),
        (nr["clone"], "clone flags"),
        (nr["clone3"], "enosys"),
        (nr["socket"], "family"),
        (nr["socketpair"], "family"),
        (nr["prctl"], "prctl"),
    ]
    lines = [
        (LD, ARCH),
        (JEQ, AUDIT_ARCH[machine], None, "enosys"),  # another ABI: refused whole
        (LD, NR),
        (JGE, X32_BIT, "enosys", None),  # the x32 numbering (and nothing valid above it)
        *[(JEQ, number, label, None) for number, label in dispatch],
        (RET, ALLOW),
        "clone flags",
        (LD, ARG0),
        (JSET, CLONE_NEWUSER, "eperm", None),
        (RET, ALLOW),
        "family",
        (LD, ARG0),
        *[(JEQ, family, "allow", None) for family in (AF_UNIX, AF_INET, AF_INET6)],
        (RET, EAFNOSUPPORT),
        "prctl",
        (LD, ARG0),
        (JEQ, PR_SET_PDEATHSIG, "eperm", None),
        (RET, ALLOW),
        "eperm",
        (RET, EPERM),
        "enosys",
        (RET, ENOSYS),
        "allow",
        (RET, ALLOW),
    ]
    return assemble(lines)


def assemble(lines: Sequence) -> bytes:
    """Label strings mark the next instruction; jumps name a label or None (the next line)."""
    labels, code = {}, []
    for line in lines:
        if isinstance(line, str):
            labels[line] = len(code)
        else:
            code.append(line)
    packed = []
    for index, (op, k, *jumps) in enumerate(code):
        if op == LD:
            packed.append(struct.pack("HBBI", op, 0, 0, k))
            continue
        offsets = [0 if label is None else labels[label] - index - 1 for label in jumps or (None, None)]
        packed.append(struct.pack("HBBI", op, *offsets, k))
    return b"".join(packed)
