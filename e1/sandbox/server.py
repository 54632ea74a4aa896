"""The root fork server: runs inside its own mount and network namespaces and starts each run.

Started once per process by :mod:`e1.sandbox.backends` as ``python -S -B server.py CONFIG``
(standard library only: it runs before and after a ``chroot``). Setup, once:

    unshare(mount, net)          -> an empty network namespace: no route to anything
    tmpfs root + read-only binds -> /usr /bin /lib* /etc, this interpreter; nothing else of
                                    the host (no /run, /home, /root, /var: no host sockets)
    chroot                       -> the server and every run see only that root
                                    (:mod:`e1.sandbox.rootfs`)

Two flavours serve runs: this process forks the plain ones (``python -S``), and a child of it
that ran ``site.main()`` once (the host's own site-packages and .pth files, as root, before any
model code exists) forks those with site-packages (``python -s``): neither pays start-up per run.

Per run, prepared before its request arrives (a few "zygotes" wait, so a run starts at once):

    fork -> unshare(mount, pid, ipc, uts, net) -> fork -> PID 1 of a fresh PID namespace, which
        joins a cgroup slot (and a cgroup namespace rooted there) and waits. On the request (a
        JSON header plus the run's pipes, passed on by the middle process after it set the
        slot's limits): mount a private tmpfs on /tmp and /dev/shm (size and inode capped)
        and a fresh /proc, write main.py, set rlimits, drop to the throwaway uid, arm the
        parent-death signal again, no_new_privs, the seccomp filter of :mod:`e1.sandbox.seccomp`.
        Each run has its own network namespace (an empty one: no loopback, no abstract unix
        socket of another run) and IPC namespace (SysV IPC, POSIX message queues), so runs of
        one batch (a GRPO group's samples) cannot hand each other an answer.
        Then an argv is exec'd; Python source runs in this very interpreter
        (started with a run's flags and environment, so only __main__, argv, the environment
        and the standard streams need making): no interpreter start-up per run. It ends as
        Python's shutdown would, as far as a program can see (threads, atexit, flushes,
        finalisers), without tearing the interpreter down. ``fresh`` in the request (the
        client's E1_SANDBOX_FRESH=1) execs a new interpreter for source too.

The middle process sends a pidfd of the run (so the parent can SIGKILL it without pid
races), waits, and sends the exit status. A cgroup slot is reused only while it is clean (see
:mod:`e1.sandbox.slots`). Middles and PID 1s die with their parents (PR_SET_PDEATHSIG); the
server stops when the control socket closes (e1 closed it or died), and then kills what is
left in its slots and removes them and the parent cgroups: nothing outlives e1.
"""

import array
import atexit
import builtins
import ctypes
import fcntl
import gc
import importlib.util
import io
import json
import os
import resource
import select
import signal
import site
import socket
import struct
import sys
import weakref
from importlib.machinery import SourceFileLoader


