"""Stop on pattern: end thinking when a regex appears in the thinking text.

RowState works on token ids; a :class:`StopPattern`, built by the backend with its tokenizer,
tells it whether the thinking written so far now contains a match. It decodes only the last
``window`` thinking ids, so the cost per token is bounded whatever the thinking's length, and a
match split across several tokens is still found once its last token arrives (the window
decodes them together).

    stop = StopPattern(tokenizer, r"\\boxed\\{")
    stop([..., id_of("\\\\box"), id_of("ed{")])   # -> True

What it guarantees: checked after every thinking token, it fires at the first token whose
arrival completes a match lying within the last ``window`` thinking tokens. A match spanning
more tokens than that is not seen (64 tokens hold a few hundred characters); ``^`` anchors at the
window's start, not the thinking's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

STOP_WINDOW_TOKENS = 64


class StopPattern:
    """``pattern`` (a regex) matched against the decoded tail of the thinking ids."""

    def __init__(self, tokenizer, pattern: str, window: int = STOP_WINDOW_TOKENS):
        self.tokenizer, self.pattern, self.window = tokenizer, re.compile(pattern), window

    def __call__(self, tail_ids: Sequence[int]) -> bool:
        """Whether the text of ``tail_ids`` (the last ``window`` thinking ids, or fewer) holds a match."""
        text = self.tokenizer.decode(list(tail_ids[-self.window :]), skip_special_tokens=True)
        return self.pattern.search(text) is not None
