"""Cgroup slots of the fork server: made by the server, limits set by the middle process,
joined by the run. Standard library only: :mod:`e1.sandbox.server` loads this file by path
(it runs with ``-S`` and without e1 on ``sys.path``) before it chroots.
"""

import os


def open_cgroups(parents):
    """Directory fds of the parent cgroups (opened before the chroot hides /sys)."""
    return [(os.open(path, os.O_RDONLY | os.O_DIRECTORY), files) for path, files in parents]


def make_slot(cgroups, name):
    """A cgroup reused run after run: joining a fresh cgroup costs ~20 ms, a used one ~0.3 ms."""
    for parent_fd, _ in cgroups:
        os.mkdir(name, 0o700, dir_fd=parent_fd)


def set_limits(cgroups, cgroup_fds, limits):
    for (_, files), fd in zip(cgroups, cgroup_fds):
        for key, file in files.items():
            write_at(fd, file, str(limits[key]))


def write_at(dir_fd, name, text):
    fd = os.open(name, os.O_WRONLY, dir_fd=dir_fd)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def oom_kills(cgroup_fds):
    """How often the cgroup hit its memory limit so far (v2 memory.events oom_kill, v1 failcnt)."""
    total = 0
    for cgroup_fd in cgroup_fds:
        for name in ("memory.events", "memory.failcnt"):
            try:
                fd = os.open(name, os.O_RDONLY, dir_fd=cgroup_fd)
            except OSError:
                continue
            with os.fdopen(fd) as file:
                words = file.read().split()
            counts = dict(zip(words[::2], words[1::2])) if name == "memory.events" else {"oom_kill": words[0]}
            total += int(counts.get("oom_kill", 0))
    return total
