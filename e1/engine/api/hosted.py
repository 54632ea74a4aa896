"""Hosted reasoning APIs (Gemini, Claude) through the same ``generate`` as every engine.

    settings = ApiSettings(None, backend="gemini")           # the vendor's endpoint; the key from GEMINI_API_KEY
    engine = HostedEngine.load("gemini-2.5-flash", settings, modes=[Mode.parse("none:effort=high")])
    completions = engine.generate(prompts, Budget(1024, 1024), Mode.parse("elastic"), Sampling(seed=0), n=4, seeds=[7])

Prompts are chat messages (the engine's ``tokenizer`` is :class:`~e1.engine.api.client.ChatMessages`);
each sample is one request built by its vendor (:mod:`e1.engine.api.vendors`: the fields and their
documentation), sent through the vendor's official SDK (its retries on 429 and 5xx, its timeout),
read through the vendor's gate (its shape, strictly typed, and its counts against the request:
:mod:`e1.engine.api.replies`), journalled once accepted (:class:`~e1.engine.api.client.ReplyJournal`:
a resumed run sends no accepted request twice, and every refused one again), and read back with
the vendor's own token counts. Every request is
built, and refused if the vendor cannot take it, before the first one is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from e1.budget import Budget
from e1.engine.api.client import ChatMessages, ReplyJournal, row_task, run_rows
from e1.engine.api.openai_engine import ApiSettings, _text_markers
from e1.engine.api.vendors import VENDORS, Vendor
from e1.engine.base import Completion, Mode, Sampling
from e1.errors import ConfigError, redact


class HostedEngine:
    """One vendor's model; ``client`` is its SDK client (pointed at ``settings.url`` when given)."""

    max_context = None  # the vendor checks its own context

    def __init__(
        self,
        vendor: Vendor,
        client,
        settings: ApiSettings,
        model: str,
        journal: ReplyJournal,
        modes: Sequence[Mode] = (),
    ):
        self.vendor, self.client, self.settings, self.model, self.journal = vendor, client, settings, model, journal
        self.tokenizer, self.markers = ChatMessages(), _text_markers(None, None)
        self.methods = {str(mode): vendor.method(mode) for mode in modes}

    @classmethod
    def load(
        cls, model: str, settings: ApiSettings, modes: Sequence[Mode] = (), *, journal: Path | None = None
    ) -> HostedEngine:
        """The SDK client (the key read from its variable now, kept only in the client)."""
        vendor = VENDORS[settings.backend]
        client = vendor.client(settings, settings.api_key())
        return cls(vendor, client, settings, model, ReplyJournal(journal), [Mode.parse(m) for m in modes])

    def describe(self) -> dict:
        """What config.json records: where, what, and the method each mode used (never the key)."""
        return {
            "backend": self.settings.backend,
            "url": redact(self.settings.url or "the vendor's endpoint"),
            "model": self.model,
            "prompts": "chat messages",
            "methods": dict(self.methods),
            "sampling": self.vendor.sampling,
            "concurrency": self.settings.concurrency,
            "max_retries": self.settings.max_retries,
            "request_timeout_s": self.settings.request_timeout_s,
        }

    def finish_run(self) -> None:
        """The run's samples are all stored: the journal of replies is no longer needed."""
        self.journal.remove()

    def generate(
        self,
        prompts,
        budget: Budget,
        mode: Mode = Mode("none"),
        sampling: Sampling = Sampling(),
        n: int = 1,
        progress=None,
        seeds: Sequence[int] | None = None,
        prefixes: Sequence[Sequence[int]] | None = None,
    ) -> list[Completion]:
        from e1.engine.seeds import prompt_seeds, sample_seed

        if prefixes is not None:
            raise ConfigError(
                f"--backend {self.settings.backend} cannot follow another row's tokens",
                hint="e1 sweep draws every cell on its own with a hosted backend",
            )
        if n < 1:
            raise ConfigError(f"n must be >= 1, got {n}")
        if not all(isinstance(p, str) for p in prompts):
            raise ConfigError(f"--backend {self.settings.backend} takes prompts as text, not token ids")
        mode = Mode.parse(mode)
        self.methods.setdefault(str(mode), self.vendor.method(mode))
        per_prompt = prompt_seeds(sampling, len(prompts), seeds)
        tasks = []
        for p in range(len(prompts)):
            for j in range(n):  # every request built (and checked) before the first is sent
                request = self.vendor.request(
                    self.model, prompts[p], budget, mode, sampling, sample_seed(per_prompt[p], j) >> 33
                )  # >> 33: an int32, as Gemini takes
                tasks.append(row_task((p, j), self._row, request, (p, j)))
        return run_rows(tasks, self.settings.concurrency, progress)

    def _row(self, request: dict, row: tuple[int, int]) -> Completion:
        """One parse through the vendor's gate, then the journal: a refused reply is sent again on resume."""
        key = self.journal.key(self.settings.backend, request)
        done = self.journal.replay(key, lambda raw: self.vendor.completion(self.vendor.accept(raw, request), row))
        if done is None:
            raw = self.vendor.send(self.client, request)  # RequestError: failed for good, or cut
            reply = self.vendor.accept(raw, request)  # RequestError: its shape or counts are not the vendor's
            done = self.vendor.completion(reply, row)  # RequestError: a count it needs is missing
            self.journal.put(key, reply)
        return done
