"""GRPO core: every expected value is derived by hand beside its assert."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from e1.errors import ConfigError
from e1.grpo.core import (
    GRPOLossConfig,
    aggregate,
    entropy_from_logits,
    group_advantages,
    kl_k3,
    log_probs_and_entropy,
    loss_mask,
    loss_normalizer,
    policy_loss,
    token_log_probs,
)

NO_KL = GRPOLossConfig(kl_coef=0.0)


def _grad_of_loss(log_probs, old, adv, mask, config, **kwargs):
    """Loss, metrics and d loss / d log_probs."""
    lp = log_probs.clone().requires_grad_(True)
    loss, metrics = policy_loss(lp, old, adv, mask, config, **kwargs)
    loss.backward()
    return loss.item(), metrics, lp.grad


# --- config -------------------------------------------------------------------------------


def test_config_defaults_are_the_papers_and_frozen():
    config = GRPOLossConfig()
    assert (config.clip_low, config.clip_high, config.kl_coef, config.entropy_coef) == (0.2, 0.2, 0.001, 0.0)
    assert (config.aggregation, config.forced_tokens, config.scale_by_std, config.eps) == (
        "token-mean",
        "train",
        True,
        1e-6,
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.kl_coef = 0.1


@pytest.mark.parametrize(
    "field, value",
    [
        ("clip_low", 1.0),
        ("clip_low", -0.1),
        ("clip_high", -0.1),
        ("kl_coef", -1.0),
        ("entropy_coef", -1.0),
        ("eps", 0.0),
        ("clip_low", float("nan")),
    ],
)
def test_config_rejects_out_of_range_numbers(field, value):
    with pytest.raises(ConfigError) as caught:
        GRPOLossConfig(**{field: value})
    assert field in caught.value.message and caught.value.hint


def test_config_suggests_the_closest_choice():
    with pytest.raises(ConfigError) as caught:
        GRPOLossConfig(aggregation="token_mean")
    assert caught.value.hint == "did you mean 'token-mean'?"
    with pytest.raises(ConfigError):
        GRPOLossConfig(forced_tokens="drop")


# --- advantages ---------------------------------------------------------------------------


def test_advantages_of_a_hand_picked_group():
    # rewards [1, 0, 0, 1]: mean 0.5, deviations ±0.5
    # unbiased var = (4 * 0.25) / (4 - 1) = 1/3, std = 0.5773503
    # A = ±0.5 / (0.5773503 + 1e-6) = ±0.8660239
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4)
    assert adv.tolist() == pytest.approx([0.8660239, -0.8660239, -0.8660239, 0.8660239], abs=1e-6)


def test_advantages_use_the_unbiased_std():
    # rewards [2, 0]: mean 1, deviations ±1; unbiased std = sqrt((1 + 1) / 1) = 1.4142136
    # A = ±1 / 1.4142146 = ±0.7071063 (a biased std of 1 would give ±1)
    adv = group_advantages(torch.tensor([2.0, 0.0]), group_size=2)
    assert adv.tolist() == pytest.approx([0.7071063, -0.7071063], abs=1e-6)


def test_advantages_without_std_are_centred_rewards():
    # mean 0.5 -> [1 - 0.5, 0 - 0.5, 0 - 0.5, 1 - 0.5]
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), group_size=4, scale_by_std=False)
    assert adv.tolist() == [0.5, -0.5, -0.5, 0.5]


def test_advantages_accept_groups_as_rows_and_zero_constant_groups_exactly():
    # row 0 as above; row 1 all 0.1: float32 mean of three 0.1s need not be exactly 0.1, and
    # dividing its rounding error by std + eps = 1e-6 would not be small; we want exact zeros.
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.1, 0.1, 0.1, 0.1], [3.0, 3.0, 3.0, 3.0]])
    adv = group_advantages(rewards, group_size=4)
    assert adv.shape == (12,)
    assert adv[:4].tolist() == pytest.approx([0.8660239, -0.8660239, -0.8660239, 0.8660239], abs=1e-6)
    assert torch.equal(adv[4:], torch.zeros(8))


def test_advantages_reject_bad_groups():
    with pytest.raises(ConfigError):
        group_advantages(torch.ones(4), group_size=1)  # no baseline in a group of one
    with pytest.raises(ConfigError):
        group_advantages(torch.ones(5), group_size=2)  # 5 is not a whole number of groups
    with pytest.raises(ConfigError):
        group_advantages(torch.ones(2, 4), group_size=2)  # rows are groups of 4, not 2


def test_identical_rewards_give_zero_policy_gradient():
    adv = group_advantages(torch.tensor([1.0, 1.0, 1.0, 1.0]), group_size=4)  # all A = 0
    torch.manual_seed(0)
    lp, old = -torch.rand(4, 5), -torch.rand(4, 5)  # [4, 5] arbitrary, ratios != 1
    loss, _, grad = _grad_of_loss(lp, old, adv, torch.ones(4, 5, dtype=torch.bool), NO_KL)
    assert loss == 0.0
    assert torch.equal(grad.abs(), torch.zeros(4, 5))


# --- clipped surrogate --------------------------------------------------------------------


def _clip_example():
    # Two sequences of 3 tokens, all valid, N = 6; old log-probs 0 so ratio r = exp(lp).
    ratios = torch.tensor([[1.5, 0.5, 1.25], [0.85, 1.5, 0.95]])
    adv = torch.tensor([1.0, -1.0])
    return ratios.log(), torch.zeros(2, 3), adv, torch.ones(2, 3, dtype=torch.bool)


def test_clipped_tokens_get_no_gradient_with_asymmetric_clip():
    lp, old, adv, mask = _clip_example()
    config = GRPOLossConfig(clip_low=0.1, clip_high=0.3, kl_coef=0.0)  # trust region [0.9, 1.3]
    loss, metrics, grad = _grad_of_loss(lp, old, adv, mask, config)
    # d(-A r / N)/d lp = -A r / N (since dr/dlp = r); clipped tokens get 0.
    # seq 0, A = +1: r=1.5 > 1.3 clipped -> 0; r=0.5 other side -> -0.5/6; r=1.25 inside -> -1.25/6
    # seq 1, A = -1: r=0.85 < 0.9 clipped -> 0; r=1.5 other side -> +1.5/6; r=0.95 inside -> +0.95/6
    expected = torch.tensor([[0.0, -0.5 / 6, -1.25 / 6], [0.0, 1.5 / 6, 0.95 / 6]])
    torch.testing.assert_close(grad, expected)
    assert grad[0, 0] == 0 and grad[1, 0] == 0  # exactly zero, not merely small
    # per-token loss -min(rA, clip(r)A):
    # seq 0: -min(1.5, 1.3) = -1.3; -min(0.5, 0.9) = -0.5; -1.25
    # seq 1: max(0.85, 0.9) = 0.9;  max(1.5, 1.3) = 1.5;   0.95
    # token mean: (-1.3 - 0.5 - 1.25 + 0.9 + 1.5 + 0.95) / 6 = 0.3 / 6 = 0.05
    assert loss == pytest.approx(0.05, abs=1e-6)
    assert metrics["pg_loss"] == pytest.approx(0.05, abs=1e-6)
    assert metrics["clip_fraction"] == pytest.approx(2 / 6)  # the two zero-gradient tokens
    # (1.5 + 0.5 + 1.25 + 0.85 + 1.5 + 0.95) / 6 = 6.55 / 6
    assert metrics["ratio_mean"] == pytest.approx(6.55 / 6, abs=1e-6)
    assert "kl" not in metrics and "entropy" not in metrics


def test_symmetric_clip_moves_which_tokens_are_clipped():
    lp, old, adv, mask = _clip_example()
    _, metrics, grad = _grad_of_loss(lp, old, adv, mask, NO_KL)  # trust region [0.8, 1.2]
    # now r=1.25 (A>0) is above 1.2 -> clipped, and r=0.85 (A<0) is inside -> +0.85/6
    expected = torch.tensor([[0.0, -0.5 / 6, 0.0], [0.85 / 6, 1.5 / 6, 0.95 / 6]])
    torch.testing.assert_close(grad, expected)
    assert metrics["clip_fraction"] == pytest.approx(2 / 6)  # 1.5 and 1.25 in sequence 0


# --- masking forced tokens ----------------------------------------------------------------


def _forced_example():
    # One sequence: 2 sampled tokens, the forced end marker, then padding. A = +1, ratio 1.
    response = torch.tensor([[1, 1, 1, 0]])
    forced = torch.tensor([[0, 0, 1, 0]])
    return torch.zeros(1, 4), torch.zeros(1, 4), torch.tensor([1.0]), response, forced


def test_mask_excludes_forced_tokens_from_loss_and_gradient():
    lp, old, adv, response, forced = _forced_example()
    mask = loss_mask(response, forced, "mask")
    assert mask.tolist() == [[True, True, False, False]]
    # valid tokens 0, 1 (N = 2), each -A r = -1: loss = -2 / 2 = -1; grad = -A r / N = -0.5
    loss, _, grad = _grad_of_loss(lp, old, adv, mask, NO_KL)
    assert loss == pytest.approx(-1.0)
    assert grad.tolist() == [[-0.5, -0.5, 0.0, 0.0]]
    # garbage at the masked positions (even NaN in the padding) changes nothing
    changed = torch.tensor([[0.0, 0.0, 3.0, float("nan")]])
    changed_old = torch.tensor([[0.0, 0.0, -7.0, float("inf")]])
    loss2, _, grad2 = _grad_of_loss(changed, changed_old, adv, mask, NO_KL)
    assert loss2 == loss and torch.equal(grad2, grad)


def test_train_keeps_forced_tokens_in_the_loss():
    lp, old, adv, response, forced = _forced_example()
    mask = loss_mask(response, forced, "train")
    assert mask.tolist() == [[True, True, True, False]]
    # N = 3: loss = -3 / 3 = -1; grad = -1/3 on each valid token, 0 on padding
    loss, _, grad = _grad_of_loss(lp, old, adv, mask, NO_KL)
    assert loss == pytest.approx(-1.0)
    torch.testing.assert_close(grad, torch.tensor([[-1 / 3, -1 / 3, -1 / 3, 0.0]]))
    # the forced token now matters: lp = log 1.1 there -> (-1 - 1 - 1.1) / 3 = -1.0333
    loss2, _, _ = _grad_of_loss(torch.tensor([[0.0, 0.0, math.log(1.1), 0.0]]), old, adv, mask, NO_KL)
    assert loss2 == pytest.approx(-3.1 / 3, abs=1e-6)


def test_loss_mask_rejects_unknown_choice():
    with pytest.raises(ConfigError):
        loss_mask(torch.ones(1, 2), torch.zeros(1, 2), "ignore")


# --- aggregation --------------------------------------------------------------------------


def test_token_mean_and_seq_mean_by_hand():
    values = torch.tensor([[2.0, 99.0, 99.0], [1.0, 2.0, 6.0]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    # token-mean: (2 + 1 + 2 + 6) / 4 = 2.75; seq-mean: (2/1 + 9/3) / 2 = 2.5
    assert aggregate(values, mask, "token-mean").item() == pytest.approx(2.75)
    assert aggregate(values, mask, "seq-mean").item() == pytest.approx(2.5)
    assert loss_normalizer(mask, "token-mean") == 4 and loss_normalizer(mask, "seq-mean") == 2


def test_policy_loss_aggregations_by_hand():
    # seq 0: one valid token, r = 1.1, A = +2 -> -2.2; seq 1: three tokens, r = 0.9, 1.0, 1.1, A = -1
    lp = torch.tensor([[1.1, 1.0, 1.0], [0.9, 1.0, 1.1]]).log()
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    adv = torch.tensor([2.0, -1.0])
    old = torch.zeros(2, 3)
    loss, _, grad = _grad_of_loss(lp, old, adv, mask, NO_KL)
    # token-mean: (-2.2 + 0.9 + 1.0 + 1.1) / 4 = 0.8 / 4 = 0.2; grad -A r / 4
    assert loss == pytest.approx(0.2, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-2.2 / 4, 0, 0], [0.9 / 4, 1.0 / 4, 1.1 / 4]]))
    seq = GRPOLossConfig(kl_coef=0.0, aggregation="seq-mean")
    loss, _, grad = _grad_of_loss(lp, old, adv, mask, seq)
    # seq-mean: (-2.2 / 1 + (0.9 + 1.0 + 1.1) / 3) / 2 = (-2.2 + 1.0) / 2 = -0.6
    # grad: -A r / (len_i * 2): seq 0 -2.2 / 2 = -1.1; seq 1 r / 6
    assert loss == pytest.approx(-0.6, abs=1e-6)
    torch.testing.assert_close(grad, torch.tensor([[-1.1, 0, 0], [0.9 / 6, 1.0 / 6, 1.1 / 6]]))


# --- KL and entropy -----------------------------------------------------------------------


def test_k3_by_hand():
    lp = torch.zeros(1, 4)
    ref = torch.tensor([[0.0, math.log(0.5), 1.0, 15.0]])
    kl = kl_k3(lp, ref)
    assert kl[0, 0] == 0.0  # exp(0) - 0 - 1
    # ref - lp = -ln 2: 0.5 + 0.693147 - 1 = 0.193147
    assert kl[0, 1].item() == pytest.approx(0.193147, abs=1e-6)
    # ref - lp = 1: e - 1 - 1 = 0.718282
    assert kl[0, 2].item() == pytest.approx(0.718282, abs=1e-6)
    # ref - lp = 15: e^15 - 16 = 3.27e6 -> clamped to 10 as verl's low_var_kl does
    assert kl[0, 3].item() == 10.0
    assert (kl_k3(-torch.rand(3, 5), -torch.rand(3, 5)) >= 0).all()


def test_kl_term_enters_the_loss_with_its_coefficient():
    config = GRPOLossConfig(kl_coef=0.5)
    lp, old, adv = torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([0.0])  # A = 0: no pg term
    ref = torch.ones(1, 2)
    loss, metrics, grad = _grad_of_loss(lp, old, adv, torch.ones(1, 2), config, ref_log_probs=ref)
    # k3 = e - 2 = 0.718282 per token; loss = 0.5 * 0.718282 = 0.359141
    assert loss == pytest.approx(0.359141, abs=1e-6)
    assert metrics["kl"] == pytest.approx(0.718282, abs=1e-6)
    # d k3 / d lp = 1 - exp(ref - lp) = 1 - e = -1.718282; times coef / N = 0.5 / 2
    torch.testing.assert_close(grad, torch.full((1, 2), -1.718282 * 0.25))


def test_kl_coef_zero_needs_no_reference_and_nonzero_does():
    lp, old, adv = torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([1.0])
    loss, metrics = policy_loss(lp, old, adv, torch.ones(1, 2), NO_KL)
    assert loss.item() == -1.0 and "kl" not in metrics
    with pytest.raises(ConfigError):
        policy_loss(lp, old, adv, torch.ones(1, 2), GRPOLossConfig())
    with pytest.raises(ConfigError):
        policy_loss(lp, old, adv, torch.ones(1, 2), GRPOLossConfig(kl_coef=0, entropy_coef=0.01))


def test_entropy_bonus_by_hand():
    config = GRPOLossConfig(kl_coef=0.0, entropy_coef=0.1)
    entropy = torch.tensor([[2.0, 4.0]])
    loss, metrics = policy_loss(
        torch.zeros(1, 2), torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), config, entropy=entropy
    )
    # pg = -1 per token; entropy mean 3; loss = -1 - 0.1 * 3 = -1.3
    assert loss.item() == pytest.approx(-1.3)
    assert metrics["entropy"] == pytest.approx(3.0) and metrics["pg_loss"] == pytest.approx(-1.0)


# --- log-probs and entropy from logits ----------------------------------------------------


def test_token_log_probs_match_naive_log_softmax():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 11) * 4  # [B, L, V]
    tokens = torch.randint(0, 11, (2, 3))  # [B, L]
    naive = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [B, L]
    torch.testing.assert_close(token_log_probs(logits, tokens), naive)
    low = token_log_probs(logits.bfloat16(), tokens)
    assert low.dtype == torch.float32 and low.shape == (2, 3)


def test_token_log_probs_carry_gradient():
    logits = torch.zeros(1, 1, 4, requires_grad=True)
    token_log_probs(logits, torch.tensor([[2]])).sum().backward()
    # d log softmax_2 / d logits = onehot(2) - softmax = [-0.25, -0.25, 0.75, -0.25]
    torch.testing.assert_close(logits.grad, torch.tensor([[[-0.25, -0.25, 0.75, -0.25]]]))


def test_entropy_of_uniform_and_peaked_distributions():
    uniform = torch.full((2, 3, 8), 1.7)  # any constant logits -> uniform over V = 8
    torch.testing.assert_close(entropy_from_logits(uniform), torch.full((2, 3), math.log(8)))
    peaked = torch.tensor([[[0.0, -1e4, -1e4]]])  # all mass on one token
    assert entropy_from_logits(peaked).item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_shared_log_probs_and_entropy_match_the_separate_functions(entropy_grad):
    torch.manual_seed(0)
    logits = (torch.randn(2, 3, 11) * 4).requires_grad_(True)  # [B, L, V]
    tokens = torch.randint(0, 11, (2, 3))  # [B, L]
    log_probs, entropy = log_probs_and_entropy(logits, tokens, entropy_grad=entropy_grad)
    torch.testing.assert_close(log_probs, token_log_probs(logits, tokens))
    torch.testing.assert_close(entropy, entropy_from_logits(logits))
    assert log_probs.requires_grad and entropy.requires_grad == entropy_grad  # a metric stays out of the graph


def test_shared_entropy_gradient_matches_the_separate_one():
    torch.manual_seed(1)
    logits = torch.randn(1, 2, 5)  # [B, L, V]
    shared = logits.clone().requires_grad_(True)
    log_probs_and_entropy(shared, torch.zeros(1, 2, dtype=torch.long), entropy_grad=True)[1].sum().backward()
    separate = logits.clone().requires_grad_(True)
    entropy_from_logits(separate).sum().backward()
    torch.testing.assert_close(shared.grad, separate.grad)


# --- gradient accumulation ----------------------------------------------------------------


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean"])
def test_micro_batches_with_the_mini_batch_normalizer_sum_to_the_full_loss(aggregation):
    torch.manual_seed(0)
    config = GRPOLossConfig(kl_coef=0.01, aggregation=aggregation)
    lp = (-torch.rand(4, 6)).requires_grad_(True)  # [4, 6]
    old = lp.detach() + 0.3 * torch.randn(4, 6)  # [4, 6] some ratios outside the clip range
    ref = -torch.rand(4, 6)  # [4, 6]
    adv = torch.tensor([1.0, -0.5, 2.0, -1.0])  # [4]
    lengths = torch.tensor([6, 2, 4, 1])  # valid tokens: 13, very unequal across micro-batches
    mask = torch.arange(6) < lengths.unsqueeze(-1)  # [4, 6]

    full, _ = policy_loss(lp, old, adv, mask, config, ref_log_probs=ref)
    (full_grad,) = torch.autograd.grad(full, lp)

    parts = [slice(0, 1), slice(1, 4)]  # micro-batches of 6 and 7 valid tokens
    normalizer = sum(loss_normalizer(mask[p], aggregation) for p in parts)  # 13 tokens / 4 sequences
    micro = [
        policy_loss(lp[p], old[p], adv[p], mask[p], config, ref_log_probs=ref[p], normalizer=normalizer)[0]
        for p in parts
    ]
    (micro_grad,) = torch.autograd.grad(sum(micro), lp)
    torch.testing.assert_close(sum(micro), full)
    torch.testing.assert_close(micro_grad, full_grad)
    # dividing by each micro-batch's own count and averaging micro-batches would be wrong here
    naive = sum(policy_loss(lp[p], old[p], adv[p], mask[p], config, ref_log_probs=ref[p])[0] for p in parts) / 2
    assert abs(naive.item() - full.item()) > 1e-3


def test_metrics_decompose_the_loss():
    torch.manual_seed(1)
    config = GRPOLossConfig(kl_coef=0.05, entropy_coef=0.01, clip_high=0.28)
    lp, old, ref = -torch.rand(3, 5), -torch.rand(3, 5), -torch.rand(3, 5)  # [3, 5]
    entropy = torch.rand(3, 5) * 2  # [3, 5]
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])  # [3, 5]
    loss, m = policy_loss(lp, old, torch.tensor([0.5, -1.0, 1.5]), mask, config, ref_log_probs=ref, entropy=entropy)
    assert loss.item() == pytest.approx(m["pg_loss"] + 0.05 * m["kl"] - 0.01 * m["entropy"], abs=1e-6)
    assert all(isinstance(v, float) for v in m.values())


def test_policy_loss_rejects_mismatched_shapes():
    with pytest.raises(ValueError):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(3), torch.ones(2, 3), NO_KL)