def load(name):
    """A sibling module, loaded by path: no e1 on sys.path here."""
    spec = importlib.util.spec_from_file_location(
        f"e1_sandbox_{name}", os.path.join(os.path.dirname(__file__), f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


slots, rootfs = load("slots"), load("rootfs")
LIBC, check, unshare = rootfs.LIBC, rootfs.check, rootfs.unshare
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWCGROUP = 0x20000, 0x04000000, 0x08000000, 0x02000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, rootfs.CLONE_NEWNET
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER = 1, 38, 22, 36
MAIN = "/tmp/main.py"
SECCOMP = None  # (buffer, sock_fprog) of the filter e1.sandbox.seccomp built: set by main() from the config
READY = 4  # zygotes kept waiting: joining a cgroup v1 can take ~10 ms, longer than a short run
STDIO = (("stdin", "r", "strict"), ("stdout", "w", "strict"), ("stderr", "w", "backslashreplace"))  # fds 0, 1, 2
SOCKETS = weakref.WeakSet()  # every socket object this server made (see forget_sockets)


def prctl(option, value):
    check(LIBC.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl {option}")


# --- per run ---------------------------------------------------------------------------------


def seccomp_filter(program):
    """The sock_fprog for ``program`` (packed sock_filter lines, built by :mod:`e1.sandbox.seccomp`):
    (the buffer to keep alive, the pointer to pass to prctl)."""
    buffer = ctypes.create_string_buffer(program)
    return buffer, ctypes.c_char_p(struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(buffer)))


def confine(request, fds, middle):
    """PID 1 of the run, in its cgroup already: private /tmp, /dev/shm and /proc, main.py, the
    throwaway uid, the parent-death signal again (the uid change cleared it; the seccomp
    filter keeps the program from clearing it), the run's fds on 0, 1, 2 (3, ... extra),
    rlimits, no_new_privs, seccomp. ``middle``: a socket whose peer is the middle process, to
    see it did not die before the signal was armed again. On any failure the run ends here
    (exit 127, the reason on its stderr)."""
    uid = request["uid"]
    try:
        rootfs.mount_scratch(uid, request["limits"])
        stdin, stdout, stderr, source, *extra = fds
        if request["source"]:
            with os.fdopen(source, "rb") as file, open(MAIN, "wb") as out:
                out.write(file.read())
            os.chown(MAIN, uid, uid)
        os.setsid()
        os.chdir("/tmp")
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([middle], [], [], 0)[0]:  # EOF: the middle died before the line above
            os._exit(127)
        forget_sockets()
        place_fds([stdin, stdout, stderr, *extra])
        for name, value in request["rlimits"].items():  # after the fds are placed: open_files may be small
            resource.setrlimit(getattr(resource, name), (value, value))
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        check(LIBC.prctl(PR_SET_SECCOMP, ctypes.c_ulong(2), SECCOMP[1], 0, 0), "seccomp")
    except BaseException as err:  # noqa: BLE001 - report anything, never return into the server
        os.write(2, f"e1 sandbox: setting up the run failed: {err!r}\n".encode())
        os._exit(127)


def tracked(*sockets):
    """``sockets``, remembered so that a run can forget them (:func:`forget_sockets`)."""
    SOCKETS.update(sockets)
    return sockets if len(sockets) > 1 else sockets[0]


def socketpair():
    return tracked(*socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))


def forget_sockets():
    """In a run's PID 1, before its fds are placed: detach every socket object of the server's
    that this fork still holds (links of other zygotes, control sockets). Their fds are closed
    by :func:`place_fds` with the rest; without this, such an object, finalised when the
    server's frames unwind into the program, would close whatever fd of the run has taken its
    number since (the harness channel, on a host whose fds 3-6 were free)."""
    for sock in list(SOCKETS):
        sock.detach()


def place_fds(fds):
    """``fds`` onto 0, 1, 2, ... in order, every other fd closed (any of them may sit anywhere)."""
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 3 + len(fds)) for fd in fds]
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(len(fds), 1 << 20)


def start_program(request):
    """Confined PID 1: become the program. Python source runs in this interpreter, already
    started (:class:`Become` unwinds to the bottom of this file); an argv, or any program with
    ``fresh`` set, is exec'd. Never returns."""
    if request["source"] and not request["fresh"]:
        raise Become(request)
    try:
        os.execvpe(request["argv"][0], request["argv"], request["env"])
    except BaseException as err:  # noqa: BLE001
        os.write(2, f"e1 sandbox: setting up the run failed: {err!r}\n".encode())
    os._exit(127)


class Become(BaseException):
    """Raised in a confined PID 1 to leave the server's frames for the program's (see bottom)."""

    def __init__(self, request):
        super().__init__()
        self.request = request


def become_main(request):
    """This interpreter as a fresh ``python -S -B main.py`` (``-s -B`` with site-packages) run in
    /tmp with the run's environment: ``__main__``, argv, environment and standard streams as the
    interpreter's start-up makes them. The server was started with the same flags and
    environment, so ``sys.flags``, ``sys.path``, the hash seed and the locale already agree
    (site-packages were loaded by the flavour's start-up; ``sys.flags.no_site`` stays 1)."""
    env = request["env"]
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
    sys.argv, sys.orig_argv = ["main.py"], list(request["argv"])
    for fd, (name, mode, errors) in enumerate(STDIO):
        buffer = open(fd, mode + "b", -1, closefd=False)
        buffer.raw.name = f"<{name}>"
        stream = io.TextIOWrapper(buffer, "utf-8", errors, "\n", fd == 2, False)
        stream.mode = mode
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    module = type(sys)("__main__")
    module.__dict__.update(
        __annotations__={},
        __builtins__=builtins,
        __file__=MAIN,
        __cached__=None,
        __loader__=SourceFileLoader("__main__", MAIN),
    )
    sys.modules["__main__"] = module
    return module.__dict__


