"""A plain OpenAI-compatible server's rows (one that takes no budgets; see
:mod:`e1.engine.api.openai_engine`'s table): ``elastic`` and ``budget-forcing`` as two calls (thinking,
then the solution after the end marker), ``truncate`` and ``none`` as one, on token ids where the server
returns them (each reply replayed through the row's :class:`~e1.engine.row_state.RowState`), else on texts
counted by the reply's ``usage``.

:class:`PlainRows` is mixed into :class:`~e1.engine.api.openai_engine.OpenAIEngine`, which supplies the
requests (``_call``, ``_body``), the records (``_record``, ``row_state``) and what the server takes
(``ids_in``, ``ids_out``, ``markers``, ``tokenizer``).
"""

from __future__ import annotations

import functools

from e1.budget import Budget
from e1.engine.api.client import ChatMessages, RequestError, chat_completion
from e1.engine.api.replies import Choice, Usage
from e1.engine.base import Completion, Mode, Sampling
from e1.engine.markers import PROMPT_ABSENT, PROMPT_CLOSED, PROMPT_OPEN
from e1.engine.row_state import PREFILLED, THINK, UNOPENED
from e1.engine.rules import ANSWER_TEXT, NEWLINE_TEXT, end_parts, forced_end


class PlainRows:
    """The two-call and one-call methods of a server that takes no budgets."""

    def _two_call_row(
        self, text: str, ids, row: tuple[int, int], budget: Budget, mode: Mode, sampling: Sampling, row_seed: int
    ) -> Completion:
        """Thinking (``max_tokens=t``, stopped at the end marker), then the solution (``max_tokens=s``) from
        prompt + thinking + (exit text) + marker; on ids where the server returns them (:meth:`_replay_two_calls`)."""
        if self.ids_out:
            return self._replay_two_calls(ids, row, budget, mode, sampling, row_seed)
        markers, think, think_tokens, natural = self.markers, "", 0, False
        phase = markers.prompt_thinking(ids)
        if phase == PROMPT_CLOSED:
            return self._solution_call(text, ids, row, budget.solve, sampling, row_seed)
        if budget.think > 0:
            choice, usage = self._thinking_call(text, ids, budget.think, sampling, row_seed)
            think, think_tokens = choice.text or "", usage.completion()
            if choice.finish_reason == "stop":
                natural = choice.stopped_at(markers.end_text)
                if not natural:  # the end of sequence while thinking: the row is done
                    return self._text_completion(row, ids, think, "", think_tokens, 0, False, False, "stop")
        forced = not natural
        opened = phase == PROMPT_OPEN or markers.start_text in think
        # a forced end as every engine forces it (e1.engine.rules.forced_end), in texts; a natural end: the marker
        parts = end_parts(mode, markers.start_text, mode.exit_text, NEWLINE_TEXT, markers.end_text, ANSWER_TEXT)
        seam = forced_end(parts, opened) if forced else markers.end_text
        choice, usage = self._call(
            "completions",
            self._body(
                row_seed,
                1,
                sampling,
                prompt=self._prompt(text, ids, think + seam),
                max_tokens=budget.solve,
                skip_special_tokens=False,
            ),
            _counted,
        )
        return self._text_completion(
            row,
            ids,
            think,
            choice.text or "",
            think_tokens,
            usage.completion(),
            forced,
            True,
            choice.stopped,
            seam if forced else "",
            parts.exit + parts.lines + parts.after if forced else "",
        )

    def _thinking_call(self, text: str, ids, max_tokens: int, sampling: Sampling, row_seed: int):
        """The first of two calls: thinking, at most ``max_tokens``, stopped at the end marker."""
        body = self._body(
            row_seed,
            0,
            sampling,
            prompt=self._prompt(text, ids),
            max_tokens=max_tokens,
            stop=[self.markers.end_text],
            skip_special_tokens=False,
        )
        return self._call("completions", body, self._thinking_read)

    def _thinking_read(self, choice: Choice, usage: Usage) -> tuple[Choice, Usage]:
        """The thinking call's text reply: its usage and (at a stop) why it stopped."""
        usage.completion()
        if choice.finish_reason == "stop":
            choice.stopped_at(self.markers.end_text)
        return choice, usage

    def _prompt(self, text: str, ids, written: str = ""):
        """The prompt, ``written`` text after it: as ids where the server takes them, else as text."""
        if not self.ids_in:
            return text + written
        return list(ids) + (self.tokenizer.encode(written, add_special_tokens=False) if written else [])

    def _replay_two_calls(
        self, ids: list[int], row: tuple[int, int], budget: Budget, mode: Mode, sampling: Sampling, row_seed: int
    ) -> Completion:
        """The two calls on token ids, each reply fed to the row's state (forcing at t as e1's engines do).
        A prompt that closed thinking skips the first call."""
        state = self.row_state(ids, budget, mode, sampling)
        if state.phase == THINK and state.forced_token() is None:
            self._ids_call(
                state, row_seed, 0, sampling, ids, budget.think, stop=[self.markers.end_text], skip_special_tokens=False
            )
        while not state.done and state.forced_token() is not None:
            state.accept(state.forced_token())  # the exit text, end marker (and s1's answer prompt)
        if not state.done:
            self._ids_call(state, row_seed, 1, sampling, list(ids) + state.tokens, budget.solve)
        completion = self._record(state, row, ids)
        completion.finish_reason = completion.finish_reason or "length"
        return completion

    def _ids_call(
        self, state, row_seed: int, call: int, sampling: Sampling, prompt: list[int], max_tokens: int, **more
    ) -> Choice:
        """One completions request on token ids (call ``call`` of the row, ``more`` fields beside), its reply's
        ids fed to the row's ``state``: every token-id request of the replaying paths is built here."""
        fields = {"prompt": list(prompt), "max_tokens": max_tokens, **more, "return_token_ids": True}  # as sent before
        choice = self._call("completions", self._body(row_seed, call, sampling, **fields), _with_ids)
        state.extend(list(choice.token_ids))
        return choice

    def _one_call_row(
        self, text: str, ids, row: tuple[int, int], budget: Budget, mode: Mode, sampling: Sampling, row_seed: int
    ) -> Completion:
        """``truncate`` (``max_tokens`` = t + s) or ``none``: one call, split at the end marker (on a
        server that returns ids, by the row's state replaying them)."""
        if ids is None:
            return self._chat_row(text, row, budget, mode, sampling, row_seed)
        state = self.row_state(ids, budget, mode, sampling)
        if self.ids_out:
            choice = self._ids_call(state, row_seed, 0, sampling, ids, state.max_new_tokens, skip_special_tokens=False)
            completion = self._record(state, row, ids)
            completion.finish_reason = completion.finish_reason or choice.stopped
            return completion
        if self.markers.prompt_thinking(ids) == PROMPT_CLOSED:
            return self._solution_call(text, ids, row, state.max_new_tokens, sampling, row_seed)
        choice, usage = self._call(
            "completions",
            self._body(
                row_seed,
                0,
                sampling,
                prompt=self._prompt(text, ids),
                max_tokens=state.max_new_tokens,
                skip_special_tokens=False,
            ),
            _counted,
        )
        output, total = choice.text or "", usage.completion()
        think, marker, solution = output.partition(self.markers.end_text)
        # a reply that never ended thinking is all thinking, its EOS too (as e1's engines count)
        think_tokens = (
            min(total, len(self.tokenizer.encode(think + marker, add_special_tokens=False))) if marker else total
        )
        completion = self._text_completion(
            row, ids, think, solution, think_tokens, total - think_tokens, False, bool(marker), choice.stopped
        )
        if not marker and self.markers.start_text not in think and self.markers.prompt_thinking(ids) == PROMPT_ABSENT:
            completion.think_end = UNOPENED  # left to the model, which never opened it (as RowState says)
        return completion

    def _chat_row(
        self, text: str, row: tuple[int, int], budget: Budget, mode: Mode, sampling: Sampling, row_seed: int
    ) -> Completion:
        """One call on chat messages: thinking and solution as the server splits and counts them."""
        cap = mode.output_cap(budget)
        max_tokens = sampling.max_tokens if cap is None else cap
        # reasoning models take max_completion_tokens (reasoning included), not max_tokens
        cap = (
            {"reasoning_effort": mode.effort, "max_completion_tokens": max_tokens}
            if mode.effort
            else {"max_tokens": max_tokens}
        )
        return self._call(
            "chat/completions",
            self._body(row_seed, 0, sampling, **ChatMessages.request(text), **cap),
            lambda choice, usage: chat_completion(choice, usage, row),
        )

    def _solution_call(
        self, text: str, ids, row: tuple[int, int], max_tokens: int, sampling: Sampling, row_seed: int
    ) -> Completion:
        """A prompt that closed thinking (Qwen3, thinking off) on a server that returns no ids: one call, all solution."""
        body = self._body(
            row_seed, 1, sampling, prompt=self._prompt(text, ids), max_tokens=max_tokens, skip_special_tokens=False
        )
        choice, usage = self._call("completions", body, _counted)
        completion = self._text_completion(
            row, ids, "", choice.text or "", 0, usage.completion(), False, False, choice.stopped
        )
        completion.closed, completion.think_end = (
            True,
            PREFILLED,
        )  # thinking ended in the prompt, none of it in the reply
        return completion

    def _text_completion(
        self,
        row,
        ids,
        think: str,
        solution: str,
        think_tokens: int,
        solve_tokens: int,
        forced: bool,
        closed: bool,
        finish: str,
        seam: str = "",
        forced_text: str = "",
    ) -> Completion:
        """A record from a plain server's texts: ids re-tokenised (the ``seam``: markers, forced texts), texts decoded
        as the local engines do, counts as given (usage); ``forced_text``: the seam's texts that are not markers."""
        encode = functools.partial(self.tokenizer.encode, add_special_tokens=False)
        think_ids = encode(think.replace(self.markers.start_text, ""))
        marker_ids = encode(seam) if forced else (list(self.markers.end_ids) if closed else [])
        solution_ids = encode(solution)
        decode = functools.partial(self.tokenizer.decode, skip_special_tokens=True)
        return Completion(
            prompt_index=row[0],
            sample_index=row[1],
            think_text=decode(think_ids),
            solution_text=decode(solution_ids),
            prompt_tokens=len(ids),
            think_tokens=think_tokens,
            solve_tokens=solve_tokens,
            forced=forced,
            finish_reason=finish,
            token_ids=think_ids + marker_ids + solution_ids,
            forced_mask=[False] * len(think_ids) + [forced] * len(marker_ids) + [False] * len(solution_ids),
            closed=closed,
            think_end="budget" if forced else "natural" if closed else "open",
            forced_text=forced_text,
        )


def _with_ids(choice: Choice, usage: Usage) -> Choice:
    """A reply of a server that returns token ids (found at load): refused (never journalled) without them."""
    if choice.token_ids is None:
        raise RequestError(
            "the reply carries no token_ids, though the server returned them when e1 started",
            hint="check that the server is the one e1 started with; rerun the same command to resume",
        )
    return choice


def _counted(choice: Choice, usage: Usage) -> tuple[Choice, Usage]:
    """A plain server's text reply, which e1 counts by its usage: refused (never journalled) without it."""
    usage.completion()
    return choice, usage
