"""``dynasor`` (Dynasor-CoT: Fu et al., "Efficiently Serving LLM Reasoning Programs with Certaindex",
arXiv 2412.20993) — elastic, plus: every ``every`` thinking tokens a short *probe* answer is decoded and
rolled back (e1's trial machinery, :mod:`e1.engine.early_exit_state`: never in the output, counted as
trial tokens); thinking ends when the last ``agree`` probes gave the same answer and none of them hedged.

As its authors run it (github.com/hao-ai-lab/Dynasor, commit 0d2f1b93a60e031cfc7fb43843d2b736b225960c of
2025-05-31, package version 0.0.1):

- the probe is the thinking so far + ``"... Oh, I suddenly got the answer to the whole problem,
  **Final Answer**\\n\\n\\[ \\boxed{"`` (``probeing_suffix`` in ``dynasor/core/cot.py``; ``--probe`` of
  ``dynasor/cli/openai_server.py``; ``probe_text`` of ``examples/client-vllm.py``), decoded for 20 tokens
  (``max_tokens=20`` in ``cot.py`` and in ``handle_adaptive_compute`` of ``dynasor/cli/vllm_server.py``);
- a probe every 32 tokens, and 2 agreeing probes end thinking (``--dynasor-saving-effort`` default
  ``2,32`` in ``openai_server.py``; ``token_interval=32``, ``certainty_window=2`` in ``vllm_server.py``
  and ``examples/client-vllm.py``; the chat CLI's effort levels in ``cot.py:effort_level`` are
  (agree, every) = mild (8, 64), low (5, 64), mid (3, 64), high (2, 64), crazy (2, 32));
- the probe's answer is its text up to the first ``}`` that closes no ``{`` (``obtain_answer``), "" when
  there is none;
- a probe *hedges* when its whole text, lower-cased, contains one of ``uncertain_words`` = "wait",
  "hold", "but", "okay", "no", "hmm" as a substring (``dynasor/core/entropy.py``, ``cot.py``);
- thinking ends when the last ``agree`` answers are one equivalence group (``eqaul_group``: each equal
  to the first), none of them "" (``count_not_empty``) and none of their probes hedged
  (``cot.py``'s ``adaptive_end`` condition). The probe is placed after each chunk of ``every`` tokens
  and the exit taken there (``vllm_server.py``); on exit the authors append
  ``"\\n\\n...</think>\\n Oh, I have got the answer to the whole problem\\n**Final Answer:**\\n\\[\\n
  \\boxed{" + answer + "}\\n\\]"`` (``cot.py``; ``vllm_server.py``: ``probe_text + answer + "} \\]"``)
  and stop.

Deliberate differences (each keeps one e1 contract): probes are greedy (the authors sample them at
temperature 0.6, top-p 0.95), so they never draw from the row's random stream; probes run in thinking
only, every ``every`` *thinking* tokens (the authors probe the whole response in chunks); answers agree
when equal after stripping and lower-casing, or when both read as numbers within a relative 1e-4
(``math_equal``'s first two tests, without its percentage scaling and sympy: the decision runs inside
the decoding loop, where e1's reward workers do not); after an exit e1 forces the model's end marker
and the solution gets its budget ``s`` (the authors write the probe's answer as the final answer, text
the model did not write); the probe's ids are appended to the thinking's ids, not re-tokenized with the
text before them; ``cot.py`` places each probe one chunk earlier than ``vllm_server.py`` (it probes the
text before the chunk it is decoding, from the prompt on) and ``vllm_server.py``'s ``should_early_exit``
ends in ``return True`` (it exits on any unhedged probe once ``agree`` exist): e1 follows
``vllm_server.py``'s placement and ``cot.py``'s rule.

    >>> mode = Mode.parse("dynasor")
    >>> mode.trial_interval, mode.agree_count, mode.trial_tokens, mode.trial_cap
    (32, 2, 20, None)
    >>> probe_answer("42} \\\\]"), probe_answer("\\\\frac{1}{2}}"), probe_answer("42"), hedges("4} but wait")
    ('42', '\\\\frac{1}{2}', '', True)
    >>> mode.trial_verdict([], ("7} \\\\]", " 7 } ")), mode.trial_verdict([], ("7}", "7} Hmm"))
    ((1.0, True), (0.0, False))
"""

from __future__ import annotations

import math

from e1.budget import MAX_TOKENS
from e1.engine.modes.catalog import register
from e1.engine.modes.mode import Mode
from e1.engine.modes.options import EXIT, GRACE, Count
from e1.errors import ConfigError

