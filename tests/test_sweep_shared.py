"""Shared-prefix sweeps: RowState.follow by hand, generate(prefixes=) on the transformers backend,
shared == independent under greedy decoding, the same per-cell statistics when sampling (and a
deliberately biased sharing caught by the same check), resume, --independent, paired differences."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from e1.budget import Budget
from e1.cli.app import app
from e1.engine.base import Mode, Sampling
from e1.engine.hf.hf_engine import HFEngine
from e1.engine.markers import PROMPT_OPEN, Markers
from e1.engine.row_state import RowState
from e1.errors import ResultsError
from e1.eval.run import EvalConfig
from e1.eval.shared import followable_tokens, problem_batches
from e1.eval.sweep import SweepConfig, sweep
from e1.rewards.scoring import ScoringSpec
from e1.store.samples import SampleStore
from tests.fakes import Interrupting

# a one-token marker 7; EOS 2; "Wait" is (5,); thinking ids 11, solution ids 12
MARKERS = Markers(
    start_text="<t>",
    end_text="</t>",
    start_ids=(3,),
    end_ids=(7,),
    eos_ids=frozenset({2}),
    pad_id=0,
    wait_ids=(5,),
    answer_ids=(6,),
)
ROOT = [11, 11, 11, 11, 11, 7, 12, 12, 12, 2]  # natural end at e = 6 thinking tokens (the marker counted)


def follow(mode: str, budget: Budget, ids=ROOT) -> tuple[RowState, int]:
    state = RowState(budget, Mode.parse(mode), MARKERS, PROMPT_OPEN, 100)
    return state, state.follow(ids)


def test_follow_takes_thinking_up_to_t_then_leaves_the_marker_due():
    state, taken = follow("elastic", Budget(3, 4))
    assert taken == 3 and state.tokens == [11, 11, 11]  # t = 3 < e = 6: the root's solution is not reused
    assert state.forced_token() == 7 and not state.done


def test_follow_shares_the_solution_after_a_natural_end_within_t():
    state, taken = follow("elastic", Budget(6, 4))  # e = 6 <= t: the whole root, EOS included (4 solution ids)
    assert taken == 10 and state.done and state.finish_reason == "stop" and not state.was_forced
    state, taken = follow("elastic", Budget(8, 2))  # ... cut at s = 2
    assert taken == 8 and state.done and state.finish_reason == "length" and state.solve_tokens == 2


def test_follow_truncate_none_grace_and_waits():
    state, taken = follow("truncate", Budget(2, 2))
    assert taken == 4 and state.done and state.finish_reason == "length"
    state, taken = follow("none", Budget(1, 1))
    assert taken == len(ROOT) and state.done and state.finish_reason == "stop"
    # grace=2 at t=4: the window runs to 6 thinking tokens; the root's 6th is its own end marker
    state, taken = follow("elastic:grace=2", Budget(4, 4), [11, 11, 11, 11, 11, 11, 11])
    assert taken == 6 and state.forced_token() == 7
    # s1 wait=1: the root's natural end is sampled, then replaced by Wait: taken, and following stops
    state, taken = follow("budget-forcing:wait=1", Budget(9, 4))
    assert taken == 6 and state.tokens == [11] * 5 + [5] and state.forced == [False] * 5 + [True]


def test_followable_tokens_and_problem_batches():
    assert followable_tokens(Mode("elastic", grace=8), Budget(100, 50), 1000) == 158
    assert followable_tokens(Mode("truncate"), Budget(600, 600), 1000) == 1000  # capped by max_tokens
    assert followable_tokens(Mode("none"), Budget(1, 1), 1000) == 1000
    todo = [(m, b, p) for m in "ab" for b in (1, 2) for p in (P("x"), P("y"), P("z"))]  # mode-major, as eval lists it
    batches = problem_batches(todo, problems_per_call=2)
    assert [[(m, b, p.id) for m, b, p in batch] for batch in batches] == [
        [(m, b, q) for q in "xy" for m in "ab" for b in (1, 2)],
        [(m, b, "z") for m in "ab" for b in (1, 2)],
    ]


class P:
    def __init__(self, id_):
        self.dataset, self.id = "d", id_


def test_generate_with_prefixes_equals_independent_greedy_decoding(tiny_engine):
    prompts = ["What is 2 + 3?", "Let x = 7."]
    greedy = Sampling(temperature=0.0, max_tokens=40)
    roots = tiny_engine.generate(prompts, Budget(1, 1), Mode("none"), greedy, n=2)
    prefixes = [c.token_ids for c in roots]
    for mode, budget in [
        ("elastic", Budget(5, 6)),
        ("truncate", Budget(8, 4)),
        ("elastic:exit=qwen", Budget(3, 4)),
        ("budget-forcing", Budget(4, 5)),
        ("elastic", Budget(0, 5)),
    ]:
        shared = tiny_engine.generate(prompts, budget, mode, greedy, n=2, prefixes=prefixes)
        alone = tiny_engine.generate(prompts, budget, mode, greedy, n=2)
        assert [c.token_ids for c in shared] == [c.token_ids for c in alone], mode
        assert [c.forced_mask for c in shared] == [c.forced_mask for c in alone], mode
        followed = {"truncate": budget.total}.get(Mode.parse(mode).name, budget.think)  # the model never ends by itself
        assert [c.prefix_tokens for c in shared] == [followed] * 4, mode
    with pytest.raises(Exception, match="prefixes for 4 rows"):
        tiny_engine.generate(prompts, Budget(2, 2), Mode(), greedy, n=2, prefixes=prefixes[:1])


# ---- a tiny sampled model whose accuracy depends on how long it thought ---------------------

P_END, RAMP, SOLVE = 0.1, 16, 16


class ThinkingCoin(torch.nn.Module):
    """Thinks ("a") until it samples the end marker (probability P_END per token), then writes
    " The answer is \\boxed{D}." where D is 2 (right) with probability min(1, L / RAMP), L being the
    thinking ids before the marker (natural or forced), else 3; then EOS. Histories live in the KV
    cache, as in tests.fakes.ScriptedModel."""

    def __init__(self, tokenizer, markers):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1))
        self.config = type("Config", (), {"max_position_embeddings": 4096})()
        encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
        self.vocab, self.markers = len(tokenizer), markers
        self.think, (self.right,), (self.wrong,) = encode("a")[0], encode("2"), encode("3")
        self.lead, self.tail = encode(" The answer is \\boxed{"), encode("}.") + [min(markers.eos_ids)]

    def forward(self, input_ids, attention_mask, position_ids, past_key_values, use_cache=True):
        history, _ = past_key_values.update(input_ids.float()[:, None, :, None], input_ids.float()[:, None, :, None], 0)
        history = history[:, 0, :, 0].long()  # [B, T]
        logits = torch.full((input_ids.shape[0], input_ids.shape[1], self.vocab), -math.inf)  # [B, T, V]
        for row in range(input_ids.shape[0]):
            for token, p in self._next(history[row][attention_mask[row].bool()].tolist()).items():
                logits[row, -1, token] = math.log(p)
        return type("Output", (), {"logits": logits})()

    def _next(self, tokens: list[int]) -> dict[int, float]:
        start = max(i for i, t in enumerate(tokens) if t == self.markers.start_ids[0])
        generated = tokens[start + 1 :]
        end = self.markers.end_ids[0]
        if end not in generated:
            return {end: P_END, self.think: 1 - P_END}
        cut = generated.index(end)
        written = generated[cut + 1 :]
        if len(written) < len(self.lead):
            return {self.lead[len(written)]: 1.0}
        if len(written) == len(self.lead):
            p = min(1.0, generated[:cut].count(self.think) / RAMP)
            return {t: q for t, q in ((self.right, p), (self.wrong, 1 - p)) if q > 0}
        return {self.tail[min(len(written) - len(self.lead) - 1, len(self.tail) - 1)]: 1.0}


@pytest.fixture
def coin_loader(tiny_engine):
    return lambda model: HFEngine(
        ThinkingCoin(tiny_engine.tokenizer, tiny_engine.markers),
        tiny_engine.tokenizer,
        tiny_engine.markers,
        batch_size=64,
    )


def problems(tmp_path, count: int):
    path = tmp_path / "coin.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"q{i}", "problem": f"Problem {i}.", "answer": "2"}) + "\n" for i in range(count))
    )
    return path


CELLS = (Mode("elastic"), Mode("truncate"), Mode("none"))


def coin_sweep(out, data, independent: bool, seed: int, n: int = 25):
    settings = EvalConfig(
        model="coin",
        datasets=(str(data),),
        budgets=tuple(Budget(t, SOLVE) for t in (4, 8, 16)),
        modes=CELLS,
        n=n,
        sampling=Sampling(temperature=1.0, top_p=1.0, seed=seed, max_tokens=64),
        batch_size=200,
        scoring=ScoringSpec(workers=1),
    )
    return SweepConfig(models=("coin",), settings=settings, out=out, independent=independent)


def disagreements(a: pd.DataFrame, b: pd.DataFrame, z: float = 4.0) -> list[str]:
    """Cells whose accuracy, mean thinking tokens or forced rate differ by more than z standard errors
    (two independent samples of iid draws: the fake's problems are all alike)."""
    found = []
    for key, left in a.groupby(["mode", "think_budget"]):
        right = b[(b["mode"] == key[0]) & (b["think_budget"] == key[1])]
        for column in ("correct", "think_tokens", "forced"):
            x, y = left[column].astype(float), right[column].astype(float)
            se = math.sqrt(x.var(ddof=1) / len(x) + y.var(ddof=1) / len(y))
            if abs(x.mean() - y.mean()) > z * se + 1e-9:
                found.append(f"{key} {column}: {x.mean():.3f} vs {y.mean():.3f} (se {se:.3f})")
    return found


def biased_follow(original):
    """The mistake sharing must not make: a row forced at t < e reuses the root's solution, which was
    written after the root's natural end e (after the forced marker, the root's own solution ids)."""

    def follow(self, ids):
        taken = original(self, ids)
        end = self.markers.end_ids[0]
        if self.mode.name == "elastic" and self.forced_token() is not None and end in ids[taken:]:
            while self.forced_token() is not None:
                self.accept(self.forced_token())
            for token in ids[ids.index(end) + 1 :]:
                if self.done:
                    break
                self.accept(token)
            taken = len(ids)
        return taken

    return follow


def test_shared_cells_match_independent_cells_and_a_biased_sharing_is_caught(tmp_path, coin_loader, monkeypatch):
    data = problems(tmp_path, 8)  # 8 problems × 25 samples = 200 draws per cell
    shared, _, _ = sweep(coin_sweep(tmp_path / "shared", data, False, seed=0), load_engine=coin_loader)
    alone, _, _ = sweep(coin_sweep(tmp_path / "alone", data, True, seed=1), load_engine=coin_loader)
    assert len(shared) == len(alone) == 9 * 200  # none runs at each of the 3 budgets too
    assert disagreements(shared, alone) == []
    # the check has power where it matters: elastic at t = 4 forces ~66% of rows (0.9^4), whose honest
    # accuracy is 4/16 = 0.25; reusing the root's later solution lifts it to ~0.7 for them
    forced4 = shared[(shared["mode"] == "elastic") & (shared["think_budget"] == 4)]
    assert forced4["forced"].mean() == pytest.approx(0.9**4, abs=0.1)

    monkeypatch.setattr(RowState, "follow", biased_follow(RowState.follow))
    biased, _, _ = sweep(coin_sweep(tmp_path / "biased", data, False, seed=0), load_engine=coin_loader)
    found = disagreements(biased, alone)
    assert any("('elastic', 4) correct" in line for line in found), found
    assert not any("think_tokens" in line or "forced" in line for line in found), found  # only the solutions lie


def test_shared_sweep_pairs_cells_and_reports_the_paired_difference(tmp_path, coin_loader):
    data = problems(tmp_path, 8)
    sweep(coin_sweep(tmp_path / "shared", data, False, seed=0, n=10), load_engine=coin_loader)
    sweep(coin_sweep(tmp_path / "alone", data, True, seed=0, n=10), load_engine=coin_loader)
    shared, alone = (
        elastic_vs_truncate(pd.read_parquet(tmp_path / name / "differences.parquet")) for name in ("shared", "alone")
    )
    assert list(shared["think_budget"]) == [4, 8, 16] and (shared["problems"] == 8).all()
    samples = pd.read_parquet(tmp_path / "shared" / "samples.parquet")
    none = samples[(samples["mode"] == "none") & (samples["think_budget"] == 16)].set_index(
        ["problem_id", "sample_index"]
    )
    truncate = samples[(samples["mode"] == "truncate") & (samples["think_budget"] == 16)].set_index(
        ["problem_id", "sample_index"]
    )
    # truncate at 32 is the first 32 ids of the same root as none: whatever none finished within 32, so did truncate
    short = none[none["think_tokens"] + none["solve_tokens"] <= 32].index
    assert (truncate.loc[short, "think_text"] == none.loc[short, "think_text"]).all() and len(short) > 0
    assert (truncate.loc[short, "correct"] == none.loc[short, "correct"]).all()
    # pairing removes the shared thinking's variance: the paired interval is narrower than independent draws'
    width = {
        name: frame["difference_ci_high"] - frame["difference_ci_low"]
        for name, frame in (("shared", shared), ("alone", alone))
    }
    assert (width["shared"].to_numpy() < width["alone"].to_numpy()).sum() >= 2


def elastic_vs_truncate(differences):
    """The rows of a differences.parquet that pair elastic with truncate (either order), by think budget."""
    pair = differences["mode"].isin(["elastic", "truncate"]) & differences["other_mode"].isin(["elastic", "truncate"])
    return differences[pair].sort_values("think_budget").reset_index(drop=True)


def test_shared_sweep_resumes_to_the_same_rows(tmp_path, coin_loader):
    data = problems(tmp_path, 4)
    full, _, _ = sweep(coin_sweep(tmp_path / "full", data, False, seed=3, n=5), load_engine=coin_loader)
    config = coin_sweep(tmp_path / "cut", data, False, seed=3, n=5)
    config = SweepConfig(
        models=config.models, settings=EvalConfig(**{**config.settings.__dict__, "batch_size": 10}), out=config.out
    )  # 2 problems per batch: a root call and 9 cells each
    with pytest.raises(KeyboardInterrupt):
        sweep(config, load_engine=lambda m: Interrupting(coin_loader(m), 12))  # in the 2nd batch
    partial = SampleStore(tmp_path / "cut" / "models" / "coin").read()  # the parts written so far
    assert len(partial) == 2 * 9 * 5  # the first batch (2 problems × 9 cells × 5 samples) was written
    resumed, _, _ = sweep(config, load_engine=coin_loader)
    pd.testing.assert_frame_equal(resumed, full)  # roots regrow the same: a resumed sweep is the uncut one


def test_independent_option_is_recorded_and_a_mismatch_is_refused(tmp_path, tiny_model_dir):
    data = problems(tmp_path, 2)
    out = tmp_path / "sweep"
    args = [
        "sweep",
        "--model",
        str(tiny_model_dir),
        "--datasets",
        str(data),
        "--think",
        "0,4",
        "--solve",
        "4",
        "--modes",
        "elastic,truncate",
        "--n",
        "2",
        "--temperature",
        "0",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args, prog_name="e1")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "config.json").read_text())["share_prefixes"] is True
    assert "paired: mode − other mode" in result.output and (out / "differences.parquet").is_file()
    result = CliRunner().invoke(app, [*args, "--independent"], prog_name="e1")
    assert isinstance(result.exception, ResultsError) and "share_prefixes" in str(result.exception)
    alone = tmp_path / "alone"
    result = CliRunner().invoke(app, [*args[:-1], str(alone), "--independent"], prog_name="e1")
    assert result.exit_code == 0, result.output
    assert json.loads((alone / "config.json").read_text())["share_prefixes"] is False
    # greedy decoding: sharing changes nothing but the work done
    pd.testing.assert_frame_equal(pd.read_parquet(out / "samples.parquet"), pd.read_parquet(alone / "samples.parquet"))
