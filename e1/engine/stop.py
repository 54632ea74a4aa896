"""Stop on pattern: end thinking when a regex appears in the thinking text.

A stop pattern is outside input (a client of ``e1 serve`` sends it; a sweep's config names it), and
it runs on text a model wrote, so it runs on RE2 (``google-re2``), whose matching is linear in the
text whatever the pattern: a pattern with nested quantifiers such as ``(a+)+$`` cannot stall the
engine. :func:`compile_stop` is its one gate (:meth:`e1.engine.modes.options.Pattern.check` calls it):
RE2 syntax (https://github.com/google/re2/wiki/Syntax), and what RE2 refuses (backreferences,
lookarounds, possessive quantifiers, a repetition over 1000), and a pattern over ``STOP_MAX_PROGRAM``
instructions (which bounds one search's time), are a one-line :class:`~e1.errors.ConfigError` naming
``stop=`` and the construct.

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
characters, whatever the thinking's length: a few microseconds, where decoding a tail of ids
afresh for every token cost tens (on an H200 at batch 256 that made ``stop=`` 2.45x plain
vLLM per token; ``benchmarks/stop.py`` times both side by side). A tokenizer without a Rust
backend (a "slow" one) falls back to decoding the last ``window // 4`` ids per token.

Most ids need less. While no copy of the pattern's lead text (:func:`required_lead`) lies in the window
and the detokenizer holds no partial character, an id whose own text holds no broken character (U+FFFD),
no copy of the lead and does not begin with the lead's end cannot start or complete a match: it only
appends its text. Such an
id is *quiet* (:attr:`StopPattern.quiet`, one table over the vocabulary, built once per tokenizer and
lead), and a scanner that is :attr:`~StopScanner.idle` takes it without the detokenizer
(:meth:`StopScanner.skip`; a batched caller, the vLLM processor's stepping path, looks quiet ids up for
all its rows at once and calls no Python at all for them). Exact for a byte-level decoder (GPT-2's,
Qwen's, Llama 3's): its text is the bytes of every id, concatenated, then decoded, so past a whole
character an id's text does not depend on the ids before it. **Patterns without a lead** (``a|b``,
``[xy]z``, ``(?i)x``, ...) **and tokenizers with another decoder are scanned at every id, as before**
(:attr:`StopPattern.quiet` is None).
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache

import numpy as np
import re2

from e1.errors import ConfigError

STOP_WINDOW_CHARS = 512
STOP_MAX_MEM = 1 << 20  # bytes of one compiled pattern and its DFA cache (RE2 falls back to its NFA past it)
# RE2 instructions of one pattern: a search's worst case grows with it (linear in the text either way), and
# past ~500 nested counted repeats such as (?:[ -~]?){900}Q outgrow the DFA's 1 MiB cache, so every search
# over the 512-character window falls back to the NFA: 5-9 ms per thinking token (red team). At 500 the
# worst found takes ~2 us a search once warm (~2 ms while its DFA fills); \\boxed\{ is 11 instructions,
# \\boxed\{[^}]{0,40}\} 372; a Unicode class is large (\p{L} alone is 1201: write [A-Za-z] instead)
STOP_MAX_PROGRAM = 500
_REFUSED = {
    "(?=": "a lookahead (?=...)",
    "(?!": "a lookahead (?!...)",
    "(?<": "a lookbehind (?<=...)",
    "(?P": "a backreference (?P=...)",
    "(?>": "an atomic group (?>...)",
}  # RE2's "invalid perl operator"s


def compile_stop(pattern: str):
    r"""``pattern`` compiled by RE2 (matching in time linear in the text), or a one-line ConfigError
    naming ``stop=`` and the construct RE2 refuses. The gate of every stop pattern (RE2 caches compiled ones).

    >>> compile_stop(r"(a+)+$").search(b"a" * 100_000 + b"b") is None   # no catastrophic backtracking
    True
    >>> compile_stop(r"(\w+) \1")
    Traceback (most recent call last):
    e1.errors.ConfigError: stop= pattern '(\\w+) \\1' uses a backreference \1, which RE2 does not run (stop patterns run on RE2, in linear time: https://github.com/google/re2/wiki/Syntax)
    """
    options = re2.Options()
    options.never_capture, options.log_errors, options.max_mem = True, False, STOP_MAX_MEM
    try:
        compiled = re2.compile(pattern, options)
    except re2.error as err:
        reason = err.args[0].decode("utf-8", "replace") if err.args and isinstance(err.args[0], bytes) else str(err)
        shown, construct = pattern if len(pattern) <= 60 else pattern[:57] + "...", _construct(reason)
        raise ConfigError(
            f"stop= pattern {shown!r} uses {construct}, which RE2 does not run"
            if construct
            else f"stop= pattern {shown!r} is not a regex: {' '.join(reason.split())[:80]}",  # one line
            hint="stop patterns run on RE2, in linear time: https://github.com/google/re2/wiki/Syntax",
        ) from None
    if compiled.programsize > STOP_MAX_PROGRAM:
        raise ConfigError(
            f"stop= pattern {pattern[:57]!r} compiles to {compiled.programsize} RE2 instructions, "
            f"more than {STOP_MAX_PROGRAM}",
            hint="a smaller pattern: fewer or shorter repeats",
        )
    return compiled


def _construct(reason: str) -> str | None:
    r"""The construct that RE2's error ``reason`` names, in words (None: a plain syntax error)."""
    said, _, where = reason.partition(": ")
    where = where[:20]
    if said == "invalid escape sequence":
        if where[1:].isdigit():
            return f"a backreference {where}"
        return r"\Z (RE2 writes the end of text \z)" if where == r"\Z" else f"the escape {where}"
    if said == "invalid perl operator":
        return _REFUSED.get(where[:3], f"the group {where}")
    if said == "bad repetition operator":
        return f"a possessive quantifier {where}"
    if said == "invalid repetition size":
        return f"a repetition of more than 1000 ({where}; nested repeats multiply)"
    if said.startswith("pattern too large"):
        return f"a pattern larger than {STOP_MAX_MEM >> 10} KiB once compiled"
    return None


class StopPattern:
    """``pattern`` (a regex) matched against the last ``window`` characters of the thinking text. ``prefilter``
    False: scanners take every id through the detokenizer, as before the quiet table (benchmarks compare)."""

    prefilter = True

    def __init__(self, tokenizer, pattern: str, window: int = STOP_WINDOW_CHARS):
        self.tokenizer, self.pattern, self.window = tokenizer, compile_stop(pattern), window
        self.backend = getattr(tokenizer, "backend_tokenizer", None)  # the Rust tokenizer of a "fast" one
        self.lead = required_lead(self.pattern)
        # [V] bool: ids that cannot start or complete a match in an idle scanner (None: every id is scanned)
        self.quiet: np.ndarray | None = (
            quiet_ids(self.backend, self.lead) if self.lead and _byte_level(self.backend) else None
        )
        self.texts = id_texts(self.backend) if self.quiet is not None else None  # each id's own text

    def scanner(self, prefilter: bool | None = None) -> StopScanner:
        """A fresh scanner for one row's thinking (``prefilter`` False: every id through the detokenizer
        and the lead check, as before the quiet table: the reference the tests compare with)."""
        prefilter = self.prefilter if prefilter is None else prefilter
        return StopScanner(self, prefilter) if self.backend is not None else _IdWindowScanner(self)


def _byte_level(backend) -> bool:
    """Whether ``backend`` decodes ids as GPT-2's byte-level BPE does (their bytes concatenated, then UTF-8)."""
    return backend is not None and type(backend.decoder).__name__ == "ByteLevel"


@lru_cache(maxsize=8)
def id_texts(backend) -> list[str]:
    """Each id's text on its own, as the scanner's detokenizer writes it (special ids: ""). Once per tokenizer."""
    size = backend.get_vocab_size(with_added_tokens=True)
    return backend.decode_batch([[i] for i in range(size)], skip_special_tokens=True)


@lru_cache(maxsize=32)
def quiet_ids(backend, lead: str) -> np.ndarray:
    """[V] bool: the ids whose text holds no U+FFFD (part of a character, or bytes that are none), no copy of
    ``lead``, and does not begin with the rest of one (a proper suffix of ``lead``): appended to text that ends
    in a whole character, such an id adds its own text and no copy of the lead can end in it. Once per
    tokenizer and lead."""
    rests = tuple(lead[k:] for k in range(1, len(lead)))
    quiet = np.fromiter(
        (lead not in text and "\ufffd" not in text and not text.startswith(rests) for text in id_texts(backend)), bool
    )
    quiet.flags.writeable = False
    return quiet


def required_lead(pattern) -> str:
    r"""Text every match of the compiled ``pattern`` begins with ("" when none can be told): the common
    prefix of RE2's possible match range (every string a match begins lies between its two ends).

    >>> required_lead(compile_stop(r"\\boxed\{")), required_lead(compile_stop(r"(?i)\\Boxed")), required_lead(compile_stop("a|b"))
    ('\\boxed{', '\\', '')
    """
    try:
        low, high = pattern.possiblematchrange(16)
    except re2.error:  # RE2 could not tell
        return ""
    size = 0
    while size < min(len(low), len(high)) and low[size] == high[size]:
        size += 1
    for end in range(size, -1, -1):  # whole characters only: the scanner's text is decoded
        try:
            return low[:end].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return ""


class StopScanner:
    """One row's incremental view of its thinking text (see the module docstring). A match begins with
    the pattern's lead (:func:`required_lead`): while no copy of the lead lies in the window, RE2 is
    not asked (each push looks for the lead in its own new characters only); and while the scanner is
    also :attr:`idle`, a quiet id (:attr:`StopPattern.quiet`) only adds its text (:meth:`skip`)."""

    __slots__ = ("backend", "behind", "idle", "lead", "quiet", "search", "stream", "text", "texts", "window")

    def __init__(self, stop: StopPattern, prefilter: bool = True):
        from tokenizers.decoders import DecodeStream

        self.search, self.window, self.backend = stop.pattern.search, stop.window, stop.backend  # RE2's
        self.stream = DecodeStream(skip_special_tokens=True)
        self.text = ""
        self.lead = stop.lead
        self.behind = 1 << 62 if self.lead else 0  # how far the last copy of the lead begins from the end (0: no lead)
        self.quiet, self.texts = (stop.quiet, stop.texts) if prefilter and stop.quiet is not None else (None, None)
        # quiet ids may be skipped: the detokenizer holds no partial character and no copy of the lead is in the
        # window (a fresh one: nothing pushed yet, and a lead never seen)
        self.idle = self.quiet is not None

    def push(self, token: int) -> bool:
        """Add one thinking id; whether the text's last ``window`` characters now hold a match."""
        if self.idle and 0 <= token < len(self.quiet) and self.quiet[token]:
            self.skip([token])
            return False
        piece = self.stream.step(self.backend, token)
        if piece is None:  # a partial character, or a skipped special id: the text did not change
            self.idle = False  # the next id may complete a character (a special one, looked at once more, costs little)
            return False
        text = self.text + piece
        if lead := self.lead:
            found = text.rfind(lead, max(0, len(self.text) - len(lead) + 1))  # a copy ending in the new piece
            self.behind = len(text) - found if found >= 0 else self.behind + len(piece)
        if len(text) > 2 * self.window:  # trimmed now and then, so a push copies at most 2 windows
            text = text[-self.window :]
        self.text = text
        if self.behind > self.window:  # no match can begin inside the window
            self.idle = self.quiet is not None  # and the piece ended in a whole character
            return False
        self.idle = False
        return self.search(text[-self.window :].encode()) is not None  # RE2 reads UTF-8 bytes faster than str

    def skip(self, ids: list[int]) -> None:
        """Add quiet ids (each ``quiet[i]``) pushed while :attr:`idle`: as their pushes would, with no search (none
        could match) and no detokenizer (at a whole character a byte-level id's text is its own, and after it the
        detokenizer is where it was: at a whole character). Joins the last ``2 * window`` ids' texts at most
        (a quiet id's text is a character or more, a special id's nothing), so the cost is bounded."""
        tail = ids[-2 * self.window :]
        added = "".join(map(self.texts.__getitem__, tail))
        if len(tail) < len(ids) and len(added) < self.window:  # special ids among them: all are needed
            added = "".join(map(self.texts.__getitem__, ids))
        text = added if len(tail) < len(ids) and len(added) >= self.window else self.text + added
        self.behind += len(added)  # above the window already: stays so
        self.text = text[-self.window :] if len(text) > 2 * self.window else text


class _IdWindowScanner:
    """The fallback for a tokenizer without a Rust backend: decode the last ``window // 4`` ids afresh."""

    __slots__ = ("decode", "ids", "search")

    def __init__(self, stop: StopPattern):
        self.search, self.decode = stop.pattern.search, stop.tokenizer.decode
        self.ids: deque[int] = deque(maxlen=max(1, stop.window // 4))

    def push(self, token: int) -> bool:
        self.ids.append(token)
        return self.search(self.decode(list(self.ids), skip_special_tokens=True).encode()) is not None
