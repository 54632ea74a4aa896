"""Streamed chat text rebuilt from e1's split of the token ids, so that a stream says exactly
what the whole (non-streamed) reply says.

vLLM's reasoning parser splits a stream by the text of each delta. When vLLM merges several
tokens into one delta (a client that reads slowly) and ``</think>`` is a special token (skipped
in the text), the ``deepseek_r1`` parser cuts the delta at ``find("</think>") == -1`` and loses
characters. e1 already replays each choice's ids through a RowState, which labels every token
thinking, marker or solution; :class:`ChoiceText` decodes each phase incrementally from those
labels and writes the delta's ``reasoning`` and ``content`` itself:

    text = ChoiceText(tokenizer)
    feed(state, choice["token_ids"])
    text.rewrite(choice["delta"], state, final=choice["finish_reason"] is not None)

Concatenated, the deltas equal the whole reply's ``reasoning``/``content`` (the same ids decoded
the same way), whatever vLLM's parser did.
"""

from __future__ import annotations

from e1.engine import T_SOLVE, T_THINK, RowState

# which text a token's kind belongs to (as RowState.split); markers, forced texts (exit, s1's answer prompt), EOS: none
_PHASE = {T_THINK: 0, T_SOLVE: 1}
_MAX_HELD_IDS = 8  # a character is at most 4 bytes: a trailing "\ufffd" held past 8 ids is the text's own


class PhaseText:
    """One phase's text, decoded incrementally as its ids arrive (vLLM's own approach: decode
    the ids since the last emitted text and emit the new suffix once it does not end in a
    partial character). Per call the work is proportional to the ids not yet emitted (a held
    partial character is capped at ``_MAX_HELD_IDS``), never to the whole phase; only
    :meth:`rest` decodes the whole phase, once, when it ends (as the whole reply does).

        text.ids += [132]; text.new_text()   # '' (the first byte of 'é' alone)
        text.ids += [107]; text.new_text()   # 'é'
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.sent: list[str] = []  # the text given to the client so far
        self.start = self.read = 0  # ids[start:read] were emitted: the context for ids[read:]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def new_text(self) -> str:
        """The text of the ids added since the last emission ('' while it ends mid-character)."""
        before, after = self.decode(self.ids[self.start : self.read]), self.decode(self.ids[self.start :])
        held = after.endswith("\ufffd") and len(self.ids) - self.read <= _MAX_HELD_IDS
        if len(after) <= len(before) or held:
            return ""
        self.start, self.read = self.read, len(self.ids)
        return self._sent(after[len(before) :])

    def rest(self) -> str:
        """Everything not yet given to the client: the whole phase decoded once, less what was
        sent (held partial characters included), so the stream ends equal to the whole reply."""
        whole, sent = self.decode(self.ids), "".join(self.sent)
        if whole.startswith(sent):
            text = whole[len(sent) :]
        else:  # sent text that is not a prefix cannot be taken back: go on from the window
            text = self.decode(self.ids[self.start :])[len(self.decode(self.ids[self.start : self.read])) :]
        self.start = self.read = len(self.ids)
        return self._sent(text)

    def _sent(self, text: str) -> str:
        self.sent.append(text)
        return text


class ChoiceText:
    """One streamed choice's reasoning and content, from its RowState's labelled tokens.

    Tokens are taken once their label is final: the last few may be a partly written marker
    (relabelled when it completes), so they wait. While the model has not opened thinking,
    vLLM's delta stands (as a whole reply's message does) and what it said counts as sent."""

    def __init__(self, tokenizer):
        self.phases = (PhaseText(tokenizer), PhaseText(tokenizer))  # reasoning, content
        self.taken = 0  # the state's tokens already handed to a phase
        self.rewriting = self.think_ended = False

    def rewrite(self, delta: dict, state: RowState, final: bool) -> None:
        """Set ``delta``'s reasoning and content to the new text of each phase (``final``: the
        choice's last chunk, so every token is taken and every held character given)."""
        self._take(state, final)
        think, solution = self.phases
        if not state.opened and not self.rewriting:
            for phase, text in (
                (think, delta.get("reasoning") or delta.get("reasoning_content")),
                (solution, delta.get("content")),
            ):
                phase.sent += [text] if text else []
            return
        catch_up = not self.rewriting and any(phase.sent for phase in self.phases)  # vLLM spoke before <think>
        think_ends = not self.think_ended and (state.closed or final)
        reasoning = think.rest() if catch_up or think_ends else think.new_text()
        content = solution.rest() if catch_up or final else solution.new_text()
        self.rewriting, self.think_ended = True, self.think_ended or think_ends
        delta["reasoning"], delta["content"] = reasoning or None, content or None
        if "reasoning_content" in delta:  # the name older vLLMs use
            delta["reasoning_content"] = delta["reasoning"]

    def _take(self, state: RowState, final: bool) -> None:
        end = len(state.tokens) if final or state.done else len(state.tokens) - _unsettled(state)
        for token, kind in zip(state.tokens[self.taken : end], state.kinds[self.taken : end]):
            if kind in _PHASE:
                self.phases[_PHASE[kind]].ids.append(token)
        self.taken = max(self.taken, end)


def _unsettled(state: RowState) -> int:
    """How many of the state's last tokens may still be relabelled: a partly written marker
    (the end marker while thinking, the start marker until thinking opened)."""
    markers = [state.markers.end_ids] if not state.closed else []
    if not state.opened:
        markers.append(state.markers.start_ids)
    tokens = state.tokens
    return max((k for ids in markers for k in range(1, len(ids)) if tuple(tokens[-k:]) == tuple(ids[:k])), default=0)
