"""Serving with budgets: vLLM's OpenAI-compatible server, e1's separate thinking and solution budgets.

- :mod:`e1.serve.server` — ``e1 serve``: the vLLM command line with e1's plug-ins, and ``serve``.
- :mod:`e1.serve.processor` — the logits processor (``--logits-processors``) inside vLLM's engine.
- :mod:`e1.serve.processor_v2` — its model runner V2 form, and the class that serves either runner.
- :mod:`e1.serve.middleware` — the ASGI middleware (``--middleware``): validation, defaults, counts.
- :mod:`e1.serve.responses`, :mod:`e1.serve.budgets` — the pure parts both share.

Nothing here imports vLLM at import time; the processor module does (vLLM loads it by name).
"""

from e1.serve.budgets import ServeDefaults
from e1.serve.server import ServeConfig, command_line, serve

__all__ = ["ServeConfig", "ServeDefaults", "command_line", "serve"]
