"""A multiple-choice letter is read where the solution states it, never guessed from running text
(issue M2, item 4; the rules are :mod:`e1.rewards.choice`'s docstring).

The same solutions through e1 and through the two evaluation harnesses' letter extractors
(lm-eval 0.4.13: the ``regex`` filter of its ``mmlu_pro`` task, ``answer is \\(?([ABCDEFGHIJ])\\)?``
taking the first match, and the ``multi_choice_regex`` filter of ``gpqa_*_cot_zeroshot``'s
flexible-extract, with choices "3", "4", "5", "6"; lighteval 0.13.0: ``IndicesExtractionConfig``
with ``NativeLetters`` and 4 choices, with and without ``try_extract_without_anchor``, the first
extracted). "-" is no answer (lm-eval's ``[invalid]``, lighteval's empty list). lm-eval's columns
are checked live below when lm-eval is installed; lighteval's were run once in a scratch
environment (``/tmp`` venv, lighteval 0.13.0 ``--no-deps``) and are recorded here as facts.

| solution | e1 | lm-eval mmlu_pro | lm-eval gpqa flexible | lighteval | lighteval no anchor | why e1 reads it so |
|---|---|---|---|---|---|---|
| `The answer is a bit tricky, so (C).` | - | - | C | C | C | "a bit" after "answer is" is text; a later letter is not stated |
| `Answer: I believe it is B.` | - | - | - | B | B | "I" is a word here; "it is B" is not a stated answer |
| `The answer is C.` | C | C | - | C | C | |
| `The answer is (b).` | B | - | - | - | - | a letter in parentheses is a choice in either case |
| `Answer: d` | - | - | - | - | A | a bare lower-case letter is text; lighteval's unanchored pattern reads the "A" of "Answer" |
| `Answer: D` | D | - | D | D | D | |
| `\\boxed{C}` | C | - | - | - | C | the box is what e1's prompts ask for |
| `\\boxed{(c)}` | C | - | - | - | - | |
| ` C` | C | - | - | - | C | the whole solution is the letter (after s1's forced "Final Answer:") |
| ` C) 5` | C | - | C | - | C | one line: the letter written as an option |
| `A) 3\\nB) 4\\nC) 5\\nD) 6` | - | - | D | - | D | listing every option chooses none |
| `The answer is B because 2 + 2 = 4.` | B | B | B | B | B | "B" is a word of its own right after "answer is" |
| `I think B looks right.` | - | - | - | - | B | no stated answer |
| `A bit of algebra gives 4, so B.` | - | - | B | A | A | no stated answer; "A bit" is not a choice |
| `Is it A or B? I am not sure.` | - | - | - | - | A | no stated answer |
| `The answer is not (A) but (B).` | - | - | B | A | A | "not" follows "answer is": nothing is stated as the answer |
| `**Answer:** C` | C | - | - | C | C | |
| `The answer is A` | A | A | - | A | A | "A" at the end of the text is the letter |
| `So the answer is 4.` | - | - | B | - | - | e1 never maps an option's text to its letter |
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e1.rewards import reward_for
from e1.rewards.choice import chosen_letter

# (solution, e1, lm-eval mmlu_pro, lm-eval gpqa flexible): the table's first four columns
TABLE = [
    ("The answer is a bit tricky, so (C).", None, None, "C"),
    ("Answer: I believe it is B.", None, None, None),
    ("The answer is C.", "C", "C", None),
    ("The answer is (b).", "B", None, None),
    ("Answer: d", None, None, None),
    ("Answer: D", "D", None, "D"),
    ("\\boxed{C}", "C", None, None),
    ("\\boxed{(c)}", "C", None, None),
    (" C", "C", None, None),
    (" C) 5", "C", None, "C"),
    ("A) 3\nB) 4\nC) 5\nD) 6", None, None, "D"),
    ("The answer is B because 2 + 2 = 4.", "B", "B", "B"),
    ("I think B looks right.", None, None, None),
    ("A bit of algebra gives 4, so B.", None, None, "B"),
    ("Is it A or B? I am not sure.", None, None, None),
    ("The answer is not (A) but (B).", None, None, "B"),
    ("**Answer:** C", "C", None, None),
    ("The answer is A", "A", "A", None),
    ("So the answer is 4.", None, None, "B"),
]


@pytest.mark.parametrize(("solution", "letter"), [(row[0], row[1]) for row in TABLE])
def test_e1_reads_the_tables_strings_as_documented(solution, letter):
    assert chosen_letter(solution) == letter
    # through the reward as scoring sees it (after the end of thinking), "B" the gold letter
    assert reward_for("choice")([f"<think>x</think>{solution}"], ["B"])[0].reward == float(letter == "B")


@pytest.mark.parametrize(("solution", "mmlu_pro", "gpqa"), [(row[0], row[2], row[3]) for row in TABLE])
def test_lm_evals_extractors_read_the_tables_strings_as_documented(solution, mmlu_pro, gpqa):
    """The table's lm-eval columns, run live: the documented differences are lm-eval's real behaviour."""
    extraction = pytest.importorskip("lm_eval.filters.extraction")
    strict = extraction.RegexFilter(regex_pattern=r"answer is \(?([ABCDEFGHIJ])\)?", group_select=0)
    flexible = extraction.MultiChoiceRegexFilter(
        regex_pattern=r"(\([A-Z]\))", group_select=-1, ignore_case=True, ignore_punctuation=True
    )
    read = lambda filtered: None if filtered == "[invalid]" else filtered.strip("()")  # noqa: E731
    assert read(strict.apply([[solution]], [{}])[0][0]) == mmlu_pro
    assert read(flexible.apply([[solution]], [{"choices": ["3", "4", "5", "6"]}])[0][0]) == gpqa


# running text: words that start sentences, the words "a", "A", "I", the word "answer", numbers and
# algebra; never a bare capital B-P, a parenthesised letter or a box, and every sentence ends in a
# lower-case word, so no letter is stated in it
WORDS = [
    "a",
    "A",
    "I",
    "I'm",
    "A-grade",
    "bit",
    "think",
    "believe",
    "it",
    "is",
    "the",
    "answer",
    "answer:",
    "so",
    "tricky",
    "option",
    "choice",
    "The",
    "So",
    "Is",
    "or",
    "maybe",
    "not",
    "B's",
    "4",
    "2",
    "=",
    "+",
    "x",
    "Answer",
]
LAST = ["bit", "tricky", "it", "sure", "right", "x", "choice", "option", "answer", "4"]
sentence = st.builds(
    lambda words, last: " ".join([*words, last]) + ".",
    st.lists(st.sampled_from(WORDS), max_size=12),
    st.sampled_from(LAST),
)
running = st.lists(sentence, max_size=4).flatmap(
    lambda parts: st.sampled_from([" ", "\n", "\n\n"]).map(lambda sep: sep.join(parts))
)
letters = st.sampled_from("ABCDEFGHIJ")
STATED = [
    lambda x: f"\\boxed{{{x}}}",
    lambda x: f"\\boxed{{({x.lower()})}}",
    lambda x: f"\\boxed{{\\text{{{x}}}}}",
    lambda x: f"The answer is {x}.",
    lambda x: f"The answer is ({x.lower()}).",
    lambda x: f"Answer: {x},",
    lambda x: f"**Answer:** {x}\n",
    lambda x: f"The final answer is option {x}.",
    lambda x: f"ANSWER: ({x})",
]  # a bare letter is followed by punctuation or a line break: "Answer: A bit." is running text (the table)


@settings(max_examples=300, deadline=None)
@given(running)
def test_running_text_states_no_letter(text):
    assert chosen_letter(text) is None


@settings(max_examples=300, deadline=None)
@given(before=running, after=running, letter=letters, form=st.sampled_from(STATED), sep=st.sampled_from([" ", "\n"]))
def test_a_stated_letter_is_always_found_wherever_it_stands_in_running_text(before, after, letter, form, sep):
    assert chosen_letter(before + sep + form(letter) + sep + after) == letter


@settings(max_examples=100, deadline=None)
@given(letter=letters, form=st.sampled_from(["{x}", " {x}", "({x})", "{x}.", "{x}) 42", " ({x}) the third one"]))
def test_a_solution_that_is_the_letter_alone_chooses_it(letter, form):
    assert chosen_letter(form.format(x=letter)) == letter
