"""``nothinking`` — NoThinking (Ma et al., "Reasoning Models Can Be Effective Without Thinking", arXiv
2504.09858): the prompt is prefilled with a closed thinking block holding one fixed sentence, so the model
writes its solution at once; the whole budget ``t + s`` goes to that solution (a sweep draws it beside
elastic at equal tokens; pass@k as for any mode).

    >>> mode = Mode.parse("nothinking")
    >>> print(mode.prefill("<|im_start|>assistant\\n<think>\\n", "<think>", "</think>"))
    <|im_start|>assistant
    <think>
    Okay, I think I have finished thinking.
    </think>
    >>> mode.prefill("<|im_start|>assistant\\n", "<think>", "</think>")
    '<|im_start|>assistant\\n<think>\\nOkay, I think I have finished thinking.\\n</think>'
    >>> from e1.budget import Budget
    >>> mode.output_cap(Budget(512, 1024)), str(Mode.parse("nothinking:text='Done.'"))
    (1536, "nothinking:text='Done.'")

The sentence is the authors': the paper's Sec. 2 ("Method", arXiv 2504.09858v1, 14 Apr 2025) defines
NoThinking as "forcing the thinking box to be empty during the decoding process" and shows the box as
``<|beginning of thinking|>`` / ``Okay, I think I have finished thinking.`` / ``<|end of thinking|>``, the
sentence on a line of its own between the markers (its exact prompts are in its Appendix C, which, like
the authors' code, was not at hand: the layout here is the one Sec. 2 shows). The authors control tokens with
s1's budget forcing over the whole reply; here the reply's one budget is ``t + s`` (``truncate``'s cap), the
closed block counted in neither, as a prompt is.

What e1 writes, on every backend, through one function (:meth:`NoThinking.prefill`, called by
:func:`e1.engine.prefilled`): after a prompt that opened thinking (R1's newer template, ``<think>\\n``), the
sentence, a line break and the end marker; after one that left thinking to the model, the start marker and a
line break first. A prompt whose template closed thinking already (Qwen3 with ``enable_thinking: false``) is
refused: the box would be closed twice. The prompt then ends in the end marker, so every backend reads it
as answering (:meth:`e1.engine.markers.Markers.prompt_thinking`): no thinking, ``think_end`` ``prefilled``.
``text='...'`` puts another sentence in the box.
"""

from __future__ import annotations

from e1.data import THINK_END, THINK_START
from e1.engine.modes.catalog import register
from e1.engine.modes.mode import Mode
from e1.engine.modes.options import Text
from e1.errors import ConfigError

SENTENCE = "Okay, I think I have finished thinking."  # arXiv 2504.09858, Sec. 2 (the thinking box of NoThinking)

TEXT = Text(
    "text",
    f"text='I am done.': the sentence in the closed thinking box (default: the authors', \"{SENTENCE}\")",
    default="",
    presets=("paper",),
    blank="paper",
)


@register
class NoThinking(Mode):
    name = "nothinking"
    summary = "NoThinking (Ma et al. 2025): the prompt ends in a closed thinking box; t + s for the solution"
    options = (TEXT,)
    separate = False

    def check(self) -> None:
        if THINK_START in self.sentence or THINK_END in self.sentence:  # other markers: refused by prefill
            raise ConfigError(f"mode {self}: its sentence holds a think marker", hint="write the sentence alone")

    @property
    def sentence(self) -> str:
        return self.text or SENTENCE

    def prefill(self, prompt: str, start: str, end: str) -> str:
        """``prompt`` (a text) ending in the closed box: the part of ``start`` + "\\n" + sentence + "\\n" +
        ``end`` the prompt does not hold yet. A prompt that ends in this box already is returned as it is."""
        if start in self.sentence or end in self.sentence:
            raise ConfigError(f"mode {self}: its sentence holds a think marker", hint="write the sentence alone")
        body = f"\n{self.sentence}\n{end}"
        if self._boxed(prompt, start, end):
            return prompt
        last_start, last_end = prompt.rfind(start), prompt.rfind(end)
        if last_end > last_start >= -1 and last_end >= 0:
            raise ConfigError(
                f"mode {self} prefills a closed thinking box, but the prompt closed thinking already",
                hint="leave out the chat template's enable_thinking=false (nothinking closes thinking itself)",
            )
        if last_start >= 0 and not prompt[last_start + len(start) :].strip():
            tail = prompt[last_start + len(start) :]  # what the template wrote after its start marker
            return prompt + (body[1:] if tail.endswith("\n") else body)
        return prompt + start + body

    def _boxed(self, prompt: str, start: str, end: str) -> bool:
        """Whether ``prompt`` ends in the box :meth:`prefill` writes, whatever blank the template left after
        its start marker (so a prefilled prompt, prefilled again by ``e1 serve``, is returned as it is)."""
        head = prompt.removesuffix(f"{self.sentence}\n{end}")
        return head != prompt and head.endswith("\n") and head.rstrip().endswith(start)

    def output_cap(self, budget):
        return budget.total

    def count_bounds(self, budget):
        return 0, budget.total  # the prompt closed thinking: every token is the solution's, t + s at most

    def worst_case(self, budget, markers, exit_ids=()):
        return budget.total

    def followable_tokens(self, budget, max_tokens: int) -> int:
        return 0  # its prompt is not the others': no unconstrained sample of theirs can be followed
