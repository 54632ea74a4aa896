"""Cgroup slots of the fork server: made and checked by the server, limits set by the middle
process, joined by the run. Standard library only: :mod:`e1.sandbox.server` loads this file by
path (it runs with ``-S`` and without e1 on ``sys.path``) before it chroots.

A slot is a cgroup reused run after run (joining a fresh cgroup costs ~20 ms on cgroup v1, a
used one ~0.3 ms). Invariant: a run starts in a slot that holds no process but its own and no
memory but its own (at most ``LEFTOVER`` bytes): :meth:`Pool.clean` checks it for every run just
before the run is handed its request, and a slot holding more (a process, or memory charged by
an earlier run and not yet freed: tmpfs pages, kernel objects, page cache) is retired instead of
reused: removed once empty (the kernel moves what it still holds to the parent) and replaced by
a fresh one. When its fork server stops, every process in its slots is killed and the slots
(and, by the main flavour, the parents) are removed.
"""

import os
import signal
import time

LEFTOVER = 2 << 20  # bytes a waiting run may hold in its slot (its own pages: ~0.1-0.4 MiB)
USAGE = ("memory.current", "memory.usage_in_bytes")  # cgroup v2, v1


def open_cgroups(parents):
    """Directory fds of the parent cgroups (opened before the chroot hides /sys)."""
    return [(os.open(path, os.O_RDONLY | os.O_DIRECTORY), files) for path, files in parents]


def open_grandparents(parents):
    """(fd of the directory holding each parent, the parent's name): to remove the parents."""
    return [
        (os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY), os.path.basename(path)) for path, _ in parents
    ]


class Pool:
    """The slots of one flavour of the server: free, in use (middle pid -> slot), retired."""

    def __init__(self, cgroups, prefix, grandparents):
        self.cgroups, self.prefix, self.grandparents = cgroups, prefix, grandparents
        self.free, self.busy, self.retired, self.made = [], {}, [], 0
        self.usage_files = [next((name for name in USAGE if exists_at(fd, name)), None) for fd, _ in cgroups]

    def take(self):
        if not self.free:
            name = f"{self.prefix}slot-{self.made}"
            self.made += 1
            for parent_fd, _ in self.cgroups:
                os.mkdir(name, 0o700, dir_fd=parent_fd)
            self.free.append(name)
        return self.free.pop()

    def ended(self, pid):
        """The middle process ``pid`` was reaped: its slot is free again (unless retired)."""
        slot = self.busy.pop(pid, None)
        if slot is not None:
            self.free.append(slot)
        if self.retired:
            self.retired = [slot for slot in self.retired if not remove(self.cgroups, slot)]

    def clean(self, pid):
        """Whether the slot of the waiting middle ``pid`` holds only its run (see the module)."""
        fds = [os.open(self.busy[pid], os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd) for fd, _ in self.cgroups]
        try:
            if any(len(read_at(fd, "cgroup.procs").split()) > 1 for fd in fds):
                return False
            return self.usage(fds) <= LEFTOVER
        finally:
            for fd in fds:
                os.close(fd)

    def usage(self, fds):
        """Bytes charged to the slot open as ``fds`` (one per hierarchy)."""
        return sum(int(read_at(fd, name)) for fd, name in zip(fds, self.usage_files) if name)

    def retire(self, pid):
        """Stop using the slot of middle ``pid`` (killed by the caller): removed once empty."""
        self.retired.append(self.busy.pop(pid))

    def close(self, timeout_s=3.0):
        """Kill every middle and every process in the slots, reap them, remove the slots (and
        the parents, once every child of ours is gone: the other flavour removes its slots)."""
        for pid in self.busy:
            kill(pid)
        slots = [*self.free, *self.busy.values(), *self.retired]
        if self.grandparents and self.cgroups:  # the main flavour: what the other left too (if it died)
            slots += [name for name in os.listdir(self.cgroups[0][0]) if "slot-" in name and name not in slots]
        deadline = time.monotonic() + timeout_s
        while slots and time.monotonic() < deadline:
            for slot in slots:
                for parent_fd, _ in self.cgroups[:1]:
                    for pid in read_at(parent_fd, f"{slot}/cgroup.procs", "").split():
                        kill(int(pid))
            reap_all()
            slots = [slot for slot in slots if not remove(self.cgroups, slot)]
            time.sleep(0.005 if slots else 0)
        self.free, self.busy, self.retired = [], {}, slots
        while self.grandparents and time.monotonic() < deadline + timeout_s:
            reap_all()
            self.grandparents = [(fd, name) for fd, name in self.grandparents if not rmdir_at(fd, name)]
            time.sleep(0.005 if self.grandparents else 0)


def remove(cgroups, slot):
    """rmdir the slot in every hierarchy; True once it is gone everywhere."""
    return all([rmdir_at(parent_fd, slot) for parent_fd, _ in cgroups])


def rmdir_at(dir_fd, name):
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass  # gone already


def reap_all():
    """Reap every exited child (the server is a subreaper: orphaned runs come to it too)."""
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def exists_at(dir_fd, name):
    try:
        os.stat(name, dir_fd=dir_fd)
    except OSError:
        return False
    return True


def set_limits(cgroups, cgroup_fds, limits):
    for (_, files), fd in zip(cgroups, cgroup_fds):
        for key, file in files.items():
            write_at(fd, file, str(limits[key]))


def read_at(dir_fd, name, missing=None):
    try:
        fd = os.open(name, os.O_RDONLY, dir_fd=dir_fd)
    except FileNotFoundError:
        if missing is None:
            raise
        return missing
    try:
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


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
            words = read_at(cgroup_fd, name, "").split()
            if words:
                counts = dict(zip(words[::2], words[1::2])) if name == "memory.events" else {"oom_kill": words[0]}
                total += int(counts.get("oom_kill", 0))
    return total