def run_main(request):
    """Run main.py as ``__main__`` and end the process as the interpreter would; never returns.

    An uncaught exception is printed without this file's frames and exits 1 (130 for
    KeyboardInterrupt, as a PID 1 does); SystemExit exits with its code as Python does."""
    namespace = become_main(request)
    try:
        with open(MAIN, "rb") as file:
            code = compile(file.read(), MAIN, "exec", dont_inherit=True)
        exec(code, namespace)
        status = 0
    except SystemExit as exit:
        status = exit_status(exit.code)
    except BaseException as err:  # noqa: BLE001 - the program's own error, reported as Python does
        trace = err.__traceback__
        while trace is not None and trace.tb_frame.f_globals is globals():
            trace = trace.tb_next
        sys.excepthook(type(err), err.with_traceback(trace), trace)
        status = 130 if isinstance(err, KeyboardInterrupt) else 1
        del err, trace
    shut_down(namespace, status)


def exit_status(code):
    """The exit status of ``SystemExit(code)``: None 0, an int itself, anything else printed, 1."""
    if code is None or isinstance(code, int):
        return code or 0
    sys.stderr.write(f"{code}\n")
    return 1


def shut_down(namespace, status):
    """What Python's shutdown does that a program can see: non-daemon threads joined, atexit
    handlers, standard streams flushed (120 if that fails), the program's objects finalised
    (unclosed files flush). The interpreter's own modules are not torn down: that costs a
    forked interpreter more than the whole run, and nothing of the program's depends on it."""
    if (threading := sys.modules.get("threading")) is not None:
        threading._shutdown()
    atexit._run_exitfuncs()
    flushed = flush_std()
    namespace.clear()
    gc.collect()
    flushed = flushed and flush_std()
    os._exit(120 if status == 0 and not flushed else status)


def flush_std():
    """Flush sys.stdout and sys.stderr as Python's shutdown does: a failure is reported as
    "Exception ignored in: ..." on stderr; False if one failed."""
    ok = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None and not stream.closed:
                stream.flush()
        except Exception as err:  # noqa: BLE001
            ok = False
            import traceback

            try:
                sys.stderr.write(f"Exception ignored in: {stream!r}\n" + "".join(traceback.format_exception_only(err)))
                sys.stderr.flush()
            except Exception:  # noqa: BLE001 - nowhere left to say it
                pass
    return ok


