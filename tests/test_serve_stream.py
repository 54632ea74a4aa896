"""`e1 serve` streaming: each delta's reasoning and content are decoded from e1's split of the
token ids, so the concatenated stream equals the whole (non-streamed) reply, however vLLM
grouped the tokens into deltas and whatever its reasoning parser made of them.

The pure tests feed hand-built chunks (as vLLM's chat server sends them, with the text its
``deepseek_r1`` parser gave, lost characters included) through ``Plan.rewrite_chunk``; then ONE
server started with ``--stream-interval 3`` (vLLM sends a delta every 3 tokens, as it does for
a client that falls behind) streams greedy replies that must equal the whole replies.
"""

from __future__ import annotations

import pytest

from e1.engine.markers import resolve_markers
from e1.models.tiny import build_tokenizer
from e1.serve.budgets import Served, ServeDefaults
from e1.serve.responses import prepare, rewrite_response

NL, START, END, EOS = 203, 3, 4, 2  # the tiny tokenizer's "\n", <think>, </think>, <|im_end|>
E_ACUTE = (132, 107)  # 'é': two byte tokens, neither a character alone


@pytest.fixture(scope="module")
def tokenizer():
    tokenizer = build_tokenizer()
    assert tokenizer.encode("\n", add_special_tokens=False) == [NL]
    assert tokenizer.convert_tokens_to_ids(["<think>", "</think>", "<|im_end|>"]) == [START, END, EOS]
    assert tokenizer.encode("é", add_special_tokens=False) == list(E_ACUTE)
    return tokenizer


def served_by(tokenizer, think_end: str | None = None) -> Served:
    return Served(ServeDefaults(think=64, solve=32), tokenizer, resolve_markers(tokenizer, think_end=think_end), 256)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def prompt(tokenizer, opens: bool = True) -> list[int]:
    return ids(tokenizer, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n" + ("<think>\n" if opens else ""))


def streamed(served, groups, deltas=None, budget=(64, 32), opens=True) -> tuple[str | None, str | None, list]:
    """Stream ``groups`` of ids (one chunk each, the last one finishing) through the middleware's
    rewriting; ``deltas``: the text vLLM put in each chunk (default: wrong text, which must not
    matter). Returns (reasoning, content) concatenated, and each chunk's (reasoning, content)."""
    _, plan = prepare({"thinking_budget": budget[0], "solution_budget": budget[1]}, served)
    first = {
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
        "prompt_token_ids": prompt(served.tokenizer, opens),
    }
    plan.rewrite_chunk(first, served)
    reasoning, content, each = "", "", []
    for i, group in enumerate(groups):
        delta = dict(deltas[i]) if deltas else {"reasoning": "?", "content": "?"}
        finish = "stop" if i == len(groups) - 1 else None
        chunk = {"choices": [{"index": 0, "delta": delta, "token_ids": list(group), "finish_reason": finish}]}
        delta = plan.rewrite_chunk(chunk, served)["choices"][0]["delta"]
        each.append((delta.get("reasoning"), delta.get("content")))
        reasoning += delta.get("reasoning") or ""
        content += delta.get("content") or ""
    return reasoning or None, content or None, each


def whole(served, groups, budget=(64, 32), opens=True, message=None) -> tuple[str | None, str | None]:
    """The non-streamed reply's (reasoning, content) for the same ids."""
    _, plan = prepare({"thinking_budget": budget[0], "solution_budget": budget[1]}, served)
    message = dict(message or {"reasoning": "?", "content": "?"})
    response = {
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "stop",
                "token_ids": [t for group in groups for t in group],
            }
        ],
        "prompt_token_ids": prompt(served.tokenizer, opens),
    }
    out = rewrite_response(response, plan, served)["choices"][0]["message"]
    return out["reasoning"], out["content"]


def test_a_delta_holding_a_newline_and_the_end_marker_loses_no_character(tokenizer):
    served = served_by(tokenizer)
    # the load test's failure: four newlines one by one, then [newline, </think>] in one delta,
    # where vLLM's deepseek_r1 parser cut delta_text[:-1] and sent reasoning '' (one newline lost)
    groups = [[NL], [NL], [NL], [NL], [NL, END], ids(tokenizer, " 5"), [EOS]]
    vllm_said = [{"reasoning": "\n"}] * 4 + [{"reasoning": ""}, {"content": " 5"}, {"content": ""}]
    assert streamed(served, groups, vllm_said)[:2] == ("\n" * 5, " 5") == whole(served, groups)


