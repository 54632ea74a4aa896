"""The seccomp filter every unshare run gets, built here and installed by the fork server.

The policy lives in importable, testable code; :mod:`e1.sandbox.server` (standard library only)
receives the packed BPF program as hex in its config and installs it per run.

    >>> len(filter_program()) % 8     # struct sock_filter: u16 code, u8 jt, u8 jf, u32 k
    0
"""

from __future__ import annotations

import os
import struct

CLONE_NEWUSER = 0x10000000
# (audit arch, unshare, clone, clone3) syscall numbers
ARCHES = {"x86_64": (0xC000003E, 272, 56, 435), "aarch64": (0xC00000B7, 97, 220, 435)}
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_JMP|JSET|K, BPF_RET|K
ALLOW, EPERM, ENOSYS = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38


def filter_program(machine: str | None = None) -> bytes:
    """Refuse unshare/clone with CLONE_NEWUSER (EPERM) and clone3 (ENOSYS: libc falls back to
    clone), as packed ``struct sock_filter`` lines."""
    arch, nr_unshare, nr_clone, nr_clone3 = ARCHES[machine or os.uname().machine]
    program = [
        (LD, 0, 0, 4), (JEQ, 1, 0, arch), (RET, 0, 0, ALLOW),  # another ABI: not ours to judge
        (LD, 0, 0, 0), (JEQ, 4, 0, nr_unshare), (JEQ, 3, 0, nr_clone), (JEQ, 1, 0, nr_clone3),
        (RET, 0, 0, ALLOW), (RET, 0, 0, ENOSYS),
        (LD, 0, 0, 16), (JSET, 0, 1, CLONE_NEWUSER), (RET, 0, 0, EPERM), (RET, 0, 0, ALLOW),
    ]
    return b"".join(struct.pack("HBBI", *line) for line in program)