def zygote(link, cgroups, slot):
    """The middle process, made before its request: namespaces, cgroup and PID 1 ready (joining
    a cgroup v1 can wait ~10 ms for RCU, so PID 1 joins while waiting). On a request (header +
    [run socket, stdin, stdout, stderr, source, *extra]) this sets the slot's limits, hands the
    fds on to PID 1, sends the run's pidfd, waits, and sends the exit status. Never returns."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    cgroup_fds = [os.open(slot, os.O_RDONLY | os.O_DIRECTORY, dir_fd=parent_fd) for parent_fd, _ in cgroups]
    unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET)
    to_program, from_middle = socketpair()
    pid = os.fork()
    if pid == 0:
        link.close()
        to_program.close()
        waiting_program(from_middle, cgroup_fds)
    from_middle.close()
    pidfd = os.pidfd_open(pid)
    header, fds, _, _ = socket.recv_fds(link, 1 << 20, 64)
    if not header:
        os._exit(0)  # the server is gone
    request = json.loads(header)
    channel, fds = tracked(socket.socket(fileno=fds[0])), fds[1:]
    status = {"returncode": 127}
    try:
        slots.set_limits(cgroups, cgroup_fds, request["limits"])
        ooms = slots.oom_kills(cgroup_fds)
        socket.send_fds(to_program, [header], fds)
        channel.sendmsg([b"started"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pidfd]))])
        for fd in fds:
            os.close(fd)
        status["returncode"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        status["oom"] = slots.oom_kills(cgroup_fds) > ooms
    except BaseException as err:  # noqa: BLE001
        status["error"] = repr(err)
    try:
        channel.send(json.dumps(status).encode())
    except OSError:
        pass  # the client stopped waiting (it gave up on the run): nobody to tell
    os._exit(0)


def waiting_program(link, cgroup_fds):
    """PID 1 of a zygote: join the cgroup and a cgroup namespace rooted there (the run sees
    "/", not the host's path), wait for the request, confine, start the program."""
    try:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for fd in cgroup_fds:
            slots.write_at(fd, "cgroup.procs", "0")
            os.close(fd)
        unshare(CLONE_NEWCGROUP)
        header, fds, _, _ = socket.recv_fds(link, 1 << 20, 64)
    except BaseException:  # noqa: BLE001 - the middle reports the missing program
        os._exit(127)
    if not header:
        os._exit(0)
    request = json.loads(header)
    confine(request, fds, link)
    start_program(request)


def serve(control, pool, other):
    """Hand each request to a waiting zygote whose slot is clean, until the control socket
    closes (our parent closed it, or died: the kernel closes a dead process's sockets) or the
    child flavour ``other`` died."""
    ready = []  # (middle pid, link), oldest first
    while True:
        while len(ready) < READY:  # made while runs run: a burst of requests finds them waiting
            ready.append(spawn_zygote(control, pool))
        header, fds, _, _ = socket.recv_fds(control, 1 << 20, 64)
        if not header:
            return
        dispatch(header, fds, ready, control, pool)
        for fd in fds:
            os.close(fd)
        if other in reap(pool, ready):
            return


def dispatch(header, fds, ready, control, pool):
    """Hand the request to the oldest waiting zygote (it has most likely joined its slot) whose
    slot is clean and whose middle is alive; a dirty slot is retired, its zygote killed. If
    none takes it, the request is dropped: the client sees its run socket close (a failed run)."""
    for _ in range(len(ready) + len(pool.free) + 2):  # each turn takes a zygote or retires a slot
        pid, link = ready.pop(0) if ready else spawn_zygote(control, pool)
        try:
            if pool.clean(pid):
                socket.send_fds(link, [header], fds)
                return
            slots.kill(pid)  # its PID 1 dies with it (the parent-death signal)
            pool.retire(pid)
        except OSError:
            slots.kill(pid)  # e.g. a middle that died: its slot is checked again when next used
        finally:
            link.close()


def spawn_zygote(control, pool):
    slot = pool.take()
    ours, theirs = socketpair()
    pid = os.fork()
    if pid == 0:
        control.close()
        ours.close()
        zygote(theirs, pool.cgroups, slot)
    theirs.close()
    pool.busy[pid] = slot
    return pid, ours


def reap(pool, ready):
    """Collect finished middle processes (and orphans: this is a subreaper); free their slots.
    Returns the pids reaped."""
    reaped = []
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append(pid)
        pool.ended(pid)
        ready[:] = [(zygote_pid, link) for zygote_pid, link in ready if zygote_pid != pid]


def main():
    """Set up, then serve two flavours of runs: this process forks plain ones (``python -S``);
    a child that ran ``site.main()`` once forks those with site-packages (``python -s``)."""
    global SECCOMP
    config = json.loads(sys.argv[1])
    SECCOMP = seccomp_filter(bytes.fromhex(config["seccomp"]))
    control, site_control = (tracked(socket.socket(fileno=fd)) for fd in config["control_fds"])
    try:
        cgroups = slots.open_cgroups(config["cgroups"])
        grandparents = slots.open_grandparents(config["cgroups"])
        rootfs.build_root(config["interpreter_paths"])
    except BaseException as err:  # noqa: BLE001
        control.send(f"error {err!r}".encode())
        return
    compile("pass", "<warm>", "exec")  # the parser's first use costs ~1 ms: paid once here, not per run
    prctl(PR_SET_CHILD_SUBREAPER, 1)  # a run whose middle died is reaped here, not by the host's init
    other = os.fork()  # the other flavour: if it dies, this one stops too (and e1 starts both again)
    if other == 0:
        control.close()
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        site.ENABLE_USER_SITE = False  # what `python -s` does at start-up: site-packages, .pth files, no user site
        site.main()  # the host's own packages, as root, before any model code exists
        control, prefix = site_control, "site-"
    else:
        site_control.close()
        prefix = ""
    pool = slots.Pool(cgroups, prefix, [] if prefix else grandparents)  # the main flavour removes the parents
    try:
        control.send(b"ready")
        gc.freeze()  # runs are forks of this process: their collections skip what it made (fewer copied pages)
        serve(control, pool, other)
    except BaseException as err:
        if not isinstance(err, Become):  # (a confined PID 1 leaving for its program is not the server)
            pool.close()
        raise
    pool.close()  # however we stop, nothing of ours outlives us: no run, no slot


if __name__ == "__main__":
    try:
        main()
        PROGRAM = None
    except Become as become:  # only in a confined PID 1
        PROGRAM = become.request
    if PROGRAM is not None:  # outside the handler: the server's frames are gone, no exception is current
        run_main(PROGRAM)
