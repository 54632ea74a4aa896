"""``early-exit`` (DEER: Yang et al., "Dynamic Early Exit in Reasoning Models", arXiv 2504.15895) —
elastic, plus: at each thinking transition a short greedy *trial answer* is decoded and rolled back;
thinking ends there when the trial is sure enough (:mod:`e1.engine.early_exit_state` runs the trials).
Two recipes, chosen with ``recipe=``:

``recipe=deer`` (the default: a bare ``early-exit`` is this, with DEER's defaults) — DEER as its authors run it (https://github.com/iie-ycx/DEER, ``vllm-deer.py``, the
script their README recommends for reproducing the paper; the transformers script ``vanilla_deer.py``
where it agrees):

- a transition is the *text* "Wait" anywhere in what thinking just wrote (vLLM's stop string
  ``continue_str``; ``--points 0`` uses "Alternatively": ``at=alt``), so a token that merges it with
  other text (".\\n\\nWait", "Waiting") counts; the trial is tried on the thinking *before* that
  token (the script stops generating just before "Wait"); if it is not confident the token is kept
  (the script appends "Wait" and goes on), if it is the token is dropped and thinking ends there;
- the trial prompt is ``"\\n**Final Answer**\\n\\boxed"`` (``answer_prompt_str``; no end marker:
  the trial is decoded inside thinking), decoded for at most 20 tokens (``--prob_check_max_tokens``),
  ending at EOS or at the token whose text completes one of the script's closing-brace stop
  strings (``pred_prob_stop_tokens``: ``" }"``, ``"}\\n"``, ``"}."``, ``"}}"``, ...);
- its confidence leaves out the first token (the ``{`` that ``\\boxed`` calls for) and scores the rest,
  the stopping token included (``calculate_average_max_prob_from_logprobs`` starts at index 1), as
  the arithmetic mean (``--policy avg1``, the default), the geometric mean (``avg2``, its Qwen3
  setting) or the minimum (``min``) of their probabilities: ``confidence=mean|geometric|min``;
- thinking ends when the confidence is *above* the threshold (``pred_prob > threshold``; 0.95), and
  no trial is tried after the 10th (``--max_judge_steps 10``; ``tries=`` changes it).

Deliberate differences (each keeps one e1 contract): the trial is greedy, scored by the greedy token's
probability (the transformers script and the paper's "max probability"; ``vllm-deer.py`` leaves the
trial's temperature at vLLM's default 1); after an exit e1 forces the model's own end marker and the
solution gets its budget ``s`` (the script appends ``"\\n</think>\\n\\n"`` and answers freely); the
thinking budget is e1's ``t`` (the script exits 50 tokens before its ``think_ratio`` limit); the
trial prompt's ids are appended to the thinking's ids, not re-tokenized with the text before them;
a trial with no scored token (its first token is EOS) has confidence 0 (the script divides by zero);
a "Wait" split over several tokens is tried before the last of them. Not offered: the Qwen3 script's
(``vllm-deer-qwen3.py``) extra condition that the trial stop at ``</think>``, and its answer forcing
(``--af``). The paper's text was not at hand beyond its abstract: where code and paper could differ,
this follows the code.

``recipe=e1`` (what a bare ``early-exit`` meant before DEER's recipe became the default) — e1's
first variant: a transition is a token sequence at the end of thinking (``at=para+wait``: "\\n\\n",
"Wait", " Wait" as ids, so a merged ".\\n\\n" never fires), the trial is tried after it, its prompt
is the end marker + "Final Answer:", up to 16 tokens scored from the first, the exit when the
confidence reaches the threshold (``>=``), no cap on trials. Its confidences run 5-10x above
DEER's on the same positions, so thresholds do not transfer (``benchmarks/deer_confidence.py``).

Runs recorded before the default changed keep their meaning: a run directory whose ``config.json``
lacks ``mode_format`` 2 has its stored texts read through :meth:`Mode.legacy`, which names
``recipe=e1`` where a text has no ``recipe=`` (its config and its samples' labels alike, so a resume
decodes nothing again), and the first command that writes into it records them so.

    >>> mode = Mode.parse("early-exit")
    >>> mode == Mode.parse("early-exit:recipe=deer"), mode.confidence_threshold, mode.trial_tokens, mode.trial_cap
    (True, 0.95, 20, 10)
    >>> mode.transition_texts, Mode.parse("early-exit:recipe=e1").transition_texts
    (('Wait', ' Wait'), ('\\n\\n', 'Wait', ' Wait'))
    >>> mode.trial_confidence([0.2, 0.9, 0.6]), mode.is_confident(0.95), Mode.parse("early-exit:recipe=e1").is_confident(0.95)
    (0.75, False, True)
    >>> Mode.legacy("early-exit:threshold=0.9")   # a text a run recorded before: e1's variant
    'early-exit:threshold=0.9:recipe=e1'
"""

