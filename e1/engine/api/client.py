"""Requests to an OpenAI-compatible server: one JSON call at a time, retried, journalled, run N at once.

    caller = Caller(client, journal=ReplyJournal(run_dir / "api-replies.jsonl"))
    reply = caller.call("completions", {"model": "m", "prompt": "...", "max_tokens": 16})
    results = run_rows([lambda: caller.call(...), ...], concurrency=8)

Retries are the ``openai`` client's own (``max_retries``): exponential backoff from 0.5 s (at most
8 s, with jitter) on connection errors, timeouts, 408, 409, 429 and 5xx, a ``Retry-After`` /
``retry-after-ms`` header of up to two minutes honoured instead; a reply cut at the deadline or the
size cap is a failed try too. A request that still fails, or a reply the gate refuses
(:mod:`e1.engine.api.replies`: its types, its counts against the request), raises :class:`RequestError`,
which names the sample.

The journal makes resuming safe for paid APIs: every reply the gate accepted is appended (and
flushed to disk) as it arrives, keyed by a hash of its request, so a rerun after a crash answers a
request it already sent from the journal instead of sending it again, even for samples whose batch
was not yet written to the run store. A refused reply is never journalled, so a rerun sends its
request again; a torn last line (a kill mid-write) is skipped.

Also here: :class:`ChatMessages` (the prompts of an engine without a tokenizer are chat messages)
and the functions that read a reply's counts (``usage``, a budget server's ``budget``) into a record.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from e1.engine.api.replies import Choice, Reply, RequestError, Usage, accept, limits_of, transport_reason
from e1.engine.base import Completion


class ReplyJournal:
    """Accepted replies by request, appended to a JSON-lines file as they arrive (None: keep nothing).
    Only the replies of an earlier, interrupted run are held in memory: a run sends each request once.
    A reply enters only once it passed the gate (:mod:`e1.engine.api.replies`), and :meth:`get` hands
    back raw entries that the caller passes through the gate again, so a rejected reply (or a line
    from an older e1 that stored replies unchecked) is never replayed: its request is sent again."""

    def __init__(self, path: Path | None):
        self.path = None if path is None else Path(path)
        self._replies: dict[str, dict] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._replies[entry["key"]] = entry["reply"]
                except (ValueError, KeyError, TypeError, RecursionError):
                    continue  # a line torn by a kill (or not e1's)

    @staticmethod
    def key(endpoint: str, body: dict) -> str:
        return hashlib.sha256(json.dumps([endpoint, body], sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> dict | None:
        return self._replies.get(key)

    def put(self, key: str, reply) -> None:
        """Append an accepted reply (a :class:`~e1.engine.api.replies.Shape`): the fields e1 reads, as the server set them."""
        if self.path is None:
            return
        line = json.dumps({"key": key, "reply": reply.model_dump(mode="json", exclude_unset=True)}) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())

    def remove(self) -> None:
        """Forget every reply (the run is complete: its samples are in the store)."""
        with self._lock:
            self._replies.clear()
            if self.path is not None:
                self.path.unlink(missing_ok=True)

    def replay(self, key: str, check: Callable):
        """``check`` (the gate, then what the sample reads) of the journalled reply of ``key``, or
        None: none is journalled, or ``check`` refuses it (send the request again)."""
        raw = self.get(key)
        if raw is None:
            return None
        try:
            return check(raw)
        except RequestError:
            return None


class Caller:
    """POSTs JSON bodies through an ``openai.OpenAI`` client (its retries, its key; its ``http_client``
    :func:`~e1.engine.api.replies.bounded_client`, which cuts a reply at the deadline and the size cap).
    ``markers``: the thinking markers a chat reply's split may not hold."""

    def __init__(
        self, client, journal: ReplyJournal | None = None, markers: tuple[str, ...] = (), deadline_s: float = 600.0
    ):
        self.client, self.journal = client, journal or ReplyJournal(None)
        self.markers, self.deadline_s = markers, deadline_s

    def call(self, endpoint: str, body: dict, read: Callable[[Reply], object] | None = None):
        """The reply to ``POST /<endpoint>`` (``completions`` or ``chat/completions``) as the gate
        accepted it, or ``read(reply)``: what the sample takes from it (its record, or the fields
        its method needs), refused before the reply is journalled if the reply lacks them."""
        limits, markers, read = limits_of(body), self._markers(endpoint), read or (lambda reply: reply)
        key = self.journal.key(endpoint, body)
        done = self.journal.replay(key, lambda raw: read(accept(Reply, raw, limits, markers)))
        if done is None:
            reply = accept(Reply, self._post(endpoint, body), limits, markers)
            done = read(reply)
            self.journal.put(key, reply)  # only now: a refused reply is sent again on resume
        return done

    def _markers(self, endpoint: str) -> tuple[str, ...]:
        return self.markers if endpoint.startswith("chat") else ()

    def _post(self, endpoint: str, body: dict) -> bytes:
        import httpx
        import openai

        try:
            return self.client.post(f"/{endpoint}", body=body, cast_to=httpx.Response).content
        except openai.APIStatusError as err:
            raise RequestError(f"HTTP {err.status_code} from the server: {_message(err)}") from err
        except openai.APIConnectionError as err:
            reason = transport_reason(err, self.deadline_s)
            raise RequestError(
                reason or f"cannot reach {self.client.base_url} ({err.__class__.__name__}: {err})"
            ) from err


def _message(err) -> str:
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        text = inner.get("message") if isinstance(inner, dict) else inner
        if text:
            return str(text).splitlines()[0][:300]
    return str(err).splitlines()[0][:300]


