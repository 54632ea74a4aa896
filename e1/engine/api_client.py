"""Requests to an OpenAI-compatible server: one JSON call at a time, retried, journalled, run N at once.

    caller = Caller(client, journal=ReplyJournal(run_dir / "api-replies.jsonl"))
    reply = caller.call("completions", {"model": "m", "prompt": "...", "max_tokens": 16})
    results = run_rows([lambda: caller.call(...), ...], concurrency=8)

Retries are the ``openai`` client's own (``max_retries``): exponential backoff from 0.5 s (at most
8 s, with jitter) on connection errors, timeouts, 408, 409, 429 and 5xx, a ``Retry-After`` /
``retry-after-ms`` header of up to two minutes honoured instead. A request that still fails, or a
reply that is not a JSON object, raises :class:`RequestError`, which names the sample.

The journal makes resuming safe for paid APIs: every reply is appended (and flushed to disk) as it
arrives, keyed by a hash of its request, so a rerun after a crash answers a request it already
sent from the journal instead of sending it again, even for samples whose batch was not yet
written to the run store. A torn last line (a kill mid-write) is skipped.

Also here: :class:`ChatMessages` (the prompts of an engine without a tokenizer are chat messages)
and the functions that read a reply's counts (``usage``, a budget server's ``budget``) into a record.
"""

from __future__ import annotations

import functools

import hashlib
import json
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Sequence

from e1.engine.base import Completion
from e1.errors import ModelError


class RequestError(ModelError):
    """A request that failed for good (retries spent) or got a reply e1 cannot read, for one sample.
    ``where`` names the sample; :meth:`about` lets the caller name its problem too."""

    def __init__(self, reason: str, prompt_index: int = -1, sample_index: int = -1, hint: str | None = None):
        self.reason, self.prompt_index, self.sample_index = reason, prompt_index, sample_index
        where = f"prompt {prompt_index}, sample {sample_index}" if prompt_index >= 0 else "a request"
        super().__init__(f"the request for {where} failed: {reason}", hint=hint or _HINT)

    def for_sample(self, prompt_index: int, sample_index: int) -> RequestError:
        return RequestError(self.reason, prompt_index, sample_index, self.hint)

    def about(self, name: str) -> RequestError:
        """The same error naming the sample as ``name`` (e.g. ``aime problem 7``) and its sample index."""
        error = RequestError(self.reason, self.prompt_index, self.sample_index, self.hint)
        error.message = f"the request for {name}, sample {self.sample_index} failed: {self.reason}"
        return error


_HINT = "finished samples are kept; rerun the same command to resume"


class ReplyJournal:
    """Replies by request, appended to a JSON-lines file as they arrive (None: keep nothing). Only
    the replies of an earlier, interrupted run are held in memory: a run sends each request once."""

    def __init__(self, path: Path | None):
        self.path = None if path is None else Path(path)
        self._replies: dict[str, dict] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    self._replies[entry["key"]] = entry["reply"]
                except (ValueError, KeyError, TypeError):
                    continue  # a line torn by a kill

    @staticmethod
    def key(endpoint: str, body: dict) -> str:
        return hashlib.sha256(json.dumps([endpoint, body], sort_keys=True).encode()).hexdigest()

    def get(self, key: str) -> dict | None:
        return self._replies.get(key)

    def put(self, key: str, reply: dict) -> None:
        if self.path is None:
            return
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"key": key, "reply": reply}) + "\n")
                handle.flush()
                os.fsync(handle.fileno())

    def remove(self) -> None:
        """Forget every reply (the run is complete: its samples are in the store)."""
        with self._lock:
            self._replies.clear()
            if self.path is not None:
                self.path.unlink(missing_ok=True)


class Caller:
    """POSTs JSON bodies through an ``openai.OpenAI`` client (its retries, timeout and key)."""

    def __init__(self, client, journal: ReplyJournal | None = None):
        self.client, self.journal = client, journal or ReplyJournal(None)

    def call(self, endpoint: str, body: dict) -> dict:
        """The reply to ``POST /<endpoint>`` (``completions`` or ``chat/completions``) as a dict."""
        import openai

        key = self.journal.key(endpoint, body)
        reply = self.journal.get(key)
        if reply is not None:
            return reply
        try:
            reply = self.client.post(f"/{endpoint}", body=body, cast_to=object)
        except openai.APIStatusError as err:
            raise RequestError(f"HTTP {err.status_code} from the server: {_message(err)}") from err
        except openai.APIConnectionError as err:
            raise RequestError(f"cannot reach {self.client.base_url} ({err.__class__.__name__}: {err})") from err
        except ValueError as err:  # a 200 whose body does not parse as JSON
            raise RequestError(f"the reply is not JSON ({err})") from err
        if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list) or not reply["choices"]:
            raise RequestError(f"the reply is not a completion: {str(reply)[:200]!r}")
        self.journal.put(key, reply)
        return reply


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
    once all are done, where given). On the first failure no
    new task starts, the ones in flight finish (their replies reach the journal), and it is raised
    as a :class:`RequestError` naming the task's row (``task.row``: (prompt, sample)) when it has one."""
    if not tasks:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(tasks)))) as pool:
        futures = [pool.submit(task) for task in tasks]
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        failed = next((f for f in futures if f in done and f.exception() is not None), None)
        if failed is not None:
            for future in futures:
                future.cancel()
            wait(futures)
            error = failed.exception()
            row = getattr(tasks[futures.index(failed)], "row", None)
            if isinstance(error, RequestError) and row is not None:
                raise error.for_sample(*row) from error
            raise error
        results = [future.result() for future in futures]
    if progress:
        progress(len(tasks))
    return results