from __future__ import annotations

import math

from e1.engine.modes.catalog import register
from e1.engine.modes.mode import Mode
from e1.engine.modes.options import EXIT, GRACE, Count, Real, Text, Word
from e1.errors import ConfigError

# where a trial answer is tried (``at=``): preset names joined by "+", or one quoted text
TRANSITION_TEXTS = {"wait": ("Wait", " Wait"), "para": ("\n\n",), "alt": ("Alternatively",)}
# DEER's recipe (vllm-deer.py): its trial prompt, the texts that end a trial at the closing brace of
# \boxed{...}, and the floor under a probability in the geometric mean
DEER_PROMPT = "\n**Final Answer**\n\\boxed"
DEER_STOP_TEXTS = (" }", "}\n", "}\n\n", "}.", "}.\n", "}\\", "}}", ")}", ")}.", ")}\n")
DEER_PROB_FLOOR = 1e-10
# each recipe's defaults: threshold, trial tokens, trials per sample (None: no cap), where tried
DEFAULTS = {
    "e1": {"threshold": 0.95, "trial": 16, "tries": None, "at": "para+wait"},
    "deer": {"threshold": 0.95, "trial": 20, "tries": 10, "at": "wait"},
}
# trial answers per sample on e1 serve (its default, and the most a request may ask): each trial is
# a round of requests, so a client's at= must not make a request's rounds unbounded
SERVED_TRIES = 64

RECIPE = Word(
    "recipe",
    "recipe=deer (the default): DEER's own recipe (text transitions, \\boxed trial, first token "
    "dropped, >, 10 trials); recipe=e1: e1's first variant (what a bare early-exit meant before)",
    default="deer",
    choices=("deer", "e1"),
)
CONFIDENCE = Word(
    "confidence",
    "confidence=mean|geometric|min: how a trial's token probabilities become its "
    "confidence (DEER's avg1, avg2, min; default mean)",
    default="mean",
    choices=("mean", "geometric", "min"),
)
THRESHOLD = Real(
    "threshold",
    "threshold=0.95: thinking ends when a trial answer is that sure (default 0.95)",
    min=0,
    max=1,
    above=True,
)
TRIAL = Count("trial", "trial=16: the most tokens of one trial answer (default 20; recipe=e1 16)", min=1, max=1024)
TRIES = Count(
    "tries", "tries=32: at most 32 trial answers per sample (default 10; recipe=e1: no limit)", min=0, max=1 << 20
)
AT = Text(
    "at",
    "at=para+wait or at='Hmm': where trial answers are tried (default wait; recipe=e1 para+wait)",
    default="",
    presets=tuple(TRANSITION_TEXTS),
    joined=True,
)