def test_a_delta_holding_the_marker_and_solution_tokens_splits_at_the_marker(tokenizer):
    served = served_by(tokenizer)
    think, solution = ids(tokenizer, "First add the numbers."), ids(tokenizer, "The answer is 5.")
    groups = [think[:3], think[3:] + [END] + solution[:2], solution[2:] + [EOS]]
    reasoning, content, each = streamed(served, groups)
    assert (reasoning, content) == ("First add the numbers.", "The answer is 5.") == whole(served, groups)
    assert each == [("First add the", None), (" numbers.", "The answer"), (None, " is 5.")]


def test_one_token_per_delta_with_a_forced_end_equals_the_whole_reply(tokenizer):
    served = served_by(tokenizer)
    # t = 3, s = 2: vLLM returns three thinking ids, the </think> e1 forced, two solution ids, the forced EOS
    think, solution = ids(tokenizer, "First add the numbers."), ids(tokenizer, "The answer is 5.")
    tokens = think[:3] + [END] + solution[:2] + [EOS]
    groups = [[t] for t in tokens]
    reasoning, content, each = streamed(served, groups, budget=(3, 2))
    assert (reasoning, content) == ("First add the", "The answer") == whole(served, groups, budget=(3, 2))
    assert [r for r, _ in each] == ["First", " add", " the", None, None, None, None]


def test_a_character_split_over_two_deltas_is_sent_once_whole(tokenizer):
    served = served_by(tokenizer)
    groups = [[E_ACUTE[0]], [E_ACUTE[1], NL], [END, E_ACUTE[0]], [E_ACUTE[1], EOS]]
    reasoning, content, each = streamed(served, groups)
    assert (reasoning, content) == ("é\n", "é") == whole(served, groups)
    assert each == [(None, None), ("é\n", None), (None, None), (None, "é")]  # never a lone '\ufffd'


def test_a_character_cut_by_the_forced_end_is_sent_as_the_whole_reply_has_it(tokenizer):
    served = served_by(tokenizer)
    # t = 1 stops thinking after the first byte of 'é': the whole reply decodes it as '\ufffd'
    groups = [[E_ACUTE[0], END], ids(tokenizer, " 5") + [EOS]]
    assert streamed(served, groups, budget=(1, 4))[:2] == ("\ufffd", " 5") == whole(served, groups, budget=(1, 4))


def test_bytes_that_are_no_character_are_held_at_most_eight_ids(tokenizer):
    served = served_by(tokenizer)
    # twelve lone continuation bytes of 'é': the whole reply decodes each as '\ufffd'
    groups = [[E_ACUTE[1]] for _ in range(12)] + [[END, EOS]]
    reasoning, _, each = streamed(served, groups)
    assert reasoning == "\ufffd" * 12 == whole(served, groups)[0]
    assert [r for r, _ in each[:9]] == [None] * 8 + ["\ufffd" * 9]  # held while it could still become a character


def test_a_marker_of_several_tokens_split_over_deltas_is_held_then_dropped(tokenizer):
    served = served_by(tokenizer, think_end=" ##END##")
    marker = list(served.markers.end_ids)
    assert len(marker) == 8  # ' ', '#', '#', 'E', 'N', 'D', '#', '#'
    think, solution = ids(tokenizer, "x ##"), ids(tokenizer, "The answer is 5.")
    # "x ##" looks like the marker's start: held, then given as thinking when the marker does not follow
    groups = [think, [NL] + marker[:2], marker[2:5], marker[5:] + solution, [EOS]]
    reasoning, content, each = streamed(served, groups)
    assert (reasoning, content) == ("x ##\n", "The answer is 5.") == whole(served, groups)
    assert each[:3] == [("x", None), (" ##\n", None), (None, None)]  # nothing of the marker is ever sent