class ChatMessages:
    """The ``tokenizer`` of an engine without ``--tokenizer``: its "chat template" (what
    :func:`e1.data.prompts.build_prompt` calls) returns the messages themselves, as JSON, so the
    server applies the model's own template (a system prompt and template arguments included).

        >>> ChatMessages.request(ChatMessages().apply_chat_template([{"role": "user", "content": "Hi"}]))
        {'messages': [{'role': 'user', 'content': 'Hi'}]}
    """

    chat_template = "the server's"

    def apply_chat_template(self, messages, tokenize: bool = False, add_generation_prompt: bool = True, **kwargs) -> str:
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


def completion_tokens(usage: dict) -> int:
    tokens = usage.get("completion_tokens")
    if not isinstance(tokens, int):
        raise RequestError("the reply has no usage.completion_tokens, so its tokens cannot be counted")
    return tokens


def stopped_at(choice: dict, end_text: str) -> bool:
    """Whether a ``stop`` finish was the end marker (vLLM: ``stop_reason``; SGLang: ``matched_stop``;
    llama.cpp: ``stopping_word``) rather than the end of sequence."""
    for key in ("stop_reason", "matched_stop", "stopping_word"):
        if key in choice:
            return choice[key] == end_text
    raise RequestError("the reply does not say why thinking stopped (no stop_reason), so e1 cannot tell "
                       "the end marker from the end of sequence", hint="use a vLLM, SGLang or llama.cpp server")


def check_report(report, completion: Completion) -> None:
    """The server's counts must be e1's: else its markers are not the tokenizer's."""
    if not isinstance(report, dict):
        return
    theirs = (report.get("thinking_tokens"), report.get("solution_tokens"))
    ours = (completion.think_tokens, completion.solve_tokens)
    if theirs != ours:
        raise RequestError(f"the server counted thinking/solution tokens {theirs}, e1's replay of its tokens {ours}",
                           hint="pass the served model's own tokenizer and the server's --think-start/--think-end")


def reported_completion(choice: dict, usage: dict, row: tuple[int, int]) -> Completion:
    """A chat reply from a budget server: counts from its ``budget``, texts from its message."""
    report, message = choice.get("budget"), choice.get("message")
    if not isinstance(report, dict) or not isinstance(message, dict):
        raise RequestError("the reply has no budget report or no message")
    thinking, solution = int(report["thinking_tokens"]), int(report["solution_tokens"])
    forced = bool(report.get("thinking_forced"))
    return Completion(
        prompt_index=row[0], sample_index=row[1], think_text=_reasoning(message), solution_text=message.get("content") or "",
        prompt_tokens=int(usage.get("prompt_tokens") or 0), think_tokens=thinking, solve_tokens=solution, forced=forced,
        finish_reason="stop" if choice.get("finish_reason") == "stop" else "length", token_ids=[], forced_mask=[],
        closed=forced or solution > 0 or report.get("thinking_end") in ("natural", "pattern"),
        think_end=str(report.get("thinking_end") or ""))


def chat_completion(choice: dict, usage: dict, row: tuple[int, int]) -> Completion:
    """A chat reply from a plain server: thinking tokens from ``reasoning_tokens``, never guessed."""
    message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
    details = usage.get("completion_tokens_details") or {}
    thinking = details.get("reasoning_tokens") if isinstance(details, dict) else None
    if not isinstance(thinking, int):
        raise RequestError("the reply does not report usage.completion_tokens_details.reasoning_tokens, so its "
                           "thinking cannot be counted", hint="pass --tokenizer (the served model's)")
    total = completion_tokens(usage)
    content = message.get("content")
    return Completion(
        prompt_index=row[0], sample_index=row[1], think_text=_reasoning(message), solution_text=content or "",
        prompt_tokens=int(usage.get("prompt_tokens") or 0), think_tokens=thinking, solve_tokens=total - thinking,
        forced=False, finish_reason="stop" if choice.get("finish_reason") == "stop" else "length", token_ids=[],
        forced_mask=[], closed=content is not None)


def _reasoning(message: dict) -> str:
    return str(message.get("reasoning") or message.get("reasoning_content") or "")
