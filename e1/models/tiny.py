"""Tiny reasoning models built on the spot: a tokenizer trained on a corpus and a small
Qwen2 decoder with random weights, saved as an ordinary Hugging Face model folder.

Tests and the offline demo use these; nothing is downloaded.

    path = build_tiny_model("./tiny", corpus=["What is 2+2? 4", ...])
    # e1 eval --model ./tiny ...

The chat template follows the Qwen/DeepSeek-R1 convention: the generation prompt ends in
``<think>\\n`` (the template opens thinking); pass ``opens_thinking=False`` for a template
that leaves ``<think>`` to the model. Heads are 32 wide, the smallest vLLM's CPU attention takes.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{OPEN}{% endif %}"
)

DEFAULT_CORPUS = [
    "What is 2 + 3? Let's think step by step and output the final answer within \\boxed{}.",
    "First add the numbers. 2 + 3 = 5. Wait, let me check: 3 + 2 = 5. So the answer is \\boxed{5}.",
    "The sum of the digits is 12, then multiply by 4 to get 48. The final answer is \\boxed{48}.",
    "Let x = 7. Then 2x + 1 = 15 and x^2 = 49. Hence \\frac{1}{2} of 10 is 5.",
]


def build_tokenizer(
    corpus: Iterable[str] = DEFAULT_CORPUS,
    vocab_size: int = 512,
    opens_thinking: bool = True,
    special_tokens: list[str] = SPECIAL_TOKENS,
):
    """A byte-level BPE tokenizer trained on ``corpus`` with think markers as special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(list(corpus), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>" if "<|im_end|>" in special_tokens else special_tokens[0],
        pad_token="<|endoftext|>" if "<|endoftext|>" in special_tokens else special_tokens[0],
        chat_template=_TEMPLATE.replace("{OPEN}", "<think>\n" if opens_thinking else ""),
    )


def build_char_tokenizer(alphabet: str, opens_thinking: bool = True, plain_template: bool = True):
    """One token per character of ``alphabet`` plus the special tokens. With ``plain_template``
    the chat template is just the user's text followed by ``<think>`` (no role headers), which
    keeps prompts short for tiny character-level tasks."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + sorted(set(alphabet)))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<think>", "</think>"]})
    open_think = "<think>" if opens_thinking else ""
    tokenizer.chat_template = (
        "{% for message in messages %}{{ message['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}" + open_think + "{% endif %}"
        if plain_template
        else _TEMPLATE.replace("{OPEN}", open_think + "\n" if opens_thinking else "")
    )
    return tokenizer


def tiny_config(
    vocab_size: int,
    hidden_size: int = 64,
    layers: int = 2,
    heads: int = 2,
    kv_heads: int = 1,
    intermediate_size: int = 128,
    max_positions: int = 2048,
    eos_token_id=None,
    pad_token_id=None,
):
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=hidden_size // heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        bos_token_id=None,
    )


def build_tiny_model(
    path: str | Path,
    corpus: Iterable[str] = DEFAULT_CORPUS,
    *,
    vocab_size: int = 512,
    opens_thinking: bool = True,
    seed: int = 0,
    tokenizer=None,
    **config,
) -> Path:
    """Train a tokenizer (unless one is given), build a random tiny Qwen2 with it, save both to ``path``."""
    import torch
    from transformers import AutoModelForCausalLM

    path = Path(path)
    tokenizer = tokenizer or build_tokenizer(corpus, vocab_size, opens_thinking)
    torch.manual_seed(seed)
    model_config = tiny_config(
        len(tokenizer), eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **config
    )
    model = AutoModelForCausalLM.from_config(model_config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
