"""Feeding a run's stdin and collecting its stdout/stderr, with a deadline and output caps."""

from __future__ import annotations

import os
import selectors
import time
from collections.abc import Callable


def pump(
    stdin_fd: int,
    stdout_fd: int,
    stderr_fd: int,
    stdin: bytes,
    deadline: float,
    cap: int,
    exited: Callable[[], bool] | None,
) -> tuple[bytes, bytes, str | None]:
    """Write ``stdin``, read both outputs until they close, the deadline, or a cap is passed.

    Returns (stdout, stderr, reason) with reason None, "timeout" or "output limit". Closes
    the three fds. If the program exits while something holds its pipes open (possible only
    without a PID namespace), collection stops 0.2 s later: ``exited`` is polled every 0.1 s for
    that. ``exited`` None (a PID namespace: its pipes close when it dies) waits without waking,
    which keeps idle runs from taking the GIL from the caller's other threads (decoding).
    """
    chunks: dict[int, list[bytes]] = {stdout_fd: [], stderr_fd: []}
    sizes = {stdout_fd: 0, stderr_fd: 0}
    selector = selectors.DefaultSelector()
    for fd in (stdout_fd, stderr_fd):
        selector.register(fd, selectors.EVENT_READ)
    if stdin:
        os.set_blocking(stdin_fd, False)
        selector.register(stdin_fd, selectors.EVENT_WRITE)
    else:
        os.close(stdin_fd)
    view, offset, reason, exited_at = memoryview(stdin), 0, None, None
    try:
        while reason is None and (stdout_fd in selector.get_map() or stderr_fd in selector.get_map()):
            now = time.monotonic()
            if now >= deadline:
                reason = "timeout"
                break
            if exited is not None and exited_at is None and exited():
                exited_at = now
            elif exited_at is not None and now - exited_at > 0.2:
                break
            for key, _ in selector.select(deadline - now if exited is None else min(deadline - now, 0.1)):
                if key.fd == stdin_fd:
                    offset = _feed(stdin_fd, view, offset)
                    if offset >= len(view):
                        selector.unregister(stdin_fd)
                        os.close(stdin_fd)
                    continue
                data = os.read(key.fd, 65536)
                if not data:
                    selector.unregister(key.fd)
                    continue
                chunks[key.fd].append(data)
                sizes[key.fd] += len(data)
                if sizes[key.fd] > cap:
                    reason = "output limit"
                    break
    finally:
        stdin_open = stdin_fd in selector.get_map()
        selector.close()
        for fd in (stdout_fd, stderr_fd, *((stdin_fd,) if stdin_open else ())):
            os.close(fd)
    return b"".join(chunks[stdout_fd])[:cap], b"".join(chunks[stderr_fd])[:cap], reason


def _feed(fd: int, view: memoryview, offset: int) -> int:
    try:
        return offset + os.write(fd, view[offset : offset + 65536])
    except (BrokenPipeError, ConnectionResetError):
        return len(view)  # the program stopped reading: fine
