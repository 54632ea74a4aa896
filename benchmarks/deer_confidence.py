"""early-exit's trial confidence on the same token streams: DEER's definition computed here from scratch
(the reference), e1's ``recipe=deer`` (its row state, trials in the running KV cache) and e1's first
variant ``recipe=e1``, side by side, on the tiny model built on the spot (nothing downloaded).

The reference follows DEER's vllm-deer.py (github.com/iie-ycx/DEER) with no e1 code on its path: for
each transition in a greedy thinking stream, the model is run afresh (no cache) on prompt + the thinking
*before* the token that completes the transition text + ``"\\n**Final Answer**\\n\\boxed"``; up to 20
greedy tokens, stopping at EOS or when the decoded answer holds a closing-brace stop string; the
confidence is the mean (and geometric mean, minimum) of the greedy tokens' probabilities after the first.

    python benchmarks/deer_confidence.py --prompts 4 --think 48

Prints one row per trial position: the reference's three confidences, e1 ``recipe=deer``'s at the same
position (``|Δ|``: decode-with-cache vs recompute numerics), and ``recipe=e1``'s trial at the same
transition (tried after the token, end marker + "Final Answer:", first token counted), with the ratio
e1/DEER. A random tiny model is not R1: its ratios show how far the two definitions can part on one
stream, not R1's 5-10x; rerun with ``--model`` on a real reasoning model for that figure.
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections import Counter
from pathlib import Path


def reference_trial(model, tokenizer, context: list[int], eos: set[int], most: int = 20) -> dict:
    """DEER's trial on ``context`` (prompt + thinking before the transition), recomputed from scratch."""
    import torch

    from e1.engine.modes.early_exit import DEER_PROMPT, DEER_STOP_TEXTS

    ids = context + tokenizer.encode(DEER_PROMPT, add_special_tokens=False)
    answer, probabilities = [], []
    with torch.no_grad():
        for _ in range(most):
            logits = model(input_ids=torch.tensor([ids + answer])).logits[0, -1].float()  # [V]
            p, token = torch.softmax(logits, dim=-1).max(dim=-1)
            answer.append(int(token))
            probabilities.append(float(p))
            if int(token) in eos or any(stop in tokenizer.decode(answer) for stop in DEER_STOP_TEXTS):
                break
    scored = probabilities[1:]
    if not scored:
        return {"mean": 0.0, "geometric": 0.0, "min": 0.0}
    return {
        "mean": sum(scored) / len(scored),
        "min": min(scored),
        "geometric": math.exp(sum(math.log(max(p, 1e-10)) for p in scored) / len(scored)),
    }


def frequent_text(tokenizer, rows, special: set[int]) -> str:
    """The commonest thinking token whose text encodes back to it (a transition that fires in these streams)."""
    counts = Counter(t for row in rows for t in row.token_ids[: row.think_tokens] if t not in special)
    for token, _ in counts.most_common():
        text = tokenizer.decode([token])
        if text.strip() and tokenizer.encode(text, add_special_tokens=False) == [token]:
            return text
    return tokenizer.decode([counts.most_common(1)[0][0]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a model folder (default: the tiny model, built on the spot)")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--think", type=int, default=48)
    parser.add_argument("--at", help="the transition text (default: the streams' commonest token)")
    args = parser.parse_args()

    from e1.budget import Budget
    from e1.data.prompts import build_prompt
    from e1.engine.base import Mode, Sampling
    from e1.engine.hf.hf_engine import HFEngine
    from e1.engine.spec import EngineSpec
    from e1.models.tiny import build_tiny_model

    path = args.model or build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
    engine = HFEngine.load(str(path), EngineSpec(dtype="float32", device="cpu"))
    tokenizer, greedy, budget = engine.tokenizer, Sampling(temperature=0.0), Budget(args.think, 4)
    texts = [
        build_prompt(tokenizer, f"What is {i} + {3 * i}? Put the answer in \\boxed{{}}.") for i in range(args.prompts)
    ]
    prompt_ids = engine.encode(texts)
    streams = engine.generate(texts, budget, Mode("elastic"), greedy)
    at = args.at or frequent_text(tokenizer, streams, set(tokenizer.all_special_ids))
    # threshold=1 never ends thinking: the output stays elastic's, so every transition is tried on the same stream
    deer = engine.generate(
        texts, budget, Mode.parse(f"early-exit:recipe=deer:threshold=1:tries=100000:at={at!r}"), greedy
    )
    first = engine.generate(texts, budget, Mode.parse(f"early-exit:recipe=e1:threshold=1:at={at!r}"), greedy)
    eos = set(engine.markers.eos_ids)
    print(f"at={at!r}, {args.prompts} greedy streams of up to {args.think} thinking tokens, {path}")
    print(
        f"{'row':>3} {'pos':>4} | {'ref mean':>8} {'ref geo':>8} {'ref min':>8} | {'deer':>8} {'|Δ|':>8} | {'e1':>8} {'e1/ref':>7}"
    )
    gaps, ratios = [], []
    for row, (stream, d, f) in enumerate(zip(streams, deer, first)):
        assert d.token_ids == stream.token_ids == f.token_ids, "threshold=1 must leave the streams elastic's"
        after = (
            {t["position"]: t["confidence"] for t in f["trials"]}
            if isinstance(f, dict)
            else {t["position"]: t["confidence"] for t in f.trials}
        )
        for trial in d.trials:
            position = trial["position"]  # thinking before the held token
            ref = reference_trial(engine.model, tokenizer, prompt_ids[row] + stream.token_ids[:position], eos)
            gap = abs(trial["confidence"] - ref["mean"])
            e1 = after.get(position + 1)  # recipe=e1 tries after the same (single-id) transition
            ratio = e1 / ref["mean"] if e1 is not None and ref["mean"] > 0 else float("nan")
            gaps.append(gap)
            if e1 is not None:
                ratios.append(ratio)
            e1_text = f"{e1:8.4f}" if e1 is not None else f"{'-':>8}"
            print(
                f"{row:>3} {position:>4} | {ref['mean']:8.4f} {ref['geometric']:8.4f} {ref['min']:8.4f} | "
                f"{trial['confidence']:8.4f} {gap:8.1e} | {e1_text} {ratio:7.2f}"
            )
    finite = [r for r in ratios if math.isfinite(r)]
    print(
        f"\n{len(gaps)} trials: e1 recipe=deer vs the reference, max |Δ| = {max(gaps, default=0):.2e}; "
        f"e1's first variant / DEER: median {sorted(finite)[len(finite) // 2] if finite else float('nan'):.2f}x "
        f"over {len(finite)} shared positions"
    )


if __name__ == "__main__":
    main()
