"""Samples written before their ``think_end`` vocabulary was recorded, read in today's.

Today's vocabulary (:data:`e1.engine.THINK_ENDS`) is recorded in every samples file e1 writes
(:data:`~e1.store.results.THINK_END_KEY`). A file without it may hold the vocabulary before abf6856,
where ``open`` also held replies that never opened thinking (today ``unopened``) and a prompt that
closed thinking left ``think_end`` null (today ``prefilled``). Mixed with today's rows, such rows would
bias every think rate of their cell (:func:`e1.report.metrics.thinking_kinds`), so
:meth:`e1.store.SampleStore.table` reads each of them through :func:`read_today`: its value as today's
vocabulary says it where the prompt its row continued from shows which it was, else null (unknown, as an
API that reports none), so rates leave it out instead of misreporting it. The rule itself is the
engine's (:func:`e1.engine.row_engine.think_end_before`, handed down when the engine loads: the store
knows no markers); without it every such row reads as unknown.

    table = read_today(table, vocabularies, prompts, group_key, ("<think>", "</think>"))
"""

from __future__ import annotations

from collections.abc import Callable

from e1.store.results import THINK_END_VOCABULARY

# (prompt text, start marker text, end marker text) -> (stored think_end -> today's, None: unknown)
Reading = Callable[[str, str, str], Callable[[str | None], str | None]]
_READING: list[Reading] = []


def read_old_ends_with(reading: Reading) -> None:
    """Have :func:`read_today` read old rows by ``reading`` (the engine's rule, handed down once it loads)."""
    _READING[:] = [reading]


def _unknown(stored: str | None) -> None:
    return None


MAX_MARKER_CHARS = 1024  # a marker text longer than this is no marker e1 recorded: no old row is read by it


def stored_markers(record: dict | None) -> tuple[str, str] | None:
    """The think markers' texts a run's ``config.json`` records, when its stored prompts can be read by them
    (None: it records none, or not as two different texts e1 could have recorded, or not as one token).

    A prompt's text shows which marker its ids held (what e1 decided from: ``Markers.prompt_thinking``) only
    where the end marker was one token (``end_ids``: one id; a reasoning model's added ``</think>``, which its
    tokenizer splits out wherever the text stands). A run without a tokenizer (a chat API, a hosted vendor:
    ``end_ids`` empty) stored its messages, not a text a model continued from; a marker of several tokens can
    stand in a text where the ids hold other tokens (`` </think>`` is not ``</think>``'s ids after a space)."""
    markers = (record or {}).get("markers")
    texts = tuple(markers.get(k) for k in ("think_start", "think_end")) if isinstance(markers, dict) else ()
    if len(texts) != 2 or not all(isinstance(t, str) and 0 < len(t) <= MAX_MARKER_CHARS for t in texts):
        return None
    ids = markers.get("end_ids")
    one_token = isinstance(ids, list) and len(ids) == 1 and type(ids[0]) is int
    return texts if texts[0] != texts[1] and one_token else None


def read_today(table, vocabularies: list[int], prompts, group_key: list[str], markers: tuple[str, str] | None):
    """``table`` (its ``think_end`` and ``group_key`` columns at least) with the ``think_end`` of each row read
    in today's vocabulary, given the vocabulary of the file it was read from (``vocabularies``, one per row:
    :func:`~e1.store.results.think_end_vocabulary`): today's as it is; the older one (1) by the engine's
    reading of the prompt of its problem and cell (``prompts``: ``group_key`` and ``prompt`` columns, the prompt
    e1 stores on sample 0), unknown (null) where there is no such prompt or no markers; any other unknown."""
    import pyarrow as pa

    old = [vocabulary != THINK_END_VOCABULARY for vocabulary in vocabularies]
    if not any(old):
        return table
    rule = _READING[0] if _READING and markers is not None else None
    stored = dict(zip(_keys(prompts, group_key), prompts.column("prompt").to_pylist())) if rule else {}
    readings: dict[tuple, Callable[[str | None], str | None]] = {}
    ends = table.column("think_end").to_pylist()
    for index, key in enumerate(_keys(table, group_key)):
        if not old[index]:
            continue
        if vocabularies[index] != 1:
            ends[index] = None  # a vocabulary e1 never wrote: no word of it is read
            continue
        if key not in readings:
            prompt = stored.get(key)
            readings[key] = rule(prompt, *markers) if rule is not None and isinstance(prompt, str) else _unknown
        ends[index] = readings[key](ends[index])
    at = table.schema.get_field_index("think_end")
    return table.set_column(at, pa.field("think_end", pa.string()), pa.array(ends, type=pa.string()))


def _keys(table, columns: list[str]):
    return zip(*(table.column(column).to_pylist() for column in columns))
