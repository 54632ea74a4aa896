"""The root every unshare run sees, and each run's private scratch. Standard library only:
:mod:`e1.sandbox.server` loads this file by path (it runs with ``-S``, without e1 on ``sys.path``).

The root is a tmpfs holding read-only binds of the system directories and of this interpreter
(its install, venv, site-packages: wherever they live, under /tmp included). Each run mounts its
own /tmp and /dev/shm over the root's; interpreter directories under those two are bound again
on top, read-only, so a venv in /tmp works in the sandbox as outside it.
"""

import ctypes
import os

LIBC = ctypes.CDLL(None, use_errno=True)
CLONE_NEWNS, CLONE_NEWNET = 0x20000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
TOP_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")
DEVICES = ("null", "zero", "full", "random", "urandom")
SCRATCH = ("/tmp", "/dev/shm")  # every run gets its own of these
STASH = "/.interpreter"  # the root's copy of interpreter directories that a run's scratch hides
HIDDEN = []  # those directories (set by build_root)


def check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source, target, fstype, flags, data=None):
    args = [s.encode() if s is not None else None for s in (source, target, fstype, data)]
    check(LIBC.mount(args[0], args[1], args[2], ctypes.c_ulong(flags), args[3]), f"mount {target}")


def unshare(flags):
    check(LIBC.unshare(flags), "unshare")


def build_root(interpreter_paths):
    """Enter new mount and network namespaces and chroot into the root (see the module)."""
    unshare(CLONE_NEWNS | CLONE_NEWNET)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    sources = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in interpreter_paths}  # before /tmp is covered
    root = "/tmp"  # a tmpfs over /tmp of this namespace only; the host's /tmp is untouched
    mount("e1-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m")
    for name in TOP_DIRS:
        source = "/" + name
        if os.path.islink(source):
            os.symlink(os.readlink(source), root + source)
        elif os.path.isdir(source):
            bind(source, root + source)
    for path, fd in sources.items():
        if not os.path.isdir(root + path) or not os.listdir(root + path):
            bind(f"/proc/self/fd/{fd}", root + path)
        if any(path == top or path.startswith(top + "/") for top in SCRATCH):
            HIDDEN.append(path)
            bind(f"/proc/self/fd/{fd}", f"{root}{STASH}/{len(HIDDEN) - 1}")
        os.close(fd)
    os.makedirs(root + "/dev/shm")
    for name in DEVICES:
        open(f"{root}/dev/{name}", "w").close()
        mount(f"/dev/{name}", f"{root}/dev/{name}", None, MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{root}/dev/{name}")
    for name in ("proc", "tmp"):
        os.makedirs(f"{root}/{name}", 0o755, exist_ok=True)  # /tmp exists if the interpreter lives there
    os.chroot(root)
    os.chdir("/")


def bind(source, target):
    os.makedirs(target, exist_ok=True)
    mount(source, target, None, MS_BIND | MS_REC)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def mount_scratch(uid, limits):
    """A run's own /tmp and /dev/shm (size and inodes capped, owned by ``uid``) and /proc."""
    scratch = f"size={limits['scratch_bytes']},nr_inodes={limits['scratch_inodes']},mode=0700,uid={uid},gid={uid}"
    for target in SCRATCH:
        mount("e1-scratch", target, "tmpfs", MS_NOSUID | MS_NODEV, scratch)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for index, path in enumerate(HIDDEN):
        bind(f"{STASH}/{index}", path)
