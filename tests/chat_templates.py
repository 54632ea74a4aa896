"""Tokenizers of the chat-template families e1 documents, built offline: a BPE vocabulary trained on
the spot with each family's special tokens, its chat template (``tests/fixtures/chat_templates``)
and its BOS behaviour (R1's tokenizer adds a BOS itself when asked for special tokens).

    tokenizer = family_tokenizer("qwen3")
    tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True, enable_thinking=False)
"""

from __future__ import annotations

from pathlib import Path

from e1.engine.markers import PROMPT_ABSENT, PROMPT_CLOSED, PROMPT_OPEN
from e1.models.tiny import DEFAULT_CORPUS, build_tokenizer

TEMPLATES = Path(__file__).parent / "fixtures" / "chat_templates"
R1_BOS, R1_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
_R1_TOKENS = [R1_BOS, R1_EOS, "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"]
_CHATML_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
FAMILIES = {  # name: (template file, special tokens, the tokenizer adds a BOS)
    "r1_old": ("r1_old.jinja", _R1_TOKENS, True),
    "r1_new": ("r1_new.jinja", _R1_TOKENS, True),
    "qwen3": ("qwen3.jinja", _CHATML_TOKENS, False),
    "plain": ("plain.jinja", _CHATML_TOKENS, False),
}
# (family, chat template arguments) -> what its generation prompt leaves thinking
PHASES = {
    ("r1_old", ()): PROMPT_ABSENT,  # "<｜Assistant｜>": the model writes <think> itself
    ("r1_new", ()): PROMPT_OPEN,  # "<｜Assistant｜><think>\n"
    ("qwen3", (("enable_thinking", True),)): PROMPT_ABSENT,  # "<|im_start|>assistant\n"
    ("qwen3", (("enable_thinking", False),)): PROMPT_CLOSED,  # "...assistant\n<think>\n\n</think>\n\n"
    ("plain", ()): PROMPT_ABSENT,
}


def family_tokenizer(name: str, corpus=DEFAULT_CORPUS):
    """A tokenizer of family ``name`` (:data:`FAMILIES`)."""
    from tokenizers import processors

    template, special, adds_bos = FAMILIES[name]
    tokenizer = build_tokenizer(corpus, special_tokens=special)
    tokenizer.chat_template = (TEMPLATES / template).read_text()
    if adds_bos:  # as R1's LlamaTokenizerFast with add_bos_token: encode(text) puts a BOS first
        tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token = R1_BOS, R1_EOS, R1_EOS
        bos_id = tokenizer.convert_tokens_to_ids(R1_BOS)
        tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{R1_BOS} $A", pair=f"{R1_BOS} $A {R1_BOS} $B", special_tokens=[(R1_BOS, bos_id)]
        )
    return tokenizer


def family_model(path, name: str, **config) -> Path:
    """A tiny random model with family ``name``'s tokenizer, saved to ``path``."""
    from e1.models.tiny import build_tiny_model

    return build_tiny_model(path, tokenizer=family_tokenizer(name), **config)
