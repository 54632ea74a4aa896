"""``early-exit`` (DEER, Yang et al. 2025) — elastic, plus: at each thinking transition ("Wait", a
paragraph break) a short greedy trial answer is decoded and rolled back; thinking ends there when its
mean token probability reaches ``threshold`` (:mod:`e1.engine.early_exit` runs the trials);
``tries=N`` stops trying after N trial answers.

    >>> mode = Mode.parse("early-exit:threshold=0.9:at=wait")
    >>> mode.confidence_threshold, mode.trial_tokens, mode.transition_texts
    (0.9, 16, ('Wait', ' Wait'))
"""

from __future__ import annotations

from e1.engine.modes.base import Mode, register
from e1.engine.modes.options import EXIT, GRACE, Count, Real, Text

# where a trial answer is tried (``at=``): preset names joined by "+", or one quoted text
TRANSITION_TEXTS = {"wait": ("Wait", " Wait"), "para": ("\n\n",)}
DEFAULTS = {"threshold": 0.95, "trial": 16, "at": "para+wait"}
# trial answers per sample on e1 serve (its default, and the most a request may ask): each trial is
# a round of requests, so a client's at= must not make a request's rounds unbounded
SERVED_TRIES = 64

THRESHOLD = Real("threshold", "threshold=0.95: thinking ends when a trial answer is that sure (default 0.95)",
                 min=0, max=1, above=True)
TRIAL = Count("trial", "trial=16: the most tokens of one trial answer (default 16)", min=1, max=1024)
TRIES = Count("tries", "tries=32: at most 32 trial answers per sample (default: no limit)", min=0, max=1 << 20)
AT = Text("at", "at=para+wait or at='Hmm': where trial answers are tried (default para+wait)",
          default="", presets=tuple(TRANSITION_TEXTS), joined=True)


@register
class EarlyExit(Mode):
    name = "early-exit"
    summary = "elastic plus trial answers at thinking transitions; exits when one is confident (DEER)"
    options = (EXIT, GRACE, THRESHOLD, TRIAL, TRIES, AT)
    trials = True

    @property
    def confidence_threshold(self) -> float:
        """The mean trial-token probability at which thinking ends."""
        return DEFAULTS["threshold"] if self.threshold is None else self.threshold

    @property
    def trial_tokens(self) -> int:
        """The most tokens of one trial answer (it also ends at EOS)."""
        return DEFAULTS["trial"] if self.trial is None else self.trial

    @property
    def transition_texts(self) -> tuple[str, ...]:
        at = self.at or DEFAULTS["at"]
        if AT.is_preset(at):
            return tuple(text for name in at.split("+") for text in TRANSITION_TEXTS[name])
        return (at,)

    def trial_room(self, markers) -> int:
        """A trial's prompt (end marker, "Final Answer:"), its answer and the EOS that ends a vLLM request."""
        return len(markers.end_ids) + len(markers.answer_ids) + self.trial_tokens + 1

    def served(self) -> Mode:
        """At most SERVED_TRIES trial answers per sample (the default there)."""
        from e1.errors import ConfigError

        if self.tries is not None and self.tries > SERVED_TRIES:
            raise ConfigError(f"mode {self} asks for {self.tries} trial answers per sample; this server tries "
                              f"at most {SERVED_TRIES}", hint=f"send tries={SERVED_TRIES} or fewer")
        return self if self.tries is not None else self.replace(tries=SERVED_TRIES)