PROBE = "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"
HEDGES = ("wait", "hold", "but", "okay", "no", "hmm")  # uncertain_words
DEFAULTS = {"every": 32, "agree": 2, "probe": 20}
SERVED_TRIES = 64  # probes per sample on e1 serve (its default, and the most a request may ask)

EVERY = Count(
    "every",
    "every=32: a probe answer every 32 thinking tokens (default 32)",
    min=1,
    max=MAX_TOKENS,
    default=DEFAULTS["every"],
)
AGREE = Count(
    "agree",
    "agree=2: thinking ends when the last 2 probe answers agree and none hedges (default 2)",
    min=1,
    max=64,
    default=DEFAULTS["agree"],
)
PROBE_TOKENS = Count(
    "probe", "probe=20: the most tokens of one probe answer (default 20)", min=1, max=1024, default=DEFAULTS["probe"]
)
TRIES = Count("tries", "tries=64: at most 64 probes per sample (default: no limit; e1 serve 64)", min=0, max=1 << 20)


def probe_answer(text: str) -> str:
    """A probe's answer: its text up to the first ``}`` that closes no ``{`` ("" when none does)."""
    depth = 0
    for at, char in enumerate(text):
        if char == "{":
            depth += 1
        elif char == "}":
            if not depth:
                return text[:at]
            depth -= 1
    return ""


def hedges(text: str) -> bool:
    """Whether a probe's text holds one of the authors' uncertain words (as a substring, any case)."""
    lowered = text.lower()
    return any(word in lowered for word in HEDGES)


def same_answer(a: str, b: str) -> bool:
    """Two probe answers agree: equal stripped and lower-cased, or both numbers within a relative 1e-4."""
    if a.strip().lower() == b.strip().lower():
        return True
    x, y = _number(a), _number(b)
    return x is not None and y is not None and math.isclose(x, y, rel_tol=1e-4)


def _number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


@register
class Dynasor(Mode):
    name = "dynasor"
    summary = "elastic plus a probe answer every N thinking tokens; exits when the last few agree (Dynasor-CoT)"
    options = (EXIT, GRACE, EVERY, AGREE, PROBE_TOKENS, TRIES)
    trials = True

    @property
    def trial_interval(self) -> int:
        return self.every  # (an option's default is its value when unset: "dynasor:every=32" is "dynasor")

    @property
    def agree_count(self) -> int:
        """How many last probe answers must agree (none hedging) for thinking to end."""
        return self.agree

    @property
    def trial_tokens(self) -> int:
        """The most tokens of one probe answer (it also ends at EOS)."""
        return self.probe

    @property
    def trial_cap(self) -> int | None:
        return self.tries

    @property
    def trial_prompt_text(self) -> str:
        return PROBE

    @property
    def trial_stop_texts(self) -> tuple[str, ...]:
        return ()  # the whole probe is decoded: a hedge after the closing brace counts

    @property
    def trial_window(self) -> int:
        return self.agree_count

    def trial_verdict(self, probabilities, texts) -> tuple[float, bool]:
        """``texts``: the last ``agree`` probes' texts (fewer while there are fewer), this one last. The
        confidence recorded is 1 when this probe has an answer and does not hedge, else 0."""
        answers = [probe_answer(text) for text in texts]
        sure = [answer != "" and not hedges(text) for answer, text in zip(answers, texts)]
        agreed = len(texts) == self.agree_count and all(sure) and all(same_answer(a, answers[0]) for a in answers)
        return float(sure[-1]), agreed

    def trial_solution(self, answer: str) -> str:
        """A probe's text as the reward reads a solution: the probe prompt's ``\\boxed{`` completed by it."""
        return f"{PROBE}{answer}"

    def trial_room(self, markers) -> int:
        """The probe prompt (its UTF-8 bytes bound its ids, plus one a tokenizer may add), the answer, an EOS."""
        return len(PROBE.encode()) + 1 + self.trial_tokens + 1

    def served(self) -> Mode:
        """At most SERVED_TRIES probes per sample (the default there)."""
        if self.tries is not None and self.tries > SERVED_TRIES:
            raise ConfigError(
                f"mode {self} asks for {self.tries} probes per sample; this server tries at most {SERVED_TRIES}",
                hint=f"send tries={SERVED_TRIES} or fewer",
            )
        return self if self.tries is not None else self.replace(tries=SERVED_TRIES)
