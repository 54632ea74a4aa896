"""Stop on pattern: end thinking when a regex appears in the thinking text.

RowState works on token ids; a :class:`StopPattern`, built once by the backend with its
tokenizer, gives each row a :class:`StopScanner` that is pushed every thinking id as it arrives
and says whether the thinking written so far now contains a match.

    stop = StopPattern(tokenizer, r"\\\\boxed\\{")
    scan = stop.scanner()
    [scan.push(i) for i in tokenizer.encode("so \\\\boxed{")]   # [..., False, True]

What it guarantees: pushed every thinking id, ``push`` returns True at the first id whose
arrival completes a match lying within the last ``window`` characters of the thinking's text,
the text as ``tokenizer.decode(ids, skip_special_tokens=True)`` writes it (a character split
over several byte-level ids counts once its last byte arrives). ``^`` anchors at the window's
start, not the thinking's; a match longer than the window is not seen.

What it costs: one incremental detokenizer step per id (``tokenizers``' ``DecodeStream``, the
streaming decoder Hugging Face's servers use) and one regex search over at most ``window``
characters, whatever the thinking's length: about a microsecond, where decoding a tail of ids
afresh for every token cost tens (on an H200 at batch 256 that made ``stop=`` 2.45x plain
vLLM per token; ``benchmarks/stop.py`` times both side by side). A tokenizer without a Rust
backend (a "slow" one) falls back to decoding the last ``window // 4`` ids per token.
"""

from __future__ import annotations

import re
from collections import deque

STOP_WINDOW_CHARS = 512


class StopPattern:
    """``pattern`` (a regex) matched against the last ``window`` characters of the thinking text."""

    def __init__(self, tokenizer, pattern: str, window: int = STOP_WINDOW_CHARS):
        self.tokenizer, self.pattern, self.window = tokenizer, re.compile(pattern), window
        self.backend = getattr(tokenizer, "backend_tokenizer", None)  # the Rust tokenizer of a "fast" one

    def scanner(self) -> StopScanner:
        """A fresh scanner for one row's thinking."""
        return StopScanner(self) if self.backend is not None else _IdWindowScanner(self)


class StopScanner:
    """One row's incremental view of its thinking text (see the module docstring)."""

    __slots__ = ("backend", "search", "stream", "text", "window")

    def __init__(self, stop: StopPattern):
        from tokenizers.decoders import DecodeStream

        self.search, self.window, self.backend = stop.pattern.search, stop.window, stop.backend
        self.stream = DecodeStream(skip_special_tokens=True)
        self.text = ""

    def push(self, token: int) -> bool:
        """Add one thinking id; whether the text's last ``window`` characters now hold a match."""
        piece = self.stream.step(self.backend, token)
        if piece is None:  # a partial character, or a skipped special id: the text did not change
            return False
        text = self.text + piece
        if len(text) > 2 * self.window:  # trimmed now and then, so a push copies at most 2 windows
            text = text[-self.window :]
        self.text = text
        return self.search(text[-self.window :]) is not None


class _IdWindowScanner:
    """The fallback for a tokenizer without a Rust backend: decode the last ``window // 4`` ids afresh."""

    __slots__ = ("decode", "ids", "search")

    def __init__(self, stop: StopPattern):
        self.search, self.decode = stop.pattern.search, stop.tokenizer.decode
        self.ids: deque[int] = deque(maxlen=max(1, stop.window // 4))

    def push(self, token: int) -> bool:
        self.ids.append(token)
        return self.search(self.decode(list(self.ids), skip_special_tokens=True)) is not None