@pytest.mark.parametrize("before", ["", "Hi"])
def test_a_model_that_opens_thinking_itself_streams_as_its_whole_reply(tokenizer, before):
    served = served_by(tokenizer)
    think, solution = ids(tokenizer, "First add the numbers."), ids(tokenizer, "The answer is 5.")
    pre = ids(tokenizer, before)
    groups = ([pre] if pre else []) + [[START] + think[:2], think[2:] + [END], solution + [EOS]]
    # vLLM's parser puts text before <think> in reasoning; e1 lets it stand until thinking opens
    vllm_said = ([{"reasoning": before}] if pre else []) + [{"reasoning": "?"}] * 2 + [{"content": "?"}]
    reasoning, content, _ = streamed(served, groups, vllm_said, opens=False)
    assert (reasoning, content) == (before + "First add the numbers.", "The answer is 5.")
    assert (reasoning, content) == whole(served, groups, opens=False)


def test_a_reply_that_never_thinks_keeps_vllms_text(tokenizer):
    served = served_by(tokenizer)
    answer = ids(tokenizer, "The answer is 5.")
    groups = [answer[:2], answer[2:], [EOS]]
    vllm_said = [{"content": "The answer"}, {"content": " is 5."}, {"content": ""}]
    reasoning, content, _ = streamed(served, groups, vllm_said, budget=(0, 8), opens=False)
    assert (reasoning, content) == (None, "The answer is 5.")
    assert whole(
        served, groups, budget=(0, 8), opens=False, message={"reasoning": None, "content": "The answer is 5."}
    ) == (reasoning, content)


def test_vllms_own_parser_deltas_are_replaced(tokenizer):
    """The bug end to end on the pure side: vLLM's deepseek_r1 parser itself makes the deltas."""
    parser_module = pytest.importorskip("vllm.reasoning.deepseek_r1_reasoning_parser")
    served = served_by(tokenizer)
    parser = parser_module.DeepSeekR1ReasoningParser(tokenizer)
    groups = [[NL, NL], [NL, NL, END] + ids(tokenizer, " 5"), [EOS]]
    deltas, previous = [], []
    for group in groups:
        text = tokenizer.decode(group, skip_special_tokens=True)
        before = tokenizer.decode(previous, skip_special_tokens=True)
        message = parser.extract_reasoning_streaming(before, before + text, text, previous, previous + group, group)
        deltas.append({"reasoning": message.reasoning, "content": message.content} if message else {})
        previous = previous + group
    assert streamed(served, groups, deltas)[:2] == ("\n" * 4, " 5") == whole(served, groups)


# -- the server, sending several tokens per delta ---------------------------------------------

INTERVAL = 3  # vLLM's --stream-interval: a delta every 3 tokens


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`e1 serve --stream-interval 3` on the chatty tiny model (it often ends thinking itself)."""
    from tests.serving import chatty_server

    yield from chatty_server(tmp_path_factory, "--think", "8", "--solve", "6", "--", "--stream-interval", str(INTERVAL))


def test_streams_of_several_tokens_per_delta_equal_the_whole_replies(server):
    import openai
    from transformers import AutoTokenizer

    end = AutoTokenizer.from_pretrained(server[1]).convert_tokens_to_ids("</think>")
    client = openai.OpenAI(base_url=server[0] + "/v1", api_key="none", max_retries=0, timeout=120)
    end_shared = 0  # deltas where </think> came with other tokens: the case vLLM's parser loses text in
    for i in range(6):
        problem = f"What is {i} + {i * 3}?" + " x" * i
        request = dict(
            model=server[1],
            messages=[{"role": "user", "content": problem}],
            temperature=0,
            extra_body={"thinking_budget": 4 + i, "solution_budget": 6, "return_token_ids": True},
        )
        message = client.chat.completions.create(**request).model_dump()["choices"][0]["message"]
        reasoning, content, sizes = "", "", []
        for chunk in client.chat.completions.create(**request, stream=True):
            for choice in chunk.model_dump()["choices"]:
                reasoning += choice["delta"].get("reasoning") or ""
                content += choice["delta"].get("content") or ""
                token_ids = choice.get("token_ids") or []
                sizes.append(len(token_ids))
                end_shared += len(token_ids) > 1 and end in token_ids
        assert (reasoning or None, content or None) == (message["reasoning"], message["content"])
        # vLLM did merge tokens into deltas: at least the interval, more when the reader lags behind the
        # engine (its output collector then merges the waiting deltas into one)
        assert max(sizes) >= INTERVAL
    assert end_shared
