"""Serving with budgets: vLLM's OpenAI-compatible server, e1's separate thinking and solution budgets.

- :mod:`e1.serve.server` — ``e1 serve``: the vLLM command line with e1's plug-ins, and ``serve``.
- :mod:`e1.serve.processor` — the logits processor (``--logits-processors``) inside vLLM's engine.
- :mod:`e1.serve.processor_v2` — its model runner V2 form, and the class that serves either runner.
- :mod:`e1.serve.middleware` — the ASGI middleware (``--middleware``): validation, defaults, counts.
- :mod:`e1.serve.responses`, :mod:`e1.serve.budgets` — the pure parts both share.

Nothing here imports vLLM at import time; the processor module does (vLLM loads it by name).
"""

from e1.serve.budgets import (
    FIELDS,
    MODE_FIELD,
    ROOM_FIELD,
    SOLVE_FIELD,
    THINK_FIELD,
    ServeDefaults,
    check_fields,
    check_room,
    mode_field,
)
from e1.serve.server import ServeConfig, command_line, processor_name, serve

__all__ = [
    "FIELDS",
    "MODE_FIELD",
    "ROOM_FIELD",
    "SOLVE_FIELD",
    "THINK_FIELD",
    "ServeConfig",
    "ServeDefaults",
    "check_fields",
    "check_room",
    "command_line",
    "mode_field",
    "processor_name",
    "serve",
]
