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
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable, Sequence

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


def run_rows(tasks: Sequence[Callable[[], object]], concurrency: int) -> list:
    """Run every task, ``concurrency`` at a time; their results in order. On the first failure no
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
        return [future.result() for future in futures]