def row_task(row: tuple[int, int], fn: Callable, *args) -> Callable[[], object]:
    """``fn(*args)`` as a task of :func:`run_rows` that names its (prompt, sample) ``row``."""
    task = functools.partial(fn, *args)
    task.row = row
    return task


def run_rows(tasks: Sequence[Callable[[], object]], concurrency: int, progress=None) -> list:
    """Run every task, ``concurrency`` at a time; their results in order (``progress(len(tasks))``
    once all are done, where given). On the first failure, or an abort of the caller (Ctrl-C), no
    new task starts and the ones in flight finish (every reply they received reaches the journal)
    before it propagates; a task's failure is raised as a :class:`RequestError` naming the task's
    row (``task.row``: (prompt, sample)) when it has one."""
    if not tasks:
        return []
    flight = _Flight()
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(tasks)))) as pool:
        futures = []
        try:
            for task in tasks:
                futures.append(pool.submit(flight.run, task))
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:
            flight.land()
            raise
        failed = next((f for f in futures if f in done and f.exception() is not None), None)
        if failed is not None:
            flight.land()
            error = failed.exception()
            row = getattr(tasks[futures.index(failed)], "row", None)
            if isinstance(error, RequestError) and row is not None:
                raise error.for_sample(*row) from error
            raise error
        results = [future.result() for future in futures]
    if progress:
        progress(len(tasks))
    return results


class _Flight:
    """The tasks in flight: :meth:`land` starts no other and waits for those (their replies journalled)."""

    def __init__(self):
        self.active, self.stopped, self.changed = 0, False, threading.Condition()

    def run(self, task: Callable[[], object]):
        with self.changed:
            if self.stopped:
                return None  # never started: its request is not sent
            self.active += 1
        try:
            return task()
        finally:
            with self.changed:
                self.active -= 1
                self.changed.notify_all()

    def land(self) -> None:
        with self.changed:
            self.stopped = True
            self.changed.wait_for(lambda: self.active == 0)


class ChatMessages:
    """The ``tokenizer`` of an engine without ``--tokenizer``: its "chat template" (what
    :func:`e1.data.prompts.build_prompt` calls) returns the messages themselves, as JSON, so the
    server applies the model's own template (a system prompt and template arguments included).

        >>> ChatMessages.request(ChatMessages().apply_chat_template([{"role": "user", "content": "Hi"}]))
        {'messages': [{'role': 'user', 'content': 'Hi'}]}
    """

    chat_template = "the server's"

    def apply_chat_template(
        self, messages, tokenize: bool = False, add_generation_prompt: bool = True, **kwargs
    ) -> str:
        return json.dumps({"messages": list(messages), "chat_template_kwargs": kwargs})

    @staticmethod
    def request(prompt: str) -> dict:
        """The request fields of a prompt: its messages (and template arguments); any other text is the user's message."""
        try:
            built = json.loads(prompt)
        except ValueError:
            built = None
        if not isinstance(built, dict) or not isinstance(built.get("messages"), list):
            return {"messages": [{"role": "user", "content": prompt}]}
        kwargs = built.get("chat_template_kwargs") or {}
        return {"messages": built["messages"], **({"chat_template_kwargs": kwargs} if kwargs else {})}


# ---- replies to records ------------------------------------------------------------------------


def check_report(report, completion: Completion) -> None:
    """The server's counts must be e1's: else its markers are not the tokenizer's."""
    if report is None:
        return
    theirs = (report.thinking_tokens, report.solution_tokens)
    ours = (completion.think_tokens, completion.solve_tokens)
    if theirs != ours:
        raise RequestError(
            f"the server counted thinking/solution tokens {theirs}, e1's replay of its tokens {ours}",
            hint="pass the served model's own tokenizer and the server's --think-start/--think-end",
        )


def reported_completion(choice: Choice, usage: Usage, row: tuple[int, int]) -> Completion:
    """A chat reply from a budget server: counts from its ``budget`` (checked by the gate), texts from its message."""
    report, message = choice.budget, choice.message
    if report is None or message is None:
        raise RequestError("the reply has no budget report or no message")
    thinking, solution, forced = report.thinking_tokens, report.solution_tokens, report.thinking_forced
    return Completion(
        prompt_index=row[0],
        sample_index=row[1],
        think_text=message.thinking,
        solution_text=message.content or "",
        prompt_tokens=usage.prompt_tokens or 0,
        think_tokens=thinking,
        solve_tokens=solution,
        forced=forced,
        finish_reason=choice.stopped,
        token_ids=[],
        forced_mask=[],
        closed=forced or solution > 0 or report.thinking_end in ("natural", "pattern", "prefilled"),
        think_end=report.thinking_end or "",
    )


def chat_completion(choice: Choice, usage: Usage, row: tuple[int, int]) -> Completion:
    """A chat reply from a plain server: thinking tokens from ``reasoning_tokens``, never guessed."""
    message = choice.message
    thinking = usage.reasoning_tokens
    if thinking is None:
        raise RequestError(
            "the reply does not report usage.completion_tokens_details.reasoning_tokens, so its "
            "thinking cannot be counted",
            hint="pass --tokenizer (the served model's)",
        )
    if message is None:
        raise RequestError("the chat reply has no message")
    total = usage.completion()
    return Completion(
        prompt_index=row[0],
        sample_index=row[1],
        think_text=message.thinking,
        solution_text=message.content or "",
        prompt_tokens=usage.prompt_tokens or 0,
        think_tokens=thinking,
        solve_tokens=total - thinking,
        forced=False,
        finish_reason=choice.stopped,
        token_ids=[],
        forced_mask=[],
        closed=message.content is not None,
    )
