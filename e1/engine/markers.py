"""Think markers resolved from the tokenizer — never hard-coded token ids.

markers = resolve_markers(tokenizer)               # <think> / </think> from the vocabulary
markers = resolve_markers(tokenizer, think_end="Final answer:")   # any text, maybe several tokens
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from e1.data import THINK_END, THINK_START
from e1.engine.rules import ANSWER_TEXT, NEWLINE_TEXT, WAIT_TEXT
from e1.errors import MarkerError

DEFAULT_START, DEFAULT_END = THINK_START, THINK_END  # the defaults, overridable per model
# what a prompt leaves thinking (Markers.prompt_thinking): open, closed, or never opened
PROMPT_OPEN, PROMPT_CLOSED, PROMPT_ABSENT = "open", "closed", "absent"
PROMPT_THINKING = (PROMPT_OPEN, PROMPT_CLOSED, PROMPT_ABSENT)


@dataclass(frozen=True)
class Markers:
    start_text: str
    end_text: str
    start_ids: tuple[int, ...]
    end_ids: tuple[int, ...]
    eos_ids: frozenset[int]
    pad_id: int
    wait_ids: tuple[int, ...]  # "Wait" for budget-forcing:wait=k
    answer_ids: tuple[int, ...]  # "Final Answer:" forced after the marker in budget-forcing
    newline_ids: tuple[int, ...] = ()  # "\n": s1's line breaks around a forced marker (budget-forcing:answer=s1)

    def prompt_thinking(self, prompt_ids) -> str:
        """What the prompt leaves thinking: :data:`PROMPT_OPEN` when its last start marker comes after its
        last end marker (R1's newer template ends in ``<think>\\n``, Qwen3's with thinking on),
        :data:`PROMPT_CLOSED` when its last end marker comes last (Qwen3 with ``enable_thinking=False``
        ends in ``<think>\\n\\n</think>\\n\\n``: the reply is all solution), :data:`PROMPT_ABSENT` when
        it holds neither (R1's older template: the model opens thinking itself). vLLM's reasoning
        parsers decide a prompt's phase the same way, by the last marker.

            markers.prompt_thinking(tokenizer.apply_chat_template(chat, add_generation_prompt=True))
        """
        return last_marker(list(prompt_ids), self.start_ids, self.end_ids)


def last_marker(prompt: Sequence, start: Sequence, end: Sequence) -> str:
    """What ``prompt`` leaves thinking, by its last marker (:meth:`Markers.prompt_thinking`): a sequence of
    ids with the markers' ids, or a text with the markers' texts (a prompt a run stored, read back).

        >>> last_marker("<|im_start|>assistant\\n<think>\\n", "<think>", "</think>")
        'open'
        >>> last_marker([5, 1, 2, 7], (1,), (2,)), last_marker("Q: 2 + 2?", "<think>", "</think>")
        ('closed', 'absent')
    """
    start, end = (start, end) if isinstance(prompt, str) else (list(start), list(end))  # a slice's own type
    for stop in _stops(prompt, {start[-1], end[-1]}):  # from the end: the first marker met is the last one
        if _ends_at(prompt, stop, end):
            return PROMPT_CLOSED
        if _ends_at(prompt, stop, start):
            return PROMPT_OPEN
    return PROMPT_ABSENT


def _stops(prompt: Sequence, lasts: set):
    """The positions just past each element of ``prompt`` in ``lasts`` (where a marker could end), from the
    end; a text is searched by ``str.rfind`` (a prompt read back may be long, and hold no marker)."""
    if not isinstance(prompt, str):
        yield from (stop for stop in range(len(prompt), 0, -1) if prompt[stop - 1] in lasts)
        return
    stop = len(prompt)
    while (at := max(prompt.rfind(last, 0, stop) for last in lasts)) >= 0:
        yield at + 1
        stop = at


def _ends_at(prompt: Sequence, stop: int, marker: Sequence) -> bool:
    k = len(marker)
    return k <= stop and prompt[stop - k : stop] == marker


def _encode(tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer.encode(text, add_special_tokens=False))


def exit_ids(tokenizer, exit_text: str) -> tuple[int, ...]:
    """A mode's exit text (``Mode.exit_text``) as ``tokenizer``'s ids, forced at t before the end
    marker; ``()`` for the bare marker. Every caller (``e1 eval``/``sweep``, ``e1 serve``) tokenises
    it here, so all of them force, count and budget the same ids.

        exit_ids(tokenizer, Mode.parse("elastic:exit=qwen").exit_text)   # ~20 ids
    """
    return _encode(tokenizer, exit_text) if exit_text else ()


def _single_token(tokenizer, text: str) -> tuple[int, ...] | None:
    """The id of ``text`` if the vocabulary has it as one token (e.g. an added special token)."""
    token_id = tokenizer.convert_tokens_to_ids(text)
    unk = getattr(tokenizer, "unk_token_id", None)
    if token_id is None or (unk is not None and token_id == unk and text != tokenizer.unk_token):
        return None
    return (int(token_id),)


def resolve_markers(tokenizer, think_start: str | None = None, think_end: str | None = None, eos_ids=()) -> Markers:
    """Markers for ``tokenizer``. Defaults must be single tokens of its vocabulary; explicit
    markers may be any text (several tokens are matched as a sequence)."""
    ids = {}
    for role, given, default in (("end", think_end, DEFAULT_END), ("start", think_start, DEFAULT_START)):
        if given is None:
            found = _single_token(tokenizer, default)
            if found is None:
                option = "--think-start" if role == "start" else "--think-end"
                raise MarkerError(
                    f"the tokenizer has no {default} token, so thinking cannot be budgeted",
                    hint=f"pass the model's marker with {option} TEXT",
                )
            ids[role] = (default, found)
        else:
            if not given:
                raise MarkerError(f"empty think {role} marker", hint="pass a non-empty text")
            ids[role] = (given, _single_token(tokenizer, given) or _encode(tokenizer, given))
    eos = {int(i) for i in eos_ids if i is not None}
    if tokenizer.eos_token_id is not None:
        eos.add(int(tokenizer.eos_token_id))
    if not eos:
        raise MarkerError("the tokenizer defines no end-of-sequence token", hint="set eos_token in its config")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos)
    return Markers(
        start_text=ids["start"][0],
        end_text=ids["end"][0],
        start_ids=ids["start"][1],
        end_ids=ids["end"][1],
        eos_ids=frozenset(eos),
        pad_id=int(pad),
        wait_ids=_encode(tokenizer, WAIT_TEXT),
        answer_ids=_encode(tokenizer, ANSWER_TEXT),
        newline_ids=_encode(tokenizer, NEWLINE_TEXT),
    )


_SENTENCE_END = (".", "!", "?", "\n", "。", "！", "？")


def sentence_end_ids(tokenizer) -> frozenset[int]:
    """The ids whose text ends a sentence (``.``, ``!``, ``?``, a newline; trailing spaces
    ignored), for a grace window that lets thinking finish its sentence. One pass over the
    vocabulary (~1 s for 150k tokens); callers cache it."""
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    return frozenset(i for i, text in enumerate(texts) if text.rstrip(" ").endswith(_SENTENCE_END))


def generation_eos(model: str) -> list[int]:
    """EOS ids from generation_config.json (often more than the tokenizer's one)."""
    path = Path(model) / "generation_config.json"
    if not path.exists():
        return []
    import json

    try:
        eos = json.loads(path.read_text()).get("eos_token_id")
    except (OSError, ValueError):
        return []
    if eos is None:
        return []
    return list(eos) if isinstance(eos, list) else [eos]