@register
class EarlyExit(Mode):
    name = "early-exit"
    summary = "elastic plus trial answers at thinking transitions; exits when one is confident (DEER)"
    options = (EXIT, GRACE, THRESHOLD, TRIAL, TRIES, AT, RECIPE, CONFIDENCE)
    trials = True

    @classmethod
    def _upgraded(cls, text: str) -> str:
        """A recorded text without ``recipe=`` meant e1's variant (the only one then): it names it now."""
        return Mode._naming(text, "recipe", "e1")

    @property
    def _defaults(self) -> dict:
        return DEFAULTS[self.recipe]

    @property
    def confidence_threshold(self) -> float:
        """The confidence at which thinking ends (reached for recipe=e1, exceeded for recipe=deer)."""
        return self._defaults["threshold"] if self.threshold is None else self.threshold

    @property
    def trial_tokens(self) -> int:
        """The most tokens of one trial answer (it also ends at EOS, and for recipe=deer at the closing brace)."""
        return self._defaults["trial"] if self.trial is None else self.trial

    @property
    def trial_cap(self) -> int | None:
        """The most trials per sample (None: no cap)."""
        return self._defaults["tries"] if self.tries is None else self.tries

    @property
    def transition_texts(self) -> tuple[str, ...]:
        at = self.at or self._defaults["at"]
        if AT.is_preset(at):
            return tuple(text for name in at.split("+") for text in TRANSITION_TEXTS[name])
        return (at,)

    @property
    def text_transitions(self) -> bool:
        """Transitions are found in the thinking's text and tried before the token that completes one
        (recipe=deer); else they are id sequences at the end of thinking, tried after them."""
        return self.recipe == "deer"

    @property
    def trial_prompt_text(self) -> str | None:
        """The text fed to begin a trial (None: the end marker + "Final Answer:", recipe=e1)."""
        return DEER_PROMPT if self.recipe == "deer" else None

    @property
    def trial_stop_texts(self) -> tuple[str, ...]:
        """Texts that end a trial answer at the token completing one (none for recipe=e1)."""
        return DEER_STOP_TEXTS if self.recipe == "deer" else ()

    def trial_confidence(self, probabilities) -> float:
        """A trial's confidence from its answer tokens' probabilities, in decoding order: recipe=deer leaves
        the first out; then their mean, geometric mean (each floored at 1e-10, as DEER does) or minimum.
        No token left to score: 0 (never confident)."""
        scored = list(probabilities)[1:] if self.recipe == "deer" else list(probabilities)
        if not scored:
            return 0.0
        if self.confidence == "min":
            return min(scored)
        if self.confidence == "geometric":
            return math.exp(sum(math.log(max(p, DEER_PROB_FLOOR)) for p in scored) / len(scored))
        return sum(scored) / len(scored)

    def is_confident(self, confidence: float) -> bool:
        """Whether a trial this sure ends thinking: DEER compares with ``>``, e1's variant with ``>=``."""
        threshold = self.confidence_threshold
        return confidence > threshold if self.recipe == "deer" else confidence >= threshold

    trial_window = 0  # the verdict reads no trial's text, only this trial's probabilities

    def trial_verdict(self, probabilities, texts) -> tuple[float, bool]:
        """A trial's confidence and whether it ends thinking (``texts`` unread: see ``trial_window``)."""
        confidence = self.trial_confidence(probabilities)
        return confidence, self.is_confident(confidence)

    def trial_solution(self, answer: str) -> str:
        """A trial answer's text as the reward reads a solution: after the recipe's prompt ("Final Answer:",
        or DEER's "**Final Answer**" and ``\\boxed`` that the answer's braces complete)."""
        return f"{DEER_PROMPT}{answer}" if self.recipe == "deer" else f"Final Answer:{answer}"

    def trial_room(self, markers) -> int:
        """A trial's prompt, its answer and the EOS that ends a vLLM request. DEER's prompt is bounded by
        its UTF-8 bytes (a byte-level tokenizer's worst case) plus one id a tokenizer may add in front."""
        prompt = (
            len(DEER_PROMPT.encode()) + 1 if self.recipe == "deer" else len(markers.end_ids) + len(markers.answer_ids)
        )
        return prompt + self.trial_tokens + 1

    def served(self) -> Mode:
        """At most SERVED_TRIES trial answers per sample (the default there, where the recipe has no cap)."""
        cap = self.trial_cap
        if cap is not None and cap > SERVED_TRIES:
            raise ConfigError(
                f"mode {self} asks for {cap} trial answers per sample; this server tries at most {SERVED_TRIES}",
                hint=f"send tries={SERVED_TRIES} or fewer",
            )
        return self if cap is not None else self.replace(tries=SERVED_TRIES)
