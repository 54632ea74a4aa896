"""A blocking call given up at a deadline, for clients whose library bounds each socket wait only.

>>> within(lambda: 42, 1.0, lambda: TimeoutError("late"))
42
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def within(call: Callable[[], T], timeout_s: float, late: Callable[[], Exception]) -> T:
    """``call()``'s result if it returns within ``timeout_s``, else ``late()`` is raised (a server dripping
    its status line a byte at a time would otherwise hold a per-read timeout for hours). A late call is
    left to its daemon thread, which ends with the server or with e1; an error is re-raised here."""
    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as err:  # re-raised on the caller's thread
            box["error"] = err

    thread = threading.Thread(target=run, daemon=True, name="e1-within")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise late()
    if "error" in box:
        raise box["error"]
    return box["value"]
